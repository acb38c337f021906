"""The one schema: every role's meta/argument_specs.yml, as `nodeforge check`, the docs and `init` read it.

The loader lives in the collection (module_utils/model.py), where the validation play reads the same files."""

from __future__ import annotations

from nodeforge.collection import model

GLOBAL_PREFIX = model.GLOBAL_PREFIX
VarSpec = model.VarSpec
RoleSpec = model.RoleSpec
load_role_spec = model.load_role_spec


def role_specs() -> dict[str, model.RoleSpec]:
    return model.role_specs()


def all_vars() -> dict[str, model.VarSpec]:
    return model.all_vars()


def prefixes() -> tuple[str, ...]:
    return model.prefixes()
