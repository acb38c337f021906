# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Filters over module_utils.upgrade: a node's upgrade plan, its state record, the modules and jobs it waits on."""

from __future__ import annotations

from ansible_collections.nodeforge.gpu.plugins.plugin_utils.filter_errors import ModuleUtils, reraise_as_filter_error

upgrade = ModuleUtils("upgrade")

DOCUMENTATION = r"""
name: upgrade_node_plan
short_description: nodeforge.gpu rolling-upgrade filters (node plan, state record, modules, GPU pods)
description:
  - C(upgrade_node_plan) computes a node's plan from the versions found (the input, component to installed and
    target) - action todo, current or refused (with the reasons), per component upgrade, downgrade, current or
    refused. Arguments - the component (driver, ofed, toolkit or stack), the node's state file text, whether
    downgrades are allowed, whether the run resumes, and the units an upgrade stops (a record naming others, or one
    that does not fit an upgrade's schedule, refuses the node).
  - C(upgrade_state_record) builds the node's state file record - the state (the input), the component, the step,
    the plan, an optional message and extra keys.
  - C(upgrade_modules_to_unload) lists the driver's loaded modules (the input is /proc/modules) in unload order.
  - C(upgrade_gpu_pods) lists the pods (k8s_info resources, the input) that hold GPUs, DaemonSet pods left out.
  - C(upgrade_roles) names the roles a component's install step runs, in the node stack's order. Optional argument -
    the node's nvidia_container_toolkit_runtimes; empty leaves the toolkit's role out unless the component is the
    toolkit (a node without a container runtime).
  - C(upgrade_batch_size) sizes the upgrade play's batches - the input is the number of targeted nodes; arguments -
    upgrade_batch and upgrade_max_unavailable (a percentage of the targeted nodes or a count), which wins when set.
author: nodeforge
options:
  _input:
    description: Versions found, a state, /proc/modules, pods or a component, as each filter says.
    type: raw
    required: true
"""


_fail = reraise_as_filter_error(upgrade, "UpgradeError")


class FilterModule:
    def filters(self):
        return {
            "upgrade_node_plan": _fail(upgrade.node_plan),
            "upgrade_state_record": _fail(upgrade.state_record),
            "upgrade_modules_to_unload": upgrade.loaded_in_order,
            "upgrade_gpu_pods": upgrade.gpu_pods,
            "upgrade_roles": _fail(upgrade.install_roles),
            "upgrade_batch_size": _fail(upgrade.play_batch_size),
        }
