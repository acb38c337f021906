# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The RDMA side of `nodeforge validate` pinned down word for word where test_acceptance.py and
test_acceptance_mutants.py look at parts: ibstat's CAs separated by blank lines and its FDR10 rate, each port line it
refuses (with the error's tool, message and line), ibstatus' port number, a perftest table with a blank line and a
rule of dashes and underscores, `grep -n` over the peer memory clients' versions, a profile whose first HCA is absent,
and the RDMA parsers refusing a value that is no command output, each naming its own tool."""

from __future__ import annotations

import pytest

from nodeforge import collection  # noqa: F401  (sets up the collection loader)
from tests.test_acceptance import output
from tests.test_acceptance_mutants import HEAD, IB_HEADER, IB_ROW, IB_RULE, IBSTAT_CA, IBSTAT_PORT
from tests.test_parsers import refusal

from ansible_collections.nodeforge.gpu.plugins.module_utils import acceptance  # isort: skip

# A ConnectX-3 (MT4099) port at FDR10: ibstat prints the rate with the speed's name behind it.
IBSTAT_FDR10 = (
    "CA 'mlx4_0'\n\tCA type: MT4099\n\tNumber of ports: 1\n\tFirmware version: 2.42.5000\n\tHardware version: 1\n"
    "\tNode GUID: 0x0002c90300a1b2c0\n\tSystem image GUID: 0x0002c90300a1b2c3\n\tPort 1:\n\t\tState: Active\n"
    "\t\tPhysical state: LinkUp\n\t\tRate: 40 (FDR10)\n\t\tBase lid: 3\n\t\tLMC: 0\n\t\tSM lid: 1\n"
    "\t\tCapability mask: 0x02514868\n\t\tPort GUID: 0x0002c90300a1b2c1\n\t\tLink layer: InfiniBand\n"
)


def test_ibstat_reads_cas_separated_by_blank_lines_and_an_fdr10_rate():
    """`ibstat mlx5_0; echo; ibstat mlx4_0`: a blank line is no end of the output."""
    text = "\n" + IBSTAT_CA.format(ports=1) + IBSTAT_PORT.format(port=1) + "\n\n" + IBSTAT_FDR10
    assert acceptance.ibstat(text) == [
        {
            "ca": "mlx5_0",
            "port": 1,
            "state": "ACTIVE",
            "phys_state": "LinkUp",
            "rate_gbps": 100.0,
            "link_layer": "InfiniBand",
        },
        {
            "ca": "mlx4_0",
            "port": 1,
            "state": "ACTIVE",
            "phys_state": "LinkUp",
            "rate_gbps": 40.0,
            "link_layer": "InfiniBand",
        },
    ]


PORT_ONE = IBSTAT_CA.format(ports=1) + IBSTAT_PORT.format(port=1)
HUGE = "9" * 31


@pytest.mark.parametrize(
    ("text", "message", "line"),
    [
        (PORT_ONE.replace("Rate: 100", "Rate: 100 Gb/sec"), "unreadable rate '100 Gb/sec'", "\t\tRate: 100 Gb/sec"),
        (PORT_ONE.replace("Rate: 100", "Rate: 40 (fdr10)"), "unreadable rate '40 (fdr10)'", "\t\tRate: 40 (fdr10)"),
        (PORT_ONE.replace("Link layer: InfiniBand", "Link layer: Infini"), "unknown link layer 'Infini'",
         "\t\tLink layer: Infini"),
        (PORT_ONE + "\t\tLink speed: EDR\n", "unknown port field 'Link speed'", "\t\tLink speed: EDR"),
        (IBSTAT_CA.format(ports=1) + f"\tPort {HUGE}:\n", f"the port number is not an integer ('{HUGE}')",
         f"\tPort {HUGE}:"),
        # Two lines run together: the first colon splits the key from its value, whatever the value holds.
        (PORT_ONE.replace("State: Active\n\t\t", "State: Active\t\t"),
         "unknown port state 'Active\\t\\tPhysical state: LinkUp'", "\t\tState: Active\t\tPhysical state: LinkUp"),
    ],
)  # fmt: skip
def test_ibstat_refuses_a_port_line_naming_tool_message_and_line(text, message, line):
    assert refusal(acceptance.ibstat, text) == ("ibstat", message, line, "")


def test_ibstatus_refuses_a_port_number_of_31_digits_naming_the_line():
    head = HEAD.replace("port 1", f"port {HUGE}").rstrip("\n")
    assert refusal(acceptance.ibstatus, head + "\n\tstate:\t\t 4: ACTIVE\n") == (
        "ibstatus",
        f"the port is not an integer ('{HUGE}')",
        head,
        "",
    )


REGISTERED = {"rc": 0, "stdout": "", "stdout_lines": []}


@pytest.mark.parametrize(
    ("parser", "tool"),
    [
        (acceptance.ibstat, "ibstat"),
        (acceptance.ibstatus, "ibstatus"),
        (acceptance.ib_write_bw, "ib_write_bw"),
        (acceptance.ofed_info, "ofed_info -s"),
        (acceptance.memory_peers_version, "/sys/kernel/mm/memory_peers/*/version"),
    ],
)
def test_rdma_parsers_refuse_a_registered_result_in_place_of_its_output_naming_their_tool(parser, tool):
    assert refusal(parser, REGISTERED) == (
        tool,
        "expected the command's output as text, got dict",
        "{'rc': 0, 'stdout': '', 'stdout_lines': []}",
        "",
    )


def test_ib_write_bw_reads_rows_after_a_blank_line_up_to_a_rule_of_dashes_and_underscores():
    report = "\n".join([IB_RULE, IB_HEADER, "", IB_ROW, "-" * 40 + "_" * 47])
    row = {
        "bytes": 65536,
        "iterations": 5000,
        "bw_peak": 11300.4,
        "bw_avg": 11264.11,
        "bw_peak_mbs": 11849.33,
        "bw_avg_mbs": 11811.28,
        "msg_rate_mpps": 0.180226,
    }
    assert acceptance.ib_write_bw(report) == {**row, "unit": "MB/sec", "rows": [row]}


def test_memory_peers_version_of_grep_n_reads_the_version_after_the_last_colon():
    """`grep -n . /sys/kernel/mm/memory_peers/*/version` prints PATH:LINE:VERSION."""
    text = "".join(f"/sys/kernel/mm/memory_peers/{client}/version:1:535.261.03\n" for client in ("nv_mem", "nv_mem_nc"))
    assert acceptance.memory_peers_version(text) == "535.261.03"


def test_evaluate_hca_ports_judges_every_hca_after_one_that_is_absent():
    hcas = [
        {"name": "mlx5_9", "rate_gbps": 100, "link_layer": "InfiniBand"},
        {"name": "mlx5_2", "rate_gbps": 100, "link_layer": "InfiniBand"},
    ]
    assert acceptance.evaluate_hca_ports(output("ibstat-dgx1-edr.txt"), hcas, "dgx-1") == [
        {
            "check": "hca_port[mlx5_9]",
            "status": "fail",
            "measured": None,
            "expected": "ACTIVE 100 Gb/s InfiniBand",
            "reason": "mlx5_9 port 1 not found",
            "unit": None,
        },
        {
            "check": "hca_port[mlx5_2]",
            "status": "pass",
            "measured": "ACTIVE 100 Gb/s InfiniBand",
            "expected": "ACTIVE 100 Gb/s InfiniBand",
            "reason": "",
            "unit": None,
        },
    ]
