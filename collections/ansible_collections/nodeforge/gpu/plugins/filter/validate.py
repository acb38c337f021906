# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Filters over module_utils.validate: what role nodeforge.gpu.validate needs before its report."""

from __future__ import annotations

from ansible_collections.nodeforge.gpu.plugins.plugin_utils.filter_errors import ModuleUtils

validate = ModuleUtils("validate")

DOCUMENTATION = r"""
name: validate_rdma_pairs
short_description: nodeforge.gpu validate helpers (ib_write_bw pairs and thresholds, probe sections)
description:
  - C(validate_rdma_pairs) pairs the play's hosts for ib_write_bw, a list of dicts with keys server and client; its
    argument maps hosts to their validate_rdma_peer; hosts without one pair up in the order given (the inventory's).
  - C(validate_sections) splits a nodeforge validate probe's stdout into a dict of sections, each with output and rc.
  - C(validate_selinux_store) names the SELinux policy store the runtime probe found ("" for none).
  - C(validate_tools) lists the performance tools (all_reduce_perf, dcgmi, ib_write_bw) the driver probe found.
  - C(validate_ib_write_bw_runs) adds an attempt's client loop results (its argument) to the client's ib_write_bw runs
    by HCA name (the input, a dict; none at first), counting each HCA's runs in C(attempt).
  - C(validate_ib_write_bw_todo) names the HCAs of its argument still to run ib_write_bw on, given the runs so far
    (the input), which are those without a run and those whose last run could not measure perftest's CPU clock.
author: nodeforge
options:
  _input:
    description: The play's hosts in inventory order, a probe's stdout, or a client's ib_write_bw runs.
    type: raw
    required: true
"""


class FilterModule:
    def filters(self):
        return {
            "validate_rdma_pairs": validate.rdma_pairs,
            "validate_sections": validate.sections,
            "validate_selinux_store": validate.selinux_store,
            "validate_tools": validate.tools,
            "validate_ib_write_bw_runs": validate.ib_write_bw_runs,
            "validate_ib_write_bw_todo": validate.ib_write_bw_todo,
        }
