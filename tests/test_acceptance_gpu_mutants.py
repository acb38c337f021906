# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""`nodeforge validate`'s GPU-side parsers and evaluators (module_utils/acceptance.py) pinned down word for word where
test_acceptance.py and test_acceptance_mutants.py leave room: the tool each parser names when it refuses a value that
is no output, None read as no output, the NVRM line, the compiler line and the module license read whole, the
out-of-bounds count of all_reduce_perf at the length limit of a count, dcgmi's table cut before its first test, the
remapped-rows query's pending remapping, parsed GPU rows without a name, and check_result's refusal of a status."""

from __future__ import annotations

import pytest

from nodeforge import collection  # noqa: F401  (sets up the collection loader)
from tests.test_acceptance import output
from tests.test_parsers import refusal

from ansible_collections.nodeforge.gpu.plugins.module_utils import acceptance  # isort: skip

VERSION_FILE = "/proc/driver/nvidia/version"
NVRM_580 = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (nixbld@)  "


# ---- every parser names its tool when it refuses a value that is no command output ----------------------------------


@pytest.mark.parametrize(
    ("parser", "tool"),
    [
        (acceptance.nvidia_driver_version, VERSION_FILE),
        (acceptance.module_license_flavor, "modinfo license"),
        (acceptance.nvidia_smi_gpus, "nvidia-smi --query-gpu"),
        (acceptance.nvidia_smi_remapped_rows, "nvidia-smi --query-remapped-rows"),
        (acceptance.nccl_all_reduce, "all_reduce_perf"),
        (acceptance.nccl_transport, "NCCL log"),
        (acceptance.dcgmi_diag, "dcgmi diag"),
    ],
    ids=lambda value: getattr(value, "__name__", None),
)
def test_a_parser_given_a_number_for_output_names_its_tool(parser, tool):
    assert refusal(parser, 12) == (tool, "expected the command's output as text, got int", "12", "")


# ---- None is no output -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("parser", "error"),
    [
        (acceptance.systemd_memlock, ("systemctl show -p LimitMEMLOCK", "no output", "", "")),
        (
            acceptance.nvidia_driver_version,
            (VERSION_FILE, "no 'NVRM version:' line (is the nvidia module loaded?)", "", ""),
        ),
        (acceptance.module_license_flavor, ("modinfo license", "no license in the output", "", "")),
        (acceptance.nvidia_smi_gpus, ("nvidia-smi --query-gpu", "no GPU in the output", "", "")),
    ],
    ids=lambda value: getattr(value, "__name__", None),
)
def test_none_is_read_as_no_output(parser, error):
    assert refusal(parser, None) == error


def test_an_nccl_log_of_none_names_no_network_and_no_gpudirect_rdma():
    assert acceptance.nccl_transport(None) == {
        "net": None,
        "devices": [],
        "connections": 0,
        "gdrdma_connections": 0,
        "gdrdma": False,
    }


# ---- /proc/driver/nvidia/version and the module license ----------------------------------------------------------


def test_driver_version_of_an_nvrm_line_cut_inside_the_version_is_refused_word_for_word():
    cut = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.26"
    assert refusal(acceptance.nvidia_driver_version, cut + "\n") == (
        VERSION_FILE,
        "unreadable NVRM version line",
        cut,
        "",
    )


@pytest.mark.parametrize(
    ("gcc_line", "gcc"),
    [
        (None, ""),
        ("GCC version:  gcc version 15.3.0 (GCC) ", "gcc version 15.3.0 (GCC)"),
        # The compiler line is kept whole after its tag, colons included.
        (
            "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14+deb12u1) (build: 2025-06-14T16:05:50)",
            "gcc version 12.2.0 (Debian 12.2.0-14+deb12u1) (build: 2025-06-14T16:05:50)",
        ),
    ],
    ids=["no-compiler-line", "h200-vm", "colons-in-the-compiler-line"],
)
def test_driver_version_reads_the_whole_compiler_line_or_none(gcc_line, gcc):
    text = NVRM_580 + "\n" + (gcc_line + "\n" if gcc_line is not None else "")
    assert acceptance.nvidia_driver_version(text) == {
        "version": "580.159.04",
        "flavor_hint": "open",
        "raw": NVRM_580,
        "gcc": gcc,
    }


def test_driver_version_of_the_h200_vm_file():
    assert acceptance.nvidia_driver_version(output("proc-driver-nvidia-version-580-open-h200-vm.txt")) == {
        "version": "580.159.04",
        "flavor_hint": "open",
        "raw": NVRM_580,
        "gcc": "gcc version 15.3.0 (GCC)",
    }


def test_module_license_is_the_whole_value_after_the_tag():
    """What follows "license:" is the license, with or without modinfo's padding, colons and all."""
    assert acceptance.module_license_flavor("license:NVIDIA\n") == "proprietary"
    assert acceptance.module_license_flavor("license:Dual MIT/GPL\n") == "open"
    line = "license:        NVIDIA: see the LICENSE file"
    assert refusal(acceptance.module_license_flavor, "filename:       /lib/modules/x/nvidia.ko\n" + line + "\n") == (
        "modinfo license",
        "not an NVIDIA module license ('NVIDIA: see the LICENSE file')",
        line,
        "",
    )


# ---- all_reduce_perf --------------------------------------------------------------------------------------------

NCCL_TABLE = output("nccl-all-reduce-perf-16x1-nccl-tests-format.txt")


def test_nccl_all_reduce_reads_an_out_of_bounds_count_of_30_digits_and_refuses_31():
    thirty = "9" * 30
    table = acceptance.nccl_all_reduce(
        NCCL_TABLE.replace("# Out of bounds values : 0 OK", f"# Out of bounds values : {thirty} FAILED")
    )
    assert (table["out_of_bounds"], table["avg_busbw"], table["complete"]) == (int(thirty), 1.93019, True)
    line = f"# Out of bounds values : {thirty}9 FAILED"
    assert refusal(acceptance.nccl_all_reduce, NCCL_TABLE.replace("# Out of bounds values : 0 OK", line)) == (
        "all_reduce_perf",
        f"Out of bounds values is not an integer ('{thirty}9')",
        line,
        "",
    )


def test_nccl_all_reduce_refuses_a_row_of_an_unknown_layout_word_for_word():
    [row] = [line for line in NCCL_TABLE.splitlines() if line.split()[:2] == ["8", "2"]]
    damaged = row + "  x"
    assert refusal(acceptance.nccl_all_reduce, NCCL_TABLE.replace(row + "\n", damaged + "\n", 1)) == (
        "all_reduce_perf",
        "a result row of 14 columns",
        damaged,
        "",
    )


def test_nccl_all_reduce_summary_is_a_line_marked_with_hashes_only():
    """A summary whose '#' mark is followed by other text is no summary: the run reads as cut short."""
    damaged = NCCL_TABLE.replace("# Avg bus bandwidth    : 1.93019", "#XAvg bus bandwidth    : 1.93019")
    table = acceptance.nccl_all_reduce(damaged)
    assert (table["avg_busbw"], table["out_of_bounds"], table["complete"], len(table["rows"])) == (None, 0, False, 26)
    marked = NCCL_TABLE.replace("# Avg bus bandwidth    : 1.93019", "### Avg bus bandwidth    : 1.93019")
    assert acceptance.nccl_all_reduce(marked)["avg_busbw"] == 1.93019


# ---- dcgmi diag ---------------------------------------------------------------------------------------------------

DCGM_TOP = [
    "Successfully ran diagnostic for group.",
    "+---------------------------+------------------------------------------------+",
    "| Diagnostic                | Result                                         |",
    "+===========================+================================================+",
]


@pytest.mark.parametrize(
    ("lines", "message", "line"),
    [
        (DCGM_TOP[:1], "the table ends without its closing border", DCGM_TOP[0]),
        (DCGM_TOP, "no test results", DCGM_TOP[3]),
    ],
    ids=["no-table", "cut-after-the-header"],
)
def test_dcgmi_diag_without_a_test_row_is_refused_naming_its_last_line(lines, message, line):
    text = "\n".join(lines) + "\n"
    assert refusal(acceptance.dcgmi_diag, text) == ("dcgmi diag", message, line, "")
    assert acceptance.evaluate_dcgm_diag(text) == acceptance.check_result(
        "dcgm_diag", "fail", None, "Pass", f"dcgmi diag output could not be read: {message}; line: {line}"
    )


# ---- evaluate_gpus ------------------------------------------------------------------------------------------------

H200 = output("nvidia-smi-query-gpu-h200-vm.txt")


@pytest.mark.parametrize(
    ("rows", "remap"),
    [
        ("00000000:00:06.0, No, No\n", acceptance.check_result("gpu_remapped_rows", "pass", "1/1", "1/1")),
        (
            "00000000:00:06.0, Yes, No\n",
            acceptance.check_result(
                "gpu_remapped_rows", "fail", "0/1", "1/1", "GPU 0: row remapping pending or failed"
            ),
        ),
        (
            "00000000:00:06.0, Yes, [N/A]\n",
            acceptance.check_result(
                "gpu_remapped_rows", "fail", "0/1", "1/1", "GPU 0: row remapping pending or failed"
            ),
        ),
    ],
    ids=["none", "pending", "pending-failure-not-reported"],
)
def test_evaluate_gpus_fails_a_pending_row_remapping(rows, remap):
    assert acceptance.evaluate_gpus(H200, 1, "H200", True, rows) == [
        acceptance.check_result("gpu_count", "pass", 1, 1, "1 GPUs visible to nvidia-smi"),
        acceptance.check_result("gpu_model", "pass", "NVIDIA H200", "H200", ""),
        acceptance.check_result("gpu_persistence", "pass", "1/1", "1/1"),
        acceptance.check_result("gpu_ecc", "pass", "1/1", "1/1"),
        acceptance.not_applicable(
            "gpu_retired_pages", "these GPUs do not retire pages ([N/A]; row remapping replaces it from Ampere on)"
        ),
        remap,
    ]


def test_evaluate_gpus_of_parsed_rows_without_a_name_measures_an_empty_model():
    """GPUs queried without the name field: the model measured is empty, and the reason says no name was reported."""
    gpus = acceptance.nvidia_smi_gpus(
        "0, 00000000:00:06.0, Enabled, Enabled, [N/A]\n",
        "index,pci.bus_id,persistence_mode,ecc.mode.current,retired_pages.pending",
    )
    assert acceptance.evaluate_gpus(gpus, 1, "H200", True) == [
        acceptance.check_result("gpu_count", "pass", 1, 1, "1 GPUs visible to nvidia-smi"),
        acceptance.check_result("gpu_model", "fail", "", "H200", "(no name reported) is not a H200"),
        acceptance.check_result("gpu_persistence", "pass", "1/1", "1/1"),
        acceptance.check_result("gpu_ecc", "pass", "1/1", "1/1"),
        acceptance.not_applicable(
            "gpu_retired_pages", "these GPUs do not retire pages ([N/A]; row remapping replaces it from Ampere on)"
        ),
        acceptance.not_applicable("gpu_remapped_rows", "no row remapper reported (before Ampere, or not queried)"),
    ]


# ---- check results ------------------------------------------------------------------------------------------------


def test_check_result_refuses_a_status_it_does_not_know_naming_it():
    with pytest.raises(ValueError) as refused:
        acceptance.check_result("gpu_count", "passed")
    assert str(refused.value) == "status must be pass, fail or na, not 'passed'"
