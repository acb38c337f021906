"""`nodeforge check`: static inventory validation, before any node is touched.

Reports every problem at once, each naming the file, the group or host, the variable, what was found and what
was expected. Sources of truth: the roles' meta/argument_specs.yml (types, choices, required), the hardware
profiles and the version manifest (via nodeforge.content), and the cross-variable rules in nodeforge.rules.
"""

from __future__ import annotations

import difflib
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodeforge import content, rules, specs
from nodeforge.inventory import Definition, Inventory

WORKER_GROUP = "gpu_nodes"
BOOL_STRINGS = {"yes", "no", "true", "false", "on", "off", "1", "0", "y", "n"}


@dataclass(frozen=True)
class Problem:
    where: str  # a file (with line when known), or the inventory path
    scope: str  # "group gpu_nodes", "host node-01", "hosts node-01, node-02"
    variable: str  # may be "" for inventory-level problems
    found: str
    expected: str

    def __str__(self) -> str:
        parts = [self.where, self.scope]
        if self.variable:
            parts.append(self.variable)
        return ": ".join(p for p in parts if p) + f": found {self.found}; expected {self.expected}"

    def as_dict(self) -> dict[str, str]:
        return {
            "where": self.where,
            "scope": self.scope,
            "variable": self.variable,
            "found": self.found,
            "expected": self.expected,
        }


def _templated(value: Any) -> bool:
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def _show(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else str(value).replace("True", "true").replace("False", "false")
    return text if len(text) <= 80 else text[:77] + "..."


def _type_ok(kind: str, value: Any) -> bool:
    if kind in ("str", "path"):
        # Ansible converts numbers to strings; a mapping, a list or a boolean is a mistake.
        return isinstance(value, str | int | float) and not isinstance(value, bool)
    if kind == "bool":
        return isinstance(value, bool) or (isinstance(value, str) and value.lower() in BOOL_STRINGS)
    if kind == "int":
        if isinstance(value, bool):
            return False
        if isinstance(value, int):
            return True
        return isinstance(value, str) and value.strip().lstrip("-").isdigit()
    if kind == "float":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "list":
        return isinstance(value, list)
    if kind == "dict":
        return isinstance(value, dict)
    return True  # raw and anything unknown


def validate_value(name: str, spec: dict[str, Any], value: Any) -> list[tuple[str, str, str]]:
    """Check one value against an argument_spec entry: (variable path, found, expected) per violation."""
    if _templated(value) or (value is None and not spec.get("required")):
        return []
    kind = spec.get("type", "str")
    if not _type_ok(kind, value):
        return [(name, f"{_show(value)} ({type(value).__name__})", f"type {kind}")]
    out: list[tuple[str, str, str]] = []
    choices = spec.get("choices")
    if choices is not None:
        items = value if kind == "list" else [value]
        for item in items:
            if _templated(item):
                continue
            if item not in choices and str(item) not in [str(c) for c in choices]:
                close = difflib.get_close_matches(str(item), [str(c) for c in choices], n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                out.append((name, _show(item), f"one of {', '.join(map(str, choices))}{hint}"))
    if kind == "list" and spec.get("elements"):
        element_spec = {"type": spec["elements"], "options": spec.get("options")}
        for i, item in enumerate(value):
            out += validate_value(f"{name}[{i}]", {k: v for k, v in element_spec.items() if v}, item)
    elif kind == "dict" and spec.get("options") and isinstance(value, dict):
        options = spec["options"]
        for key, sub in value.items():
            if key not in options:
                close = difflib.get_close_matches(str(key), list(options), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                out.append((f"{name}.{key}", "an unknown key", f"one of {', '.join(options)}{hint}"))
            else:
                out += validate_value(f"{name}.{key}", options[key], sub)
        for key, sub in options.items():
            if sub.get("required") and key not in value:
                out.append((f"{name}.{key}", "nothing", "a value (required)"))
    return out


class Checker:
    def __init__(self, inventory: Inventory):
        self.inv = inventory
        self.problems: list[Problem] = []
        self.known = specs.all_vars()
        self.prefixes = specs.prefixes()
        self.profiles = content.profiles()

    def add(self, where: str, scope: str, variable: str, found: str, expected: str) -> None:
        self.problems.append(Problem(where, scope, variable, found, expected))

    # ---- per definition: schema, typos, profile names --------------------------------------------------
    def check_definition(self, d: Definition) -> None:
        name = d.name
        if name.startswith("__") or name.startswith("ansible_"):
            return
        where, scope = d.source.path, d.source.scope
        if name == "nodeforge_profile":
            self.check_profile_name(where, scope, d.value)
            return
        spec = self.known.get(name)
        if spec is None:
            ours = name.startswith(self.prefixes)
            close = difflib.get_close_matches(name, list(self.known), n=1, cutoff=0.6 if ours else 0.85)
            if ours or close:
                hint = f"a known variable (did you mean {close[0]}?)" if close else "a variable some role declares"
                self.add(where, scope, name, "an unknown variable", hint + "; see docs/inventory-reference.md")
            return
        for path, found, expected in validate_value(name, spec.spec, d.value):
            self.add(where, scope, path, found, expected)

    def check_profile_name(self, where: str, scope: str, value: Any) -> None:
        if _templated(value):
            return
        if not isinstance(value, str) or value not in self.profiles:
            close = difflib.get_close_matches(str(value), list(self.profiles), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            self.add(
                where,
                scope,
                "nodeforge_profile",
                f"unknown profile {_show(value)}",
                f"one of the known profiles: {', '.join(self.profiles)}{hint}",
            )

    # ---- per host: required variables and cross-variable rules ------------------------------------------
    def check_hosts(self) -> None:
        workers = self.inv.hosts_of(WORKER_GROUP)
        if not workers:
            self.add(
                str(self.inv.path),
                "inventory",
                "",
                f"no hosts in group {WORKER_GROUP}",
                f"the GPU workers listed under group {WORKER_GROUP}",
            )
        merged: dict[tuple[str, str, str, str], list[str]] = defaultdict(list)
        for host in sorted(workers):
            defs = self.inv.host_definitions(host)
            if "nodeforge_profile" not in defs:
                merged[(str(self.inv.path), "nodeforge_profile", "nothing", "a hardware profile")].append(host)
                continue
            for v in rules.evaluate(rules.HostContext(host, defs, self.profiles, content.manifest())):
                merged[(v.where, v.variable, v.found, v.expected)].append(host)
        for (origin, variable, found, expected), hosts in merged.items():
            # origin is "file: group X" for inventory values, a bare description for defaults
            where, _, set_for = origin.rpartition(": ") if ": " in origin else (origin, "", "")
            scope = _hosts_scope(hosts)
            if set_for and set_for != scope:
                scope = f"{set_for}, for {scope}"
            self.add(where, scope, variable, found, expected)

    def run(self) -> list[Problem]:
        for err in self.inv.errors:
            self.add(
                f"{err.path}:{err.line}" if err.line else err.path,
                "",
                "",
                err.message,
                "valid inventory YAML",
            )
        for d in self.inv.definitions():
            self.check_definition(d)
        self.check_hosts()
        return self.problems


def _hosts_scope(hosts: list[str]) -> str:
    label = "host" if len(hosts) == 1 else "hosts"
    shown = ", ".join(hosts[:5])
    more = f" (+{len(hosts) - 5} more)" if len(hosts) > 5 else ""
    return f"{label} {shown}{more}"


def check_inventory(path: str | Path, extravars: dict[str, Any] | None = None) -> list[Problem]:
    inventory = Inventory.load(path)
    inventory.add_extra_vars(extravars or {})
    return Checker(inventory).run()
