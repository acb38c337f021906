"""`nodeforge check`: static inventory validation, before any node is touched.

The check itself lives in the nodeforge.gpu collection (plugins/plugin_utils/inventory_check.py), where the
validation play that opens every playbook runs it too: the CLI and a plain ansible-playbook or AWX run refuse an
inventory with the same messages. Ansible reads the inventory (InventoryManager, VariableManager, vault).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from nodeforge.collection import inventory_check

CheckInputError = inventory_check.CheckInputError
Problem = inventory_check.Problem
plain = inventory_check.plain


def check_inventory(
    path: str | Path | Sequence[str | Path],
    extravars: dict | None = None,
    extra_vars: Sequence[str] = (),
    vault_ids: Sequence[str] = (),
    vault_password_files: Sequence[str] = (),
    ask_vault_pass: bool = False,
) -> list[Problem]:
    """Every problem of the inventory source(s) at once. `extra_vars` are -e strings as ansible-playbook takes
    them; `extravars`, an already parsed mapping, is applied over them."""
    sources = [str(p) for p in path] if isinstance(path, (list, tuple)) else [str(path)]
    view = inventory_check.load(
        sources,
        extra_vars=list(extra_vars),
        vault_ids=vault_ids,
        vault_password_files=vault_password_files,
        ask_vault_pass=ask_vault_pass,
    )
    if extravars:
        view.variable_manager._extra_vars = {**view.variable_manager.extra_vars, **extravars}
        view.extra = [
            inventory_check.Definition(str(k), v, inventory_check.EXTRA_VARS, "all hosts")
            for k, v in view.variable_manager.extra_vars.items()
        ]
    return inventory_check.check(view)
