# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The validation play's check: `nodeforge check` on the running playbook's own inventory, on the controller."""

from __future__ import annotations

import os
import time

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
  - Started by the nodeforge CLI, which checks the inventory itself while ansible-playbook starts, it also waits for
    the CLI's verdict (the file named by C(NODEFORGE_CHECK_GATE), written by the process C(NODEFORGE_CHECK_GATE_PID))
    and fails unless the CLI's check passed.
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


GATE_ENV = "NODEFORGE_CHECK_GATE"
GATE_PID_ENV = "NODEFORGE_CHECK_GATE_PID"
GATE_TIMEOUT_S = 600
GATE_POLL_S = 0.01


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def cli_verdict(environ=None, timeout_s: float = GATE_TIMEOUT_S) -> str | None:
    """The nodeforge CLI's verdict on this run's inventory ("pass", or why not), None when no CLI gates the run."""
    environ = os.environ if environ is None else environ
    path = environ.get(GATE_ENV)
    if not path:
        return None
    pid = int(environ.get(GATE_PID_ENV) or 0)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with open(path, encoding="utf-8") as handle:
                return handle.read().strip() or "an empty verdict"
        except FileNotFoundError:
            pass
        if pid and not _alive(pid):
            return f"the nodeforge CLI (pid {pid}) ended without a verdict"
        if time.monotonic() > deadline:
            return f"no verdict from the nodeforge CLI in {timeout_s:.0f} s"
        time.sleep(GATE_POLL_S)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        view = inventory_check.InventoryView.from_task_vars(self._loader, task_vars)
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
        verdict = cli_verdict()
        if verdict not in (None, "pass") and not problems:
            result["failed"] = True
            result["msg"] = (
                f"nodeforge check: the nodeforge CLI did not pass the inventory ({verdict}); no node was touched"
            )
        return result
