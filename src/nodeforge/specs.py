"""The one schema: every role's meta/argument_specs.yml, as `nodeforge check` and the docs read it."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from nodeforge import content

# Variables without a role of their own that still carry nodeforge meaning.
GLOBAL_PREFIX = "nodeforge_"


@dataclass(frozen=True)
class VarSpec:
    name: str
    role: str
    spec: dict[str, Any]

    @property
    def type(self) -> str:
        return self.spec.get("type", "str")

    @property
    def choices(self) -> list[Any] | None:
        return self.spec.get("choices")

    @property
    def required(self) -> bool:
        return bool(self.spec.get("required", False))

    @property
    def default(self) -> Any:
        return self.spec.get("default")

    @property
    def description(self) -> str:
        desc = self.spec.get("description", "")
        return " ".join(desc) if isinstance(desc, list) else str(desc)


@dataclass(frozen=True)
class RoleSpec:
    role: str
    path: Path
    short_description: str
    options: dict[str, VarSpec]


def load_role_spec(role_dir: Path) -> RoleSpec | None:
    spec_file = role_dir / "meta" / "argument_specs.yml"
    if not spec_file.is_file():
        return None
    data = yaml.safe_load(spec_file.read_text()) or {}
    main = (data.get("argument_specs") or {}).get("main") or {}
    options = {name: VarSpec(name, role_dir.name, spec or {}) for name, spec in (main.get("options") or {}).items()}
    return RoleSpec(role_dir.name, spec_file, main.get("short_description", ""), options)


@cache
def role_specs(roles_dir: Path | None = None) -> dict[str, RoleSpec]:
    roles_dir = roles_dir or content.roles_dir()
    result = {}
    for role_dir in sorted(p for p in roles_dir.iterdir() if p.is_dir()):
        spec = load_role_spec(role_dir)
        if spec:
            result[spec.role] = spec
    return result


@cache
def all_vars() -> dict[str, VarSpec]:
    return {name: v for spec in role_specs().values() for name, v in spec.options.items()}


@cache
def prefixes() -> tuple[str, ...]:
    """Variable prefixes that are ours: one per role, plus the cross-role `nodeforge_`."""
    return tuple(sorted({f"{role}_" for role in role_specs()} | {GLOBAL_PREFIX}, key=len, reverse=True))
