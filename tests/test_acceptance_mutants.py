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
