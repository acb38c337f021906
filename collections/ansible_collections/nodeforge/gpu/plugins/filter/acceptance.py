# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Filters over module_utils.acceptance: `nodeforge validate`'s output parsers and check evaluators."""

from __future__ import annotations

from ansible_collections.nodeforge.gpu.plugins.plugin_utils.filter_errors import ModuleUtils, reraise_as_filter_error

acceptance = ModuleUtils("acceptance")

DOCUMENTATION = r"""
name: acceptance_ib_write_bw
short_description: nodeforge.gpu acceptance checks (node tools' output parsers and check evaluators)
description:
  - C(acceptance_nvidia_driver_version), C(acceptance_module_license_flavor), C(acceptance_nvidia_smi_gpus),
    C(acceptance_nvidia_smi_remapped_rows), C(acceptance_ofed_info), C(acceptance_ibstat), C(acceptance_ibstatus),
    C(acceptance_hca_ports), C(acceptance_ib_write_bw), C(acceptance_nccl_all_reduce), C(acceptance_nccl_transport),
    C(acceptance_dcgmi_diag), C(acceptance_systemd_memlock) and C(acceptance_memory_peers_version) parse a command's
    output into plain data; output they cannot read fails the task with an error that names the parser's tool, what
    was wrong and the offending line.
  - C(acceptance_rdma_threshold_mbs) is the default ib_write_bw floor, 90% of a line rate in Gb/s, in MB/s.
  - The C(acceptance_evaluate_*) filters turn output and expectations into check results
    (check, status pass/fail/na, measured, expected, reason, unit); unreadable output is a failed check, not an error.
  - C(acceptance_not_applicable) is the check result (status na) of a check that does not apply to the node, with why
    (its input is the check's name, then the reason and optionally what was expected).
author: nodeforge
options:
  _input:
    description: A command's output (stdout, or stdout_lines), or for acceptance_rdma_threshold_mbs a rate in Gb/s.
    type: raw
    required: true
"""

PARSERS = (
    "nvidia_driver_version",
    "module_license_flavor",
    "nvidia_smi_gpus",
    "nvidia_smi_remapped_rows",
    "ofed_info",
    "ibstat",
    "ibstatus",
    "hca_ports",
    "ib_write_bw",
    "rdma_threshold_mbs",
    "nccl_all_reduce",
    "nccl_transport",
    "dcgmi_diag",
    "systemd_memlock",
    "memory_peers_version",
)

EVALUATORS = (
    "evaluate_driver_version",
    "evaluate_driver_flavor",
    "evaluate_gpus",
    "evaluate_ofed",
    "evaluate_hca_ports",
    "evaluate_ib_write_bw",
    "evaluate_nccl_busbw",
    "evaluate_nccl_latency",
    "evaluate_nccl_transport",
    "evaluate_dcgm_diag",
    "evaluate_memlock",
    "evaluate_memory_peers",
    "not_applicable",
)


_fail = reraise_as_filter_error(acceptance, "ParseError")


class FilterModule:
    def filters(self):
        parsers = {f"acceptance_{name}": _fail(getattr(acceptance, name)) for name in PARSERS}
        return {**parsers, **{f"acceptance_{name}": getattr(acceptance, name) for name in EVALUATORS}}
