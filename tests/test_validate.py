"""`nodeforge validate` below the lab: the node checks of module_utils/validate.py on captured outputs
(tests/data/outputs/validate), the probe scripts of role validate run for real, the runner's collection of the
report task's results, and the report writers (JSON, JUnit read back with xml.etree, HTML)."""

from __future__ import annotations

import json
import os
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from click.testing import CliRunner
from rich.console import Console

from nodeforge import cli, validate_report
from nodeforge.collection import model
from nodeforge.runner import EXIT_HOST_FAILED, EXIT_OK, EXIT_UNREACHABLE, Failure, Progress, RunResult

from ansible_collections.nodeforge.gpu.plugins.module_utils import acceptance, validate  # isort: skip

REPO = Path(__file__).resolve().parent.parent
OUTPUTS = Path(__file__).parent / "data" / "outputs" / "validate"
ROLE = REPO / "roles" / "validate"


def output(name: str) -> str:
    return (OUTPUTS / name).read_text()


def probe(**found: tuple[str, int]) -> str:
    """A probe's stdout as the scripts of roles/validate/files print it: output, then the marker with the exit code."""
    return "".join(
        f"{text.rstrip(chr(10))}\n@@nodeforge {name.replace('__', ':')} rc={rc}@@\n"
        for name, (text, rc) in found.items()
    )


def expect(profile: str, **variables) -> dict:
    return validate.expectations(model.HostModel("node-01", {"nodeforge_profile": profile, **variables}))


def by_check(results: list[dict]) -> dict[str, dict]:
    return {r["check"]: r for r in results}


DGX1_DRIVER = {
    "proc_version": (output("proc-driver-nvidia-version-535-debian12.txt"), 0),
    "modinfo_version": ("535.261.03", 0),
    "modinfo_license": (output("modinfo-license-nvidia-kernel-dkms-535.txt"), 0),
    "nvidia_smi": (output("nvidia-smi-query-gpu-dgx1.txt"), 0),
    "nvidia_smi_remapped_rows": ("Field remapped_rows.pending is not supported", 2),
    "proc_modules": ("nvidia 56602624 0 - Live 0x0\nib_core 487424 1 nvidia_peermem, Live 0x0\n", 0),
    "sys_module": ("", 0),
    "sys_module_nouveau": ("", 1),
}


def test_sections_read_back_outputs_and_exit_codes():
    text = probe(proc_version=("cat: /proc/driver/nvidia/version: No such file or directory", 1), file__a=("x\ny", 0))
    assert validate.sections(text) == {
        "proc_version": {"output": "cat: /proc/driver/nvidia/version: No such file or directory", "rc": 1},
        "file:a": {"output": "x\ny", "rc": 0},
    }


def test_probe_scripts_print_every_section(tmp_path):
    """The real scripts under /bin/sh on this machine (no driver, no HCA): each section is there with its exit
    code, and the selected files are printed byte for byte."""
    config = tmp_path / "config.toml"
    config.write_text('version = 2\nimports = ["/x/*.toml"]\n')
    env = {
        "PATH": "/usr/bin:/bin:/usr/sbin:/sbin",
        "LC_ALL": "C",
        "GPU_QUERY": "index",
        "REMAPPED_QUERY": "gpu_bus_id",
        "SERVICES": "containerd crio",
        "FILES": f"{config} {tmp_path}/missing.toml",
    }
    found = {}
    for script in ("probe-driver.sh", "probe-rdma.sh", "probe-runtime.sh"):
        run = subprocess.run(
            # As the role runs it: the shared probe() first, then the area's script.
            [
                "/bin/sh",
                "-c",
                (ROLE / "files" / "probe-lib.sh").read_text() + "\n" + (ROLE / "files" / script).read_text(),
            ],
            env=env,
            capture_output=True,
            text=True,
        )
        assert run.returncode == 0, run.stderr
        found.update(validate.sections(run.stdout))
    for name in ("proc_version", "modinfo_license", "nvidia_smi", "proc_modules", "sys_module_nouveau", "tool:dcgmi"):
        assert name in found, name
    for name in (
        "ofed_info",
        "rdma_core",
        "doca_profile",
        "ibstat",
        "memory_peers",
        "memlock_containerd",
        "memlock_crio",
    ):
        assert name in found, name
    assert found["containerd_config_dump"]["rc"] == (0 if Path("/usr/bin/containerd").exists() else 127)
    assert found[f"file:{config}"] == {"output": config.read_text().rstrip("\n"), "rc": 0}
    assert f"file:{tmp_path}/missing.toml" not in found
    # What the driver probe read is what this machine says, driver or not: the same command, read here on its own.
    direct = subprocess.run(["cat", "/proc/driver/nvidia/version"], env=env, capture_output=True, text=True)
    assert found["proc_version"] == {"output": (direct.stdout + direct.stderr).rstrip("\n"), "rc": direct.returncode}


def test_tools_are_those_the_driver_probe_finds_on_path(tmp_path):
    """The real driver probe with two of the three performance tools on PATH (and a file named like the third that
    is not executable): the filter validate_tools, which decides which perf checks run, lists exactly those two,
    sorted; a tool section that failed or a section of another kind is no tool."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, mode in (("ib_write_bw", 0o755), ("all_reduce_perf", 0o755), ("dcgmi", 0o644)):
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / name).chmod(mode)
    run = subprocess.run(
        [
            "/bin/sh",
            "-c",
            (ROLE / "files" / "probe-lib.sh").read_text() + "\n" + (ROLE / "files" / "probe-driver.sh").read_text(),
        ],
        env={"PATH": f"{bin_dir}:/usr/bin:/bin", "LC_ALL": "C", "GPU_QUERY": "index", "REMAPPED_QUERY": "gpu_bus_id"},
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert validate.tools(run.stdout) == ["all_reduce_perf", "ib_write_bw"]
    # The lines as the role passes them (stdout_lines), a failed tool and look-alike names among the sections.
    lines = probe(**{"tool:zeta": ("/x/zeta", 0), "tool:alpha": ("/x/alpha", 0), "tool:dcgmi": ("", 1)}).splitlines()
    lines += probe(**{"tools:beta": ("", 0), "file:tool:gamma": ("", 0)}).splitlines()
    assert validate.tools(lines) == ["alpha", "zeta"]
    assert validate.tools("") == []


def test_query_fields_are_the_parsers():
    variables = DataLoader().load_from_file(str(ROLE / "vars" / "main.yml"))
    assert variables["__validate_gpu_query"] == ",".join(acceptance.GPU_QUERY_FIELDS)
    assert variables["__validate_remapped_query"] == ",".join(acceptance.REMAPPED_ROWS_QUERY_FIELDS)


def test_dgx1_driver_checks_pass_on_its_outputs():
    exp = expect(
        "dgx-1", nvidia_driver_version="535.261.03", nvidia_driver_flavor="proprietary", validate_gpu_ecc="enabled"
    )
    results = by_check(validate.driver_checks(validate.sections(probe(**DGX1_DRIVER)), exp, {}))
    assert {r["status"] for r in results.values()} == {"pass", "na"}
    assert results["driver_version"]["measured"] == "535.261.03"
    assert results["driver_flavor"]["measured"] == "proprietary"
    assert results["gpu_count"]["measured"] == 8 and results["gpu_model"]["expected"] == "V100-SXM2"
    assert results["gpu_ecc"]["status"] == "pass"
    assert results["gpu_remapped_rows"]["status"] == "na"
    assert results["nouveau"]["status"] == "pass"


def test_gpu_model_is_matched_against_the_name_nvidia_smi_prints():
    # DGX H100 GPUs call themselves "NVIDIA H100 80GB HBM3"; the profile's model ("H100 SXM5 80GB") is no substring.
    smi = "".join(
        f"{i}, NVIDIA H100 80GB HBM3, 00000000:{bus}:00.0, Enabled, Enabled, No\n"
        for i, bus in enumerate(("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"))
    )
    found = dict(DGX1_DRIVER, nvidia_smi=(smi, 0))
    results = by_check(validate.driver_checks(validate.sections(probe(**found)), expect("dgx-h100"), {}))
    assert results["gpu_model"]["expected"] == "H100 80GB HBM3"
    assert results["gpu_model"]["status"] == "pass", results["gpu_model"]
    assert results["gpu_count"]["status"] == "pass"
    # And a DGX-1's V100s are not H100s.
    results = by_check(validate.driver_checks(validate.sections(probe(**DGX1_DRIVER)), expect("dgx-h100"), {}))
    assert results["gpu_model"]["status"] == "fail"


def test_loaded_driver_other_than_installed_or_pinned_fails():
    exp = expect("dgx-1", nvidia_driver_version="580.126.20", nvidia_driver_flavor="open")
    results = by_check(validate.driver_checks(validate.sections(probe(**DGX1_DRIVER)), exp, {}))
    assert results["driver_version"]["status"] == "fail"
    assert "expected 580.126.20" in results["driver_version"]["reason"]
    assert results["driver_flavor"]["status"] == "fail"
    # Nothing pinned: the installed module (modinfo) is the expectation; a reload pending shows.
    exp = expect("dgx-1", nvidia_driver_branch="535", nvidia_driver_flavor="proprietary")
    stale = {**DGX1_DRIVER, "modinfo_version": ("535.274.02", 0)}
    check = by_check(validate.driver_checks(validate.sections(probe(**stale)), exp, {}))["driver_version"]
    assert check["status"] == "fail" and check["expected"] == "535.274.02"


def test_failed_names_the_failed_checks_in_order_and_nothing_else():
    """What the acceptance_report action returns as validate_failed (the role's assert and the CLI's exit read it): the
    failed checks by name, in the order checked; passed and not-applicable ones are not named."""
    exp = expect("dgx-1", nvidia_driver_version="580.126.20", nvidia_driver_flavor="open")
    results = validate.driver_checks(validate.sections(probe(**DGX1_DRIVER)), exp, {})
    assert [r["status"] for r in results] == ["fail", "fail", "pass", "pass", "pass", "na", "pass", "na", "pass"]
    assert validate.failed(results) == ["driver_version", "driver_flavor"]
    assert validate.failed([{"check": 7, "status": "fail"}, {"check": "x", "status": "FAIL"}, {"status": "pass"}]) == [
        "7"
    ]
    assert validate.failed([]) == []


def test_nouveau_loaded_fails_and_unreadable_module_lists_fail():
    loaded = {**DGX1_DRIVER, "proc_modules": ("nouveau 2433024 0 - Live 0x0\n", 0)}
    check = validate.nouveau_check(validate.sections(probe(**loaded)), {})
    assert check["status"] == "fail" and "/proc/modules" in check["reason"]
    built_in = {"proc_modules": ("", 1), "sys_module": ("", 0), "sys_module_nouveau": ("", 0)}
    assert validate.nouveau_check(validate.sections(probe(**built_in)), {})["status"] == "fail"
    blind = {"proc_modules": ("", 1), "sys_module": ("", 1), "sys_module_nouveau": ("", 1)}
    assert validate.nouveau_check(validate.sections(probe(**blind)), {})["status"] == "fail"
    assert validate.nouveau_check(validate.sections(probe(**blind)), {"in_container": True})["status"] == "na"


def test_lab_profile_checks_that_do_not_apply_say_why():
    exp = expect("lab", ofed_mode="inbox")
    parsed = validate.sections(
        probe(
            proc_version=("cat: /proc/driver/nvidia/version: No such file or directory", 1),
            proc_modules=("", 1),
            sys_module=("", 0),
            sys_module_nouveau=("", 1),
            ofed_info=("sh: 1: ofed_info: not found", 127),
            rdma_core=("44.0-2", 0),
            memlock_containerd=("LoadState=not-found\nLimitMEMLOCK=8388608", 0),
        )
    )
    results = by_check(
        validate.driver_checks(parsed, exp, {"in_container": True})
        + validate.rdma_checks(parsed, exp, {"in_container": True}, None)
    )
    for name in validate.DRIVER_CHECKS:
        assert results[name] == acceptance.not_applicable(name, "profile lab has no GPU")
    assert results["hca_ports"]["reason"] == "no HCA in profile lab"
    assert results["peer_memory"]["status"] == "na"
    assert results["memlock[containerd]"]["reason"] == "containerd.service is not installed on this node"
    assert results["ofed_version"]["status"] == "pass" and results["ofed_version"]["measured"] == "rdma-core 44.0-2"
    assert "host kernel" in results["nouveau"]["reason"]


def test_gpu_profile_in_a_container_without_the_module_says_so():
    exp = expect("dgx-h100")
    parsed = validate.sections(
        probe(proc_version=("No such file or directory", 1), sys_module=("", 0), sys_module_nouveau=("", 1))
    )
    results = by_check(validate.driver_checks(parsed, exp, {"in_container": True}))
    assert results["driver_version"]["status"] == "na"
    assert "container and shares the host's kernel" in results["driver_version"]["reason"]
    # On a real node the missing module is a failure with the raw line.
    results = by_check(validate.driver_checks(parsed, exp, {"in_container": False}))
    assert (
        results["driver_version"]["status"] == "fail"
        and "No such file or directory" in results["driver_version"]["reason"]
    )


def test_lent_gpu_machine_without_kmod_systemd_or_rdma_tools():
    """What a lent H200 machine printed (docs/gpu-validate): the open 580 module loaded, no modinfo, systemctl or
    ibstat on the node. The flavor comes from the loaded module's ID line; the missing tools are named, not misread
    as damaged output."""
    exp = expect(
        "dgx-h100",
        nodeforge_profile_overrides={"gpu": {"count": 1}, "expected": {"gpus": 1}},
        nvidia_driver_version="580.159.04",
        validate_gpu_ecc="enabled",
    )
    parsed = validate.sections(
        probe(
            proc_version=(output("proc-driver-nvidia-version-580-open-h200-vm.txt"), 0),
            modinfo_version=("/bin/sh: 7: modinfo: not found", 127),
            modinfo_license=("/bin/sh: 7: modinfo: not found", 127),
            nvidia_smi=(output("nvidia-smi-query-gpu-h200-vm.txt"), 0),
            nvidia_smi_remapped_rows=(output("nvidia-smi-query-remapped-rows-h200-vm.txt"), 0),
            proc_modules=("nvidia_uvm 1830912 - - Live 0xffffffffc080c000 (O)\nnvidia 14299136 - - Live 0x0 (O)", 0),
            sys_module=("", 0),
            sys_module_nouveau=("", 1),
            ibstat=("/bin/sh: 7: ibstat: not found", 127),
            memlock_containerd=("/bin/sh: 7: systemctl: not found", 127),
        )
    )
    results = by_check(validate.driver_checks(parsed, exp, {}) + validate.rdma_checks(parsed, exp, {}, "580.159.04"))
    assert results["driver_version"]["status"] == "pass" and results["driver_version"]["measured"] == "580.159.04"
    assert results["driver_flavor"]["status"] == "pass" and results["driver_flavor"]["measured"] == "open"
    assert "no modinfo" in results["driver_flavor"]["reason"]
    assert results["gpu_count"]["measured"] == 1 and results["gpu_count"]["status"] == "pass"
    assert (
        results["gpu_model"]["status"] == "fail"
        and "NVIDIA H200 is not a H100 80GB HBM3" in (results["gpu_model"]["reason"])
    )
    assert results["gpu_ecc"]["status"] == "pass" and results["gpu_persistence"]["status"] == "pass"
    ports = [results[f"hca_port[{h['name']}]"] for h in exp["hcas"]]
    assert len(ports) == 8 and {p["status"] for p in ports} == {"fail"}
    assert all(p["reason"].startswith("ibstat is not installed (infiniband-diags)") for p in ports)
    assert ports[0]["expected"] == "ACTIVE 400 Gb/s InfiniBand"
    assert results["gpu_remapped_rows"]["status"] == "pass"
    assert results["memlock[containerd]"]["status"] == "fail"
    assert results["memlock[containerd]"]["reason"].startswith("systemctl is not on this node")
    # A proprietary module, told by its ID line alone, is not the open flavor the profile wants.
    proprietary = acceptance.evaluate_driver_flavor(None, "open", output("proc-driver-nvidia-version-535-debian12.txt"))
    assert (proprietary["status"], proprietary["measured"]) == ("fail", "proprietary")


def test_rdma_checks_on_dgx1_outputs():
    exp = expect("dgx-1", ofed_mode="mlnx_ofed", ofed_version="4.7-3.2.9.0")
    parsed = validate.sections(
        probe(
            ofed_info=(output("ofed-info-s-mlnx-ofed-4.7-redbook.txt"), 0),
            ibstat=(output("ibstat-dgx1-edr.txt"), 0),
            memory_peers=(output("memory-peers-version-nvidia-peermem-535.txt"), 0),
            memlock_containerd=("LoadState=loaded\n" + output("systemctl-show-limitmemlock-infinity.txt"), 0),
        )
    )
    results = by_check(validate.rdma_checks(parsed, exp, {}, "535.261.03"))
    assert results["ofed_version"]["status"] == "pass"
    assert [results[f"hca_port[mlx5_{i}]"]["status"] for i in range(4)] == ["pass"] * 4
    assert results["peer_memory"]["status"] == "pass"
    assert results["memlock[containerd]"]["status"] == "pass"
    default = validate.sections(
        probe(memlock_containerd=("LoadState=loaded\n" + output("systemctl-show-limitmemlock-default.txt"), 0))
    )
    check = validate.memlock_checks(default, exp)[0]
    assert check["status"] == "fail" and check["measured"] == 8388608
    # The inbox stack with a vendor OFED installed is the wrong stack.
    inbox = validate.ofed_check(
        validate.sections(probe(ofed_info=(output("ofed-info-s-doca-ofed-24.10.txt"), 0))), {"ofed_mode": "inbox"}
    )
    assert inbox["status"] == "fail" and "OFED-internal-24.10-1.1.4" in inbox["reason"]


CONFIG = """version = 2
imports = ["/etc/containerd/conf.d/*.toml"]
[plugins."io.containerd.grpc.v1.cri".containerd]
  default_runtime_name = "runc"
"""
DROPIN = """version = 2
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
  BinaryName = "/usr/bin/nvidia-container-runtime"
"""


def test_containerd_runtime_from_its_dump_or_its_files():
    exp = expect("lab")
    dumped = validate.sections(probe(containerd_config_dump=(DROPIN, 0)))
    check = validate.containerd_check(dumped, exp)
    assert check["status"] == "pass" and check["reason"] == "containerd config dump"
    files = {"containerd_config_dump": ("", 127), "file:/etc/containerd/config.toml": (CONFIG, 0)}
    missing = validate.containerd_check(validate.sections(probe(**files)), exp)
    assert missing["status"] == "fail" and missing["measured"] == "no nvidia runtime"
    files["file:/etc/containerd/conf.d/99-nvidia.toml"] = (DROPIN, 0)
    merged = validate.containerd_check(validate.sections(probe(**files)), exp)
    assert merged["status"] == "pass", merged
    assert "/etc/containerd/conf.d/99-nvidia.toml" in merged["reason"]
    # An import outside config.toml's imports does not count.
    files["file:/etc/containerd/config.toml"] = (CONFIG.replace("imports", "# imports"), 0)
    assert validate.containerd_check(validate.sections(probe(**files)), exp)["status"] == "fail"


def test_cdi_spec_lists_the_gpus():
    exp = expect("dgx-1")
    spec = yaml.safe_dump(
        {
            "cdiVersion": "0.5.0",
            "kind": "nvidia.com/gpu",
            "devices": [{"name": str(i)} for i in range(8)] + [{"name": "all"}],
        }
    )
    parsed = validate.sections(probe(**{"file:/var/run/cdi/nvidia.yaml": (spec, 0)}))
    assert validate.cdi_check(parsed, exp, 8)["status"] == "pass"
    assert validate.cdi_check(parsed, exp, 7)["status"] == "fail"
    assert validate.cdi_check(validate.sections(""), exp, 8)["status"] == "fail"
    assert validate.cdi_check(parsed, expect("lab"), None)["reason"] == "profile lab has no GPU"


def test_rdma_pairs_from_the_inventory():
    assert validate.rdma_pairs(["a", "b", "c", "d", "e"]) == [
        {"server": "a", "client": "b"},
        {"server": "c", "client": "d"},
    ]
    assert validate.rdma_pairs(["a", "b", "c"], {"c": "a"}) == [{"server": "a", "client": "c"}]
    assert validate.rdma_pairs(["a", "b"], {"a": "zz"}) == []


def test_ib_write_bw_runs_again_only_where_perftest_could_not_measure_its_clock():
    """The role's attempts (tasks/ib_write_bw.yml): every HCA at first; then only those whose last run's clock
    perftest could not measure; each run counted, and the last one reported with its count."""
    hcas = ["mlx5_0", "mlx5_1", "mlx5_2"]
    assert validate.ib_write_bw_todo({}, hcas) == hcas
    measured = output("ib-write-bw-redbook-004.txt")
    unmeasured = output("ib-write-bw-soft-roce-tcg-clock-unmeasured.txt")
    stdout, stderr = unmeasured.split("Couldn't connect", 1)
    first = [
        {"item": {"name": "mlx5_0"}, "stdout": measured, "rc": 0},
        # perftest's rates on stdout, its clock's complaint on stderr, exit 0 (-F): as the role's command gets them.
        {"item": {"name": "mlx5_1"}, "stdout": stdout, "stderr": "Couldn't connect" + stderr, "rc": 0},
        {"item": {"name": "mlx5_2"}, "stdout": "", "stderr": "Couldn't connect to dgx02:18517", "rc": 1},
    ]
    runs = validate.ib_write_bw_runs(None, first)
    assert {name: run["attempt"] for name, run in runs.items()} == dict.fromkeys(hcas, 1)
    # The unreachable server is a result (a failed check), not a reason to run again.
    assert validate.ib_write_bw_todo(runs, hcas) == ["mlx5_1"]
    second = [{"item": {"name": name}, "skipped": True} for name in ("mlx5_0", "mlx5_2")]
    second.insert(1, {"item": {"name": "mlx5_1"}, "stdout": measured, "rc": 0})
    runs = validate.ib_write_bw_runs(runs, second)
    assert {name: run["attempt"] for name, run in runs.items()} == {"mlx5_0": 1, "mlx5_1": 2, "mlx5_2": 1}
    assert runs["mlx5_0"]["stdout"] == measured and validate.ib_write_bw_todo(runs, hcas) == []
    checks = by_check(validate.perf_checks({"enabled": True, "peer": "dgx02", "ib": runs}, expect("dgx-1"), "dgx01"))
    again = checks["ib_write_bw[mlx5_1 <-> dgx02]"]
    assert (again["status"], again["measured"]) == ("pass", 11811.28)
    assert again["reason"].endswith("; run 2 times (perftest could not measure its CPU clock before)")
    assert "run " not in checks["ib_write_bw[mlx5_0 <-> dgx02]"]["reason"]
    # Still unmeasured after the last attempt: a failed check that says why, not a bandwidth of 0.
    last = validate.ib_write_bw_runs(runs, [{**first[1], "item": {"name": "mlx5_1"}}])
    check = by_check(validate.perf_checks({"enabled": True, "peer": "dgx02", "ib": last}, expect("dgx-1"), "x"))[
        "ib_write_bw[mlx5_1 <-> dgx02]"
    ]
    assert (check["status"], check["measured"]) == ("fail", None)
    assert "could not measure the CPU clock" in check["reason"] and "run 3 times" in check["reason"]


def test_perf_checks_judge_ib_write_bw_against_the_line_rate():
    exp = expect("dgx-1")
    ib = [{"item": {"name": f"mlx5_{i}"}, "stdout": output("ib-write-bw-redbook-004.txt"), "rc": 0} for i in range(4)]
    results = validate.perf_checks({"enabled": True, "peer": "dgx02", "ib": ib}, exp, "dgx01")
    bw = [r for r in results if r["check"].startswith("ib_write_bw")]
    # 11264.11 perftest MB/sec is 11811.28 MB/s, above 90% of 100 Gb/s (11250 MB/s).
    assert [(r["status"], r["measured"], r["expected"]) for r in bw] == [("pass", 11811.28, 11250.0)] * 4
    assert bw[0]["check"] == "ib_write_bw[mlx5_0 <-> dgx02]"
    raised = expect("dgx-1", validate_rdma_min_bw_mbs=12000)
    assert {
        r["status"] for r in validate.perf_checks({"enabled": True, "peer": "dgx02", "ib": ib}, raised, "x")[:4]
    } == {"fail"}
    # validate_rdma_fraction moves the floor with the line rate: 95% of 100 Gb/s is 11875 MB/s, above what was measured.
    stricter = expect("dgx-1", validate_rdma_fraction=0.95)
    judged = [r for r in validate.perf_checks({"enabled": True, "peer": "dgx02", "ib": ib}, stricter, "x")][:4]
    assert [(r["status"], r["expected"]) for r in judged] == [("fail", 11875.0)] * 4
    others = by_check(results)
    assert others["nccl_busbw"]["reason"] == "nccl-tests are not installed (no all_reduce_perf)"
    assert others["dcgm_diag"]["reason"] == "DCGM is not installed (no dcgmi)"
    dcgm = {
        "enabled": True,
        "peer": "dgx02",
        "ib": ib,
        "tools": ["dcgmi"],
        "dcgm": {"stdout": output("dcgmi-diag-r1-persistence-fail.txt"), "rc": 226},
    }
    assert by_check(validate.perf_checks(dcgm, exp, "x"))["dcgm_diag"]["status"] == "fail"
    assert validate.perf_checks({"enabled": False}, exp, "x")[0]["status"] == "na"
    # The server of the pair reports the same links, measured by its client.
    served = by_check(validate.perf_checks({"enabled": True, "server_of": "dgx01", "served": ib}, raised, "dgx02"))
    assert served["ib_write_bw[mlx5_3 <-> dgx01]"]["status"] == "fail"
    assert served["ib_write_bw[mlx5_3 <-> dgx01]"]["reason"].startswith("measured by dgx01's client: ")
    alone = validate.perf_checks({"enabled": True}, exp, "x")[0]
    assert alone["check"] == "ib_write_bw" and alone["reason"].startswith("no peer in this run")
    # A client that never got a report (the server was not there) fails with the raw line.
    gone = [{"item": {"name": "mlx5_0"}, "stdout": "", "stderr": "Couldn't connect to dgx02:18515", "rc": 1}]
    check = validate.perf_checks({"enabled": True, "peer": "dgx02", "ib": gone}, exp, "x")[0]
    assert check["status"] == "fail" and "Couldn't connect to dgx02:18515" in check["reason"]


def test_an_hca_never_measured_is_reported_as_not_run_and_why():
    """An HCA of the profile without a run (the play ended before the client reached it) or whose run never started
    fails as "not run", naming the client, never as unreadable output."""
    exp = expect("dgx-1")
    ib = {"mlx5_0": {"item": {"name": "mlx5_0"}, "stdout": output("ib-write-bw-redbook-004.txt"), "rc": 0}}
    ib["mlx5_1"] = {"item": {"name": "mlx5_1"}, "msg": "[Errno 2] No such file or directory: b'sh'", "rc": None}
    checks = by_check(validate.perf_checks({"enabled": True, "peer": "dgx02", "ib": ib}, exp, "dgx01"))
    assert checks["ib_write_bw[mlx5_0 <-> dgx02]"]["status"] == "pass"
    started = checks["ib_write_bw[mlx5_1 <-> dgx02]"]
    assert (started["status"], started["expected"]) == ("fail", 11250.0)
    assert started["reason"] == (
        "not run: ib_write_bw could not start on dgx01: [Errno 2] No such file or directory: b'sh'"
    )
    for hca in ("mlx5_2", "mlx5_3"):
        never = checks[f"ib_write_bw[{hca} <-> dgx02]"]
        assert never["status"] == "fail" and never["reason"].startswith(
            f"not run: dgx01's ib_write_bw client has no run on {hca} "
        ), never
        assert "could not be read" not in never["reason"]
    # On the server of the pair, the client that never ran is the other node.
    served = by_check(validate.perf_checks({"enabled": True, "server_of": "dgx01", "served": ib}, exp, "dgx02"))
    assert served["ib_write_bw[mlx5_3 <-> dgx01]"]["reason"].startswith(
        "not run: dgx01's ib_write_bw client has no run on mlx5_3 (the play ended on dgx01 "
    )


# ---------------------------------------------------------------------------------------------------------------
# The runner collects the report task's results


def _event(kind: str, host: str, task: str, res: dict, role: str = "") -> dict:
    """An event as ansible-runner sends it: the task by its own name, the role (if any) beside it."""
    return {"event": kind, "event_data": {"host": host, "task": task, "res": res, **({"role": role} if role else {})}}


def test_runner_collects_the_report_task_results_per_host():
    progress = Progress()
    results = [acceptance.check_result("nouveau", "pass", "not loaded", "not loaded")]
    report = {"ansible_facts": {"validate_results": results}, "msg": ["n1: PASS nouveau"]}
    progress.handle(_event("runner_on_ok", "n1", "Report the acceptance checks", report, role="validate"))
    # Another task's facts of that name do not count.
    progress.handle(_event("runner_on_ok", "n2", "Something else", {"ansible_facts": {"validate_results": results}}))
    assert progress.acceptance == {"n1": results}


# ---------------------------------------------------------------------------------------------------------------
# Reports


def _result(acceptance_results: dict, hosts: dict, failures: list | None = None, rc: int = 2) -> RunResult:
    return RunResult(
        playbook="validate.yml",
        status="failed" if rc else "successful",
        rc=rc,
        artifacts="/tmp/artifacts",
        hosts=hosts,
        failures=failures or [],
        changes={},
        reboot_required={},
        duration_s=3.2,
        acceptance=acceptance_results,
    )


COUNTS = dict.fromkeys(("ok", "changed", "failed", "unreachable", "skipped", "rescued", "ignored"), 0)
N1 = [
    acceptance.check_result("nouveau", "pass", "not loaded", "not loaded"),
    acceptance.check_result("ib_write_bw[mlx5_0 <-> n2]", "fail", 9000.5, 11250.0, "below the floor", "MB/s"),
    acceptance.not_applicable("hca_ports", "no HCA in profile lab"),
]


def _mixed() -> RunResult:
    return _result(
        {"n1": N1},
        {"n1": {**COUNTS, "ok": 9, "failed": 1}, "n2": {**COUNTS, "unreachable": 1}},
        [Failure("n2", "Gathering Facts", "ssh: connect to host n2 port 22: Connection refused", unreachable=True)],
    )


def test_json_payload_and_exit_codes():
    report = validate_report.payload(_mixed())
    assert report["status"] == "failed" and report["exit_code"] == EXIT_HOST_FAILED
    assert report["hosts"]["n1"]["counts"] == {"pass": 1, "fail": 1, "na": 1, "error": 0}
    assert report["hosts"]["n2"]["status"] == "unreachable"
    assert "Connection refused" in report["hosts"]["n2"]["checks"][0]["reason"]
    passing = _result({"n1": [N1[0], N1[2]]}, {"n1": {**COUNTS, "ok": 9}}, rc=0)
    assert validate_report.payload(passing)["exit_code"] == EXIT_OK
    # The playbook succeeded but a check failed (a run without the role's assert): still not 0.
    failing = _result({"n1": N1}, {"n1": {**COUNTS, "ok": 9}}, rc=0)
    assert validate_report.payload(failing)["exit_code"] == EXIT_HOST_FAILED
    only_unreachable = _result({}, {"n2": {**COUNTS, "unreachable": 1}}, rc=4)
    assert validate_report.payload(only_unreachable)["exit_code"] == EXIT_UNREACHABLE


def test_junit_reads_back_with_one_testcase_per_node_and_check():
    root = ET.fromstring(validate_report.junit(validate_report.payload(_mixed())))
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("skipped"), root.get("errors")) == ("4", "1", "1", "1")
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert set(suites) == {"n1", "n2"}
    cases = {c.get("name"): c for c in suites["n1"].findall("testcase")}
    assert set(cases) == {"nouveau", "ib_write_bw[mlx5_0 <-> n2]", "hca_ports"}
    assert {c.get("classname") for c in cases.values()} == {"nodeforge.validate.n1"}
    failure = cases["ib_write_bw[mlx5_0 <-> n2]"].find("failure")
    assert failure.get("message") == "below the floor"
    assert "measured: 9000.5 MB/s; expected: 11250.0 MB/s" in failure.text
    assert cases["hca_ports"].find("skipped").get("message") == "no HCA in profile lab"
    assert cases["nouveau"].find("failure") is None and cases["nouveau"].find("skipped") is None
    [error] = suites["n2"].findall("testcase/error")
    assert "Connection refused" in error.get("message")


def test_html_shows_each_node_check_and_the_bandwidth_bar():
    page = validate_report.html_report(validate_report.payload(_mixed()))
    assert page.startswith("<!DOCTYPE html>")
    for text in ("n1", "n2", "nouveau", "ib_write_bw[mlx5_0 &lt;-&gt; n2]", "hca_ports", "no HCA in profile lab"):
        assert text in page, text
    assert "<svg" in page and "9000.5 MB/s (floor 11250)" in page
    assert "http://" not in page and "https://" not in page and "<script" not in page  # no external assets
    assert page.count('class="fail"') >= 2  # in the grid and in n1's table


def _families(text: str) -> dict:
    """The text read back by the Prometheus client's own parser: {metric: {(labels...): value}}."""
    from prometheus_client.parser import text_string_to_metric_families

    found = {}
    for family in text_string_to_metric_families(text):
        assert family.type == "gauge" and family.documentation, family.name
        found[family.name] = {tuple(sorted(s.labels.items())): s.value for s in family.samples}
    return found


def test_textfile_reads_back_per_node_check_and_status():
    text = validate_report.textfile(validate_report.payload(_mixed()), written_at=1764547200.0)
    found = _families(text)
    status = found["nodeforge_validate_check_status"]
    bandwidth = (("check", "ib_write_bw[mlx5_0 <-> n2]"), ("node", "n1"))
    assert [status[(*bandwidth[:1], bandwidth[1], ("status", s))] for s in ("pass", "fail", "na", "error")] == [
        0.0,
        1.0,
        0.0,
        0.0,
    ]
    assert status[(("check", "hca_ports"), ("node", "n1"), ("status", "na"))] == 1.0
    # Exactly one status of each check is 1; the unreachable node's one "run" entry is an error.
    assert sum(status.values()) == 4
    assert status[(("check", "run"), ("node", "n2"), ("status", "error"))] == 1.0
    # The numbers measured, with their unit; a text measurement ("not loaded") is no sample.
    assert found["nodeforge_validate_check_measured"] == {(*bandwidth, ("unit", "MB/s")): 9000.5}
    assert found["nodeforge_validate_node_passed"] == {(("node", "n1"),): 0.0, (("node", "n2"),): 0.0}
    assert found["nodeforge_validate_checks"][(("node", "n1"), ("status", "fail"))] == 1.0
    assert found["nodeforge_validate_last_run_timestamp_seconds"] == {
        (("node", "n1"),): 1764547200.0,
        (("node", "n2"),): 1764547200.0,
    }
    # node_exporter's textfile collector refuses samples with timestamps: none has one.
    assert all(len(line.rsplit("}", 1)[1].split()) == 1 for line in text.splitlines() if not line.startswith("#"))
    passing = _result({"n1": [N1[0], N1[2]]}, {"n1": {**COUNTS, "ok": 9}}, rc=0)
    passed = _families(validate_report.textfile(validate_report.payload(passing), 0.0))
    assert passed["nodeforge_validate_node_passed"] == {(("node", "n1"),): 1.0}


def test_textfile_label_values_are_escaped_as_the_format_says():
    odd = [acceptance.check_result('a"b\\c\nd', "pass", 1, 1)]
    text = validate_report.textfile(
        validate_report.payload(_result({"n1": odd}, {"n1": {**COUNTS, "ok": 1}}, rc=0)), 0.0
    )
    labels = [dict(k) for k in _families(text)["nodeforge_validate_check_status"]]
    assert {label["check"] for label in labels} == {'a"b\\c\nd'}


def test_console_table_keeps_check_names_with_brackets():
    console = Console(record=True, width=200)
    validate_report.print_table(console, validate_report.payload(_mixed()))
    text = console.export_text()
    assert "ib_write_bw[mlx5_0 <-> n2]" in text and "n1: failed (1 pass, 1 fail, 1 not applicable)" in text
    assert "n2: unreachable" in text


def test_cli_writes_every_report_and_exits_non_zero(tmp_path, monkeypatch):
    """The verb through click, with the run replaced by a result: the table, the files, the exit code; -e values
    (a secret here) never reach a report."""
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        yaml.safe_dump(
            {"all": {"children": {"gpu_nodes": {"hosts": {"n1": None}, "vars": {"nodeforge_profile": "lab"}}}}}
        )
    )
    seen = {}

    def fake_run(playbook, opts, on_tick=None, gate=None):
        gate()  # the CLI's check of the inventory, as run_playbook calls it
        seen["playbook"], seen["extravars"] = playbook, opts.extravars
        return _mixed()

    monkeypatch.setattr(cli, "run_playbook", fake_run)
    out = {kind: tmp_path / f"report.{kind}" for kind in ("json", "xml", "html")}
    argv = ["validate", "-i", str(inventory), "--perf", "-e", "site_token=s3cret", "--json", str(out["json"])]
    result = CliRunner().invoke(cli.main, [*argv, "--junit", str(out["xml"]), "--html", str(out["html"])])
    assert result.exit_code == EXIT_HOST_FAILED, result.output
    assert seen["playbook"] == "validate.yml" and seen["extravars"]["validate_perf"] is True
    assert "ib_write_bw[mlx5_0 <-> n2]" in result.output
    assert json.loads(out["json"].read_text())["hosts"]["n1"]["checks"] == N1
    assert ET.parse(out["xml"]).getroot().get("failures") == "1"
    textfile = tmp_path / "textfile"
    textfile.mkdir()
    again = CliRunner().invoke(cli.main, ["validate", "-i", str(inventory), "--textfile", str(textfile)])
    assert again.exit_code == EXIT_HOST_FAILED, again.output
    [written] = textfile.iterdir()  # one file, whatever the nodes are called; no temporary file left
    assert written.name == "nodeforge-validate.prom"
    assert _families(written.read_text())["nodeforge_validate_node_passed"] == {
        (("node", "n1"),): 0.0,
        (("node", "n2"),): 0.0,
    }
    out["prom"] = written
    for path in out.values():
        assert "s3cret" not in path.read_text()
    stdout = CliRunner().invoke(cli.main, ["validate", "-i", str(inventory), "--json"])
    assert json.loads(stdout.stdout)["status"] == "failed"


@pytest.mark.parametrize("name", ["validate.yml"])
def test_the_verb_runs_the_validate_playbook(name):
    assert cli.VERBS["validate"].playbook == name
    assert (REPO / "playbooks" / name).is_file()


def test_report_task_lines_read_as_sentences():
    lines = validate.summary_lines(
        "n1",
        [
            acceptance.not_applicable("gpu_count", "profile lab has no GPU"),
            acceptance.check_result(
                "memlock[containerd]", "fail", 8388608, "infinity", "LimitMEMLOCK is 8388608 bytes"
            ),
            acceptance.check_result("nouveau", "pass", "not loaded", "not loaded"),
        ],
    )
    assert lines == [
        "n1: NA gpu_count: profile lab has no GPU",
        "n1: FAIL memlock[containerd]: 8388608 (expected infinity) - LimitMEMLOCK is 8388608 bytes",
        "n1: PASS nouveau: not loaded (expected not loaded)",
    ]


def test_selinux_modules_at_the_versions_of_their_te_files():
    te = (REPO / "roles" / "selinux_modules" / "files" / "infiniband.te").read_text()
    version = validate.te_version(te)
    assert version and f"module infiniband {version};" in te
    assert validate.te_version("policy_module(nvidia_container)\n") == "1"
    store = {
        "wanted": {
            "infiniband": {"installed": True, "version": version, "lang": "pp"},
            "nvidia_container": {"installed": False, "shadowed_by": None},
        }
    }
    node = {"selinux_store": store, "te_versions": {"infiniband": version, "nvidia_container": "1.0"}}
    results = by_check(validate.selinux_checks(node, expect("dgx-1")))
    assert results["selinux_module[infiniband]"]["status"] == "pass"
    assert results["selinux_module[nvidia_container]"]["status"] == "fail"
    store["wanted"]["infiniband"]["version"] = "0.9"
    assert by_check(validate.selinux_checks(node, expect("dgx-1")))["selinux_module[infiniband]"]["status"] == "fail"
    stores = probe(
        selinux_stores=("targeted\n", 0), file__etc__selinux__config=("SELINUX=enforcing\nSELINUXTYPE=targeted\n", 0)
    )
    assert validate.selinux_store(stores.replace("file:etc:selinux:config", "file:/etc/selinux/config")) == "targeted"
    assert validate.selinux_store(probe(selinux_stores=("ls: cannot access '/var/lib/selinux'", 2))) == ""


@pytest.mark.slow
def test_a_real_run_hands_each_host_s_results_to_the_runner(local_inventory):
    """validate.yml on this machine (local connection, profile lab): the report task's results reach RunResult, the
    checks the lab profile rules out say why, and the exit code follows the failed checks."""
    from nodeforge.runner import RunOptions, run_playbook

    result = run_playbook("validate.yml", RunOptions(inventory=str(local_inventory)))
    checks = by_check(result.acceptance["localnode"])
    for name in (*validate.DRIVER_CHECKS, "peer_memory", "cdi_gpus"):
        assert checks[name]["status"] == "na" and checks[name]["reason"] == "profile lab has no GPU", checks[name]
    assert checks["hca_ports"]["reason"] == "no HCA in profile lab"
    assert {checks[name]["status"] for name in validate.PERF_CHECKS} == {"na"}
    # A check the probes really read on this machine, against /sys read here.
    assert checks["nouveau"]["status"] == ("fail" if Path("/sys/module/nouveau").exists() else "pass"), checks[
        "nouveau"
    ]
    assert {c["status"] for c in checks.values()} <= {"pass", "fail", "na"}
    failed = [name for name, c in checks.items() if c["status"] == "fail"]
    assert result.exit_code == (EXIT_HOST_FAILED if failed else EXIT_OK)
    if failed:
        [failure] = result.failures
        assert failure.message == f"localnode: {len(failed)} acceptance check(s) failed: {', '.join(failed)}"


def test_doca_is_judged_by_its_profile_package():
    exp = expect("dgx-h100", ofed_mode="doca")
    assert (exp["ofed_version"], exp["doca_package"]) == ("3.4.1", "doca-ofed")
    found = probe(ofed_info=(output("ofed-info-s-doca-ofed-24.10.txt"), 0), doca_profile=("3.4.1-1", 0))
    check = validate.ofed_check(validate.sections(found), exp)
    assert check["status"] == "pass" and check["measured"] == "doca-ofed 3.4.1-1"
    assert "OFED-internal-24.10-1.1.4" in check["reason"]
    older = probe(ofed_info=(output("ofed-info-s-doca-ofed-24.10.txt"), 0), doca_profile=("3.3.0-1", 0))
    assert validate.ofed_check(validate.sections(older), exp)["status"] == "fail"
    missing = probe(ofed_info=("sh: 1: ofed_info: not found", 127), doca_profile=("dpkg-query: no packages found", 1))
    assert validate.ofed_check(validate.sections(missing), exp)["reason"] == "doca-ofed is not installed (no ofed_info)"


FAKE_PERFTEST = """#!/bin/sh
# Stand-in for perftest's ib_write_bw (no HCA here): records its arguments; the server listens on its port (-p) only
# after a while, as one started on a node just booted under emulation did, and until its client connects; the client
# connects to it (refused while nothing listens: the role's retry runs it again, and the calls show it), then prints
# the Redbook's captured report, or, in the first client run on mlx5_1, what a real one printed where perftest could
# not measure its CPU clock.
here="$(dirname "$0")"
echo "$*" >> "$here/calls"
port=$(echo "$*" | sed -n 's/.* -p \\([0-9]*\\) .*/\\1/p')
case "$*" in
  *" 127.0.0.1") ;;
  *)
    sleep 6
    exec python3 -c 'import socket, sys
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("127.0.0.1", int(sys.argv[1])))
server.listen(1)
server.settimeout(120)
server.accept()[0].close()' "$port" ;;
esac
python3 -c 'import socket, sys
socket.create_connection(("127.0.0.1", int(sys.argv[1])), 5).close()' "$port" 2>/dev/null ||
  { echo " Unable to init the socket connection" >&2; exit 1; }
case "$*" in
  "-d mlx5_1 "*" 127.0.0.1")
    if [ ! -e "$here/unmeasured.done" ]; then
      touch "$here/unmeasured.done"
      cat "$here/unmeasured.stdout"; cat "$here/unmeasured.stderr" >&2
      exit 0
    fi
esac
cat "$here/report.txt"
"""


@pytest.mark.slow
def test_perf_pairs_nodes_runs_servers_then_clients_and_judges_per_host_thresholds(tmp_path, monkeypatch):
    """--perf through the real playbook on three local hosts of profile dgx-1 (four HCAs): n1 serves n2, n3 has no
    peer. ib_write_bw is a stand-in that prints the Redbook's captured report (11811.28 MB/s): n2 passes the
    default floor (11250), n1's raised floor (12000, a host variable) fails the same links. Its first client run on
    mlx5_1 prints a report whose clock perftest could not measure: that pair runs again, server and client. Its
    servers listen 6 s after they start: each client runs once, after its server listens (a client started before
    would be refused and run again, and show in the calls twice)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ib_write_bw").write_text(FAKE_PERFTEST)
    (bin_dir / "ib_write_bw").chmod(0o755)
    (bin_dir / "report.txt").write_text(output("ib-write-bw-redbook-004.txt"))
    stdout, stderr = output("ib-write-bw-soft-roce-tcg-clock-unmeasured.txt").split("Couldn't connect", 1)
    (bin_dir / "unmeasured.stdout").write_text(stdout)
    (bin_dir / "unmeasured.stderr").write_text("Couldn't connect" + stderr)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    inventory = tmp_path / "hosts.yml"
    local = {
        "ansible_connection": "local",
        "ansible_host": "127.0.0.1",
        "ansible_python_interpreter": "{{ ansible_playbook_python }}",
    }
    hosts = {"n1": {"validate_rdma_min_bw_mbs": 12000}, "n2": None, "n3": None}
    inventory.write_text(
        yaml.safe_dump(
            {"all": {"children": {"gpu_nodes": {"hosts": hosts, "vars": {**local, "nodeforge_profile": "dgx-1"}}}}}
        )
    )
    report_file = tmp_path / "report.json"
    run = CliRunner().invoke(cli.main, ["validate", "-i", str(inventory), "--perf", "--json", str(report_file)])
    report = json.loads(report_file.read_text())
    assert run.exit_code == EXIT_HOST_FAILED, run.output
    calls = sorted((bin_dir / "calls").read_text().splitlines())
    hcas = [f"mlx5_{i}" for i in range(4)]
    servers = [f"-d {h} -i 1 -p {18515 + i} -F -s 65536" for i, h in enumerate(hcas)]
    # Every HCA once, and mlx5_1's pair a second time (its server first: the client's retry has one to reach).
    again = servers[1]
    assert calls == sorted([*servers, again] + [f"{s} 127.0.0.1" for s in [*servers, again]])
    lines = (bin_dir / "calls").read_text().splitlines()
    assert again in lines[lines.index(f"{again} 127.0.0.1") :]
    checks = {host: {c["check"]: c for c in entry["checks"]} for host, entry in report["hosts"].items()}
    for hca in hcas:
        client = checks["n2"][f"ib_write_bw[{hca} <-> n1]"]
        assert (client["status"], client["measured"], client["expected"]) == ("pass", 11811.28, 11250.0)
        server = checks["n1"][f"ib_write_bw[{hca} <-> n2]"]
        assert (server["status"], server["measured"], server["expected"]) == ("fail", 11811.28, 12000.0)
        retried = "; run 2 times (perftest could not measure its CPU clock before)"
        assert client["reason"].endswith(retried) is server["reason"].endswith(retried) is (hca == "mlx5_1"), client
    assert checks["n3"]["ib_write_bw"]["status"] == "na"


def test_the_textfile_recorded_on_the_gpu_machine_is_what_todays_writer_makes_of_its_report():
    """docs/gpu-validate: `validate --textfile` ran on the lent H200 in the same run as validate-h200.json. The
    recorded file parses with the Prometheus client's parser, each check's status series says the JSON report's
    status, and today's writer, given that report and the run's time, writes the same bytes."""
    where = REPO / "docs" / "gpu-validate"
    recorded = (where / "nodeforge-validate-h200.prom").read_text()
    report = json.loads((where / "validate-h200.json").read_text())
    found = _families(recorded)
    (stamp,) = found["nodeforge_validate_last_run_timestamp_seconds"].values()
    assert validate_report.textfile(report, written_at=stamp) == recorded
    checks = report["hosts"]["gpu-node-01"]["checks"]
    statuses = found["nodeforge_validate_check_status"]
    assert {
        c["check"]: [
            s
            for s in ("pass", "fail", "na", "error")
            if statuses[(("check", c["check"]), ("node", "gpu-node-01"), ("status", s))] == 1.0
        ]
        for c in checks
    } == {c["check"]: [c["status"]] for c in checks}
    counts = {dict(k)["status"]: v for k, v in found["nodeforge_validate_checks"].items()}
    assert counts == {"pass": 6, "fail": 14, "na": 8, "error": 0}
    assert found["nodeforge_validate_node_passed"] == {(("node", "gpu-node-01"),): 0.0}


def test_the_recorded_gpu_report_follows_from_its_raw_outputs():
    """docs/gpu-validate: the report `nodeforge validate` wrote on a lent H200 machine, and the raw outputs of the
    role's probes captured there in the same run (probes-h200.txt). Judged again here with that inventory, today's
    code gives the same node checks: a change of a parser or a rule that would judge the real machine differently
    fails here."""
    where = REPO / "docs" / "gpu-validate"
    variables = yaml.safe_load((where / "inventory" / "group_vars" / "gpu_nodes.yml").read_text())
    recorded = json.loads((where / "validate-h200.json").read_text())["hosts"]["gpu-node-01"]["checks"]
    exp = validate.expectations(model.HostModel("gpu-node-01", variables))
    # The machine has /.dockerenv (Ansible's facts call it a container) and no SELinux policy store.
    node = {"in_container": True, "selinux_store": None, "te_versions": {}}
    probes = {"all": (where / "probes-h200.txt").read_text()}
    perf = {"ib_write_bw", "nccl_busbw", "nccl_latency", "dcgm_diag"}
    results = validate.evaluate(probes, exp, node, {"enabled": False}, "gpu-node-01")
    judged = [r for r in results if r["check"] not in perf]
    assert judged == [r for r in recorded if r["check"] not in perf]
    assert [r["check"] for r in recorded if r["status"] == "pass"] == [
        "driver_flavor",
        "gpu_count",
        "gpu_persistence",
        "gpu_ecc",
        "gpu_remapped_rows",
        "nouveau",
    ]
