"""Filters that compute containerd's nvidia runtime drop-in and the import line config.toml needs.

They run on the controller, whose Python is 3.11 or newer (tomllib; meta/runtime.yml says so for every ansible-core
the collection supports), so the node needs no TOML library. The role slurps the files and copies the results with
ansible.builtin.copy: check mode and --diff work and the output is deterministic.

Why the drop-in carries a whole plugin table: containerd merges an imported file into the configuration one plugin
at a time, replacing the plugin's whole table (seen with Debian's containerd 1.6.20: a drop-in that only adds
runtimes.nvidia resets the operator's sandbox_image, registry mirrors and runc options to containerd's defaults).
So the drop-in is the CRI plugin table in effect before it (from config.toml or the last earlier import that sets
it) with the nvidia runtime added; nvidia-ctk does the same from `containerd config dump`.
"""

from __future__ import annotations

import datetime
import json
import re
import tomllib
from typing import Any

# CRI plugin id and the path of its runtimes per config version (containerd 1.x: 2; containerd 2.x: 3).
CRI_PLUGIN = {2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_IMPORTS = re.compile(r"^imports\s*=\s*\[[^\]]*\]([ \t]*#[^\n]*)?$", re.M)
_VERSION = re.compile(r"^version\s*=\s*\d+[ \t]*(#[^\n]*)?$", re.M)
_FIRST_TABLE = re.compile(r"^\s*\[", re.M)


class ContainerdConfigError(ValueError):
    pass


def _parse(text: str, where: str) -> dict:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ContainerdConfigError(f"{where} is not valid TOML: {exc}") from exc


def _key(key: str) -> str:
    return key if _BARE_KEY.match(key) else json.dumps(key)


def _value(value: Any, where: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(_value(item, where) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_key(k)} = {_value(v, where)}" for k, v in value.items()) + "}"
    raise ContainerdConfigError(f"{where}: cannot write a {type(value).__name__} as TOML")


def _table_lines(path: list[str], table: dict, out: list[str]) -> None:
    scalars = {k: v for k, v in table.items() if not isinstance(v, dict)}
    tables = {k: v for k, v in table.items() if isinstance(v, dict)}
    if scalars or not tables:
        out.append("")
        out.append("[" + ".".join(_key(p) for p in path) + "]")
        for key, value in scalars.items():
            out.append(f"{_key(key)} = {_value(value, '.'.join([*path, key]))}")
    for key, value in tables.items():
        _table_lines([*path, key], value, out)


def _merge(base: dict, override: dict) -> dict:
    result = dict(base)
    for key, value in override.items():
        both = isinstance(value, dict) and isinstance(result.get(key), dict)
        result[key] = _merge(result[key], value) if both else value
    return result


def config_version(text: str, containerd_major: int = 1, where: str = "config.toml") -> int:
    """The config.toml's version; a missing file ("") gets the one containerd_major writes."""
    if not text.strip():
        return 3 if int(containerd_major) >= 2 else 2
    version = _parse(text, where).get("version")
    if version not in CRI_PLUGIN:
        raise ContainerdConfigError(
            f"{where} has version = {version if version is not None else '(none: version 1)'}; expected 2 "
            "(containerd 1.x) or 3 (containerd 2.x). Migrate it first (`containerd config migrate`, containerd 2.x)."
        )
    return version


def containerd_imports(text: str, where: str = "config.toml") -> list[str]:
    """The imports of a config.toml (none when it is missing)."""
    return list(_parse(text, where).get("imports", [])) if text.strip() else []


def containerd_config(text: str, import_glob: str, containerd_major: int = 1, where: str = "config.toml") -> str:
    """config.toml with import_glob appended to its imports; the rest of the file is kept byte for byte."""
    version = config_version(text, containerd_major, where)
    if not text.strip():
        return f"version = {version}\nimports = [{json.dumps(import_glob)}]\n"
    imports = containerd_imports(text, where)
    if import_glob in imports:
        return text
    line = "imports = [" + ", ".join(json.dumps(i) for i in [*imports, import_glob]) + "]"
    head_end = m.start() if (m := _FIRST_TABLE.search(text)) else len(text)
    found = _IMPORTS.search(text, 0, head_end)
    if imports and not found:
        raise ContainerdConfigError(f"{where}: its imports are not one top-level `imports = [...]` line to extend")
    if found:
        new = text[: found.start()] + line + (found.group(1) or "") + text[found.end() :]
    elif version_line := _VERSION.search(text, 0, head_end):
        new = text[: version_line.end()] + "\n" + line + text[version_line.end() :]
    else:
        new = line + "\n" + text
    before, after = _parse(text, where), _parse(new, where)
    before.pop("imports", None)
    after.pop("imports", None)
    if before != after:  # pragma: no cover - the edit only touches the imports line
        raise ContainerdConfigError(f"{where}: adding the import would change other settings; edit it by hand")
    return new


def containerd_dropin(
    sources: list[list[str]],
    version: int,
    runtime: str = "nvidia",
    binary: str = "/usr/bin/nvidia-container-runtime",
    set_as_default: bool = False,
    header: str = "",
) -> str:
    """The drop-in: the CRI plugin table of the last source that has one, plus the nvidia runtime.

    sources: [[path, text], ...] in containerd's order (config.toml, then each earlier import).
    """
    plugin = CRI_PLUGIN[int(version)]
    table: dict = {}
    for where, text in sources:
        plugins = _parse(text, where).get("plugins", {})
        if plugin in plugins:
            table = plugins[plugin]
    runc = table.get("containerd", {}).get("runtimes", {}).get("runc", {})
    ours: dict = {
        "runtime_type": runc.get("runtime_type", "io.containerd.runc.v2"),
        "options": {"BinaryName": binary},
    }
    # The nvidia runtime wraps runc: it takes runc's cgroup driver, so pods behave the same under both.
    if "SystemdCgroup" in runc.get("options", {}):
        ours["options"]["SystemdCgroup"] = runc["options"]["SystemdCgroup"]
    containerd = {"runtimes": {runtime: ours}}
    if set_as_default:
        containerd["default_runtime_name"] = runtime
    table = _merge(table, {"containerd": containerd})
    lines = [line for line in header.splitlines()] + [f"version = {int(version)}"]
    _table_lines(["plugins", plugin], table, lines)
    return "\n".join(lines) + "\n"


class FilterModule:
    def filters(self):
        return {
            "nvidia_container_toolkit_containerd_version": config_version,
            "nvidia_container_toolkit_containerd_imports": containerd_imports,
            "nvidia_container_toolkit_containerd_config": containerd_config,
            "nvidia_container_toolkit_containerd_dropin": containerd_dropin,
        }
