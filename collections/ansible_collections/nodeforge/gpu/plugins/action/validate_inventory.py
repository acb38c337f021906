# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The validation play's check: `nodeforge check` on the running playbook's own inventory, on the controller."""

from __future__ import annotations

from ansible.plugins.action import ActionBase
from ansible_collections.nodeforge.gpu.plugins.plugin_utils import inventory_check

DOCUMENTATION = r"""
module: validate_inventory
short_description: Refuse an inventory that nodeforge check refuses
description:
  - Runs the checks of C(nodeforge check) (argument specs of every role, hardware profiles, cross-variable rules)
    on the inventory, group_vars, host_vars and extra vars of the running playbook, and fails listing every
    problem. The first play of every nodeforge.gpu playbook runs it, so that ansible-playbook and AWX refuse an
    inventory exactly as the CLI does, before any node task.
  - Runs on the controller and contacts no node; use it with C(run_once).
author: nodeforge
options: {}
attributes:
  check_mode:
    support: full
"""

RETURN = r"""
problems:
  description: Each problem (where, scope, variable, found, expected).
  returned: always
  type: list
  elements: dict
"""


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        view = inventory_check.InventoryView.from_hostvars(task_vars["hostvars"])
        problems, warnings = inventory_check.check_with_warnings(view)
        result["changed"] = False
        result["problems"] = [p.as_dict() for p in problems]
        if warnings:
            # Shown by ansible-playbook as [WARNING] lines (AWX too); the run goes on.
            result["warnings"] = [f"nodeforge check: {w}" for w in warnings]
        if problems:
            result["failed"] = True
            result["msg"] = (
                f"nodeforge check: {len(problems)} problem(s) in the inventory; no node was touched:\n"
                + "\n".join(f"- {p}" for p in problems)
            )
        else:
            result["msg"] = f"the inventory is valid ({', '.join(view.sources)})"
        return result
