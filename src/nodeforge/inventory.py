"""Read Ansible YAML inventories statically (no Ansible import, no node contact).

Supports what nodeforge's inventories use: a YAML inventory file (`all:` with hosts/vars/children), or a
directory holding one (hosts.yml / hosts.yaml / inventory.yml) next to group_vars/ and host_vars/ (files or
directories of files). Every variable keeps the file and the group or host that set it, so problems can name
their source.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

try:  # the C loader is ~10x faster on big inventories
    _Loader: type = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - libyaml missing
    _Loader = yaml.SafeLoader

INVENTORY_NAMES = ("hosts.yml", "hosts.yaml", "inventory.yml", "inventory.yaml")
YAML_SUFFIXES = (".yml", ".yaml", ".json", "")


@dataclass(frozen=True)
class Source:
    """Where a variable was set: a file plus the group or host it applies to."""

    path: str
    scope: str  # "group gpu_nodes" | "host node-01"

    def __str__(self) -> str:
        return f"{self.path}: {self.scope}"


@dataclass
class Definition:
    name: str
    value: Any
    source: Source


@dataclass
class Group:
    name: str
    parents: set[str] = field(default_factory=set)
    children: set[str] = field(default_factory=set)
    hosts: set[str] = field(default_factory=set)
    vars: dict[str, Definition] = field(default_factory=dict)


@dataclass
class LoadError:
    path: str
    message: str
    line: int | None = None

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        return f"{where}: {self.message}"


class Inventory:
    def __init__(self, path: Path):
        self.path = path
        self.groups: dict[str, Group] = {"all": Group("all"), "ungrouped": Group("ungrouped")}
        self.host_vars: dict[str, dict[str, Definition]] = {}
        self.errors: list[LoadError] = []
        self._depth_cache: dict[str, int] = {}
        self._direct_groups: dict[str, list[str]] | None = None
        self.extra_vars: dict[str, Definition] = {}

    # ---- loading -------------------------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | Path) -> Inventory:
        path = Path(path)
        inv = cls(path)
        if not path.exists():
            inv.errors.append(LoadError(str(path), "inventory not found"))
            return inv
        if path.is_dir():
            files = [path / n for n in INVENTORY_NAMES if (path / n).is_file()]
            if not files:
                inv.errors.append(
                    LoadError(
                        str(path),
                        f"no inventory file in directory; expected one of {', '.join(INVENTORY_NAMES)}",
                    )
                )
                return inv
            base = path
            inv._load_inventory_file(files[0])
        else:
            base = path.parent
            inv._load_inventory_file(path)
        inv._load_vars_dir(base / "group_vars", is_group=True)
        inv._load_vars_dir(base / "host_vars", is_group=False)
        for host in inv.host_vars:
            if not any(host in g.hosts for g in inv.groups.values() if g.name not in ("all", "ungrouped")):
                inv.groups["ungrouped"].hosts.add(host)
        return inv

    def _read_yaml(self, path: Path) -> Any:
        try:
            return yaml.load(path.read_text(), Loader=_Loader)
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            line = mark.line + 1 if mark else None
            self.errors.append(LoadError(str(path), f"YAML syntax error: {exc.problem or exc}", line))
        except yaml.YAMLError as exc:
            self.errors.append(LoadError(str(path), f"YAML error: {exc}"))
        except OSError as exc:
            self.errors.append(LoadError(str(path), f"cannot read: {exc.strerror}"))
        return None

    def _load_inventory_file(self, path: Path) -> None:
        data = self._read_yaml(path)
        if data is None:
            return
        if not isinstance(data, dict):
            self.errors.append(LoadError(str(path), "expected a YAML inventory mapping with top-level groups"))
            return
        for name, body in data.items():
            self._load_group(path, str(name), body, parent=None)

    def _group(self, name: str) -> Group:
        if name not in self.groups:
            self.groups[name] = Group(name)
        return self.groups[name]

    def _load_group(self, path: Path, name: str, body: Any, parent: str | None) -> None:
        group = self._group(name)
        if parent:
            group.parents.add(parent)
            self._group(parent).children.add(name)
        elif name != "all":
            group.parents.add("all")
            self.groups["all"].children.add(name)
        if body is None:
            return
        if not isinstance(body, dict):
            self.errors.append(LoadError(str(path), f"group {name}: expected a mapping (hosts/vars/children)"))
            return
        unknown = set(body) - {"hosts", "vars", "children"}
        if unknown:
            self.errors.append(
                LoadError(
                    str(path),
                    f"group {name}: unexpected key(s) {', '.join(sorted(map(str, unknown)))}; "
                    "expected hosts, vars or children",
                )
            )
        hosts = body.get("hosts") or {}
        if not isinstance(hosts, dict):
            self.errors.append(LoadError(str(path), f"group {name}: hosts must be a mapping of host names"))
            hosts = {}
        for host, hvars in hosts.items():
            host = str(host)
            group.hosts.add(host)
            self.host_vars.setdefault(host, {})
            if hvars:
                if not isinstance(hvars, dict):
                    self.errors.append(LoadError(str(path), f"host {host}: variables must be a mapping"))
                    continue
                src = Source(str(path), f"host {host}")
                for k, v in hvars.items():
                    self.host_vars[host][str(k)] = Definition(str(k), v, src)
        gvars = body.get("vars") or {}
        if not isinstance(gvars, dict):
            self.errors.append(LoadError(str(path), f"group {name}: vars must be a mapping"))
            gvars = {}
        src = Source(str(path), f"group {name}")
        for k, v in gvars.items():
            group.vars[str(k)] = Definition(str(k), v, src)
        children = body.get("children") or {}
        if not isinstance(children, dict):
            self.errors.append(LoadError(str(path), f"group {name}: children must be a mapping of groups"))
            children = {}
        for child, cbody in children.items():
            self._load_group(path, str(child), cbody, parent=name)

    def _vars_files(self, entry: Path) -> list[Path]:
        if entry.is_dir():
            return sorted(p for p in entry.rglob("*") if p.is_file() and p.suffix in YAML_SUFFIXES)
        return [entry] if entry.suffix in YAML_SUFFIXES else []

    def _load_vars_dir(self, directory: Path, is_group: bool) -> None:
        if not directory.is_dir():
            return
        for entry in sorted(directory.iterdir()):
            name = entry.stem if entry.is_file() else entry.name
            if entry.is_file() and entry.suffix not in YAML_SUFFIXES:
                continue
            for path in self._vars_files(entry):
                data = self._read_yaml(path)
                if data is None:
                    continue
                if not isinstance(data, dict):
                    self.errors.append(LoadError(str(path), "expected a mapping of variables"))
                    continue
                if is_group:
                    src = Source(str(path), f"group {name}")
                    target = self._group(name).vars
                    if name not in ("all", "ungrouped") and not self.groups[name].parents:
                        self.groups[name].parents.add("all")
                        self.groups["all"].children.add(name)
                else:
                    src = Source(str(path), f"host {name}")
                    target = self.host_vars.setdefault(name, {})
                for k, v in data.items():
                    target[str(k)] = Definition(str(k), v, src)

    # ---- queries -------------------------------------------------------------------------------------
    def group_depth(self, name: str) -> int:
        if name in self._depth_cache:
            return self._depth_cache[name]
        group = self.groups[name]
        self._depth_cache[name] = 0  # guards against cycles
        depth = 0 if name == "all" else 1 + max((self.group_depth(p) for p in group.parents), default=0)
        self._depth_cache[name] = depth
        return depth

    def host_groups(self, host: str) -> set[str]:
        """All groups the host belongs to, ancestors included."""
        if self._direct_groups is None:
            self._direct_groups = {}
            for g in self.groups.values():
                for h in g.hosts:
                    self._direct_groups.setdefault(h, []).append(g.name)
        result: set[str] = set()
        stack = list(self._direct_groups.get(host, []))
        while stack:
            name = stack.pop()
            if name in result:
                continue
            result.add(name)
            stack.extend(self.groups[name].parents)
        result.add("all")
        return result

    def hosts_of(self, group: str) -> set[str]:
        if group not in self.groups:
            return set()
        result: set[str] = set()
        stack, seen = [group], set()
        while stack:
            name = stack.pop()
            if name in seen:
                continue
            seen.add(name)
            result |= self.groups[name].hosts
            stack.extend(self.groups[name].children)
        return result

    @property
    def hosts(self) -> list[str]:
        return sorted(self.host_vars)

    def host_definitions(self, host: str) -> dict[str, Definition]:
        """Merged variables of a host with Ansible's precedence: all < parent groups < child groups < host."""
        groups = sorted(self.host_groups(host), key=lambda g: (self.group_depth(g), g))
        merged: dict[str, Definition] = {}
        for g in groups:
            merged.update(self.groups[g].vars)
        merged.update(self.host_vars.get(host, {}))
        merged.update(self.extra_vars)
        return merged

    def add_extra_vars(self, extravars: dict[str, Any]) -> None:
        """Command-line -e values: the highest precedence, for every host."""
        src = Source("command line (-e)", "all hosts")
        self.extra_vars = {str(k): Definition(str(k), v, src) for k, v in extravars.items()}

    def definitions(self) -> list[Definition]:
        """Every variable definition once (group and host level), for per-definition checks."""
        result = [d for g in self.groups.values() for d in g.vars.values()]
        result += [d for hv in self.host_vars.values() for d in hv.values()]
        return result + list(self.extra_vars.values())
