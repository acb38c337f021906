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


def load(
    path: str | Path | Sequence[str | Path],
    extra_vars: Sequence[str] = (),
    vault_ids: Sequence[str] = (),
    vault_password_files: Sequence[str] = (),
) -> inventory_check.InventoryView:
    """The inventory source(s) and -e strings as ansible-playbook reads them, with one loader that holds the vault
    secrets: the check runs on it, and the run takes its extra vars from it."""
    sources = [str(p) for p in path] if isinstance(path, (list, tuple)) else [str(path)]
    return inventory_check.load(
        sources, extra_vars=list(extra_vars), vault_ids=vault_ids, vault_password_files=vault_password_files
    )


def check_inventory(
    path: str | Path | Sequence[str | Path],
    extra_vars: Sequence[str] = (),
    vault_ids: Sequence[str] = (),
    vault_password_files: Sequence[str] = (),
) -> list[Problem]:
    """Every problem of the inventory source(s) at once."""
    return inventory_check.check(load(path, extra_vars, vault_ids, vault_password_files))
