# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""`nodeforge validate`'s parsers and evaluators pinned down where test_acceptance.py looks at parts: ibstatus' sysfs
values (unknown state and rate, states it does not know, word for word), results handed to the evaluators already
parsed (rows without an index, an NCCL table), a not-applicable result that carries its expected value, the RDMA floor
of a slow port, and perftest's check refusing a value that is no output."""

from __future__ import annotations

import pytest

from nodeforge import collection  # noqa: F401  (sets up the collection loader)
from tests.test_acceptance import output
from tests.test_parsers import refusal

from ansible_collections.nodeforge.gpu.plugins.module_utils import acceptance  # isort: skip
from ansible_collections.nodeforge.gpu.plugins.module_utils.acceptance import ParseError  # isort: skip

HEAD = "Infiniband device 'mlx5_0' port 1 status:\n"


def test_ibstatus_link_layer_ib_is_infiniband():
    """sysfs' link_layer file says InfiniBand; ibstatus prints IB where it has none."""
    text = (
        HEAD
        + "\tstate:\t\t 4: ACTIVE\n\tphys state:\t 5: LinkUp\n\trate:\t\t 100 Gb/sec (4X EDR)\n\tlink_layer:\t IB\n"
    )
    assert acceptance.ibstatus(text) == [
        {
            "ca": "mlx5_0",
            "port": 1,
            "state": "ACTIVE",
            "phys_state": "LinkUp",
            "rate_gbps": 100.0,
            "link_layer": "InfiniBand",
        }
    ]


def test_ibstatus_of_a_port_whose_sysfs_says_unknown():
    text = HEAD + "\tstate:\t\t unknown\n\tphys state:\t 3: Disabled\n\trate:\t\t unknown\n\tlink_layer:\t Ethernet\n"
    assert acceptance.ibstatus(text) == [
        {
            "ca": "mlx5_0",
            "port": 1,
            "state": "UNKNOWN",
            "phys_state": "Disabled",
            "rate_gbps": None,
            "link_layer": "Ethernet",
        }
    ]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("\tstate:\t\t 4: BUSY", "unknown port state '4: BUSY'"),
        ("\tstate:\t\t ACTIVE", "unknown port state 'ACTIVE'"),  # sysfs writes the number first
        ("\tphys state:\t 5: Wobbly", "unknown physical state '5: Wobbly'"),
        ("\tphys state:\t Wobbly", "unknown physical state 'Wobbly'"),
        ("\trate:\t\t fast", "unreadable rate 'fast'"),
        ("\trate:\t\t 100 Mb/sec", "unreadable rate '100 Mb/sec'"),
        ("\tlink_layer:\t Wifi", "unknown link layer 'Wifi'"),
    ],
)
def test_ibstatus_refuses_states_it_does_not_know_naming_the_line(line, message):
    with pytest.raises(ParseError) as refused:
        acceptance.ibstatus(HEAD + line + "\n")
    assert (refused.value.tool, refused.value.message, refused.value.line) == ("ibstatus", message, line)
    assert str(refused.value) == f"ibstatus: {message}: {line!r}"


def gpu(persistence: bool) -> dict:
    return {"name": "Tesla V100-SXM2-16GB", "persistence": persistence, "ecc": True, "retired_pages_pending": False}


def test_evaluate_gpus_of_parsed_rows_without_an_index_names_the_gpus_by_position():
    """A result handed already parsed is used as it is; a row without an index is the GPU at its position."""
    results = acceptance.evaluate_gpus([gpu(False), gpu(False), gpu(True)], 3, "V100", True)
    assert results[2:5] == [
        {
            "check": "gpu_persistence",
            "status": "fail",
            "measured": "1/3",
            "expected": "3/3",
            "reason": "GPU 0, 1: persistence mode off",
            "unit": None,
        },
        {"check": "gpu_ecc", "status": "pass", "measured": "3/3", "expected": "3/3", "reason": "", "unit": None},
        {
            "check": "gpu_retired_pages",
            "status": "pass",
            "measured": "3/3",
            "expected": "3/3",
            "reason": "",
            "unit": None,
        },
    ]


def test_evaluate_gpus_names_the_gpus_by_their_index():
    """nvidia-smi -i 4,5,6,7 (half a DGX-1): GPU 5 and 7 are named so, not by their place in the output."""
    gpus = acceptance.nvidia_smi_gpus(output("nvidia-smi-query-gpu-dgx1.txt"))[4:]
    for row in (gpus[1], gpus[3]):
        row["persistence"] = False
    [persistence] = [r for r in acceptance.evaluate_gpus(gpus, 4, "V100", True) if r["check"] == "gpu_persistence"]
    assert persistence == {
        "check": "gpu_persistence",
        "status": "fail",
        "measured": "2/4",
        "expected": "4/4",
        "reason": "GPU 5, 7: persistence mode off",
        "unit": None,
    }


def test_evaluate_gpus_of_a_parsed_result_is_the_evaluation_of_its_output():
    text = output("nvidia-smi-query-gpu-dgx1.txt")
    parsed = acceptance.nvidia_smi_gpus(text)
    assert acceptance.evaluate_gpus(parsed, 8, "V100", True) == acceptance.evaluate_gpus(text, 8, "V100", True)


def test_evaluate_nccl_of_a_parsed_table_is_the_evaluation_of_its_output():
    text = output("nccl-all-reduce-perf-16x1-nccl-tests-format.txt")
    parsed = acceptance.nccl_all_reduce(text)
    assert acceptance.evaluate_nccl_busbw(parsed, 5.0) == acceptance.evaluate_nccl_busbw(text, 5.0)
    assert acceptance.evaluate_nccl_busbw(parsed, 5.0)["status"] == "pass"
    assert acceptance.evaluate_nccl_latency(parsed, 100) == acceptance.evaluate_nccl_latency(text, 100)


def test_not_applicable_keeps_the_expected_value():
    assert acceptance.not_applicable("gpu_count", "no GPU on this node", 8) == {
        "check": "gpu_count",
        "status": "na",
        "measured": None,
        "expected": 8,
        "reason": "no GPU on this node",
        "unit": None,
    }


def test_rdma_threshold_is_rounded_to_three_decimals():
    """An SDR 1x port (2.5 Gb/s) at a third of its rate: 104.1666... MB/s."""
    assert acceptance.rdma_threshold_mbs(2.5, 1 / 3) == 104.167


def test_perftest_clock_unmeasured_refuses_what_is_no_output_as_ib_write_bw():
    with pytest.raises(ParseError) as refused:
        acceptance.perftest_clock_unmeasured(5)
    assert str(refused.value) == "ib_write_bw: expected the command's output as text, got int: '5'"


@pytest.mark.parametrize(
    ("measured", "expected", "matches"),
    [
        ("580.126.20", "580", True),
        ("4.7-3.2.9.0", "4.7", True),
        ("580", "580", True),
        ("5801", "580", False),
        ("580X", "580", False),  # a build suffix of another scheme is no release of 580
        ("58", "580", False),
    ],
)
def test_a_pinned_version_matches_itself_and_its_releases(measured, expected, matches):
    assert acceptance._version_matches(measured, expected) is matches


# ---- a damaged value is refused naming the tool, what is wrong with which field, and the whole line ----------------

SMI_GPU = "nvidia-smi --query-gpu"
SMI_ROWS = "nvidia-smi --query-remapped-rows"
V100 = "3, Tesla V100-SXM2-16GB, 00000000:0A:00.0, Enabled, Enabled, No"


@pytest.mark.parametrize(
    ("parser", "line", "tool", "message"),
    [
        (acceptance.nvidia_smi_gpus, V100.replace("3,", "3a,"), SMI_GPU, "the GPU index is not an integer ('3a')"),
        (acceptance.nvidia_smi_gpus, V100.replace("00000000:0A:00.0", "0A:00.0"), SMI_GPU,
         "not a PCI bus id ('0A:00.0')"),
        (acceptance.nvidia_smi_gpus, V100.replace("Enabled, Enabled", "On, Enabled"), SMI_GPU,
         "persistence_mode is 'On', neither Enabled nor Disabled"),
        (acceptance.nvidia_smi_gpus, V100.replace("Enabled, No", "Unknown Error, No"), SMI_GPU,
         "ecc.mode.current is 'Unknown Error', neither Enabled nor Disabled"),
        (acceptance.nvidia_smi_gpus, V100.replace(", No", ", Pending"), SMI_GPU,
         "retired_pages.pending is 'Pending', neither Yes nor No"),
        (acceptance.nvidia_smi_gpus, V100.replace("Tesla V100-SXM2-16GB", ""), SMI_GPU, "name is empty"),
        # The remapped-rows query names its bus id gpu_bus_id.
        (acceptance.nvidia_smi_remapped_rows, "0000:18:00, No, No", SMI_ROWS, "not a PCI bus id ('0000:18:00')"),
        (acceptance.nvidia_smi_remapped_rows, "00000000:18:00.0, No, Maybe", SMI_ROWS,
         "remapped_rows.failure is 'Maybe', neither Yes nor No"),
    ],
)  # fmt: skip
def test_nvidia_smi_refuses_a_damaged_value_naming_the_field(parser, line, tool, message):
    with pytest.raises(ParseError) as refused:
        parser(line + "\n")
    assert (refused.value.tool, refused.value.message, refused.value.line, refused.value.expected) == (
        tool,
        message,
        line,
        "",
    )


def test_nvidia_smi_remapped_rows_reads_its_bus_id_upper_case():
    assert acceptance.nvidia_smi_remapped_rows("00000000:ab:00.0, No, Yes") == [
        {"bus_id": "00000000:AB:00.0", "remapped_rows_pending": False, "remapped_rows_failure": True}
    ]


# A row of tests/data/outputs/validate/nccl-all-reduce-perf-16x1-nccl-tests-format.txt
NCCL_ROW = "268435456  67108864  float  sum  -1  88376.0  3.04  5.70  0  88034.0  3.05  5.72  0"


@pytest.mark.parametrize(
    ("column", "value", "message"),
    [
        (5, "88376.0us", "time is not a number ('88376.0us')"),
        (6, "3.04GB", "algbw is not a number ('3.04GB')"),
        (7, "-", "busbw is not a number ('-')"),
        (8, "x", "#wrong/error is not a number ('x')"),
        (9, "n/a", "time is not a number ('n/a')"),
        (10, "inf!", "algbw is not a number ('inf!')"),
        (11, "5,72", "busbw is not a number ('5,72')"),
        (12, "n/a", "#wrong/error is not a number ('n/a')"),
    ],
)
def test_nccl_all_reduce_refuses_a_damaged_column_naming_it(column, value, message):
    tokens = NCCL_ROW.split()
    tokens[column] = value
    line = "  ".join(tokens)
    assert refusal(acceptance.nccl_all_reduce, line + "\n")[:3] == ("all_reduce_perf", message, line)


def test_nccl_all_reduce_reads_each_column_of_both_halves():
    """Every column distinct, so a value read from its neighbour's column shows; N/A (the Redbook's error column
    when the check is off) is no count of wrong values."""
    line = "8  2  float  sum  -1  11.5  0.01  0.02  N/A  12.5  0.03  0.04  7"
    assert acceptance.nccl_all_reduce(line)["rows"] == [
        {
            "size": 8,
            "count": 2,
            "type": "float",
            "redop": "sum",
            "root": -1,
            "oop_time_us": 11.5,
            "oop_algbw": 0.01,
            "oop_busbw": 0.02,
            "oop_wrong": None,
            "ip_time_us": 12.5,
            "ip_algbw": 0.03,
            "ip_busbw": 0.04,
            "ip_wrong": 7.0,
        }
    ]


@pytest.mark.parametrize(
    ("parser", "text", "tool", "message", "line"),
    [
        (acceptance.ibstatus, HEAD + "\tstate:\t\t 4: ACTIVE\n\trate:\t\t 100 Gb/sec (4X EDR)\n", "ibstatus",
         "mlx5_0 port 1 ends without phys_state, link_layer", "rate:\t\t 100 Gb/sec (4X EDR)"),
        (acceptance.ibstat, "CA 'mlx5_0'\n\tNumber of ports: 1\n\tPort 1:\n\t\tState: Active\n", "ibstat",
         "mlx5_0 port 1 ends without phys_state, rate, link_layer", "State: Active"),
    ],
)  # fmt: skip
def test_a_port_cut_short_is_refused_naming_what_it_lacks(parser, text, tool, message, line):
    with pytest.raises(ParseError) as refused:
        parser(text)
    assert (refused.value.tool, refused.value.message, refused.value.line.strip()) == (tool, message, line.strip())


def test_a_parsed_diagnostic_without_messages_is_judged_not_refused():
    """A result parsed once and handed to an evaluator again: a passing diagnostic has no messages, which is no damaged
    result."""
    diag = acceptance.dcgmi_diag(output("dcgmi-diag-r1-pass.txt"))
    assert diag["messages"] == []
    assert acceptance.evaluate_dcgm_diag(diag) == acceptance.evaluate_dcgm_diag(output("dcgmi-diag-r1-pass.txt"))
    assert acceptance.evaluate_dcgm_diag(diag)["status"] == "pass"


# ---- memlock, OFED and peer memory: a value handed over already read, and output that cannot be read ---------------


@pytest.mark.parametrize(
    ("limit", "reason"),
    [
        (8388608, "LimitMEMLOCK is 8388608 bytes, not unlimited"),  # systemd's default, 8 MiB
        (0, "LimitMEMLOCK is 0 bytes, not unlimited"),
        (2**64 - 1, f"LimitMEMLOCK is {2**64 - 1} bytes, not unlimited"),
    ],
)
def test_evaluate_memlock_of_a_limit_in_bytes(limit, reason):
    """systemd_memlock's own answer, handed to the evaluator again (the playbook reads once, judges per service)."""
    assert acceptance.evaluate_memlock(limit, "containerd") == acceptance.check_result(
        "memlock[containerd]", "fail", limit, "infinity", reason, "bytes"
    )


@pytest.mark.parametrize(
    ("output", "message", "line"),
    [
        # Beyond systemd's 64 bits, below 0, or a YAML yes: no limit systemd can print, and no output either.
        (2**64, "expected the command's output as text, got int", str(2**64)),
        (-1, "expected the command's output as text, got int", "-1"),
        (True, "expected the command's output as text, got bool", "True"),
        ("", "no output", ""),
        ("LoadState=not-found\nLimitMEMLOCK=8388608\n", "the unit does not exist", "LoadState=not-found"),
        ("LimitNOFILE=1024\nLimitCORE=0\n", "no LimitMEMLOCK= line", "LimitNOFILE=1024"),
    ],
)
def test_evaluate_memlock_of_output_it_cannot_read(output, message, line):
    result = acceptance.evaluate_memlock(output)
    shown = line or "(empty output)"
    assert result == acceptance.check_result(
        "memlock",
        "fail",
        None,
        "infinity",
        f"systemctl show -p LimitMEMLOCK output could not be read: {message}; line: {shown}",
    )


def test_evaluate_memlock_of_infinity_passes_with_no_reason():
    assert acceptance.evaluate_memlock("LimitMEMLOCK=infinity\n", "crio") == acceptance.check_result(
        "memlock[crio]", "pass", "infinity", "infinity", ""
    )


@pytest.mark.parametrize(
    ("output", "message", "line"),
    [
        ("", "no output (is OFED installed?)", "(empty output)"),
        ("bash: ofed_info: command not found\n", "not an OFED version line", "bash: ofed_info: command not found"),
    ],
)
def test_evaluate_ofed_of_output_it_cannot_read(output, message, line):
    assert acceptance.evaluate_ofed(output, "24.10-1.1.4") == acceptance.check_result(
        "ofed_version", "fail", None, "24.10-1.1.4", f"ofed_info -s output could not be read: {message}; line: {line}"
    )


def test_evaluate_ofed_measures_the_version_and_shows_the_line():
    assert acceptance.evaluate_ofed("OFED-internal-24.10-1.1.4:\n", "24.10") == acceptance.check_result(
        "ofed_version", "pass", "24.10-1.1.4", "24.10", "OFED-internal-24.10-1.1.4:"
    )
    assert acceptance.evaluate_ofed("MLNX_OFED_LINUX-4.7-3.2.9.0:\n", "24.10") == acceptance.check_result(
        "ofed_version", "fail", "4.7-3.2.9.0", "24.10", "MLNX_OFED_LINUX-4.7-3.2.9.0:"
    )
    for pinned in (None, ""):
        assert acceptance.evaluate_ofed("OFED-internal-24.10-1.1.4:\n", pinned) == acceptance.not_applicable(
            "ofed_version", "no OFED version pinned (inbox RDMA stack)"
        )


def test_evaluate_memory_peers_of_no_client_names_the_version_it_wanted():
    assert acceptance.evaluate_memory_peers("", "580.105.08") == acceptance.check_result(
        "peer_memory",
        "fail",
        None,
        "580.105.08",
        "/sys/kernel/mm/memory_peers/*/version output could not be read: no peer memory client registered; "
        "line: (empty output)",
    )


# ---- dcgmi diag: messages of every kind, results judged, a damaged table refused naming its line ------------------

ROW = "| {:<25} | {:<46} |".format
BORDER = "+---------------------------+------------------------------------------------+"
DCGM_HEAD = [
    "Successfully ran diagnostic for group.",
    BORDER,
    ROW("Diagnostic", "Result"),
    "+===========================+================================================+",
    "|-----  Metadata  ----------+------------------------------------------------|",
    ROW("DCGM Version", "3.3.9"),
    ROW("", "(a metadata row without a name)"),
    "|-----  Deployment  --------+------------------------------------------------|",
]
DCGM_LEVEL_THREE = [
    ROW("Denylist", "Pass"),
    ROW("Persistence Mode", "Fail"),
    ROW("Error", "Persistence mode for GPU 3 is disabled. Enabl"),
    ROW("", "e it with nvidia-smi -pm 1."),
    ROW("Info", "GPU 3 was reset at boot."),
    ROW("Environment Variables", "Pass"),
    ROW("", "CUDA_VISIBLE_DEVICES is not set."),
    "|-----  Stress  ------------+------------------------------------------------|",
    ROW("Memory Bandwidth", "Fail - GPU: 3"),
    ROW("Warning", "GPU 3 reached 1200 GB/s of 2000 GB/s."),
    ROW("Targeted Power", "Skip"),
    BORDER,
]


def test_dcgmi_diag_reads_every_message_kind_and_its_test():
    diag = acceptance.dcgmi_diag("\n".join(DCGM_HEAD + DCGM_LEVEL_THREE) + "\n")
    assert diag == {
        "metadata": {"DCGM Version": "3.3.9"},
        "tests": {
            "Denylist": "Pass",
            "Persistence Mode": "Fail",
            "Environment Variables": "Pass",
            "Memory Bandwidth": "Fail - GPU: 3",
            "Targeted Power": "Skip",
        },
        "messages": [
            {
                "test": "Persistence Mode",
                "kind": "Error",
                "text": "Persistence mode for GPU 3 is disabled. Enable it with nvidia-smi -pm 1.",
            },
            {"test": "Persistence Mode", "kind": "Info", "text": "GPU 3 was reset at boot."},
            {"test": "Environment Variables", "kind": "Detail", "text": "CUDA_VISIBLE_DEVICES is not set."},
            {"test": "Memory Bandwidth", "kind": "Warning", "text": "GPU 3 reached 1200 GB/s of 2000 GB/s."},
        ],
        "passed": False,
    }
    # The reason: every failed test, then the messages of the failed tests that are not Info.
    assert acceptance.evaluate_dcgm_diag("\n".join(DCGM_HEAD + DCGM_LEVEL_THREE)) == acceptance.check_result(
        "dcgm_diag",
        "fail",
        "Fail",
        "Pass",
        "failed: Persistence Mode, Memory Bandwidth (Persistence Mode: Persistence mode for GPU 3 is disabled. Enable "
        "it with nvidia-smi -pm 1.; Memory Bandwidth: GPU 3 reached 1200 GB/s of 2000 GB/s.)",
    )


def test_evaluate_dcgm_diag_of_a_failed_test_without_messages_says_only_which():
    rows = [ROW("Denylist", "Pass"), ROW("Inforom", "Fail"), BORDER]
    assert acceptance.evaluate_dcgm_diag("\n".join(DCGM_HEAD + rows)) == acceptance.check_result(
        "dcgm_diag", "fail", "Fail", "Pass", "failed: Inforom"
    )
    passed = [ROW("Denylist", "Pass"), ROW("Inforom", "Skip"), BORDER]
    assert acceptance.evaluate_dcgm_diag("\n".join(DCGM_HEAD + passed)) == acceptance.check_result(
        "dcgm_diag", "pass", "Pass", "Pass", "2 tests passed or skipped"
    )


@pytest.mark.parametrize(
    ("lines", "message", "line"),
    [
        (["Error: unable to establish a connection to the specified host: localhost"], "the diagnostic did not run",
         "Error: unable to establish a connection to the specified host: localhost"),
        ([], "the diagnostic did not run", ""),
        ([*DCGM_HEAD, ROW("Denylist", "Pass")[:-1], BORDER], "not a table row", ROW("Denylist", "Pass")[:-1]),
        ([*DCGM_HEAD, "x" + ROW("Denylist", "Pass"), BORDER], "not a table row", "x" + ROW("Denylist", "Pass")),
        ([*DCGM_HEAD, ROW("Denylist", "Pass") + "x|", BORDER], "not a table row", ROW("Denylist", "Pass") + "x|"),
        ([*DCGM_HEAD, ROW("", "Persistence mode for GPU 3 is disabled."), BORDER],
         "a continuation row before any test", ROW("", "Persistence mode for GPU 3 is disabled.")),
        ([*DCGM_HEAD, ROW("Denylist", ""), BORDER], "Denylist without a result", ROW("Denylist", "")),
        ([*DCGM_HEAD, BORDER], "no test results", BORDER),
        ([*DCGM_HEAD, ROW("Denylist", "Pass"), ROW("Inforom", "Pass")], "the table ends without its closing border",
         ROW("Inforom", "Pass")),
    ],
)  # fmt: skip
def test_a_damaged_diagnostic_is_refused_naming_the_line(lines, message, line):
    assert refusal(acceptance.dcgmi_diag, "\n".join(lines))[:3] == ("dcgmi diag", message, line)
    shown = line or "(empty output)"
    assert acceptance.evaluate_dcgm_diag("\n".join(lines)) == acceptance.check_result(
        "dcgm_diag", "fail", None, "Pass", f"dcgmi diag output could not be read: {message}; line: {shown}"
    )


@pytest.mark.parametrize(
    ("output", "message", "line"),
    [
        ("LimitMEMLOCK=1=2\n", "LimitMEMLOCK is not an integer ('1=2')", "LimitMEMLOCK=1=2"),
        # --value prints the value alone, on one line; two bare lines are not that.
        ("8388608\n8388608\n", "no LimitMEMLOCK= line", "8388608"),
        ("LimitNOFILE=524288\n", "no LimitMEMLOCK= line", "LimitNOFILE=524288"),
        ("  \n", "no output", ""),
    ],
)
def test_systemd_memlock_refuses_naming_the_line(output, message, line):
    assert refusal(acceptance.systemd_memlock, output)[:3] == (
        "systemctl show -p LimitMEMLOCK",
        message,
        line,
    )


def test_systemd_memlock_reads_the_value_form():
    assert acceptance.systemd_memlock("infinity\n") == "infinity"
    assert acceptance.systemd_memlock("8388608\n") == 8388608


@pytest.mark.parametrize(
    ("output", "message", "line"),
    [
        # grep's PATH:VERSION form starts with the path; anything else is the version alone.
        ("nv_mem:580.105.08\n", "not a version", "nv_mem:580.105.08"),
        ("/sys/kernel/mm/memory_peers/nv_mem/version:580.105.08\n/sys/kernel/mm/memory_peers/nv_mem_nc/version:1.0-9\n",
         "peer memory clients of different versions (580.105.08, 1.0-9)",
         "/sys/kernel/mm/memory_peers/nv_mem_nc/version:1.0-9"),
        ("\n", "no peer memory client registered", ""),
    ],
)  # fmt: skip
def test_memory_peers_version_refuses_naming_the_line(output, message, line):
    assert refusal(acceptance.memory_peers_version, output)[:3] == (
        "/sys/kernel/mm/memory_peers/*/version",
        message,
        line,
    )


def test_module_license_of_no_output_is_refused_naming_modinfo():
    assert refusal(acceptance.module_license_flavor, "")[:3] == (
        "modinfo license",
        "no license in the output",
        "",
    )


def test_evaluate_driver_version_without_a_pin_says_so():
    for pinned in (None, ""):
        assert acceptance.evaluate_driver_version(
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.261.03  Fri Oct  3 12:00:00 UTC 2025\n", pinned
        ) == acceptance.not_applicable("driver_version", "no driver version pinned for this node")


# ---- NCCL's transport: the network, its devices, the channels over it, GPUDirect RDMA --------------------------------

NCCL_PLUGIN = "node-1:30:30 [0] NCCL INFO NET/Plugin: Using internal network plugin."
NCCL_IB = "node-1:30:30 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:10.0.0.1<0>"
NCCL_SOCKET = "node-1:30:30 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>"
NCCL_CHANNEL = "node-1:30:39 [{gpu}] NCCL INFO Channel 0{gpu}/0 : 0[{gpu}] -> 8[{gpu}] [send] via NET/{net}"


def nccl_log(*lines: str) -> str:
    return "\n".join(lines) + "\n"


def test_nccl_transport_counts_every_channel_and_the_ones_with_gpudirect_rdma():
    log = nccl_log(
        NCCL_PLUGIN,
        NCCL_IB,
        NCCL_IB.replace("node-1", "node-2"),  # the same devices, seen by another rank: listed once
        NCCL_CHANNEL.format(gpu=0, net="IB/0/GDRDMA"),
        NCCL_CHANNEL.format(gpu=1, net="IB/1/GDRDMA"),
        NCCL_CHANNEL.format(gpu=2, net="IB/0"),
    )
    assert acceptance.nccl_transport(log) == {
        "net": "IB",
        "devices": ["mlx5_0:1/IB", "mlx5_1:1/IB"],
        "connections": 3,
        "gdrdma_connections": 2,
        "gdrdma": True,
    }
    assert acceptance.evaluate_nccl_transport(log) == acceptance.check_result(
        "nccl_transport",
        "pass",
        "NET/IB with GDRDMA",
        "NET/IB with GDRDMA",
        "NCCL used NET/IB with GDRDMA over mlx5_0:1/IB mlx5_1:1/IB",
    )


def test_nccl_transport_of_gpudirect_rdma_announced_without_a_channel_line():
    log = nccl_log(NCCL_IB, "node-1:30:30 [0] NCCL INFO GPU Direct RDMA Enabled for HCA 0 'mlx5_0'")
    assert acceptance.nccl_transport(log) == {
        "net": "IB",
        "devices": ["mlx5_0:1/IB", "mlx5_1:1/IB"],
        "connections": 0,
        "gdrdma_connections": 0,
        "gdrdma": True,
    }
    assert acceptance.nccl_transport(nccl_log(NCCL_PLUGIN))["net"] is None


@pytest.mark.parametrize(
    ("lines", "require_gdrdma", "result"),
    [
        ([NCCL_IB, NCCL_CHANNEL.format(gpu=0, net="IB/0")], True,
         ("fail", "NET/IB", "NET/IB with GDRDMA",
          "NCCL used NET/IB over mlx5_0:1/IB mlx5_1:1/IB without GPUDirect RDMA")),
        ([NCCL_IB, NCCL_CHANNEL.format(gpu=0, net="IB/0")], False,
         ("pass", "NET/IB", "NET/IB", "NCCL used NET/IB over mlx5_0:1/IB mlx5_1:1/IB")),
        ([NCCL_SOCKET, NCCL_CHANNEL.format(gpu=0, net="Socket/0")], True,
         ("fail", "NET/Socket", "NET/IB with GDRDMA", "NCCL used NET/Socket over eth0:10.0.0.1<0>, not InfiniBand")),
        # A channel line alone names the network, with no device list.
        ([NCCL_CHANNEL.format(gpu=0, net="IB/0")], False, ("pass", "NET/IB", "NET/IB", "NCCL used NET/IB")),
        ([NCCL_CHANNEL.format(gpu=0, net="Socket/0")], False,
         ("fail", "NET/Socket", "NET/IB", "NCCL used NET/Socket, not InfiniBand")),
        ([NCCL_PLUGIN, "node-1:30:30 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>"], True,
         ("fail", None, "NET/IB with GDRDMA", "no NET/ line in the NCCL log (run with NCCL_DEBUG=INFO)")),
    ],
)  # fmt: skip
def test_evaluate_nccl_transport_says_what_nccl_used(lines, require_gdrdma, result):
    status, measured, expected, reason = result
    assert acceptance.evaluate_nccl_transport(nccl_log(*lines), require_gdrdma) == acceptance.check_result(
        "nccl_transport", status, measured, expected, reason
    )


def test_evaluate_nccl_transport_of_no_log_names_the_reader():
    assert acceptance.evaluate_nccl_transport(42) == acceptance.check_result(
        "nccl_transport",
        "fail",
        None,
        "NET/IB with GDRDMA",
        "nccl_transport output could not be read: neither the command's output (text, lines or bytes) nor a "
        "nccl_transport result: a value of type int; line: 42",
    )


# ---- ibstatus, the driver's flavor, ib_write_bw: refusals and verdicts word for word --------------------------------

PORT = (
    "\tstate:\t\t 4: ACTIVE\n\tphys state:\t 5: LinkUp\n\trate:\t\t 100 Gb/sec (4X EDR)\n\tlink_layer:\t InfiniBand\n"
)


@pytest.mark.parametrize(
    ("text", "message", "line"),
    [
        ("\tstate:\t\t 4: ACTIVE\n" + HEAD, "output does not start with an 'Infiniband device' line",
         "\tstate:\t\t 4: ACTIVE"),
        (HEAD + "\tstate 4 ACTIVE\n", "not a port status line", "\tstate 4 ACTIVE"),
        (HEAD + "\tspeed:\t\t EDR\n", "not a port status line", "\tspeed:\t\t EDR"),
        (HEAD + "\trate:\t\t \n", "rate without a value", "\trate:\t\t "),
        # A port cut short, then the next port: the error is the first port's, at its last line.
        (HEAD + "\tstate:\t\t 4: ACTIVE\n" + HEAD.replace("mlx5_0", "mlx5_1") + PORT,
         "mlx5_0 port 1 ends without phys_state, rate, link_layer", "\tstate:\t\t 4: ACTIVE"),
        (HEAD + PORT + HEAD.replace("mlx5_0", "mlx5_1"), "mlx5_1 port 1 ends without state, phys_state, rate, "
         "link_layer", HEAD.replace("mlx5_0", "mlx5_1").rstrip("\n")),
    ],
)  # fmt: skip
def test_ibstatus_refuses_naming_the_line(text, message, line):
    assert refusal(acceptance.ibstatus, text)[:3] == ("ibstatus", message, line)


def test_ibstatus_reads_two_ports_in_order():
    ports = acceptance.ibstatus(HEAD + PORT + HEAD.replace("mlx5_0", "mlx5_1") + PORT.replace("100 Gb", "200 Gb"))
    assert [(p["ca"], p["port"], p["rate_gbps"]) for p in ports] == [("mlx5_0", 1, 100.0), ("mlx5_1", 1, 200.0)]
    assert acceptance.ibstatus("") == []


LICENSE_PROPRIETARY = "license:        NVIDIA\n"
NVRM_OPEN = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  535.261.03  Release Build  (dvs-builder@U16)\n"


@pytest.mark.parametrize(
    ("license_output", "expected", "version_output", "result"),
    [
        (None, None, None, ("na", None, None, "no driver flavor configured for this node")),
        ("", "open", None, ("fail", None, "open", "modinfo license output could not be read: no license in the "
                            "output; line: (empty output)")),
        # A flavor already read (the role's fact) is taken as it is.
        ("proprietary", "open", None, ("fail", "proprietary", "open", "proprietary modules loaded, expected open")),
        ("open", "open", None, ("pass", "open", "open", "open kernel modules")),
        (LICENSE_PROPRIETARY, "proprietary", NVRM_OPEN, ("fail", "proprietary", "proprietary",
                                                         "the module license says proprietary, its ID line says open")),
    ],
)  # fmt: skip
def test_evaluate_driver_flavor_word_for_word(license_output, expected, version_output, result):
    status, measured, expected_flavor, reason = result
    got = acceptance.evaluate_driver_flavor(license_output, expected, version_output)
    assert got == acceptance.check_result("driver_flavor", status, measured, expected_flavor, reason)


def test_evaluate_ib_write_bw_without_a_floor_or_a_report():
    assert acceptance.evaluate_ib_write_bw(output("ib-write-bw-redbook-004.txt"), None) == acceptance.not_applicable(
        "ib_write_bw", "no RDMA bandwidth threshold set"
    )
    assert acceptance.evaluate_ib_write_bw("", 11250) == acceptance.check_result(
        "ib_write_bw",
        "fail",
        None,
        11250.0,
        "ib_write_bw output could not be read: no bandwidth report; line: (empty output)",
    )


# ---- ib_write_bw: each column refused by name, a table cut short, the unmeasured clock ------------------------------

IB_HEADER = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
IB_RULE = "---------------------------------------------------------------------------------------"
IB_ROW = " 65536      5000           11300.40           11264.11             0.180226"


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (IB_ROW.replace("65536", "64K"), "#bytes is not an integer ('64K')"),
        (IB_ROW.replace("5000", "5e3"), "#iterations is not an integer ('5e3')"),
        (IB_ROW.replace("11300.40", "11300,40"), "BW peak is not a number ('11300,40')"),
        (IB_ROW.replace("11264.11", "n/a"), "BW average is not a number ('n/a')"),
        (IB_ROW.replace("0.180226", "0.18Mpps"), "MsgRate is not a number ('0.18Mpps')"),
        (" 65536      5000           11300.40", "a result row with fewer than 5 columns"),
    ],
)
def test_ib_write_bw_refuses_a_damaged_row_naming_its_column(row, message):
    assert refusal(acceptance.ib_write_bw, "\n".join([IB_RULE, IB_HEADER, row, IB_RULE]))[:3] == (
        "ib_write_bw",
        message,
        row,
    )


@pytest.mark.parametrize(
    ("lines", "message", "line"),
    [
        (["Couldn't connect to 10.77.1.1:18515", ""], "no bandwidth report", "Couldn't connect to 10.77.1.1:18515"),
        ([IB_RULE, IB_HEADER, IB_RULE, IB_ROW], "the report has a header and no result", IB_HEADER),
        ([IB_RULE, IB_HEADER, "", IB_RULE.replace("-", "_")], "the report has a header and no result", IB_HEADER),
    ],
)
def test_ib_write_bw_refuses_a_report_without_a_result(lines, message, line):
    assert refusal(acceptance.ib_write_bw, "\n".join(lines))[:3] == ("ib_write_bw", message, line)


def test_ib_write_bw_of_an_unmeasured_clock_is_refused_naming_perftest_s_line():
    assert refusal(acceptance.ib_write_bw, output("ib-write-bw-soft-roce-tcg-clock-unmeasured.txt"))[:3] == (
        "ib_write_bw",
        "perftest could not measure the CPU clock it times the transfer with (r^2 0.825887 < 0.9: a busy or emulated "
        "CPU), so its 0.00 is no measurement",
        "Correlation coefficient r^2: 0.825887 < 0.9",
    )


def test_hca_ports_of_no_output_names_both_readers():
    assert refusal(acceptance.hca_ports, 42)[:3] == (
        "ibstat/ibstatus",
        "expected the command's output as text, got int",
        "42",
    )


# ---- ibstat: a CA and its ports, and each way its output is refused --------------------------------------------------

IBSTAT_CA = "CA 'mlx5_0'\n\tCA type: MT4115\n\tNumber of ports: {ports}\n\tFirmware version: 12.28.2006\n"
IBSTAT_PORT = (
    "\tPort {port}:\n\t\tState: Active\n\t\tPhysical state: LinkUp\n\t\tRate: 100\n\t\tBase lid: 11\n"
    "\t\tLink layer: InfiniBand\n"
)


def test_ibstat_reads_a_dual_port_ca_and_its_ports_in_order():
    text = IBSTAT_CA.format(ports=2) + IBSTAT_PORT.format(port=1) + IBSTAT_PORT.format(port=2).replace("Active", "Down")
    ports = acceptance.ibstat(text)
    assert [(p["ca"], p["port"], p["state"], p["phys_state"]) for p in ports] == [
        ("mlx5_0", 1, "ACTIVE", "LinkUp"),
        ("mlx5_0", 2, "DOWN", "LinkUp"),
    ]
    # A CA may show one port more than it declares (the Redbook's ConnectX with its virtual port): still read.
    assert len(acceptance.ibstat(IBSTAT_CA.format(ports=1) + text[text.index("\tPort 1:") :])) == 2


@pytest.mark.parametrize(
    ("text", "message", "line"),
    [
        ("\tState: Active\n", "output does not start with a CA", "\tState: Active"),
        (IBSTAT_CA.format(ports=1) + "\tPort one:\n", "unknown CA field 'Port one'", "\tPort one:"),
        (IBSTAT_CA.format(ports=1) + "\tmlx5_0 is down\n", "not a 'key: value' line", "\tmlx5_0 is down"),
        (IBSTAT_CA.format(ports="1 (2 virtual)"), "the number of ports is not an integer ('1 (2 virtual)')",
         "\tNumber of ports: 1 (2 virtual)"),
        (IBSTAT_CA.format(ports=1) + "\tVendor: Mellanox\n", "unknown CA field 'Vendor'", "\tVendor: Mellanox"),
        (IBSTAT_CA.format(ports=1) + IBSTAT_PORT.format(port=1).replace("State: Active", "State: Sleeping"),
         "unknown port state 'Sleeping'", "\t\tState: Sleeping"),
        (IBSTAT_CA.format(ports=1) + IBSTAT_PORT.format(port=1).replace("LinkUp", "Linked"),
         "unknown physical state 'Linked'", "\t\tPhysical state: Linked"),
        # Ports declared and shown disagree, or none is shown: the CA's line is named.
        (IBSTAT_CA.format(ports=4) + IBSTAT_PORT.format(port=1), "mlx5_0 declares 4 ports and shows 1", "CA 'mlx5_0'"),
        (IBSTAT_CA.format(ports=1), "mlx5_0 declares 1 ports and shows 0", "CA 'mlx5_0'"),
        (IBSTAT_CA.format(ports=1) + "".join(IBSTAT_PORT.format(port=p) for p in (1, 2, 3)),
         "mlx5_0 declares 1 ports and shows 3", "CA 'mlx5_0'"),
        (IBSTAT_CA.format(ports=2) + IBSTAT_PORT.format(port=1) + IBSTAT_CA.format(ports=1).replace("mlx5_0", "mlx5_1")
         + IBSTAT_PORT.format(port=1), "mlx5_0 declares 2 ports and shows 1", "CA 'mlx5_0'"),
    ],
)  # fmt: skip
def test_ibstat_refuses_naming_the_line(text, message, line):
    assert refusal(acceptance.ibstat, text)[:3] == ("ibstat", message, line)


# ---- evaluate_gpus: every check's verdict word for word --------------------------------------------------------------

DGX1_SMI = output("nvidia-smi-query-gpu-dgx1.txt")


def test_evaluate_gpus_against_a_profile_that_pins_nothing():
    assert acceptance.evaluate_gpus(DGX1_SMI, None, "none", None) == [
        acceptance.not_applicable("gpu_count", "no GPU count in the profile"),
        acceptance.not_applicable("gpu_model", "no GPU model in the profile"),
        acceptance.check_result("gpu_persistence", "pass", "8/8", "8/8"),
        acceptance.not_applicable("gpu_ecc", "the profile does not set an ECC mode"),
        acceptance.check_result("gpu_retired_pages", "pass", "8/8", "8/8"),
        acceptance.not_applicable("gpu_remapped_rows", "no row remapper reported (before Ampere, or not queried)"),
    ]


def test_evaluate_gpus_of_gpus_that_report_nothing_and_of_ecc_unwanted():
    na = "\n".join(f"{i}, NVIDIA A10, 00000000:0{i}:00.0, [N/A], [N/A], [N/A]" for i in range(2))
    assert acceptance.evaluate_gpus(na, 2, "A10", True) == [
        acceptance.check_result("gpu_count", "pass", 2, 2, "2 GPUs visible to nvidia-smi"),
        acceptance.check_result("gpu_model", "pass", "NVIDIA A10", "A10", ""),
        acceptance.not_applicable("gpu_persistence", "persistence mode not reported"),
        acceptance.not_applicable("gpu_ecc", "these GPUs have no ECC ([N/A])"),
        acceptance.not_applicable(
            "gpu_retired_pages", "these GPUs do not retire pages ([N/A]; row remapping replaces it from Ampere on)"
        ),
        acceptance.not_applicable("gpu_remapped_rows", "no row remapper reported (before Ampere, or not queried)"),
    ]
    [ecc] = [r for r in acceptance.evaluate_gpus(DGX1_SMI, 8, "V100", False) if r["check"] == "gpu_ecc"]
    assert ecc == acceptance.check_result("gpu_ecc", "fail", "0/8", "8/8", "GPU 0, 1, 2, 3, 4, 5, 6, 7: ECC enabled")


def test_evaluate_gpus_names_every_model_that_is_not_the_profile_s():
    mixed = "0, Tesla V100-SXM2-16GB, 00000000:06:00.0, Enabled, Enabled, No\n" + (
        "1, NVIDIA A100-SXM4-40GB, 00000000:07:00.0, Enabled, Enabled, No\n"
        "2, NVIDIA A10, 00000000:08:00.0, Enabled, Enabled, No\n"
    )
    [model] = [r for r in acceptance.evaluate_gpus(mixed, 3, "A100") if r["check"] == "gpu_model"]
    assert model == acceptance.check_result(
        "gpu_model",
        "fail",
        "NVIDIA A10, NVIDIA A100-SXM4-40GB, Tesla V100-SXM2-16GB",
        "A100",
        "NVIDIA A10, Tesla V100-SXM2-16GB is not a A100",
    )


def test_evaluate_gpus_merges_the_remapped_rows_by_bus_id():
    """A failed remapping alone (pending [N/A]) is a failure; a GPU the remapped-rows query lacks keeps its own."""
    fields = (*acceptance.GPU_QUERY_FIELDS, "remapped_rows.pending", "remapped_rows.failure")
    smi = (
        "4, NVIDIA H100 80GB HBM3, 00000000:18:00.0, Enabled, Enabled, [N/A], [N/A], [N/A]\n"
        "7, NVIDIA H100 80GB HBM3, 00000000:2A:00.0, Enabled, Enabled, [N/A], [N/A], Yes\n"
    )
    gpus = acceptance.nvidia_smi_gpus(smi, fields)
    rows = "00000000:18:00.0, [N/A], Yes\n"
    [remap] = [r for r in acceptance.evaluate_gpus(gpus, 2, "H100", True, rows) if r["check"] == "gpu_remapped_rows"]
    assert remap == acceptance.check_result(
        "gpu_remapped_rows", "fail", "0/2", "2/2", "GPU 4, 7: row remapping pending or failed"
    )


def test_evaluate_hca_ports_finds_the_profile_s_port_and_says_what_is_wrong():
    text = (
        IBSTAT_CA.format(ports=2)
        + IBSTAT_PORT.format(port=1)
        + IBSTAT_PORT.format(port=2).replace("State: Active", "State: Down").replace("LinkUp", "Polling")
    )
    hcas = [
        {"name": "mlx5_0", "port": 2, "rate_gbps": 100, "link_layer": "InfiniBand"},
        {"name": "mlx5_0", "rate_gbps": 200, "link_layer": "Ethernet"},
        {"name": "mlx5_3", "rate_gbps": 100, "link_layer": "InfiniBand"},
    ]
    assert acceptance.evaluate_hca_ports(text, hcas, "dgx-1") == [
        acceptance.check_result(
            "hca_port[mlx5_0]", "fail", "DOWN 100 Gb/s InfiniBand", "ACTIVE 100 Gb/s InfiniBand", "state DOWN (Polling)"
        ),
        acceptance.check_result(
            "hca_port[mlx5_0]",
            "fail",
            "ACTIVE 100 Gb/s InfiniBand",
            "ACTIVE 200 Gb/s Ethernet",
            "rate 100.0 Gb/s, expected 200; link layer InfiniBand, expected Ethernet",
        ),
        acceptance.check_result(
            "hca_port[mlx5_3]", "fail", None, "ACTIVE 100 Gb/s InfiniBand", "mlx5_3 port 1 not found"
        ),
    ]


def test_evaluate_hca_ports_of_a_port_without_a_rate():
    text = HEAD + "\tstate:\t\t 4: ACTIVE\n\tphys state:\t 5: LinkUp\n\trate:\t\t unknown\n\tlink_layer:\t Ethernet\n"
    hcas = [{"name": "mlx5_0", "rate_gbps": 25, "link_layer": "Ethernet"}]
    assert acceptance.evaluate_hca_ports(text, hcas) == [
        acceptance.check_result(
            "hca_port[mlx5_0]",
            "fail",
            "ACTIVE None Gb/s Ethernet",
            "ACTIVE 25 Gb/s Ethernet",
            "rate None Gb/s, expected 25",
        )
    ]
    assert acceptance.evaluate_hca_ports(text, [], "lab") == [
        acceptance.not_applicable("hca_ports", "no HCA in profile lab")
    ]
    assert acceptance.evaluate_hca_ports(text, None) == [acceptance.not_applicable("hca_ports", "no HCA in profile")]


# ---- all_reduce_perf: each column and summary line refused by name; the verdicts of a run that cannot be judged -----

NCCL_HEAD = "#  size  count  type  redop  root  time  algbw  busbw #wrong  time  algbw  busbw #wrong"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        # A first column that is not a number is a line of NCCL's log, skipped; one of 31 digits is no size.
        (NCCL_ROW.replace("268435456", "9" * 31), f"size is not an integer ('{'9' * 31}')"),
        (NCCL_ROW.replace("67108864", "64M"), "count is not an integer ('64M')"),
        (NCCL_ROW.replace("  -1  ", "  0x1  "), "root is not an integer ('0x1')"),
        ("# Avg bus bandwidth    : fast", "Avg bus bandwidth is not a number ('fast')"),
        ("# Avg bus bandwidth", "unreadable average bus bandwidth"),
        ("# Out of bounds values : many OK", "unreadable out-of-bounds count"),
    ],
)
def test_nccl_all_reduce_refuses_a_damaged_line_naming_it(line, message):
    assert refusal(acceptance.nccl_all_reduce, "\n".join([NCCL_HEAD, NCCL_ROW, line]) + "\n")[:3] == (
        "all_reduce_perf",
        message,
        line,
    )


def test_nccl_all_reduce_reads_a_root_and_the_summary():
    row = NCCL_ROW.replace("  -1  ", "  3  ")
    table = acceptance.nccl_all_reduce(
        "\n".join([NCCL_HEAD, row, "# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 5.71 "]) + "\n"
    )
    assert (table["rows"][0]["root"], table["out_of_bounds"], table["avg_busbw"], table["complete"]) == (
        3,
        0,
        5.71,
        True,
    )
    assert refusal(acceptance.nccl_all_reduce, "# nThread 1 nGpus 8\n" + NCCL_HEAD + "\n")[:3] == (
        "all_reduce_perf",
        "no result rows",
        NCCL_HEAD,
    )


def test_nccl_all_reduce_reads_23_columns_timestamps_after_per_iteration_statistics():
    tokens = NCCL_ROW.split()
    wide = " ".join(
        [*tokens[:9], "1.0", "2.0", "3.0", "4.0", *tokens[9:], "5.0", "6.0", "7.0", "8.0", "2025-11-24", "12:00"]
    )
    assert len(wide.split()) == 23
    assert acceptance.nccl_all_reduce(wide)["rows"] == acceptance.nccl_all_reduce(NCCL_ROW)["rows"]


@pytest.mark.parametrize("evaluate", [acceptance.evaluate_nccl_busbw, acceptance.evaluate_nccl_latency])
def test_nccl_verdicts_of_a_run_that_cannot_be_judged(evaluate):
    check = evaluate.__name__.removeprefix("evaluate_")
    what = {"nccl_busbw": "bus bandwidth", "nccl_latency": "latency"}[check]
    assert evaluate(NCCL_ROW, None) == acceptance.not_applicable(check, f"no NCCL {what} threshold set")
    assert evaluate(NCCL_ROW, 5) == acceptance.check_result(
        check, "fail", None, 5.0, "all_reduce_perf ended after the 268435456-byte row, without its summary"
    )
    wrong = "\n".join([NCCL_ROW, "# Out of bounds values : 3 FAILED", "# Avg bus bandwidth    : 5.71"])
    assert evaluate(wrong, 5) == acceptance.check_result(
        check, "fail", None, 5.0, "all_reduce_perf found 3 wrong values"
    )
    assert evaluate("", 5) == acceptance.check_result(
        check, "fail", None, 5.0, "all_reduce_perf output could not be read: no result rows; line: (empty output)"
    )


def test_nvidia_smi_fields_beyond_the_known_ones_and_a_header_with_units():
    """A field the caller adds keeps its own name (dots as underscores); nvidia-smi's header names it with its unit."""
    text = "index, memory.used [MiB], clocks.max.sm [MHz]\n0, 1024 MiB, 1980 MHz\n"
    assert acceptance.nvidia_smi_gpus(text, ("index", "memory.used", "clocks.max.sm")) == [
        {"index": 0, "memory_used": "1024 MiB", "clocks_max_sm": "1980 MHz"}
    ]


@pytest.mark.parametrize(
    ("text", "message", "line"),
    [
        ("", "no GPU in the output", ""),
        (", ".join(acceptance.GPU_QUERY_FIELDS) + "\n", "a header and no GPU", ""),
        ("0, Tesla V100-SXM2-16GB, 00000000:06:00.0, Enabled\n", "4 values where 6 fields were asked for",
         "0, Tesla V100-SXM2-16GB, 00000000:06:00.0, Enabled"),
    ],
)  # fmt: skip
def test_nvidia_smi_without_a_gpu_row_is_refused(text, message, line):
    assert refusal(acceptance.nvidia_smi_gpus, text)[:3] == ("nvidia-smi --query-gpu", message, line)
