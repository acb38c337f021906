"""`nodeforge validate`'s parsers and check evaluators (module_utils/acceptance.py, filters nodeforge.gpu.acceptance_*)
on the captured outputs of tests/data/outputs/validate/ (their sources: its README.md), on damaged and truncated
variants of them, and through Ansible's templar as the playbook will call them."""

from __future__ import annotations

import random
import re
import time
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from nodeforge import collection
from tests.conftest import damaged_text
from tests.role_expressions import trusted
from tests.test_parsers import parse_error

from ansible_collections.nodeforge.gpu.plugins.filter import acceptance as acceptance_filter  # isort: skip
from ansible_collections.nodeforge.gpu.plugins.module_utils import acceptance  # isort: skip
from ansible_collections.nodeforge.gpu.plugins.module_utils.acceptance import ParseError  # isort: skip

assert collection.model

OUTPUTS = Path(__file__).parent / "data" / "outputs" / "validate"
REPO = Path(__file__).resolve().parent.parent
PROFILES = REPO / "roles" / "nodeforge" / "files" / "profiles"


def output(name: str) -> str:
    return (OUTPUTS / name).read_text()


def profile(name: str) -> dict:
    return yaml.safe_load((PROFILES / f"{name}.yml").read_text())


def statuses(results: list[dict]) -> dict:
    return {r["check"]: r["status"] for r in results}


# The DGX-1 of IBM Redbook REDP-5610 (seed 004): four ConnectX-4 EDR ports, all up.
DGX1_PORTS = [
    {
        "ca": f"mlx5_{i}",
        "port": 1,
        "state": "ACTIVE",
        "phys_state": "LinkUp",
        "rate_gbps": 100.0,
        "link_layer": "InfiniBand",
    }
    for i in range(4)
]


# ---------------------------------------------------------------------------------------------------------------
# NVIDIA driver


def test_driver_version_of_debian_535_modules():
    assert acceptance.nvidia_driver_version(output("proc-driver-nvidia-version-535-debian12.txt")) == {
        "version": "535.261.03",
        "flavor_hint": "proprietary",
        "raw": "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.261.03  Sat Jun 14 16:05:50 UTC 2025",
        "gcc": "gcc version 12.2.0 (Debian 12.2.0-14+deb12u1)",
    }
    opened = acceptance.nvidia_driver_version(output("proc-driver-nvidia-version-535-open-debian12.txt"))
    assert (opened["version"], opened["flavor_hint"]) == ("535.261.03", "open")
    assert opened["raw"].startswith("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  535.261.03  Release")


def test_driver_version_without_the_module():
    error = parse_error(acceptance.nvidia_driver_version, output("proc-driver-nvidia-version-no-driver-debian12.txt"))
    assert error.line == "cat: /proc/driver/nvidia/version: No such file or directory"
    result = acceptance.evaluate_driver_version(output("proc-driver-nvidia-version-no-driver-debian12.txt"), "535")
    assert result["status"] == "fail"
    assert result["reason"].endswith("line: cat: /proc/driver/nvidia/version: No such file or directory")


def test_driver_version_cut_inside_the_version_is_not_read_as_a_shorter_one():
    cut = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.26"
    assert parse_error(acceptance.nvidia_driver_version, cut).line == cut
    assert parse_error(acceptance.nvidia_driver_version, "").line == ""


# The ID line: the head, blanks, then a line's worth of what the former single pattern backtracked on.
HOSTILE_NVRM = "NVRM version: NVIDIA UNIX x86_64 Kernel Module"
HOSTILE_LINE_CHARS = 112 * 1024


@pytest.mark.parametrize(
    ("tail", "version"),
    [
        (" " * HOSTILE_LINE_CHARS + "535.261.03  Sat Jun 14 16:05:50 UTC 2025", "535.261.03"),
        (" " * HOSTILE_LINE_CHARS, None),
        (" Kernel Module" * (HOSTILE_LINE_CHARS // 14) + "  535.261.03  Sat", "535.261.03"),
        (" Kernel Module" * (HOSTILE_LINE_CHARS // 14), None),
        (" 1." * (HOSTILE_LINE_CHARS // 3), None),
        ("\t" * HOSTILE_LINE_CHARS + "535.261.03" + " " * HOSTILE_LINE_CHARS, None),
    ],
    ids=["blanks-then-version", "blanks", "repeated-module-then-version", "repeated-module", "dots", "cut-version"],
)
def test_driver_version_of_a_112_kb_line_is_read_in_linear_time(tail, version):
    """The former pattern took 7 s on 20 KB of blanks after the module's name (quadratic: minutes for 112 KB)."""
    line = HOSTILE_NVRM + tail
    started = time.perf_counter()
    if version is None:
        assert parse_error(acceptance.nvidia_driver_version, line).line == line
    else:
        parsed = acceptance.nvidia_driver_version(line)
        assert (parsed["version"], parsed["flavor_hint"]) == (version, "proprietary")
    elapsed = time.perf_counter() - started
    assert elapsed < 0.5, f"a {len(line)}-character NVRM line took {elapsed:.2f} s"


def test_driver_version_reads_what_the_single_pattern_read():
    """The three-step reading gives the version and flavor that the former single pattern gave, on short lines mixed
    from the ID line's parts (splitlines' lines: no line break inside)."""
    former = re.compile(
        r"NVRM version:\s+(?P<id>NVIDIA UNIX\b.*?Kernel Module\b.*?)\s+(?P<version>\d+\.\d+(?:\.\d+)*)\s+\S"
    )
    parts = [" ", "  ", "\t", "\u00a0", "1", "1.2", " 535.261.03 ", "535.261.03", ".", "x", "\u0663.\u0663",
             "Kernel Module", "Module", "Kernel Modules", "-", "Open Kernel Module", "for x86_64", "NVIDIA UNIX",
             " 1.2\u00a0", "Sat"]  # fmt: skip
    rng = random.Random(4242)
    read = 0
    for _ in range(20000):
        line = (
            "NVRM version:"
            + rng.choice([" ", "  ", "\t", "", " x"])
            + rng.choice(["NVIDIA UNIX", "NVIDIA UNIXy", "NVIDIA UNIX x86_64"])
            + "".join(rng.choice(parts) for _ in range(rng.randint(0, 4)))
            + rng.choice([" Kernel Module", "Kernel Module", " Kernel Modules", ""])
            + "".join(rng.choice(parts) for _ in range(rng.randint(0, 8)))
        )
        match = former.match(line)
        if match is None:
            assert parse_error(acceptance.nvidia_driver_version, line).line == line
            continue
        read += 1
        parsed = acceptance.nvidia_driver_version(line)
        flavor = "open" if "Open Kernel Module" in match["id"] else "proprietary"
        assert (parsed["version"], parsed["flavor_hint"]) == (match["version"], flavor), line
    assert read > 500  # the mix reaches lines that hold a version, not only refusals


def test_evaluate_driver_version():
    text = output("proc-driver-nvidia-version-535-debian12.txt")
    assert acceptance.evaluate_driver_version(text, "535.261.03")["status"] == "pass"
    # A branch pin matches its versions; a version sharing digits does not.
    assert acceptance.evaluate_driver_version(text, "535")["status"] == "pass"
    failed = acceptance.evaluate_driver_version(text, "535.26")
    assert (failed["status"], failed["measured"], failed["expected"]) == ("fail", "535.261.03", "535.26")
    assert acceptance.evaluate_driver_version(text, "580.126.20")["status"] == "fail"
    assert acceptance.evaluate_driver_version(text, None)["status"] == "na"
    parsed = acceptance.nvidia_driver_version(text)
    assert acceptance.evaluate_driver_version(parsed, "535.261.03")["measured"] == "535.261.03"


def test_module_license_flavor():
    assert acceptance.module_license_flavor(output("modinfo-license-nvidia-kernel-dkms-535.txt")) == "proprietary"
    assert acceptance.module_license_flavor(output("modinfo-license-nvidia-open-kernel-dkms-535.txt")) == "open"
    assert (
        acceptance.module_license_flavor("filename:       /lib/modules/x/nvidia.ko\nlicense:        Dual MIT/GPL\n")
        == "open"
    )
    assert parse_error(acceptance.module_license_flavor, "GPL\n").line == "GPL"
    missing = "modinfo: ERROR: Module nvidia not found."
    assert parse_error(acceptance.module_license_flavor, missing + "\n").line == missing


def test_evaluate_driver_flavor():
    proprietary = output("modinfo-license-nvidia-kernel-dkms-535.txt")
    assert acceptance.evaluate_driver_flavor(proprietary, "proprietary")["status"] == "pass"
    wrong = acceptance.evaluate_driver_flavor(proprietary, "open")
    assert (wrong["status"], wrong["measured"], wrong["expected"]) == ("fail", "proprietary", "open")
    # The license and the module's ID line must tell the same story.
    disagree = acceptance.evaluate_driver_flavor(
        proprietary, "proprietary", output("proc-driver-nvidia-version-535-open-debian12.txt")
    )
    assert disagree["status"] == "fail"
    assert disagree["reason"] == "the module license says proprietary, its ID line says open"
    assert acceptance.evaluate_driver_flavor("open", "open")["status"] == "pass"
    assert acceptance.evaluate_driver_flavor(proprietary, None)["status"] == "na"
    damaged = acceptance.evaluate_driver_flavor("modinfo: ERROR: Module nvidia not found.", "open")
    assert damaged["status"] == "fail" and damaged["reason"].endswith("modinfo: ERROR: Module nvidia not found.")


# ---------------------------------------------------------------------------------------------------------------
# nvidia-smi

DGX1_BUSES = ["06", "07", "0A", "0B", "85", "86", "89", "8A"]


def test_nvidia_smi_gpus_of_the_dgx1():
    gpus = acceptance.nvidia_smi_gpus(output("nvidia-smi-query-gpu-dgx1.txt"))
    assert len(gpus) == 8
    assert gpus[0] == {
        "index": 0,
        "name": "Tesla V100-SXM2-16GB",
        "bus_id": "00000000:06:00.0",
        "persistence": True,
        "ecc": True,
        "retired_pages_pending": False,
    }
    assert [g["bus_id"] for g in gpus] == [f"00000000:{b}:00.0" for b in DGX1_BUSES]
    assert [g["index"] for g in gpus] == list(range(8))


def test_nvidia_smi_gpus_with_header_and_not_applicable_values():
    header = "index, name, pci.bus_id, persistence_mode, ecc.mode.current, retired_pages.pending\n"
    line = "0, NVIDIA H100 80GB HBM3, 00000000:18:00.0, Disabled, [N/A], [N/A]\n"
    assert acceptance.nvidia_smi_gpus(header + line) == [
        {
            "index": 0,
            "name": "NVIDIA H100 80GB HBM3",
            "bus_id": "00000000:18:00.0",
            "persistence": False,
            "ecc": None,
            "retired_pages_pending": None,
        }
    ]


def test_nvidia_smi_gpus_with_the_remapped_rows_fields():
    # The field list is the caller's: remapped_rows.* where the driver accepts them in --query-gpu.
    fields = (*acceptance.GPU_QUERY_FIELDS, "remapped_rows.pending", "remapped_rows.failure")
    [gpu] = acceptance.nvidia_smi_gpus(
        "0, Tesla V100-SXM2-16GB, 00000000:06:00.0, Enabled, Enabled, No, [N/A], [N/A]", fields
    )
    assert (gpu["remapped_rows_pending"], gpu["remapped_rows_failure"]) == (None, None)
    [gpu] = acceptance.nvidia_smi_gpus("3, x, 0000:1A:00.0, Enabled, Enabled, No, No, Yes", ",".join(fields))
    assert (gpu["index"], gpu["bus_id"], gpu["remapped_rows_failure"]) == (3, "0000:1A:00.0", True)


def test_nvidia_smi_remapped_rows_of_the_dgx_h100():
    rows = acceptance.nvidia_smi_remapped_rows(output("nvidia-smi-query-remapped-rows-dgx-h100.txt"))
    assert [r["bus_id"] for r in rows] == [
        f"00000000:{b}:00.0" for b in ["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"]
    ]
    assert {(r["remapped_rows_pending"], r["remapped_rows_failure"]) for r in rows} == {(False, False)}


@pytest.mark.parametrize(
    "damaged",
    [
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
        "NVIDIA driver is installed and running.",
        "No devices were found",
        "7, Tesla V100-SXM2-16GB, 00000000:8A:00.0, Enabled, Ena",
        "7, Tesla V100-SXM2-16GB, 00000000:8A:00.0, Enabled, Enabled, [Unknown Error]",
        "7, Tesla V100-SXM2-16GB, 8A:00.0, Enabled, Enabled, No",
        "seven, Tesla V100-SXM2-16GB, 00000000:8A:00.0, Enabled, Enabled, No",
    ],
)
def test_nvidia_smi_damaged_lines(damaged):
    text = [*output("nvidia-smi-query-gpu-dgx1.txt").splitlines()[:7], damaged]
    assert parse_error(acceptance.nvidia_smi_gpus, "\n".join(text)).line == damaged
    results = acceptance.evaluate_gpus("\n".join(text), 8, "Tesla V100-SXM2", ecc=True)
    assert [r["check"] for r in results] == list(acceptance._GPU_CHECKS)
    assert {r["status"] for r in results} == {"fail"}
    assert all(r["reason"].endswith(f"line: {damaged}") for r in results)


def test_evaluate_gpus_against_the_dgx1_profile():
    dgx1 = profile("dgx-1")
    results = acceptance.evaluate_gpus(
        output("nvidia-smi-query-gpu-dgx1.txt"), dgx1["expected"]["gpus"], dgx1["gpu"]["model"], ecc=True
    )
    assert statuses(results) == {
        "gpu_count": "pass",
        "gpu_model": "pass",
        "gpu_persistence": "pass",
        "gpu_ecc": "pass",
        "gpu_retired_pages": "pass",
        "gpu_remapped_rows": "na",
    }
    assert results[0]["measured"] == 8 and results[1]["measured"] == "Tesla V100-SXM2-16GB"
    assert results[2]["measured"] == "8/8"


def test_evaluate_gpus_finds_what_is_wrong():
    lines = output("nvidia-smi-query-gpu-dgx1.txt").splitlines()
    lines[3] = lines[3].replace("Enabled, Enabled, No", "Disabled, Disabled, Yes")
    results = {r["check"]: r for r in acceptance.evaluate_gpus(lines[:7], 8, "H100", ecc=True)}
    assert (results["gpu_count"]["status"], results["gpu_count"]["measured"]) == ("fail", 7)
    assert results["gpu_model"]["status"] == "fail"
    assert results["gpu_model"]["reason"] == "Tesla V100-SXM2-16GB is not a H100"
    assert (results["gpu_persistence"]["status"], results["gpu_persistence"]["measured"]) == ("fail", "6/7")
    assert results["gpu_persistence"]["reason"] == "GPU 3: persistence mode off"
    assert results["gpu_ecc"]["reason"] == "GPU 3: ECC disabled"
    assert results["gpu_retired_pages"]["reason"] == "GPU 3: page retirement pending (reset the GPU)"
    assert acceptance.evaluate_gpus(lines, None, None)[0]["status"] == "na"


def test_evaluate_gpus_merges_the_remapped_rows_query():
    h100 = "\n".join(
        f"{i}, NVIDIA H100 80GB HBM3, 00000000:{b}:00.0, Enabled, Enabled, [N/A]"
        for i, b in enumerate(["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"])
    )
    remapped = output("nvidia-smi-query-remapped-rows-dgx-h100.txt")
    results = {r["check"]: r for r in acceptance.evaluate_gpus(h100, 8, "H100", True, remapped)}
    assert results["gpu_remapped_rows"]["status"] == "pass"
    assert results["gpu_retired_pages"]["status"] == "na"
    failing = remapped.replace("00000000:5D:00.0, No, No", "00000000:5D:00.0, No, Yes")
    results = {r["check"]: r for r in acceptance.evaluate_gpus(h100, 8, "H100", True, failing)}
    assert (results["gpu_remapped_rows"]["status"], results["gpu_remapped_rows"]["reason"]) == (
        "fail",
        "GPU 3: row remapping pending or failed",
    )


# ---------------------------------------------------------------------------------------------------------------
# OFED, HCA ports


def test_ofed_info():
    assert acceptance.ofed_info(output("ofed-info-s-mlnx-ofed-4.7-redbook.txt")) == {
        "stack": "mlnx_ofed",
        "version": "4.7-3.2.9.0",
        "raw": "MLNX_OFED_LINUX-4.7-3.2.9.0:",
    }
    assert acceptance.ofed_info(output("ofed-info-s-doca-ofed-24.10.txt")) == {
        "stack": "doca",
        "version": "24.10-1.1.4",
        "raw": "OFED-internal-24.10-1.1.4:",
    }
    full = "MLNX_OFED_LINUX-5.0-2.1.8.0 (OFED-5.0-2.1.8):\n\nmlnx-ofed-kernel:\n"
    assert acceptance.ofed_info(full)["version"] == "5.0-2.1.8.0"


@pytest.mark.parametrize(
    "damaged", ["MLNX_OFED_LINUX-4.7-3.2", "bash: line 1: ofed_info: command not found", "MLNX_OFED_LINUX-:"]
)
def test_ofed_info_damaged(damaged):
    assert parse_error(acceptance.ofed_info, damaged + "\n").line == damaged
    result = acceptance.evaluate_ofed(damaged, "4.7-3.2.9.0")
    assert result["status"] == "fail" and result["reason"].endswith(f"line: {damaged}")


def test_evaluate_ofed():
    redbook = output("ofed-info-s-mlnx-ofed-4.7-redbook.txt")
    assert acceptance.evaluate_ofed(redbook, "4.7-3.2.9.0")["status"] == "pass"
    assert acceptance.evaluate_ofed(redbook, "4.7")["status"] == "pass"
    assert acceptance.evaluate_ofed(redbook, "5.0-2.1.8.0")["status"] == "fail"
    assert acceptance.evaluate_ofed(output("ofed-info-s-doca-ofed-24.10.txt"), "24.10")["status"] == "pass"
    assert acceptance.evaluate_ofed(redbook, None)["status"] == "na"


def test_ibstat_and_ibstatus_read_the_same_ports():
    # Both outputs come from infiniband-diags 44.0 over one sysfs tree holding the Redbook's port values.
    assert acceptance.ibstat(output("ibstat-dgx1-edr.txt")) == DGX1_PORTS
    assert acceptance.ibstatus(output("ibstatus-dgx1-edr.txt")) == DGX1_PORTS
    assert acceptance.ibstat(output("ibstat-mlx5_1-port1-dgx1-edr.txt")) == [DGX1_PORTS[1]]
    assert acceptance.hca_ports(output("ibstatus-dgx1-edr.txt")) == DGX1_PORTS
    assert acceptance.hca_ports(output("ibstat-dgx1-edr.txt")) == DGX1_PORTS
    # ibstat prints nothing where there is no RDMA device.
    assert acceptance.ibstat("") == []


def test_ibstatus_as_the_redbook_pdf_left_it():
    # The PDF's text layout split "default gid:" from its value (and worse further down): damaged output.
    error = parse_error(acceptance.ibstatus, output("ibstatus-redbook-004-pdf.txt"))
    assert (error.line, error.message) == ("        default gid:", "default gid without a value")


def test_ibstatus_without_devices():
    error = parse_error(acceptance.ibstatus, output("ibstatus-no-devices-debian12.txt"))
    assert error.line == "Fatal error:  No devices"
    results = acceptance.evaluate_hca_ports(output("ibstatus-no-devices-debian12.txt"), profile("dgx-1")["hcas"])
    assert [r["check"] for r in results] == [f"hca_port[mlx5_{i}]" for i in range(4)]
    assert all(r["status"] == "fail" and r["reason"].endswith("line: Fatal error:  No devices") for r in results)


def test_ibstat_cut_short():
    lines = output("ibstat-dgx1-edr.txt").splitlines()
    # Cut inside the last port: it ends without its link layer.
    error = parse_error(acceptance.ibstat, "\n".join(lines[:-1]))
    assert error.line == "\t\tPort GUID: 0xec0d9a030044bda4"
    # Cut inside a value: "InfiniBand" becomes a link layer nobody knows.
    error = parse_error(acceptance.ibstat, "\n".join(lines)[:-4])
    assert error.line == "\t\tLink layer: Infini"
    # Cut between a CA's header and its port.
    error = parse_error(acceptance.ibstat, "\n".join(lines[: lines.index("CA 'mlx5_3'") + 7]))
    assert (error.line, error.message) == ("CA 'mlx5_3'", "mlx5_3 declares 1 ports and shows 0")


def test_evaluate_hca_ports_against_the_dgx1_profile():
    hcas = profile("dgx-1")["hcas"]
    results = acceptance.evaluate_hca_ports(output("ibstat-dgx1-edr.txt"), hcas)
    assert statuses(results) == {f"hca_port[mlx5_{i}]": "pass" for i in range(4)}
    assert results[0]["measured"] == results[0]["expected"] == "ACTIVE 100 Gb/s InfiniBand"
    down = output("ibstat-dgx1-edr.txt").replace(
        "Node GUID: 0xec0d9a030044bda4\n\tSystem image GUID: 0xec0d9a030044bda4\n\tPort 1:\n\t\tState: Active\n"
        "\t\tPhysical state: LinkUp",
        "Node GUID: 0xec0d9a030044bda4\n\tSystem image GUID: 0xec0d9a030044bda4\n\tPort 1:\n\t\tState: Down\n"
        "\t\tPhysical state: Polling",
    )
    results = acceptance.evaluate_hca_ports(down, hcas)
    assert [r["status"] for r in results] == ["pass", "pass", "pass", "fail"]
    assert results[3]["reason"] == "state DOWN (Polling)"
    ndr = [{**hca, "rate_gbps": 400, "link_layer": "Ethernet"} for hca in hcas[:1]] + [
        {"name": "mlx5_9", "rate_gbps": 400}
    ]
    results = acceptance.evaluate_hca_ports(acceptance.ibstat(output("ibstat-dgx1-edr.txt")), ndr)
    assert results[0]["reason"] == "rate 100.0 Gb/s, expected 400; link layer InfiniBand, expected Ethernet"
    assert (results[1]["status"], results[1]["reason"]) == ("fail", "mlx5_9 port 1 not found")


def test_evaluate_hca_ports_against_the_supermicro_profile_s_four_25gbe_ports():
    """Seed 001's GPU node: two dual-port 25GbE ConnectX-4 Lx cards, four RoCE ports, each at 25 Gb/s. The profile's
    former single 100 Gb/s port would have failed on this hardware."""
    hcas = profile("supermicro-4029gp-tvrt")["hcas"]
    recorded = output("ibstat-supermicro-4029gp-tvrt-25gbe.txt")
    results = acceptance.evaluate_hca_ports(recorded, hcas)
    assert statuses(results) == {f"hca_port[mlx5_{i}]": "pass" for i in range(4)}
    assert {r["measured"] for r in results} == {"ACTIVE 25 Gb/s Ethernet"}
    # A port that came up at 10 Gb/s (a 10G transceiver, or a switch port set so) fails, and only that one.
    slow = recorded.split("CA 'mlx5_3'")
    slow = slow[0] + "CA 'mlx5_3'" + slow[1].replace("Rate: 25", "Rate: 10", 1)
    results = acceptance.evaluate_hca_ports(slow, hcas)
    assert [r["status"] for r in results] == ["pass", "pass", "pass", "fail"]
    assert results[3]["reason"] == "rate 10.0 Gb/s, expected 25"
    # The old profile's expectation against the same hardware: every port but mlx5_0 missing, mlx5_0 at the wrong rate.
    old = [{"name": "mlx5_0", "link_layer": "Ethernet", "rate_gbps": 100}]
    assert acceptance.evaluate_hca_ports(recorded, old)[0]["reason"] == "rate 25.0 Gb/s, expected 100"


def test_evaluate_hca_ports_without_hcas_in_the_profile():
    assert acceptance.evaluate_hca_ports("", profile("lab")["hcas"], "lab") == [
        {
            "check": "hca_ports",
            "status": "na",
            "measured": None,
            "expected": None,
            "reason": "no HCA in profile lab",
            "unit": None,
        }
    ]


# ---------------------------------------------------------------------------------------------------------------
# ib_write_bw

# perftest 4.5's own formats (strings of Debian 12's ib_write_bw): RESULT_FMT and REPORT_FMT.
PERFTEST_RESULT_FMT = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
PERFTEST_REPORT_FMT = " %-7d    %-10d       %-7.2f            %-7.2f\t\t   %-7.6f"
PERFTEST_LINE = "-" * 87


def test_ib_write_bw_of_the_redbook():
    report = acceptance.ib_write_bw(output("ib-write-bw-redbook-004.txt"))
    assert {k: v for k, v in report.items() if k != "rows"} == {
        "bytes": 65536,
        "iterations": 5000,
        "bw_peak": 11300.40,
        "bw_avg": 11264.11,
        "bw_peak_mbs": 11849.33,
        "bw_avg_mbs": 11811.28,
        "msg_rate_mpps": 0.180226,
        "unit": "MB/sec",
    }
    # perftest's MB is 2^20 bytes: its own message rate times the message size gives the same bytes per second.
    assert abs(report["bytes"] * report["msg_rate_mpps"] - report["bw_avg_mbs"]) < 0.1
    assert abs(report["bytes"] * report["msg_rate_mpps"] - report["bw_avg"]) > 500


def test_ib_write_bw_in_gbits():
    report = acceptance.ib_write_bw(output("ib-write-bw-redbook-004-gbits.txt"))
    assert (report["unit"], report["bw_avg"], report["bw_peak"]) == ("Gb/sec", 94.49, 94.79)
    assert (report["bw_avg_mbs"], report["bw_peak_mbs"]) == (11811.25, 11848.75)


def test_ib_write_bw_in_mib_as_later_perftests_print_it():
    """Debian 13's perftest 25.01.0+0.80 over soft-RoCE in a QEMU guest (the VM tier on Debian 13): the same 2^20-byte
    unit under the name MiB/sec. Its message rate times the message size agrees with it, not with 10^6 bytes."""
    report = acceptance.ib_write_bw(output("ib-write-bw-soft-roce-trixie-mib.txt"))
    assert (report["unit"], report["bytes"], report["bw_peak"], report["bw_avg"]) == ("MiB/sec", 65536, 5.01, 4.85)
    assert (report["bw_peak_mbs"], report["bw_avg_mbs"]) == (5.25, 5.09)
    assert acceptance.evaluate_ib_write_bw(output("ib-write-bw-soft-roce-trixie-mib.txt"), 2)["status"] == "pass"
    assert acceptance.evaluate_ib_write_bw(output("ib-write-bw-soft-roce-trixie-mib.txt"), 5.1)["status"] == "fail"


def test_ib_write_bw_passes_over_perftests_clock_warning_inside_its_table():
    # perftest prints this between its header and its rows when the CPUs' clocks differ (its Perftest_tools.c wording).
    warning = "Conflicting CPU frequency values detected: 5008.116000 != 3295.212000. CPU Frequency is not max."
    lines = output("ib-write-bw-redbook-004.txt").splitlines()
    header = next(i for i, line in enumerate(lines) if "#bytes" in line)
    report = acceptance.ib_write_bw("\n".join([*lines[: header + 1], warning, *lines[header + 1 :]]))
    assert report["bw_avg"] == 11264.11
    # Any other line there is still no report.
    other = "\n".join([*lines[: header + 1], "something else entirely", *lines[header + 1 :]])
    assert parse_error(acceptance.ib_write_bw, other).line == "something else entirely"


def test_ib_write_bw_in_perftests_own_layout_and_with_several_sizes():
    rows = [(8192, 5000, 10877.52, 10874.31, 1.391912), (65536, 5000, 11300.40, 11264.11, 0.180226)]
    text = "\n".join(
        [PERFTEST_LINE, PERFTEST_RESULT_FMT] + [PERFTEST_REPORT_FMT % row for row in rows] + [PERFTEST_LINE, ""]
    )
    report = acceptance.ib_write_bw(text)
    assert [(r["bytes"], r["bw_avg"]) for r in report["rows"]] == [(8192, 10874.31), (65536, 11264.11)]
    assert (report["bytes"], report["bw_avg_mbs"]) == (65536, 11811.28)


def test_ib_write_bw_damaged():
    error = parse_error(acceptance.ib_write_bw, output("ib-write-bw-redbook-004-mr-failure.txt"))
    assert error.line == "Couldn't create IB resources"
    result = acceptance.evaluate_ib_write_bw(output("ib-write-bw-redbook-004-mr-failure.txt"), 11250)
    assert result["status"] == "fail" and result["reason"].endswith("line: Couldn't create IB resources")
    cut = output("ib-write-bw-redbook-004.txt")[: -len(" 11264.11 0.180226\n")]
    assert parse_error(acceptance.ib_write_bw, cut).line == "65536 5000 11300.40"
    header_only = "\n".join(output("ib-write-bw-redbook-004.txt").splitlines()[:-1])
    assert parse_error(acceptance.ib_write_bw, header_only).message == "the report has a header and no result"


def test_ib_write_bw_whose_clock_perftest_could_not_measure_is_no_measurement():
    # Soft-RoCE in a busy emulated guest: perftest's clock fit failed after the transfer, so it printed 0.00.
    unmeasured = output("ib-write-bw-soft-roce-tcg-clock-unmeasured.txt")
    error = parse_error(acceptance.ib_write_bw, unmeasured)
    assert error.line == "Correlation coefficient r^2: 0.825887 < 0.9"
    assert "could not measure the CPU clock" in error.message and "r^2 0.825887" in error.message
    result = acceptance.evaluate_ib_write_bw(unmeasured, 2.0)
    assert (result["status"], result["measured"]) == ("fail", None)
    assert acceptance.perftest_clock_unmeasured(unmeasured) is True
    # A measured report, and one that never reached its server, are results, not worth another run.
    assert acceptance.perftest_clock_unmeasured(output("ib-write-bw-redbook-004.txt")) is False
    assert acceptance.perftest_clock_unmeasured(output("ib-write-bw-redbook-004-mr-failure.txt")) is False
    # The message beside a report with a rate (a clock perftest did measure) leaves the report as it is.
    measured = "Correlation coefficient r^2: 0.85 < 0.9\n" + output("ib-write-bw-redbook-004.txt")
    assert acceptance.ib_write_bw(measured)["bw_avg"] == 11264.11
    assert acceptance.perftest_clock_unmeasured(measured) is False
    # Without -F perftest prints no report at all ("Can't produce a report"): unmeasured too.
    assert acceptance.perftest_clock_unmeasured("Correlation coefficient r^2: 0.7 < 0.9\nCan't produce a report\n")


def test_rdma_threshold():
    assert acceptance.rdma_threshold_mbs(100) == 11250.0
    assert acceptance.rdma_threshold_mbs(400) == 45000.0
    assert acceptance.rdma_threshold_mbs(100, 0.95) == 11875.0
    assert acceptance.rdma_threshold_mbs(2.5, 1) == 312.5


def test_evaluate_ib_write_bw():
    report = output("ib-write-bw-redbook-004.txt")
    result = acceptance.evaluate_ib_write_bw(report, acceptance.rdma_threshold_mbs(100))
    assert {k: result[k] for k in ("status", "measured", "expected", "unit")} == {
        "status": "pass",
        "measured": 11811.28,
        "expected": 11250.0,
        "unit": "MB/s",
    }
    assert "ib_write_bw printed 11264.11 MB/sec" in result["reason"]
    # The Redbook's floor, 11,000 perftest MB/sec, in this unit.
    assert acceptance.evaluate_ib_write_bw(report, 11000 * acceptance.PERFTEST_MB / 1e6)["status"] == "pass"
    assert acceptance.evaluate_ib_write_bw(report, 11811.29)["status"] == "fail"
    # A floor is met at the floor itself ("at least"), in MB/s as measured.
    assert acceptance.evaluate_ib_write_bw(report, 11811.28)["status"] == "pass"
    assert acceptance.evaluate_ib_write_bw(report, None)["status"] == "na"


# ---------------------------------------------------------------------------------------------------------------
# NCCL


def test_nccl_all_reduce_of_the_redbook_16x1_table():
    table = acceptance.nccl_all_reduce(output("nccl-all-reduce-perf-redbook-004-16x1.txt"))
    assert (len(table["rows"]), table["complete"], table["avg_busbw"], table["out_of_bounds"]) == (
        26,
        False,
        None,
        None,
    )
    assert table["rows"][0] == {
        "size": 8,
        "count": 2,
        "type": "float",
        "redop": "sum",
        "root": None,
        "oop_time_us": 78.92,
        "oop_algbw": 0.0,
        "oop_busbw": 0.0,
        "oop_wrong": 2e-07,
        "ip_time_us": 72.73,
        "ip_algbw": 0.0,
        "ip_busbw": 0.0,
        "ip_wrong": 1e-07,
    }
    last = table["rows"][-1]
    assert (last["size"], last["count"], last["oop_time_us"], last["oop_busbw"], last["ip_busbw"]) == (
        268435456,
        67108864,
        88376.0,
        5.70,
        5.72,
    )
    assert [row["size"] for row in table["rows"]] == [8 * 2**i for i in range(26)]


def test_nccl_all_reduce_in_current_nccl_tests_layout():
    table = acceptance.nccl_all_reduce(output("nccl-all-reduce-perf-16x1-nccl-tests-format.txt"))
    assert (table["complete"], table["avg_busbw"], table["out_of_bounds"]) == (True, 1.93019, 0)
    redbook = acceptance.nccl_all_reduce(output("nccl-all-reduce-perf-redbook-004-16x1.txt"))
    measured = ("size", "count", "oop_time_us", "oop_algbw", "oop_busbw", "ip_time_us", "ip_algbw", "ip_busbw")
    # Same run, both layouts: the same numbers.
    assert [[row[k] for k in measured] for row in table["rows"]] == [
        [row[k] for k in measured] for row in redbook["rows"]
    ]
    assert {(row["root"], row["oop_wrong"], row["ip_wrong"]) for row in table["rows"]} == {(-1, 0.0, 0.0)}


def test_nccl_all_reduce_with_timestamps_and_per_iteration_columns():
    text = output("nccl-all-reduce-perf-16x1-nccl-tests-format.txt")
    rows = [line for line in text.splitlines() if line.strip() and not line.startswith(("#", "nccl-test"))]
    # -T 1 appends a timestamp; per-iteration timing adds i_min i_max i_p99 i_cv% after each #wrong.
    stamped = [row + "  2025-11-24 12:00:00" for row in rows]
    per_iter = []
    for row in rows:
        tokens = row.split()
        per_iter.append(" ".join([*tokens[:9], "1.0", "2.0", "3.0", "4.0", *tokens[9:], "5.0", "6.0", "7.0", "8.0"]))
    plain = acceptance.nccl_all_reduce(text)["rows"]
    assert acceptance.nccl_all_reduce("\n".join(stamped))["rows"] == plain
    assert acceptance.nccl_all_reduce("\n".join(per_iter))["rows"] == plain
    error = parse_error(acceptance.nccl_all_reduce, stamped[0] + " x")
    assert (error.line, error.message) == (stamped[0] + " x", "a result row of 16 columns")


def test_nccl_all_reduce_damaged():
    error = parse_error(acceptance.nccl_all_reduce, output("nccl-all-reduce-perf-redbook-004-8gpu-pdf.txt"))
    assert error.line == "                    1 on nv-nccl-7f9ns device 0 [0x06] Tesla V100-SXM2-16GB"
    text = output("nccl-all-reduce-perf-16x1-nccl-tests-format.txt")
    cut = text[: text.index("  5.72       0\n# Out of bounds")]
    error = parse_error(acceptance.nccl_all_reduce, cut)
    assert (
        error.line
        == "   268435456      67108864     float     sum      -1  88376.0    3.04    5.70       0  88034.0    3.05  "
    )
    result = acceptance.evaluate_nccl_busbw(cut, 5.0)
    assert result["status"] == "fail" and result["reason"].endswith(f"line: {error.line}")
    assert parse_error(acceptance.nccl_all_reduce, "").line == ""
    no_rows = "# nThread 1 nGpus 8 minBytes 8 maxBytes 268435456\nmpirun noticed that process rank 0 exited on signal 9"
    assert (
        parse_error(acceptance.nccl_all_reduce, no_rows).line == "mpirun noticed that process rank 0 exited on signal 9"
    )


def test_evaluate_nccl_busbw_and_latency():
    text = output("nccl-all-reduce-perf-16x1-nccl-tests-format.txt")
    busbw = acceptance.evaluate_nccl_busbw(text, 5.0)
    assert (busbw["status"], busbw["measured"], busbw["expected"], busbw["unit"]) == ("pass", 5.7, 5.0, "GB/s")
    assert busbw["reason"] == "peak 5.7 GB/s at 67108864 bytes (average 1.93019 GB/s), floor 5.0 GB/s"
    assert acceptance.evaluate_nccl_busbw(text, 40)["status"] == "fail"
    assert acceptance.evaluate_nccl_busbw(text, 5.7)["status"] == "pass"  # at the floor: met
    assert acceptance.evaluate_nccl_busbw(text, 5.71)["status"] == "fail"
    latency = acceptance.evaluate_nccl_latency(text, 100)
    assert (latency["status"], latency["measured"], latency["unit"]) == ("pass", 78.92, "us")
    assert acceptance.evaluate_nccl_latency(text, 50)["status"] == "fail"
    assert acceptance.evaluate_nccl_latency(text, 78.92)["status"] == "pass"  # at the ceiling: met
    assert acceptance.evaluate_nccl_latency(text, 78.91)["status"] == "fail"
    assert acceptance.evaluate_nccl_latency(text, None)["status"] == "na"


def test_evaluate_nccl_needs_a_finished_run():
    redbook = output("nccl-all-reduce-perf-redbook-004-16x1.txt")
    unfinished = acceptance.evaluate_nccl_busbw(redbook, 5.0)
    assert unfinished["status"] == "fail"
    assert unfinished["reason"] == "all_reduce_perf ended after the 268435456-byte row, without its summary"
    assert acceptance.evaluate_nccl_busbw(redbook, 5.0, require_summary=False)["status"] == "pass"
    assert acceptance.evaluate_nccl_latency(redbook, 100, require_summary=False)["measured"] == 78.92
    wrong = output("nccl-all-reduce-perf-16x1-nccl-tests-format.txt").replace(
        "Out of bounds values : 0 OK", "Out of bounds values : 3 FAILED"
    )
    assert acceptance.nccl_all_reduce(wrong)["out_of_bounds"] == 3
    result = acceptance.evaluate_nccl_busbw(wrong, 5.0)
    assert (result["status"], result["reason"]) == ("fail", "all_reduce_perf found 3 wrong values")


def test_nccl_transport_of_the_redbook_log():
    assert acceptance.nccl_transport(output("nccl-log-redbook-004.txt")) == {
        "net": "IB",
        "devices": ["mlx5_3:1/IB", "mlx5_2:1/IB", "mlx5_1:1/IB", "mlx5_0:1/IB"],
        "connections": 1,
        "gdrdma_connections": 1,
        "gdrdma": True,
    }
    result = acceptance.evaluate_nccl_transport(output("nccl-all-reduce-perf-16x1-nccl-tests-format.txt"))
    assert (result["status"], result["measured"]) == ("pass", "NET/IB with GDRDMA")


def test_evaluate_nccl_transport_without_rdma():
    plain_ib = "host:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0(1)\n"
    assert acceptance.evaluate_nccl_transport(plain_ib)["status"] == "fail"
    assert acceptance.evaluate_nccl_transport(plain_ib, require_gdrdma=False)["status"] == "pass"
    gdr = plain_ib.replace("NET/IB/0(1)", "NET/IB/0(1)/GDRDMA")
    assert acceptance.nccl_transport(gdr)["gdrdma_connections"] == 1
    socket = (
        "host:1:1 [0] NCCL INFO NET/Plugin: Using internal network plugin.\n"
        "host:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>\n"
        "host:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0\n"
    )
    result = acceptance.evaluate_nccl_transport(socket)
    assert (result["status"], result["reason"]) == (
        "fail",
        "NCCL used NET/Socket over eth0:10.0.0.1<0>, not InfiniBand",
    )
    silent = acceptance.evaluate_nccl_transport("")
    assert (silent["status"], silent["reason"]) == ("fail", "no NET/ line in the NCCL log (run with NCCL_DEBUG=INFO)")


# ---------------------------------------------------------------------------------------------------------------
# dcgmi diag

DCGM_LEVEL_ONE = [
    "Denylist",
    "NVML Library",
    "CUDA Main Library",
    "Permissions and OS Blocks",
    "Persistence Mode",
    "Environment Variables",
    "Page Retirement/Row Remap",
    "Graphics Processes",
    "Inforom",
]


def test_dcgmi_diag_passed():
    diag = acceptance.dcgmi_diag(output("dcgmi-diag-r1-pass.txt"))
    assert diag["tests"] == {name: "Pass" for name in DCGM_LEVEL_ONE}
    assert list(diag["tests"]) == DCGM_LEVEL_ONE
    assert diag["metadata"] == {
        "DCGM Version": "3.3.9",
        "Driver Version Detected": "580.126.20",
        "GPU Device IDs Detected": "1db1,1db1,1db1,1db1,1db1,1db1,1db1,1db1",
    }
    assert (diag["messages"], diag["passed"]) == ([], True)
    assert acceptance.evaluate_dcgm_diag(output("dcgmi-diag-r1-pass.txt"))["status"] == "pass"


def test_dcgmi_diag_failed():
    text = output("dcgmi-diag-r1-persistence-fail.txt")
    diag = acceptance.dcgmi_diag(text)
    assert (diag["passed"], diag["tests"]["Persistence Mode"]) == (False, "Fail")
    assert diag["messages"] == [
        {"test": "Persistence Mode", "kind": "Error", "text": "Persistence mode for GPU 3 is disabled."}
    ]
    result = acceptance.evaluate_dcgm_diag(text)
    assert (result["status"], result["reason"]) == (
        "fail",
        "failed: Persistence Mode (Persistence Mode: Persistence mode for GPU 3 is disabled.)",
    )


def test_dcgmi_diag_joins_wrapped_messages():
    row = "| {:<25} | {:<46} |".format
    text = output("dcgmi-diag-r1-persistence-fail.txt").replace(
        row("Error", "Persistence mode for GPU 3 is disabled."),
        row("Error", "Persistence mode for GPU 3 is disabled. Enabl") + "\n" + row("", "e it with nvidia-smi -pm 1."),
    )
    [message] = acceptance.dcgmi_diag(text)["messages"]
    assert message["text"] == "Persistence mode for GPU 3 is disabled. Enable it with nvidia-smi -pm 1."


def test_dcgmi_diag_damaged():
    lines = output("dcgmi-diag-r1-pass.txt").splitlines()
    # Cut before the closing border: the run may have stopped anywhere.
    error = parse_error(acceptance.dcgmi_diag, "\n".join(lines[:-1]))
    assert (error.line, error.message) == (lines[-2], "the table ends without its closing border")
    error = parse_error(acceptance.dcgmi_diag, "\n".join([*lines[:-3], lines[-3][:40]]))
    assert error.line == "| Graphics Processes        | Pass      "
    # Diag.cpp's message when the host engine answers with an error.
    failed = "Error: Unable to complete diagnostic for group 0. Return: (-3) Bad parameter passed to function."
    assert parse_error(acceptance.dcgmi_diag, failed).line == failed
    result = acceptance.evaluate_dcgm_diag(failed)
    assert result["status"] == "fail" and result["reason"].endswith(f"line: {failed}")


# ---------------------------------------------------------------------------------------------------------------
# memlock, peer memory


def test_systemd_memlock():
    assert acceptance.systemd_memlock(output("systemctl-show-limitmemlock-infinity.txt")) == "infinity"
    assert acceptance.systemd_memlock(output("systemctl-show-limitmemlock-default.txt")) == 8388608
    # systemctl show --value prints the value alone.
    assert acceptance.systemd_memlock("infinity\n") == "infinity"
    assert acceptance.systemd_memlock("65536\n") == 65536
    assert acceptance.systemd_memlock("LoadState=loaded\nLimitMEMLOCK=infinity\n") == "infinity"


@pytest.mark.parametrize(
    ("damaged", "line"),
    [
        (
            output("systemctl-show-no-systemd-debian12.txt"),
            "System has not been booted with systemd as init system (PID 1). Can't operate.",
        ),
        ("LimitMEMLOCK=infin", "LimitMEMLOCK=infin"),
        ("LoadState=not-found\nLimitMEMLOCK=8388608\n", "LoadState=not-found"),
        ("", ""),
    ],
)
def test_systemd_memlock_damaged(damaged, line):
    assert parse_error(acceptance.systemd_memlock, damaged).line == line
    result = acceptance.evaluate_memlock(damaged, "containerd")
    assert (result["check"], result["status"]) == ("memlock[containerd]", "fail")
    assert result["reason"].endswith(f"line: {line or '(empty output)'}")


def test_evaluate_memlock():
    assert acceptance.evaluate_memlock(output("systemctl-show-limitmemlock-infinity.txt"), "crio")["status"] == "pass"
    result = acceptance.evaluate_memlock(output("systemctl-show-limitmemlock-default.txt"))
    assert {k: result[k] for k in ("check", "status", "measured", "unit")} == {
        "check": "memlock",
        "status": "fail",
        "measured": 8388608,
        "unit": "bytes",
    }


def test_memory_peers_version():
    assert acceptance.memory_peers_version(output("memory-peers-version-nvidia-peermem-535.txt")) == "535.261.03"
    assert acceptance.memory_peers_version(output("memory-peers-version-nv-peer-mem-1.0-9.txt")) == "1.0-9"
    # grep . /sys/kernel/mm/memory_peers/*/version: nvidia-peermem's two clients, nv_mem and nv_mem_nc.
    both = "".join(f"/sys/kernel/mm/memory_peers/{client}/version:535.261.03\n" for client in ("nv_mem", "nv_mem_nc"))
    assert acceptance.memory_peers_version(both) == "535.261.03"
    mixed = "535.261.03\n1.0-9\n"
    error = parse_error(acceptance.memory_peers_version, mixed)
    assert (error.line, error.message) == ("1.0-9", "peer memory clients of different versions (535.261.03, 1.0-9)")
    missing = output("memory-peers-version-none-debian12.txt")
    assert parse_error(acceptance.memory_peers_version, missing).line == missing.strip()


def test_evaluate_memory_peers():
    peermem = output("memory-peers-version-nvidia-peermem-535.txt")
    assert acceptance.evaluate_memory_peers(peermem, "535.261.03")["status"] == "pass"
    assert acceptance.evaluate_memory_peers(peermem, "580.126.20")["status"] == "fail"
    assert acceptance.evaluate_memory_peers(output("memory-peers-version-nv-peer-mem-1.0-9.txt"))["measured"] == "1.0-9"
    missing = acceptance.evaluate_memory_peers(output("memory-peers-version-none-debian12.txt"))
    assert missing["status"] == "fail"
    assert missing["reason"].endswith("line: cat: '/sys/kernel/mm/memory_peers/*/version': No such file or directory")


# ---------------------------------------------------------------------------------------------------------------
# The contract: only ParseError, on anything


PARSERS = [
    acceptance.nvidia_driver_version,
    acceptance.module_license_flavor,
    acceptance.nvidia_smi_gpus,
    acceptance.nvidia_smi_remapped_rows,
    acceptance.ofed_info,
    acceptance.ibstat,
    acceptance.ibstatus,
    acceptance.hca_ports,
    acceptance.ib_write_bw,
    acceptance.nccl_all_reduce,
    acceptance.nccl_transport,
    acceptance.dcgmi_diag,
    acceptance.systemd_memlock,
    acceptance.memory_peers_version,
]

EVALUATORS = [
    lambda text: [acceptance.evaluate_driver_version(text, "535.261.03")],
    lambda text: [acceptance.evaluate_driver_flavor(text, "open", text)],
    lambda text: acceptance.evaluate_gpus(text, 8, "V100", True, text),
    lambda text: [acceptance.evaluate_ofed(text, "4.7")],
    lambda text: acceptance.evaluate_hca_ports(text, profile("dgx-1")["hcas"]),
    lambda text: [acceptance.evaluate_ib_write_bw(text, 11250)],
    lambda text: [acceptance.evaluate_nccl_busbw(text, 5), acceptance.evaluate_nccl_latency(text, 100)],
    lambda text: [acceptance.evaluate_nccl_transport(text)],
    lambda text: [acceptance.evaluate_dcgm_diag(text)],
    lambda text: [acceptance.evaluate_memlock(text)],
    lambda text: [acceptance.evaluate_memory_peers(text)],
]

FIXTURES = sorted(path.name for path in OUTPUTS.glob("*.txt"))


def variants(text: str, rng: random.Random) -> list[str]:
    """The output cut at every line, at random characters, with lines dropped or repeated, and random junk."""
    found = damaged_text(text, rng, cuts=30, reorders=5)
    found += [bytes(rng.randrange(256) for _ in range(rng.randrange(200))).decode("latin-1") for _ in range(5)]
    found.append(text.replace("\n", "\r\n"))
    return found


@pytest.mark.parametrize("name", FIXTURES)
def test_only_parse_errors_on_damaged_output(name):
    rng = random.Random(name)
    text = output(name)
    unreadable_seen = 0
    for variant in variants(text, rng):
        for parser in PARSERS:
            try:
                parser(variant)
            except ParseError as error:
                # The raw offending line is the tool's own, as it printed it.
                assert isinstance(error.line, str) and error.line in variant, (parser.__name__, variant)
        for evaluate in EVALUATORS:
            # No exception (a damaged output is a failed check, never an error), and a check failed for output its
            # parser could not read names the raw offending line, as the tool printed it.
            for result in evaluate(variant):
                _, unreadable, line = result["reason"].partition(" output could not be read: ")
                if unreadable:
                    unreadable_seen += 1
                    assert result["status"] == "fail", result
                    line = line.rpartition("; line: ")[2]
                    assert line == "(empty output)" or line in variant, (result, variant)
    assert unreadable_seen


def test_parsers_take_bytes_and_stdout_lines_and_refuse_other_types():
    text = output("ibstat-dgx1-edr.txt")
    assert acceptance.ibstat(text.encode()) == acceptance.ibstat(text.splitlines()) == DGX1_PORTS
    for parser in PARSERS:
        error = parse_error(parser, 12)
        assert error.line == "12" and isinstance(error, ValueError)
    with pytest.raises(ValueError):
        acceptance.check_result("x", "passed")


# ---------------------------------------------------------------------------------------------------------------
# The filters, as the playbook calls them


def test_filters_expose_the_parsers_and_evaluators():
    filters = acceptance_filter.FilterModule().filters()
    assert len(filters) == 28
    assert all(name.startswith("acceptance_") for name in filters)
    # The parsers' ParseError becomes Ansible's filter error; the evaluators do not raise.
    report = output("ib-write-bw-redbook-004.txt")
    assert filters["acceptance_ib_write_bw"](report) == acceptance.ib_write_bw(report)
    with pytest.raises(AnsibleFilterError, match="ib_write_bw"):
        filters["acceptance_ib_write_bw"]("no table here")
    gpus = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)"
    assert filters["acceptance_evaluate_gpus"](gpus, 1, "H100") == acceptance.evaluate_gpus(gpus, 1, "H100")
    doc = yaml.safe_load(acceptance_filter.DOCUMENTATION)
    assert doc["name"] in filters
    # The parsers are named one by one; the evaluators as the family C(acceptance_evaluate_*), with what they return.
    named = set(re.findall(r"C\((acceptance_\w+)\)", acceptance_filter.DOCUMENTATION))
    assert named == {f"acceptance_{name}" for name in acceptance_filter.PARSERS} | {"acceptance_not_applicable"}
    # Every filter documented: by its name, or as one of the acceptance_evaluate_* family.
    assert {name for name in filters if not name.startswith("acceptance_evaluate_")} == named
    family = "The C(acceptance_evaluate_*) filters turn output and expectations into check results"
    assert any(" ".join(item.split()).startswith(family) for item in doc["description"]), doc["description"]
    evaluators = {name for name in filters if name.startswith("acceptance_evaluate_")}
    assert evaluators == {f"acceptance_{name}" for name in acceptance_filter.EVALUATORS if name.startswith("evaluate_")}


def test_filters_render_through_ansible():
    variables = {"out": output("ib-write-bw-redbook-004.txt"), "hcas": profile("dgx-1")["hcas"]}
    templar = Templar(loader=DataLoader(), variables=variables)
    report = templar.template(trusted("{{ out | nodeforge.gpu.acceptance_ib_write_bw }}"))
    assert report["bw_avg_mbs"] == 11811.28
    threshold = "100 | nodeforge.gpu.acceptance_rdma_threshold_mbs"
    result = templar.template(trusted(f"{{{{ out | nodeforge.gpu.acceptance_evaluate_ib_write_bw({threshold}) }}}}"))
    assert (result["status"], result["expected"]) == ("pass", 11250.0)
    templar.available_variables = {**variables, "out": output("ibstatus-no-devices-debian12.txt")}
    results = templar.template(trusted("{{ out | nodeforge.gpu.acceptance_evaluate_hca_ports(hcas) }}"))
    assert [r["status"] for r in results] == ["fail"] * 4
