# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Resolve one role's settings through nodeforge's configuration model, on the controller."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.nodeforge.gpu.plugins.module_utils import model, settings

DOCUMENTATION = r"""
module: resolve_settings
short_description: A nodeforge role's effective settings (inventory, then profile, then manifest, then role default)
description:
  - Computes the settings of a nodeforge.gpu role from the host's variables, its hardware profile and the version
    manifest (with C(nodeforge_manifest_overrides) and each C(nodeforge_manifest_overrides_<suffix>) merged over it,
    in name order) through the collection's one configuration model
    (module_utils/model.py), the same one C(nodeforge check) and the validation play use, and returns them as the
    role's internal facts (C(__<role>_*)). Empty variables count as unset.
  - Before resolving, refuses the role's variables and the manifest overrides where a value would be unsafe in the
    file it lands in (a control character such as a newline anywhere, or a value that does not match its pattern in
    full), and a manifest override that is no mapping, with the same messages as C(nodeforge check).
  - Runs on the controller and contacts no node.
author: nodeforge
options:
  role:
    description: The role whose settings to resolve.
    type: str
    required: true
    choices: [nvidia_driver, ofed, gpudirect_rdma, nvidia_container_toolkit, selinux_modules]
  node:
    description: What the role probed on the node and the resolution needs (per role, see module_utils/settings.py).
    type: dict
    default: {}
attributes:
  check_mode:
    support: full
"""


class _Templated(Mapping):
    """The task's variables, each templated when read (as a task would see it)."""

    def __init__(self, templar: Any, variables: Mapping[str, Any]):
        self._templar = templar
        self._variables = variables

    def __getitem__(self, name: str) -> Any:
        return self._templar.template(self._variables[name])

    def __iter__(self) -> Iterator[str]:
        return iter(self._variables)

    def __len__(self) -> int:
        return len(self._variables)


class _ByName(dict):
    """On the node the variable's name is what to show as its origin (files are the CLI's business)."""

    def __missing__(self, name: str) -> str:
        return name

    def get(self, name: str, default: Any = None) -> str:
        return name


def _unsafe_values(role: str, variables: Mapping[str, Any]) -> str:
    """The role's variables and the manifest overrides checked as `nodeforge check` checks them
    (model.value_problems: full-match patterns, no control characters), before the role writes any of them."""
    found = []
    for name, spec in model.all_vars().items():
        if spec.role != role or name not in variables or model.is_manifest_overrides(name):
            continue
        for path, value, expected in model.value_problems(name, variables[name]):
            shown = "********" if spec.no_log else value
            found.append(f"{path}: found {shown}; expected {expected}")
    overrides = {name: variables[name] for name in model.manifest_override_names(variables)}
    for name, value, expected in model.manifest_override_problems(overrides):
        found.append(f"{name}: found {value}; expected {expected}")
    for name, value in overrides.items():
        for path, shown, expected in model.value_problems(name, value):
            found.append(f"{path}: found {shown}; expected {expected}")
    return "; ".join(found)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        resolver = settings.RESOLVERS.get(args.get("role", ""))
        if resolver is None:
            raise AnsibleActionFail(f"role must be one of {', '.join(settings.RESOLVERS)}; got {args.get('role')!r}")
        variables = _Templated(self._templar, task_vars)
        host = task_vars.get("inventory_hostname", "")
        unsafe = _unsafe_values(args["role"], variables)
        if unsafe:
            result.update(
                failed=True,
                changed=False,
                msg=f"{host}: {args['role']} refuses values unsafe in the files they land in: {unsafe}",
            )
            return result
        facts = resolver(model.HostModel(host, variables, _ByName()), args.get("node") or {})
        result.update(changed=False, ansible_facts=facts)
        return result
