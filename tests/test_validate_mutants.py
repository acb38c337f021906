"""module_utils/validate.py's node checks pinned down whole: each check's complete result (name, status, measured,
expected, the operator's reason word for word) for the branches tests/test_validate.py judges only by status, the
boundaries of its helpers, and the dispatch of evaluate() and runtime_checks()."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
import yaml

from nodeforge import collection

from ansible_collections.nodeforge.gpu.plugins.module_utils import validate  # isort: skip
from ansible_collections.nodeforge.gpu.plugins.module_utils.acceptance import (  # isort: skip
    check_result,
    not_applicable,
)

assert collection.model  # the import that installs the collection loader

OUTPUTS = Path(__file__).parent / "data" / "outputs" / "validate"
RUNTIME = "/usr/bin/nvidia-container-runtime"
CONTAINERD_EXPECTED = f"runtimes.nvidia with BinaryName {RUNTIME}"


def output(name: str) -> str:
    return (OUTPUTS / name).read_text()


def parsed(**found: tuple[str, int]) -> dict[str, dict]:
    """Sections as the probes print them (output, then `@@nodeforge NAME rc=N@@`), read back by sections()."""
    return validate.sections(
        "".join(f"{text.rstrip(chr(10))}\n@@nodeforge {name} rc={rc}@@\n" for name, (text, rc) in found.items())
    )


def by_check(results: list[dict]) -> dict[str, dict]:
    return {r["check"]: r for r in results}


EDR = {"name": "mlx5_0", "rate_gbps": 100}
REPORT = output("ib-write-bw-redbook-004.txt")
# What ib_write_bw's report above is judged to be against 90% of 100 Gb/s.
MEASURED_REASON = "65536-byte messages: 11811.28 MB/s average (ib_write_bw printed 11264.11 MB/sec), floor 11250.0 MB/s"


# ---------------------------------------------------------------------------------------------------------------
# perf_checks and its helpers


def test_perf_checks_without_perf_say_how_to_run_them():
    reason = "performance tests not run (nodeforge validate --perf)"
    assert validate.perf_checks({"enabled": False}, {"gpus": 8, "hcas": [EDR]}, "n1") == [
        not_applicable("ib_write_bw", reason),
        not_applicable("nccl_busbw", reason),
        not_applicable("nccl_latency", reason),
        not_applicable("dcgm_diag", reason),
    ]


def test_perf_checks_on_a_profile_without_hca_or_gpu():
    exp = {"profile": "lab", "gpus": 0, "hcas": []}
    tools = ["all_reduce_perf", "dcgmi"]
    assert validate.perf_checks({"enabled": True, "peer": "n2", "tools": tools}, exp, "n1") == [
        not_applicable("ib_write_bw", "no HCA in profile lab"),
        not_applicable("nccl_busbw", "profile lab has no GPU"),
        not_applicable("nccl_latency", "profile lab has no GPU"),
        not_applicable("dcgm_diag", "profile lab has no GPU"),
    ]


def test_perf_checks_judge_nccl_and_dcgm_outputs_against_the_thresholds():
    exp = {"profile": "p", "gpus": 1, "hcas": [EDR], "nccl_min_busbw_gbs": 5, "nccl_max_latency_us": 100}
    perf = {
        "enabled": True,
        "peer": "n2",
        "ib": [{"item": {"name": "mlx5_0"}, "stdout": REPORT, "rc": 0}],
        "tools": ["all_reduce_perf", "dcgmi"],
        "nccl": {"stdout": output("nccl-all-reduce-perf-16x1-nccl-tests-format.txt"), "rc": 0},
        "dcgm": {"stdout": output("dcgmi-diag-r1-pass.txt"), "rc": 0},
    }
    assert validate.perf_checks(perf, exp, "n1") == [
        check_result("ib_write_bw[mlx5_0 <-> n2]", "pass", 11811.28, 11250.0, MEASURED_REASON, "MB/s"),
        check_result(
            "nccl_busbw",
            "pass",
            5.7,
            5.0,
            "peak 5.7 GB/s at 67108864 bytes (average 1.93019 GB/s), floor 5.0 GB/s",
            "GB/s",
        ),
        check_result("nccl_latency", "pass", 78.92, 100.0, "78.92 us for 8 bytes, ceiling 100.0 us", "us"),
        check_result("dcgm_diag", "pass", "Pass", "Pass", "9 tests passed or skipped"),
    ]
    # Without the tools the probe looks for, each check says which is missing.
    assert validate.perf_checks({**perf, "tools": []}, exp, "n1")[1:] == [
        not_applicable("nccl_busbw", "nccl-tests are not installed (no all_reduce_perf)"),
        not_applicable("nccl_latency", "nccl-tests are not installed (no all_reduce_perf)"),
        not_applicable("dcgm_diag", "DCGM is not installed (no dcgmi)"),
    ]


def test_a_measured_run_that_exited_non_zero_fails_with_its_exit_code():
    exp = {"profile": "p", "gpus": 0, "hcas": [EDR]}
    failed = {"enabled": True, "peer": "n2", "ib": [{"item": {"name": "mlx5_0"}, "stdout": REPORT, "rc": 1}]}
    assert validate.perf_checks(failed, exp, "n1")[0] == check_result(
        "ib_write_bw[mlx5_0 <-> n2]", "fail", 11811.28, 11250.0, "exit code 1"
    )
    # No exit code at all (-1: a result without rc) is no failure of its own.
    for run in ({"stdout": REPORT}, {"stdout": REPORT, "rc": None}):
        unknown = {"enabled": True, "peer": "n2", "ib": [{"item": {"name": "mlx5_0"}, **run}]}
        assert validate.perf_checks(unknown, exp, "n1")[0] == check_result(
            "ib_write_bw[mlx5_0 <-> n2]", "pass", 11811.28, 11250.0, MEASURED_REASON, "MB/s"
        )


def test_an_hca_without_a_run_fails_in_mb_per_s_against_its_floor():
    exp = {"profile": "p", "gpus": 0, "hcas": [EDR]}
    assert validate.perf_checks({"enabled": True, "peer": "n2", "ib": []}, exp, "n1")[0] == check_result(
        "ib_write_bw[mlx5_0 <-> n2]",
        "fail",
        None,
        11250.0,
        "not run: n1's ib_write_bw client has no run on mlx5_0 (the play ended on n1 or its server before the client "
        "reached this HCA; see the run's output for n1)",
        "MB/s",
    )


@pytest.mark.parametrize(
    ("run", "why"),
    [
        (None, "not run: n1's ib_write_bw client has no run on mlx5_0 (the play ended on n1 or its server"),
        ({"stdout": "", "stderr": "", "msg": "[Errno 2] No such file or directory"}, "not run: ib_write_bw could not"),
        # A command that ran and failed also has a msg ("non-zero return code"): its output is the fact to judge.
        ({"stdout": REPORT, "rc": 1, "msg": "non-zero return code"}, ""),
        ({"stderr": "Couldn't connect to n2:18515", "rc": 1, "msg": "non-zero return code"}, ""),
        ({"stdout": REPORT, "stderr": "Couldn't connect", "rc": 1, "msg": "non-zero return code"}, ""),
        ({"stdout": "", "stderr": "", "rc": 0}, ""),
    ],
)
def test_never_run_only_where_there_is_no_output(run, why):
    assert validate._never_run(run, EDR, "n1", "n2", "ib").startswith(why)
    assert bool(validate._never_run(run, EDR, "n1", "n2", "ib")) is bool(why)


def test_never_run_names_the_client_of_the_pair():
    assert (
        validate._never_run({"msg": "boom"}, EDR, "n1", "n2", "ib")
        == "not run: ib_write_bw could not start on n1: boom"
    )
    assert (
        validate._never_run({"msg": "boom"}, EDR, "n2", "n1", "served")
        == "not run: ib_write_bw could not start on n1: boom"
    )


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        (None, ("", -1)),
        ({}, ("", -1)),
        ({"rc": None}, ("", -1)),
        ({"stdout": "out", "rc": 0}, ("out", 0)),
        ({"stdout": "out", "stderr": "err", "rc": 3}, ("out\nerr", 3)),
        ({"stdout": None, "stderr": "err", "rc": 1}, ("\nerr", 1)),
        ({"stdout": "out", "stderr": "", "rc": "2"}, ("out", 2)),
    ],
)
def test_command_result_joins_stdout_and_stderr_and_reads_the_exit_code(result, expected):
    assert validate._command_result(result) == expected


def test_rdma_threshold_from_the_minimum_or_the_line_rate():
    assert validate.rdma_threshold(EDR, {"rdma_min_bw_mbs": 12000}) == 12000.0
    assert validate.rdma_threshold(EDR, {"rdma_fraction": 0.95}) == 11875.0
    # Without a fraction, 90% of the line rate.
    assert validate.rdma_threshold(EDR, {}) == 11250.0
    assert validate.rdma_threshold({"name": "mlx5_0", "rate_gbps": ""}, {}) is None
    assert validate.rdma_threshold({"name": "mlx5_0"}, {}) is None


# ---------------------------------------------------------------------------------------------------------------
# Pairs


def test_rdma_pairs_with_peers_already_taken():
    # c names a, which b has already taken: c stays unpaired.
    assert validate.rdma_pairs(["a", "b", "c"], {"b": "a", "c": "a"}) == [{"server": "a", "client": "b"}]
    # b is a's server; b's own peer (c) does not pair b a second time.
    assert validate.rdma_pairs(["a", "b", "c"], {"a": "b", "b": "c"}) == [{"server": "b", "client": "a"}]
    # e names a, paired two pairs before.
    assert validate.rdma_pairs(["a", "b", "c", "d", "e"], {"a": "b", "c": "d", "e": "a"}) == [
        {"server": "b", "client": "a"},
        {"server": "d", "client": "c"},
    ]
    # A host naming itself is not paired with itself; nor is it paired by order.
    assert validate.rdma_pairs(["a", "b", "c"], {"a": "a"}) == [{"server": "b", "client": "c"}]


# ---------------------------------------------------------------------------------------------------------------
# Driver


DRIVER = {
    "proc_version": (output("proc-driver-nvidia-version-535-debian12.txt"), 0),
    "modinfo_version": ("535.261.03", 0),
    "modinfo_license": (output("modinfo-license-nvidia-kernel-dkms-535.txt"), 0),
    "nvidia_smi": (output("nvidia-smi-query-gpu-dgx1.txt"), 0),
    "nvidia_smi_remapped_rows": ("Field remapped_rows.pending is not supported", 2),
    "proc_modules": ("nvidia 56602624 0 - Live 0x0\n", 0),
    "sys_module": ("", 0),
    "sys_module_nouveau": ("", 1),
}
DGX1 = {
    "profile": "dgx-1",
    "gpus": 8,
    "gpu_model": "V100-SXM2",
    "driver_version": "535.261.03",
    "driver_branch": "535",
    "driver_flavor": "proprietary",
    "ecc": None,
}
FLAVOR_PASS = check_result("driver_flavor", "pass", "proprietary", "proprietary", "proprietary kernel modules")


def test_a_reload_pending_fails_the_loaded_version_with_the_installed_one():
    stale = parsed(**{**DRIVER, "modinfo_version": ("535.274.02", 0)})
    assert validate.driver_checks(stale, DGX1, {})[:2] == [
        check_result(
            "driver_version",
            "fail",
            "535.261.03",
            "535.261.03",
            "the installed module is 535.274.02, not 535.261.03",
        ),
        FLAVOR_PASS,
    ]


def test_without_a_pinned_or_installed_version_the_branch_is_expected():
    found = {**DRIVER}
    del found["modinfo_version"]
    assert validate.driver_checks(parsed(**found), {**DGX1, "driver_version": ""}, {})[:2] == [
        check_result("driver_version", "pass", "535.261.03", "535", "loaded module 535.261.03"),
        FLAVOR_PASS,
    ]


def test_the_module_license_and_the_id_line_must_agree():
    open_license = parsed(
        **{**DRIVER, "modinfo_license": (output("modinfo-license-nvidia-open-kernel-dkms-535.txt"), 0)}
    )
    assert validate.driver_checks(open_license, DGX1, {})[1] == check_result(
        "driver_flavor", "fail", "open", "proprietary", "the module license says open, its ID line says proprietary"
    )


def test_a_container_whose_host_has_no_driver_loaded():
    # /proc/driver/nvidia/version readable but empty, in a container: every driver check says why it does not apply.
    found = parsed(proc_version=("", 0), proc_modules=("", 0), sys_module=("", 0), sys_module_nouveau=("", 1))
    reason = (
        "the nvidia module is not loaded: this node is a container and shares the host's kernel, which has no NVIDIA "
        "driver loaded"
    )
    assert validate.driver_checks(found, DGX1, {"in_container": True}) == [
        *(not_applicable(check, reason) for check in validate.DRIVER_CHECKS),
        check_result(
            "nouveau",
            "pass",
            "not loaded",
            "not loaded",
            "not in /proc/modules or /sys/module (the host kernel this container shares)",
        ),
    ]
    assert validate._not_loaded({"in_container": False}) == ""


def test_nouveau_listed_after_other_modules_is_loaded():
    modules = parsed(proc_modules=("nvidia 56602624 0 - Live 0x0\nnouveau 2433024 0 - Live 0x0", 0))
    assert validate.nouveau_check(modules, {}) == check_result(
        "nouveau", "fail", "loaded", "not loaded", "nouveau is loaded (/proc/modules)"
    )


# ---------------------------------------------------------------------------------------------------------------
# RDMA


def test_ofed_check_for_the_inbox_stack():
    vendor = parsed(ofed_info=(output("ofed-info-s-doca-ofed-24.10.txt"), 0))
    assert validate.ofed_check(vendor, {"ofed_mode": "inbox"}) == check_result(
        "ofed_version",
        "fail",
        "doca 24.10-1.1.4",
        "inbox",
        "OFED-internal-24.10-1.1.4: is installed: a vendor stack, where ofed_mode is inbox",
    )
    # ofed_info answering something else is no vendor stack.
    inbox = parsed(ofed_info=("garbage", 0), rdma_core=("44.0-2\n", 0))
    assert validate.ofed_check(inbox, {"ofed_mode": "inbox"}) == check_result(
        "ofed_version", "pass", "rdma-core 44.0-2", "inbox", "the distribution's RDMA stack"
    )
    missing = parsed(ofed_info=("sh: 1: ofed_info: not found", 127), rdma_core=("", 1))
    assert validate.ofed_check(missing, {"ofed_mode": "inbox"}) == check_result(
        "ofed_version", "fail", None, "inbox", "rdma-core is not installed (ofed_mode inbox)"
    )


def test_doca_check_names_the_profile_package():
    found = parsed(ofed_info=(output("ofed-info-s-doca-ofed-24.10.txt"), 0), doca_profile=("3.4.1-1", 0))
    exp = {"ofed_mode": "doca", "ofed_version": "3.4.1"}
    assert validate.ofed_check(found, exp) == check_result(
        "ofed_version", "pass", "doca-ofed 3.4.1-1", "3.4.1", "ofed_info -s: OFED-internal-24.10-1.1.4:"
    )
    assert validate.ofed_check(found, {**exp, "doca_package": "doca-roce"}) == check_result(
        "ofed_version", "pass", "doca-roce 3.4.1-1", "3.4.1", "ofed_info -s: OFED-internal-24.10-1.1.4:"
    )


PEERMEM = {
    "profile": "dgx-1",
    "gpus": 8,
    "hcas": [EDR],
    "peer_memory_module": "nvidia-peermem",
    "peer_memory_load": True,
}


def test_peer_memory_checks_that_do_not_apply_say_why():
    peers = parsed(memory_peers=("535.261.03", 0))
    cases = [
        ({**PEERMEM, "gpus": 0}, "profile dgx-1 has no GPU"),
        ({**PEERMEM, "hcas": []}, "no HCA in profile dgx-1"),
        ({**PEERMEM, "peer_memory_module": "none"}, "gpudirect_rdma_module is none"),
        (
            {**PEERMEM, "peer_memory_load": False},
            "gpudirect_rdma_load is false: the module is not loaded by configuration",
        ),
    ]
    for exp, reason in cases:
        assert validate.peer_memory_check(peers, exp, {}, "535.261.03") == not_applicable("peer_memory", reason)


def test_peer_memory_of_nvidia_peermem_is_the_loaded_driver_s_version():
    peers = parsed(memory_peers=(output("memory-peers-version-nvidia-peermem-535.txt"), 0))
    assert validate.peer_memory_check(peers, PEERMEM, {}, "535.261.03") == check_result(
        "peer_memory", "pass", "535.261.03", "535.261.03", "peer memory client 535.261.03 registered"
    )
    assert validate.peer_memory_check(peers, PEERMEM, {}, "580.126.20") == check_result(
        "peer_memory", "fail", "535.261.03", "580.126.20", "peer memory client 535.261.03 registered"
    )
    # The legacy nv_peer_mem has its own version: any registered client passes.
    legacy = parsed(memory_peers=(output("memory-peers-version-nv-peer-mem-1.0-9.txt"), 0))
    exp = {**PEERMEM, "peer_memory_module": "nv_peer_mem"}
    assert validate.peer_memory_check(legacy, exp, {}, "535.261.03") == check_result(
        "peer_memory", "pass", "1.0-9", None, "peer memory client 1.0-9 registered"
    )
    # In a container whose host registers the client, it is judged as on the host.
    assert validate.peer_memory_check(peers, PEERMEM, {"in_container": True}, "535.261.03")["status"] == "pass"
    # rdma_checks hands the loaded driver on.
    assert by_check(validate.rdma_checks(peers, PEERMEM, {}, "580.126.20"))["peer_memory"]["expected"] == "580.126.20"


def test_memlock_checks_go_on_past_each_service_they_skip():
    found = parsed(
        memlock_containerd=("LoadState=not-found\nLimitMEMLOCK=8388608", 0),
        memlock_crio=("LoadState=loaded\nLimitMEMLOCK=infinity", 0),
    )
    assert validate.memlock_checks(found, {"runtimes": ["podman", "containerd", "crio"]}) == [
        not_applicable("memlock[containerd]", "containerd.service is not installed on this node"),
        check_result("memlock[crio]", "pass", "infinity", "infinity", ""),
    ]
    absent = parsed(
        memlock_containerd=("/bin/sh: 7: systemctl: not found", 127),
        memlock_crio=("LoadState=loaded\nLimitMEMLOCK=8388608", 0),
    )
    assert validate.memlock_checks(absent, {"runtimes": ["containerd", "crio"]}) == [
        check_result(
            "memlock[containerd]",
            "fail",
            None,
            "infinity",
            "systemctl is not on this node: no service manager to read containerd.service's LimitMEMLOCK from",
        ),
        check_result(
            "memlock[crio]", "fail", 8388608, "infinity", "LimitMEMLOCK is 8388608 bytes, not unlimited", "bytes"
        ),
    ]


def test_memlock_reads_the_limit_without_the_load_state_line():
    # The limit alone after the load state (systemctl show --value): the load state is not a second value.
    value = parsed(memlock_docker=("LoadState=loaded\ninfinity", 0))
    assert validate.memlock_checks(value, {"runtimes": ["docker"]}) == [
        check_result("memlock[docker]", "pass", "infinity", "infinity", "")
    ]
    # Further properties after the limit are lines of their own.
    more = parsed(memlock_docker=("LoadState=loaded\nLimitMEMLOCK=infinity\nLimitMEMLOCKSoft=infinity", 0))
    assert validate.memlock_checks(more, {"runtimes": ["docker"]}) == [
        check_result("memlock[docker]", "pass", "infinity", "infinity", "")
    ]


# ---------------------------------------------------------------------------------------------------------------
# Container runtimes


DROPIN = f"""version = 2
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
  BinaryName = "{RUNTIME}"
"""


def test_containerd_dump_that_fails_quotes_its_last_line():
    failed = parsed(containerd_config_dump=("time=x level=info\ncontainerd: failed to load TOML: bad key", 1))
    assert validate.containerd_check(failed, {}) == check_result(
        "runtime[containerd]",
        "fail",
        None,
        CONTAINERD_EXPECTED,
        "containerd config dump failed: containerd: failed to load TOML: bad key",
    )
    silent = parsed(containerd_config_dump=("", 1))
    assert validate.containerd_check(silent, {}) == check_result(
        "runtime[containerd]", "fail", None, CONTAINERD_EXPECTED, "containerd config dump failed: (no output)"
    )


def test_containerd_configuration_that_is_not_toml():
    bad = "version = 2\n[plugins"
    with pytest.raises(tomllib.TOMLDecodeError) as error:
        tomllib.loads(bad)
    assert validate.containerd_check(parsed(containerd_config_dump=(bad, 0)), {}) == check_result(
        "runtime[containerd]",
        "fail",
        None,
        CONTAINERD_EXPECTED,
        f"containerd's configuration is not TOML: {error.value}",
    )


def test_containerd_runtime_found_or_not_and_its_binary():
    none = parsed(containerd_config_dump=("version = 2\n", 0))
    assert validate.containerd_check(none, {}) == check_result(
        "runtime[containerd]",
        "fail",
        "no nvidia runtime",
        CONTAINERD_EXPECTED,
        "containerd config dump: no runtimes.nvidia",
    )
    found = parsed(containerd_config_dump=(DROPIN, 0))
    assert validate.containerd_check(found, {}) == check_result(
        "runtime[containerd]", "pass", f"BinaryName {RUNTIME}", CONTAINERD_EXPECTED, "containerd config dump"
    )
    runc = parsed(containerd_config_dump=(DROPIN.replace(RUNTIME, "/usr/bin/runc"), 0))
    assert validate.containerd_check(runc, {}) == check_result(
        "runtime[containerd]", "fail", "BinaryName /usr/bin/runc", CONTAINERD_EXPECTED, "containerd config dump"
    )
    bare = parsed(
        containerd_config_dump=(
            DROPIN.split('[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]')[0],
            0,
        )
    )
    assert validate.containerd_check(bare, {}) == check_result(
        "runtime[containerd]", "fail", "BinaryName (none)", CONTAINERD_EXPECTED, "containerd config dump"
    )


def test_containerd_files_at_a_configured_path_with_relative_imports():
    main = 'version = 2\nimports = ["conf.d/*.toml"]\n'
    files = {
        "containerd_config_dump": ("sh: 1: containerd: not found", 127),
        "file:/opt/ctd/main.toml": (main, 0),
        "file:/opt/ctd/conf.d/99-nvidia.toml": (DROPIN, 0),
        # Printed, but no import of main.toml names it.
        "file:/opt/ctd/other/00-runc.toml": (DROPIN.replace(RUNTIME, "/usr/bin/runc"), 0),
        "file:/opt/conf.d/00-runc.toml": (DROPIN.replace(RUNTIME, "/usr/bin/runc"), 0),
    }
    assert validate.containerd_check(parsed(**files), {"containerd_config": "/opt/ctd/main.toml"}) == check_result(
        "runtime[containerd]",
        "pass",
        f"BinaryName {RUNTIME}",
        CONTAINERD_EXPECTED,
        "containerd is not installed: /opt/ctd/main.toml, /opt/ctd/conf.d/99-nvidia.toml merged as containerd imports "
        "them",
    )
    # The default path, when none is configured.
    default = {
        "containerd_config_dump": ("sh: 1: containerd: not found", 127),
        "file:/etc/containerd/config.toml": (DROPIN, 0),
    }
    assert validate.containerd_check(parsed(**default), {})["status"] == "pass"
    assert validate.containerd_check(parsed(**default), {"containerd_config": "/opt/ctd/main.toml"}) == check_result(
        "runtime[containerd]",
        "fail",
        None,
        CONTAINERD_EXPECTED,
        "containerd is not installed and /opt/ctd/main.toml does not exist",
    )


def test_merge_plugins_as_containerd_merges_imports():
    base = {
        "version": 2,
        "imports": ["/a/*.toml"],
        "grpc": {"address": "/run/a.sock", "uid": 0},
        "plugins": {"p1": {"x": 1}, "p2": {"y": 1, "z": 1}},
    }
    override = {
        "version": 3,
        "imports": ["/b/*.toml"],
        "grpc": {"address": "/run/b.sock"},
        "plugins": {"p2": {"y": 2}},
        "root": "/r",
    }
    assert validate._merge_plugins(base, override) == {
        "version": 3,
        "imports": ["/a/*.toml"],
        "grpc": {"address": "/run/b.sock"},
        "plugins": {"p1": {"x": 1}, "p2": {"y": 2}},
        "root": "/r",
    }
    assert validate._merge_plugins({"version": 2}, {"plugins": {"p": {"x": 1}}}) == {
        "version": 2,
        "plugins": {"p": {"x": 1}},
    }


def test_files_are_the_prefixed_sections_that_succeeded():
    found = parsed(**{"file:/a": ("x", 0), "file:/b": ("gone", 1), "other": ("y", 0), "filex": ("z", 0)})
    assert validate.files(found, "file") == {"/a": "x"}


def test_runtime_checks_one_per_configured_runtime_in_order():
    hook = '{"version": "1.0.0", "hook": {"path": "/usr/bin/nvidia-container-runtime-hook"}}'
    found = parsed(
        **{
            "docker_runtimes": (f'{{"nvidia": {{"path": "{RUNTIME}"}}}}', 0),
            "crio_config": (f'[crio.runtime.runtimes.nvidia]\nruntime_path = "{RUNTIME}"\n', 0),
            "containerd_config_dump": (DROPIN, 0),
            "file:/usr/share/containers/oci/hooks.d/oci-nvidia-hook.json": (hook, 0),
        }
    )
    exp = {"runtimes": ["docker", "crio", "podman", "containerd", "kata"], "gpus": 0, "profile": "lab"}
    assert validate.runtime_checks(found, exp, {}, None) == [
        check_result("runtime[docker]", "pass", RUNTIME, RUNTIME, "docker info"),
        check_result("runtime[crio]", "pass", RUNTIME, RUNTIME, "crio config"),
        check_result(
            "runtime[podman]",
            "pass",
            "/usr/bin/nvidia-container-runtime-hook",
            "/usr/bin/nvidia-container-runtime-hook",
            "/usr/share/containers/oci/hooks.d/oci-nvidia-hook.json",
        ),
        check_result(
            "runtime[containerd]", "pass", f"BinaryName {RUNTIME}", CONTAINERD_EXPECTED, "containerd config dump"
        ),
        not_applicable("cdi_gpus", "profile lab has no GPU"),
    ]
    # CRI-O in hooks mode is judged by the hook.
    hooks = validate.runtime_checks(found, {**exp, "runtimes": ["crio"], "crio_mode": "hooks"}, {}, None)
    assert hooks[0]["check"] == "runtime[crio]" and hooks[0]["reason"].endswith("oci-nvidia-hook.json")


# ---------------------------------------------------------------------------------------------------------------
# CDI


CDI = {"profile": "dgx-1", "gpus": 2, "cdi": "auto", "driver_container": False}
CDI_SPEC = yaml.safe_dump({"devices": [{"name": n} for n in ("0", "1", "0:0", "mig-1", "all")]})


def test_cdi_checks_that_do_not_apply_say_why():
    spec = parsed(**{"file:/etc/cdi/nvidia.yaml": (CDI_SPEC, 0)})
    assert validate.cdi_check(spec, {**CDI, "gpus": 0}, 2) == not_applicable("cdi_gpus", "profile dgx-1 has no GPU")
    assert validate.cdi_check(spec, {**CDI, "cdi": "disabled"}, 2) == not_applicable(
        "cdi_gpus", "nvidia_container_toolkit_cdi is disabled"
    )
    assert validate.cdi_check(spec, {**CDI, "driver_container": True}, 2) == not_applicable(
        "cdi_gpus", "the GPU Operator's driver container describes the GPUs"
    )
    assert validate.cdi_check(spec, CDI, None) == not_applicable(
        "cdi_gpus", "no GPU seen by nvidia-smi to compare with"
    )


def test_cdi_counts_whole_gpus_only():
    spec = parsed(**{"file:/etc/cdi/nvidia.yaml": (CDI_SPEC, 0)})
    assert validate.cdi_check(spec, CDI, 2) == check_result(
        "cdi_gpus", "pass", 2, 2, "/etc/cdi/nvidia.yaml: devices 0, 1, 0:0, mig-1, all"
    )
    empty = parsed(**{"file:/var/run/cdi/nvidia.yaml": ("kind: nvidia.com/gpu", 0)})
    assert validate.cdi_check(empty, CDI, 2) == check_result(
        "cdi_gpus", "fail", 0, 2, "/var/run/cdi/nvidia.yaml: devices none"
    )
    listed = parsed(**{"file:/etc/cdi/nvidia.yaml": ("- a", 0)})
    assert validate.cdi_check(listed, CDI, 2) == check_result(
        "cdi_gpus",
        "fail",
        None,
        2,
        "/etc/cdi/nvidia.yaml is not a CDI specification: 'list' object has no attribute 'get'",
    )


# ---------------------------------------------------------------------------------------------------------------
# SELinux


def test_selinux_modules_not_installed_say_at_which_priority_and_what_shadows_them():
    store = {
        "wanted": {
            "a": {"installed": False, "shadowed_by": 500},
            "b": {"installed": False, "shadowed_by": None},
            "c": {"installed": True, "version": "", "lang": "cil"},
            "d": {"installed": True, "version": "1.2", "lang": "pp"},
        }
    }
    node = {"selinux_store": store, "te_versions": {"a": "1.0", "d": "1.3"}}
    exp = {"selinux_modules": ["a", "b", "c", "d"], "selinux_priority": 400}
    assert validate.selinux_checks(node, exp) == [
        check_result(
            "selinux_module[a]", "fail", None, "1.0", "not installed at priority 400, shadowed by priority 500"
        ),
        check_result("selinux_module[b]", "fail", None, None, "not installed at priority 400"),
        check_result("selinux_module[c]", "pass", "cil", None, "priority 400"),
        check_result("selinux_module[d]", "fail", "1.2", "1.3", "priority 400"),
    ]


@pytest.mark.parametrize(
    ("stores", "config", "store"),
    [
        ("targeted\nmls\n", "SELINUX=enforcing\nSELINUXTYPE=mls\n", "mls"),
        ("targeted\nmls\n", None, "targeted"),
        ("targeted\n", "SELINUX=disabled\n", "targeted"),
        ("default\n", None, "default"),
        ("default targeted\n", None, "targeted"),
        ("mls\n", None, ""),
        ("targeted\n", "SELINUXTYPE=mls\n", ""),
    ],
)
def test_selinux_store_from_the_config_or_the_defaults(stores, config, store):
    found = {"selinux_stores": (stores, 0)}
    if config is not None:
        found["file:/etc/selinux/config"] = (config, 0)
    text = "".join(f"{t.rstrip(chr(10))}\n@@nodeforge {n} rc={rc}@@\n" for n, (t, rc) in found.items())
    assert validate.selinux_store(text) == store


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("module NVIDIA_Container 1.0.2;\n", "1.0.2"),
        ("# comment\npolicy_module(NVIDIA_Container, 2.1)\n", "2.1"),
        ("# comment\npolicy_module(nvidia_container)\n", "1"),
        ("", ""),
        ("require { type foo_t; }\n", ""),
    ],
)
def test_te_version(text, version):
    assert validate.te_version(text) == version


# ---------------------------------------------------------------------------------------------------------------
# Summary and evaluate


def test_summary_lines_with_units_and_without_parts():
    assert validate.summary_lines(
        "n1",
        [
            check_result("ib_write_bw[mlx5_0 <-> n2]", "fail", 9000.5, 11250.0, "below the floor", "MB/s"),
            check_result("gpu_model", "pass", "NVIDIA TITAN X"),
            check_result("nouveau", "pass"),
        ],
    ) == [
        "n1: FAIL ib_write_bw[mlx5_0 <-> n2]: 9000.5 MB/s (expected 11250.0 MB/s) - below the floor",
        "n1: PASS gpu_model: NVIDIA TITAN X",
        "n1: PASS nouveau",
    ]


EVALUATE = {
    **DGX1,
    "hcas": [EDR],
    "peer_memory_module": "nvidia-peermem",
    "peer_memory_load": True,
    "runtimes": [],
    "cdi": "auto",
    "driver_container": False,
    "ofed_mode": "inbox",
}


def test_evaluate_hands_the_loaded_driver_and_the_gpus_seen_on():
    probes = {
        "driver": "".join(f"{t.rstrip(chr(10))}\n@@nodeforge {n} rc={rc}@@\n" for n, (t, rc) in DRIVER.items()),
        "rdma": f"{output('memory-peers-version-nvidia-peermem-535.txt')}@@nodeforge memory_peers rc=0@@\n",
    }
    perf = {"enabled": True, "peer": "n2", "ib": []}
    checks = by_check(validate.evaluate(probes, EVALUATE, {}, perf, "n1"))
    assert checks["peer_memory"] == check_result(
        "peer_memory", "pass", "535.261.03", "535.261.03", "peer memory client 535.261.03 registered"
    )
    assert checks["cdi_gpus"] == check_result(
        "cdi_gpus", "fail", None, 8, "no CDI specification (/var/run/cdi/nvidia.yaml or /etc/cdi/nvidia.yaml)"
    )
    assert checks["ib_write_bw[mlx5_0 <-> n2]"]["reason"].startswith("not run: n1's ib_write_bw client has no run")
    assert checks["nccl_busbw"] == not_applicable("nccl_busbw", "nccl-tests are not installed (no all_reduce_perf)")


def test_evaluate_without_a_readable_driver_compares_nothing():
    probes = {
        "driver": "No such file or directory\n@@nodeforge proc_version rc=1@@\n",
        "rdma": f"{output('memory-peers-version-nvidia-peermem-535.txt')}@@nodeforge memory_peers rc=0@@\n",
    }
    checks = by_check(validate.evaluate(probes, EVALUATE, {}, {"enabled": False}, "n1"))
    assert checks["peer_memory"] == check_result(
        "peer_memory", "pass", "535.261.03", None, "peer memory client 535.261.03 registered"
    )
    assert checks["cdi_gpus"] == not_applicable("cdi_gpus", "no GPU seen by nvidia-smi to compare with")


def test_a_module_license_modinfo_could_not_find_is_unreadable_not_absent():
    # modinfo itself is there (exit code 1, not 127): its answer is judged, not replaced by the ID line.
    found = parsed(**{**DRIVER, "modinfo_license": ("modinfo: ERROR: Module nvidia not found.", 1)})
    assert validate.driver_checks(found, DGX1, {})[1] == check_result(
        "driver_flavor",
        "fail",
        None,
        "proprietary",
        "modinfo license output could not be read: not an NVIDIA module license ('modinfo: ERROR: Module nvidia not "
        "found.'); line: modinfo: ERROR: Module nvidia not found.",
    )


def test_a_probe_section_missing_is_empty_output():
    found = {**DRIVER}
    del found["proc_version"]
    reason = (
        "/proc/driver/nvidia/version output could not be read: no 'NVRM version:' line (is the nvidia module "
        "loaded?); line: (empty output)"
    )
    assert validate.driver_checks(parsed(**found), DGX1, {})[:2] == [
        check_result("driver_version", "fail", None, "535.261.03", reason),
        check_result("driver_flavor", "fail", None, "proprietary", reason),
    ]


def test_nouveau_on_a_node_whose_module_lists_are_unreadable():
    blind = parsed(proc_modules=("", 1), sys_module=("", 1), sys_module_nouveau=("", 1))
    assert validate.nouveau_check(blind, {}) == check_result(
        "nouveau", "fail", None, "not loaded", "neither /proc/modules nor /sys/module is readable"
    )
    assert validate.nouveau_check(blind, {"in_container": True}) == not_applicable(
        "nouveau", "the host kernel's module lists are not visible in this container"
    )


# ---------------------------------------------------------------------------------------------------------------
# Expectations


def expectations(**variables) -> dict:
    return validate.expectations(collection.model.HostModel("node-01", variables))


SETTINGS = {
    "gpudirect_rdma_module": "nv_peer_mem",
    "gpudirect_rdma_load": False,
    "nvidia_container_toolkit_crio_mode": "hooks",
    "nvidia_container_toolkit_cdi": "disabled",
    "nvidia_container_toolkit_containerd_config": "/opt/ctd/main.toml",
    "selinux_modules_install": [{"name": "infiniband"}, {"name": ""}, "stray"],
    "selinux_modules_priority": 300,
    "validate_rdma_fraction": 0.8,
    "validate_gpu_ecc": "disabled",
    "nvidia_container_toolkit_runtimes": ["crio", "podman"],
    "validate_nccl_min_busbw_gbs": 40,
    "validate_nccl_max_latency_us": "50",
    "validate_rdma_min_bw_mbs": 10000,
}
# The expectations SETTINGS above set, by name.
SET = {
    "peer_memory_module": "nv_peer_mem",
    "peer_memory_load": False,
    "crio_mode": "hooks",
    "cdi": "disabled",
    "containerd_config": "/opt/ctd/main.toml",
    "selinux_modules": ["infiniband"],
    "selinux_priority": 300,
    "rdma_fraction": 0.8,
    "ecc": False,
    "runtimes": ["crio", "podman"],
    "nccl_min_busbw_gbs": 40.0,
    "nccl_max_latency_us": 50.0,
    "rdma_min_bw_mbs": 10000.0,
}
DEFAULTS = {
    "peer_memory_module": "nvidia-peermem",
    "peer_memory_load": True,
    "crio_mode": "runtime",
    "cdi": "auto",
    "containerd_config": "/etc/containerd/config.toml",
    "selinux_modules": [],
    "selinux_priority": 400,
    "rdma_fraction": 0.9,
    "ecc": None,
    "runtimes": ["containerd"],
    "nccl_min_busbw_gbs": None,
    "nccl_max_latency_us": None,
    "rdma_min_bw_mbs": None,
}


def test_expectations_follow_the_host_s_settings():
    found = expectations(nodeforge_profile="dgx-1", **SETTINGS)
    assert {key: found[key] for key in SET} == SET
    assert expectations(nodeforge_profile="dgx-1", validate_gpu_ecc="enabled")["ecc"] is True


def test_expectations_of_templated_settings_are_the_roles_defaults():
    # A templated value is only known on the node: the expectation falls back to the role's default.
    found = expectations(nodeforge_profile="dgx-1", **dict.fromkeys(SETTINGS, "{{ site_value }}"))
    assert {key: found[key] for key in DEFAULTS} == DEFAULTS


@pytest.mark.parametrize(
    ("overrides", "gpus", "model"),
    [
        # The expected count first, else the profile's GPU count; the name nvidia-smi prints, else the model.
        ({"gpu": {"count": 4, "smi_name": "H100 80GB HBM3"}, "expected": {"gpus": 2}}, 2, "H100 80GB HBM3"),
        ({"gpu": {"count": 4, "smi_name": ""}, "expected": {"gpus": None}}, 4, "Tesla V100-SXM2"),
        ({"gpu": {"count": 0, "smi_name": "", "model": ""}, "expected": {"gpus": None}}, 0, ""),
    ],
)
def test_expected_gpus_from_the_profile(overrides, gpus, model):
    found = expectations(nodeforge_profile="dgx-1", nodeforge_profile_overrides=overrides)
    assert (found["gpus"], found["gpu_model"]) == (gpus, model)


def test_expectations_name_the_driver_and_the_runtime_files():
    found = expectations(nodeforge_profile="dgx-1", nvidia_driver_flavor="open", **SETTINGS)
    assert {k: found[k] for k in ("driver_version", "driver_branch", "driver_flavor", "driver_container")} == {
        "driver_version": "580.126.20",
        "driver_branch": "580",
        "driver_flavor": "open",
        "driver_container": False,
    }


def test_nouveau_built_in_or_read_from_one_list_only():
    built_in = parsed(proc_modules=("nvidia 56602624 0 - Live 0x0", 0), sys_module=("", 0), sys_module_nouveau=("", 0))
    assert validate.nouveau_check(built_in, {"in_container": True}) == check_result(
        "nouveau",
        "fail",
        "loaded",
        "not loaded",
        "nouveau is loaded (/sys/module/nouveau) (the host kernel this container shares)",
    )
    passed = check_result("nouveau", "pass", "not loaded", "not loaded", "not in /proc/modules or /sys/module")
    # Either list readable is enough to tell.
    only_proc = parsed(proc_modules=("nvidia 56602624 0 - Live 0x0", 0), sys_module=("", 1), sys_module_nouveau=("", 1))
    assert validate.nouveau_check(only_proc, {}) == passed
    only_sys = parsed(proc_modules=("", 1), sys_module=("", 0), sys_module_nouveau=("", 1))
    assert validate.nouveau_check(only_sys, {}) == passed


# ---------------------------------------------------------------------------------------------------------------
# Docker, CRI-O and the OCI hook: each source a check reads, and what it says when that source is missing or damaged


DOCKER_INFO = (
    '{"io.containerd.runc.v2":{"path":"runc"},"nvidia":{"path":"nvidia-container-runtime"},"runc":{"path":"runc"}}'
)
DAEMON_JSON = f'{{"runtimes": {{"nvidia": {{"args": [], "path": "{RUNTIME}"}}}}}}'


@pytest.mark.parametrize(
    ("found", "result"),
    [
        # `docker info` answers: the daemon's own view wins over daemon.json (written by nvidia-ctk, path unqualified).
        ({"docker_runtimes": (DOCKER_INFO, 0), "file:/etc/docker/daemon.json": ("{}", 0)},
         ("pass", "nvidia-container-runtime", "docker info")),
        ({"docker_runtimes": ('{"runc":{"path":"runc"}}', 0)}, ("fail", "no nvidia runtime", "docker info")),
        # The daemon down (rc 1) or answering nothing: daemon.json, named as the source.
        ({"docker_runtimes": ("Cannot connect to the Docker daemon", 1),
          "file:/etc/docker/daemon.json": (DAEMON_JSON, 0)},
         ("pass", RUNTIME, "/etc/docker/daemon.json (daemon not answering)")),
        ({"docker_runtimes": ("", 0), "file:/etc/docker/daemon.json": (DAEMON_JSON, 0)},
         ("pass", RUNTIME, "/etc/docker/daemon.json (daemon not answering)")),
        ({"docker_runtimes": ("", 1), "file:/etc/docker/daemon.json": ('{"log-driver": "journald"}', 0)},
         ("fail", "no nvidia runtime", "/etc/docker/daemon.json (daemon not answering)")),
        ({"docker_runtimes": ("", 1), "file:/etc/docker/daemon.json": ('{"runtimes": null}', 0)},
         ("fail", "no nvidia runtime", "/etc/docker/daemon.json (daemon not answering)")),
        ({"docker_runtimes": ("", 1)}, ("fail", None, "no docker info and no /etc/docker/daemon.json")),
        ({}, ("fail", None, "no docker info and no /etc/docker/daemon.json")),
        # A daemon.json the probe could not read (rc 1) is no daemon.json.
        ({"docker_runtimes": ("", 1), "file:/etc/docker/daemon.json": (DAEMON_JSON, 1)},
         ("fail", None, "no docker info and no /etc/docker/daemon.json")),
        ({"docker_runtimes": ("", 1), "file:/etc/docker/daemon.json": ('{"runtimes": {', 0)},
         ("fail", None, "/etc/docker/daemon.json (daemon not answering) is not readable JSON: Expecting property "
          "name enclosed in double quotes: line 1 column 15 (char 14)")),
        ({"docker_runtimes": ("", 1), "file:/etc/docker/daemon.json": ('["runtimes"]', 0)},
         ("fail", None, "/etc/docker/daemon.json (daemon not answering) is not readable JSON: 'list' object has "
          "no attribute 'get'")),
        ({"docker_runtimes": ("<no value>", 0)},
         ("fail", None, "docker info is not readable JSON: Expecting value: line 1 column 1 (char 0)")),
        # Runtimes that are not a table: no nvidia runtime, not a crash.
        ({"docker_runtimes": ('["nvidia"]', 0)}, ("fail", "no nvidia runtime", "docker info")),
        ({"docker_runtimes": ('{"nvidia": {"path": "/usr/bin/runc"}}', 0)}, ("fail", "/usr/bin/runc", "docker info")),
    ],
)  # fmt: skip
def test_docker_check_reads_docker_info_else_daemon_json(found, result):
    status, measured, reason = result
    assert validate.docker_check(parsed(**found)) == check_result("runtime[docker]", status, measured, RUNTIME, reason)


CRIO_DROPIN = f'[crio.runtime.runtimes.nvidia]\nruntime_path = "{RUNTIME}"\nruntime_type = "oci"\n'
CRIO_FILES = "CRI-O's configuration files (crio not answering)"


@pytest.mark.parametrize(
    ("found", "result"),
    [
        ({"crio_config": (CRIO_DROPIN, 0), "file:/etc/crio/crio.conf.d/99-nvidia.toml": ("", 0)},
         ("pass", RUNTIME, "crio config")),
        ({"crio_config": ('[crio.runtime]\ndefault_runtime = "crun"\n', 0),
          "file:/etc/crio/crio.conf.d/99-nvidia.toml": (CRIO_DROPIN, 0)},
         ("fail", "no nvidia runtime", "crio config")),
        # crio not answering: its drop-ins, in the order CRI-O reads them (the last one that sets the path wins), and
        # only CRI-O's files.
        ({"crio_config": ("", 1), "file:/etc/crio/crio.conf.d/99-nvidia.toml": (CRIO_DROPIN, 0)},
         ("pass", RUNTIME, CRIO_FILES)),
        ({"crio_config": ("", 127), "file:/etc/crio/crio.conf.d/10-old.toml": (CRIO_DROPIN, 0),
          "file:/etc/crio/crio.conf.d/99-other.toml": (CRIO_DROPIN.replace(RUNTIME, "/usr/bin/crun"), 0)},
         ("fail", "/usr/bin/crun", CRIO_FILES)),
        ({"crio_config": ("", 1), "file:/etc/crio/crio.conf.d/10-nvidia.toml": (CRIO_DROPIN, 0),
          "file:/etc/crio/crio.conf.d/99-other.toml": ('[crio.runtime]\nlog_level = "info"\n', 0)},
         ("pass", RUNTIME, CRIO_FILES)),
        ({"crio_config": ("", 1), "file:/etc/containerd/conf.d/99-nvidia.toml": (CRIO_DROPIN, 0)},
         ("fail", "no nvidia runtime", CRIO_FILES)),
        ({"crio_config": ("", 1)}, ("fail", "no nvidia runtime", CRIO_FILES)),
        ({}, ("fail", "no nvidia runtime", CRIO_FILES)),
        # tomllib's own words after the source differ between Python versions.
        ({"crio_config": ("[crio.runtime\n", 0)}, ("fail", None, "crio config is not TOML: Expected ']'")),
        ({"crio_config": ("", 1), "file:/etc/crio/crio.conf.d/99-nvidia.toml": ("runtime_path = \n", 0)},
         ("fail", None, f"{CRIO_FILES} is not TOML: Invalid value")),
    ],
)  # fmt: skip
def test_crio_check_reads_crio_config_else_its_drop_ins(found, result):
    status, measured, reason = result
    got = validate.crio_check(parsed(**found), {"crio_mode": "runtime"})
    assert got["reason"].startswith(reason)
    assert got == check_result("runtime[crio]", status, measured, RUNTIME, got["reason"])


HOOK = "/usr/bin/nvidia-container-runtime-hook"
HOOK_FILE = "/usr/share/containers/oci/hooks.d/oci-nvidia-hook.json"
NO_HOOK = "no OCI hook oci-nvidia-hook.json running the toolkit's hook"


@pytest.mark.parametrize(
    ("found", "result"),
    [
        ({f"file:{HOOK_FILE}": (f'{{"version": "1.0.0", "hook": {{"path": "{HOOK}"}}}}', 0)},
         ("pass", HOOK, HOOK_FILE)),
        # A damaged or foreign hook file before a good one is passed over, not fatal.
        ({"file:/etc/containers/oci/hooks.d/oci-nvidia-hook.json": ('{"hook": ', 0),
          "file:/usr/local/share/oci-nvidia-hook.json": ('["hook"]', 0),
          "file:/run/containers/oci/hooks.d/oci-nvidia-hook.json": ('{"hook": null}', 0),
          f"file:{HOOK_FILE}": (f'{{"version": "1.0.0", "hook": {{"path": "{HOOK}"}}}}', 0)},
         ("pass", HOOK, HOOK_FILE)),
        ({f"file:{HOOK_FILE}": ('{"version": "1.0.0", "hook": {"path": "/usr/bin/other-hook"}}', 0)},
         ("fail", None, NO_HOOK)),
        ({f"file:{HOOK_FILE}.bak": (f'{{"hook": {{"path": "{HOOK}"}}}}', 0)}, ("fail", None, NO_HOOK)),
        ({}, ("fail", None, NO_HOOK)),
    ],
)  # fmt: skip
@pytest.mark.parametrize("check", ["runtime[podman]", "runtime[crio]"])
def test_the_oci_hook_check_for_podman_and_crio_in_hooks_mode(found, result, check):
    status, measured, reason = result
    if check == "runtime[podman]":
        got = validate.hook_check(parsed(**found))
    else:
        got = validate.crio_check(parsed(**found), {"crio_mode": "hooks"})
    assert got == check_result(check, status, measured, HOOK, reason)


def test_sections_of_stdout_lines_as_ansible_registers_them():
    lines = ["line one", "line two", "@@nodeforge a rc=0@@", "", "@@nodeforge b rc=3@@", "dropped"]
    assert validate.sections(lines) == {"a": {"output": "line one\nline two", "rc": 0}, "b": {"output": "", "rc": 3}}
    assert validate.sections(None) == {}
