# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The one model of nodeforge's configuration: where a setting's effective value comes from.

A role variable left empty takes the hardware profile's default, then the version manifest's, then the role
default of meta/argument_specs.yml: the chain that `nodeforge check`, the validation play that opens every
playbook and the roles all follow, so it is written once, here. The data (version manifest, hardware profiles,
argument specs) are files of the collection's roles, read from where this file is installed.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import yaml
from ansible.module_utils.parsing.convert_bool import boolean

COLLECTION_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GLOBAL_PREFIX = "nodeforge_"
WORKER_GROUP = "gpu_nodes"
# IBM Storage Scale clients (role scale_client): checked like the workers, whose profiles they need too.
SCALE_CLIENT_GROUP = "scale_clients"
# Variables whose role default "" means "the version manifest's": (section, key) there.
MANIFEST_DEFAULTS = {"nvidia_driver_branch": ("nvidia_driver", "branch"), "ofed_mode": ("ofed", "mode")}


def roles_dir(root: str | None = None) -> str:
    return os.path.join(root or COLLECTION_ROOT, "roles")


# libyaml's safe loader when PyYAML was built with it (Debian's and PyPI's wheels are): the profiles, manifests and
# rule files are read on every CLI start and in every Ansible run, and the pure-Python loader took 0.4 s of that.
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _load_yaml(path: str) -> Any:
    with open(path, encoding="utf-8") as handle:
        return yaml.load(handle, Loader=_SAFE_LOADER)


@cache
def manifest(root: str | None = None) -> dict:
    """The version manifest as shipped (roles/nodeforge/files/manifest.yml), before any host's overrides."""
    return _load_yaml(os.path.join(roles_dir(root), "nodeforge", "files", "manifest.yml"))


@cache
def profiles(root: str | None = None) -> dict[str, dict]:
    """Hardware profiles by name (roles/nodeforge/files/profiles/*.yml)."""
    directory = os.path.join(roles_dir(root), "nodeforge", "files", "profiles")
    result = {}
    for name in sorted(os.listdir(directory)):
        if name.endswith(".yml"):
            data = _load_yaml(os.path.join(directory, name))
            result[data["name"]] = data
    return result


PROFILE_OVERRIDES = "nodeforge_profile_overrides"


@cache
def profile_shape(root: str | None = None) -> dict:
    """Every key the hardware profiles use, nested (the first profile's value of each as its sample): what
    nodeforge_profile_overrides is checked against."""
    shape: dict = {}
    for data in profiles(root).values():
        shape = deep_merge(data, shape)
    return shape


def host_profile(variables: Mapping, root: str | None = None) -> dict | None:
    """The host's hardware profile as the roles see it (nodeforge_hw): nodeforge_profile, with
    nodeforge_profile_overrides deep-merged over it (roles/nodeforge/tasks/main.yml); None for an unknown profile."""
    name = variables.get("nodeforge_profile")
    profile = profiles(root).get(name) if isinstance(name, str) else None
    overrides = variables.get(PROFILE_OVERRIDES)
    if profile is not None and isinstance(overrides, Mapping):
        return deep_merge(profile, overrides)
    return profile


# Variables whose values are secrets: never shown by check, never logged by the roles. Listed here, not as no_log in
# the roles' argument specs: Ansible's role argument validation fails on a vault-encrypted value under a no_log
# option ("Unknown parameter type: AnsibleVaultEncryptedUnicode"), and these are the values that live in a vault.
SECRET_VARIABLES = frozenset({"nvidia_driver_grid_client_token", "k8s_scale_csi_gui_secrets"})


def typed(name: str, value: Any) -> Any:
    """A value as its role's argument spec types it, where Ansible's own conversion applies: a bool variable given as
    text (-e k8s_mpi_operator_enabled=false, an INI inventory's `yes`) as the boolean it means, as the role's argument
    validation reads it. Anything else, and text that is no boolean (which `check` refuses), is returned unchanged."""
    spec = all_vars().get(name)
    if spec is not None and spec.type == "bool" and isinstance(value, str):
        try:
            return boolean(value, strict=True)
        except TypeError:
            return value
    return value


@dataclass(frozen=True)
class VarSpec:
    """One variable of a role's meta/argument_specs.yml."""

    name: str
    role: str
    spec: dict

    @property
    def type(self) -> str:
        return self.spec.get("type", "str")

    @property
    def choices(self) -> list | None:
        return self.spec.get("choices")

    @property
    def required(self) -> bool:
        return bool(self.spec.get("required", False))

    @property
    def default(self) -> Any:
        return self.spec.get("default")

    @property
    def no_log(self) -> bool:
        return bool(self.spec.get("no_log", False)) or self.name in SECRET_VARIABLES

    @property
    def description(self) -> str:
        desc = self.spec.get("description", "")
        return " ".join(desc) if isinstance(desc, list) else str(desc)


@dataclass(frozen=True)
class RoleSpec:
    role: str
    path: str
    short_description: str
    options: dict[str, VarSpec]


def load_role_spec(role_dir: str) -> RoleSpec | None:
    spec_file = os.path.join(role_dir, "meta", "argument_specs.yml")
    if not os.path.isfile(spec_file):
        return None
    role = os.path.basename(role_dir)
    main = ((_load_yaml(spec_file) or {}).get("argument_specs") or {}).get("main") or {}
    options = {name: VarSpec(name, role, spec or {}) for name, spec in (main.get("options") or {}).items()}
    return RoleSpec(role, spec_file, main.get("short_description", ""), options)


@cache
def role_specs(root: str | None = None) -> dict[str, RoleSpec]:
    """Every role's argument specs: the one schema that check, the validation play and the roles enforce."""
    directory = roles_dir(root)
    result = {}
    for name in sorted(os.listdir(directory)):
        spec = load_role_spec(os.path.join(directory, name))
        if spec:
            result[spec.role] = spec
    return result


@cache
def all_vars(root: str | None = None) -> dict[str, VarSpec]:
    return {name: v for spec in role_specs(root).values() for name, v in spec.options.items()}


@cache
def prefixes(root: str | None = None) -> tuple[str, ...]:
    """Variable prefixes that are ours: one per role, plus the cross-role `nodeforge_`."""
    return tuple(sorted({f"{role}_" for role in role_specs(root)} | {GLOBAL_PREFIX}, key=len, reverse=True))


def deep_merge(base: Mapping, override: Mapping) -> dict:
    """What Ansible's combine(recursive=true) does: mappings merge key by key, anything else is replaced."""
    result = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(result.get(key), Mapping):
            result[key] = deep_merge(result[key], value)
        else:
            result[key] = value
    return result


# The version manifest's overrides: nodeforge_manifest_overrides, then every nodeforge_manifest_overrides_<suffix>, each
# deep-merged over the manifest in that order (the suffixed ones by name). Ansible's precedence gives each variable one
# value (an -e value replaces the inventory's whole mapping): a suffixed variable is how -e @mirror.yml adds to what
# group_vars set instead of replacing it. Merged here, once, for the roles (lookup nodeforge.gpu.manifest, action
# resolve_settings), the cluster layer (k8s_objects) and `nodeforge check`.
MANIFEST_OVERRIDES = "nodeforge_manifest_overrides"
_MANIFEST_OVERRIDE_LAYER = re.compile(rf"{MANIFEST_OVERRIDES}_[A-Za-z0-9_]+")


def is_manifest_overrides(name: Any) -> bool:
    """nodeforge_manifest_overrides, or one of the nodeforge_manifest_overrides_<suffix> merged over it."""
    return isinstance(name, str) and (name == MANIFEST_OVERRIDES or bool(_MANIFEST_OVERRIDE_LAYER.fullmatch(name)))


def manifest_override_names(names: Iterable[Any]) -> list[str]:
    """The manifest override variables among names, in the order they are merged over the version manifest:
    nodeforge_manifest_overrides first, then each nodeforge_manifest_overrides_<suffix> by name (a later one wins)."""
    return sorted({n for n in names if is_manifest_overrides(n)}, key=lambda n: (n != MANIFEST_OVERRIDES, n))


def _plain_type(value: Any) -> str:
    """The plain type a value's (maybe Ansible-tagged) type derives from, as messages name it."""
    return next(
        (t.__name__ for t in (bool, str, int, float, list, tuple) if isinstance(value, t)), type(value).__name__
    )


def manifest_override_problems(variables: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(variable, found, expected) for each manifest override variable of variables that is no mapping (an empty
    one counts as {}, as the roles' `| default({}, true)` did)."""
    return [
        (
            name,
            f"{variables[name]!r} ({_plain_type(variables[name])})",
            "a mapping, deep-merged over the version manifest",
        )
        for name in manifest_override_names(variables)
        if not isinstance(variables[name], Mapping) and not is_empty(variables[name])
    ]


def manifest_with_overrides(variables: Mapping[str, Any], root: str | None = None) -> dict:
    """The version manifest as the roles see it (nodeforge_manifest): the shipped one with each manifest override
    variable of variables deep-merged over it in merge order (manifest_override_names). One that is no mapping is
    left out here: `nodeforge check`, the roles and the cluster layer refuse it (manifest_override_problems)."""
    result = manifest(root)
    for name in manifest_override_names(variables):
        value = variables[name]
        if isinstance(value, Mapping):
            result = deep_merge(result, value)
    return result


def manifest_override_source(variables: Mapping[str, Any], path: Sequence[str]) -> str | None:
    """The manifest override variable whose value the effective manifest holds at path (its keys): the last one in
    merge order that sets it; None when none does (the shipped manifest's value)."""
    for name in reversed(manifest_override_names(variables)):
        value = variables[name]
        for key in path:
            if not isinstance(value, Mapping) or key not in value:
                break
            value = value[key]
        else:
            return name
    return None


# Values that land in configuration files, apt/dnf sources, modprobe.d, unit files or command lines: each must match
# its pattern in full (re.fullmatch: a trailing newline does not slip through as it does with `^...$`). The roles
# assert the same patterns before they write (nodeforge.gpu.value_problems), and no string of any nodeforge
# variable may hold a control character (a newline would start a second line in the file it lands in).
_URL = r"(https?|file)://[^\s\"'\\<>\[\]]+"
_URL_EXPECTED = "an http(s):// or file:// URL without spaces, quotes or brackets"
_VERSION = r"[0-9]+(\.[0-9]+)+"
_KERNEL = r"[A-Za-z0-9][A-Za-z0-9._+~-]*"
# Integrity: sha256 or sha512 only (md5 and sha1 no longer vouch for a file anyone could have swapped).
CHECKSUM = r"sha256:[0-9a-fA-F]{64}|sha512:[0-9a-fA-F]{128}"
CHECKSUM_EXPECTED = "sha256:<64 hex digits> or sha512:<128 hex digits> (md5 and sha1 are refused)"
VALUE_PATTERNS: dict[str, tuple[str, str]] = {
    "nvidia_driver_branch": (r"[0-9]+", "a driver branch: digits only, e.g. 580"),
    "gpudirect_rdma_driver_branch": (r"[0-9]+", "a driver branch: digits only, e.g. 580"),
    "nvidia_driver_version": (_VERSION, "a driver version such as 580.126.20"),
    "gpudirect_rdma_driver_version": (_VERSION, "a driver version such as 580.126.20"),
    "nvidia_container_toolkit_version": (r"[0-9]+\.[0-9]+\.[0-9]+", "a toolkit version X.Y.Z"),
    "ofed_version": (r"[0-9][0-9A-Za-z.-]*", "a DOCA or MLNX_OFED version such as 3.4.1 or 24.10-3.2.5.0"),
    "nvidia_driver_cuda_repo_url": (_URL, _URL_EXPECTED),
    "nvidia_container_toolkit_repo_url": (_URL, _URL_EXPECTED),
    "nvidia_container_toolkit_key_url": (_URL, _URL_EXPECTED),
    "ofed_doca_repo_url": (_URL, _URL_EXPECTED),
    "ofed_doca_key_url": (_URL, _URL_EXPECTED),
    "ofed_mlnx_ofed_url": (_URL, _URL_EXPECTED),
    "gpudirect_rdma_nv_peer_mem_url": (_URL, _URL_EXPECTED),
    "gpudirect_rdma_gdrcopy_url": (_URL, _URL_EXPECTED),
    "gpudirect_rdma_gdrcopy_checksum": (CHECKSUM, CHECKSUM_EXPECTED),
    "gpudirect_rdma_nv_peer_mem_checksum": (CHECKSUM, CHECKSUM_EXPECTED),
    "ofed_mlnx_ofed_checksum": (CHECKSUM, CHECKSUM_EXPECTED),
    "nodeforge_reboot_batch": (r"[1-9][0-9]*%?", "a number of nodes or a percentage, e.g. 1 or 25%"),
    "nodeforge_k8s_version": (r"1\.(2[5-9]|3[0-7])", "a Kubernetes version nodeforge has API schemas of: 1.25 to 1.37"),
    "ofed_doca_profile_package": (r"[a-z0-9][a-z0-9+.-]+", "a Debian/RPM package name"),
    "nvidia_driver_dkms_kernels[]": (_KERNEL, "a kernel release as uname -r prints it"),
    "gpudirect_rdma_kernels[]": (_KERNEL, "a kernel release as uname -r prints it"),
    "nvidia_driver_module_options{}": (r"[A-Za-z_][A-Za-z0-9_]*", "a module parameter name, e.g. NVreg_EnableMSI"),
    "nvidia_driver_module_options[]": (r"[^\s\"'\\]+", "a parameter value without spaces, quotes or backslashes"),
    "selinux_modules_booleans{}": (r"[A-Za-z0-9_]+", "an SELinux boolean name"),
    "ofed_memlock_users[]": (r"[^\s#]+", "a limits.conf domain (a user, @group or *) without spaces or #"),
    "ofed_memlock_services[]": (r"[A-Za-z0-9@._:-]+", "a systemd unit name without .service, e.g. containerd"),
    "validate_rdma_peer": (r"[A-Za-z0-9_.:@-]+", "an inventory host name"),
    "validate_rdma_address": (r"[A-Za-z0-9_.:%-]+", "a host name or an IP address"),
    "scale_client_node_label": (
        r"([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
        r"=([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?",
        "a Kubernetes node label key=value, e.g. scale=true",
    ),
}
# Keys of the version manifest whose values are URLs (checked where nodeforge_manifest_overrides sets them).
_MANIFEST_URL_KEY = re.compile(r"(^|_)(url|baseurl)(_deb|_rpm)?$")


def _control(text: str) -> bool:
    return any(ord(c) < 0x20 or ord(c) == 0x7F for c in text)


def value_problems(name: str, value: Any, path: str = "") -> list[tuple[str, str, str]]:
    """(path, found, expected) for every part of a variable's value that would be unsafe in the files it lands in:
    control characters anywhere (keys included), and values that do not match VALUE_PATTERNS in full (in
    nodeforge_manifest_overrides: the URLs)."""
    path = path or name
    if isinstance(value, Mapping):
        return _mapping_problems(name, value, path)
    if isinstance(value, (list, tuple)):
        rule = VALUE_PATTERNS.get(f"{name}[]")
        problems: list[tuple[str, str, str]] = []
        for index, item in enumerate(value):
            where = f"{path}[{index}]"
            if rule and isinstance(item, str) and not _control(item) and not re.fullmatch(rule[0], item):
                problems.append((where, repr(item), rule[1]))
            else:
                problems += value_problems("", item, where)
        return problems
    if isinstance(value, str):
        if _control(value):
            return [(path, repr(value), "a value without control characters (no newline, carriage return, tab, NUL)")]
        rule = VALUE_PATTERNS.get(name)
        if rule and value.strip() and not is_templated(value) and not re.fullmatch(rule[0], value):
            return [(path, repr(value), rule[1])]
    return []


def _mapping_problems(name: str, value: Mapping, path: str) -> list[tuple[str, str, str]]:
    overrides = is_manifest_overrides(name)
    key_rule = VALUE_PATTERNS.get(f"{name}{{}}")
    item_rule = VALUE_PATTERNS.get(f"{name}[]")
    problems: list[tuple[str, str, str]] = []
    for key, item in value.items():
        key_text = str(key)
        where = f"{path}.{key_text}"
        if _control(key_text) or (key_rule and not re.fullmatch(key_rule[0], key_text)):
            expected = key_rule[1] if key_rule else "a key without control characters"
            problems.append((f"{path}.{key_text!r}", f"the key {key_text!r}", expected))
            continue
        scalar = isinstance(item, (str, int, float)) and not isinstance(item, bool)
        if item_rule and scalar and not _control(str(item)):
            if not re.fullmatch(item_rule[0], str(item)):
                problems.append((where, repr(item), item_rule[1]))
            continue
        url = overrides and isinstance(item, str) and item.strip() and _MANIFEST_URL_KEY.search(key_text)
        if url and not _control(item) and not re.fullmatch(_URL, item):
            problems.append((where, repr(item), _URL_EXPECTED))
            continue
        if overrides and key_text.startswith("key_fingerprints") and isinstance(item, list):
            problems += [
                (f"{where}[{i}]", repr(f), "a key fingerprint: 40 hex digits (gpg --with-colons, the fpr line)")
                for i, f in enumerate(item)
                if not (isinstance(f, str) and re.fullmatch(r"[0-9A-Fa-f]{40}", f.replace(" ", "")))
            ]
            continue
        checksum = overrides and isinstance(item, str) and item.strip() and key_text.endswith("checksum")
        if checksum and not is_templated(item) and not _control(item) and not re.fullmatch(CHECKSUM, item):
            problems.append((where, repr(item), CHECKSUM_EXPECTED))
            continue
        problems += value_problems(MANIFEST_OVERRIDES if overrides else "", item, where)
    return problems


def _shape(value: Any) -> str:
    if isinstance(value, Mapping):
        return "mapping"
    if isinstance(value, (list, tuple)):
        return "list"
    return "scalar"


_SHAPE_WORDS = {"mapping": "a mapping", "list": "a list", "scalar": "a single value (string, number, true/false)"}


# The manifest's tables, whose keys are data (a branch, an OS) and grow: the shape of each entry. Every other mapping
# of the manifest is a record with fixed keys.
MANIFEST_TABLES = {
    "nvidia_driver.branches": "mapping",
    "nvidia_driver.distro_branches": "list",
    "nvidia_driver.cuda_repo.distros": "scalar",
    "ofed.distros": "scalar",
    "os_support": "mapping",
    "os_support.*": "list",
    "supported_os": "list",
}


def override_problems(
    overrides: Any, base: Any, path: str = "", name: str = MANIFEST_OVERRIDES
) -> list[tuple[str, str]]:
    """Where nodeforge_manifest_overrides (or a nodeforge_manifest_overrides_<suffix>: name) does not fit the version
    manifest (or nodeforge_profile_overrides the hardware profiles, name=PROFILE_OVERRIDES, base=profile_shape()):
    (path, expected) pairs.

    Each overridden entry must have the base entry's shape (a mapping where the base has a mapping, a list where it
    has a list, a single value where it has one). New keys are welcome in the manifest's tables (MANIFEST_TABLES: a
    branch, a distribution); in its records, and anywhere in a profile, they are refused, with the closest known
    key."""
    tables = MANIFEST_TABLES if is_manifest_overrides(name) else {}
    what = "the manifest's" if tables else "the hardware profiles'"
    label = f"{name}{'.' if path else ''}{path}"
    if not isinstance(overrides, Mapping):
        return [(label, _SHAPE_WORDS["mapping"])]
    base = base if isinstance(base, Mapping) else {}
    parent = path.rpartition(".")[0]
    entry_shape = tables.get(path) or tables.get(f"{parent}.*" if parent else "")
    problems: list[tuple[str, str]] = []
    for key, value in overrides.items():
        where = f"{path}.{key}" if path else str(key)
        if key in base:
            wanted = _shape(base[key]) if base[key] is not None else "scalar"
        elif entry_shape:
            wanted = entry_shape
        else:
            close = difflib.get_close_matches(str(key), [str(k) for k in base], n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]}?)" if close else ""
            problems.append((f"{label}.{key}", f"one of {what} keys here: {', '.join(map(str, base))}{hint}"))
            continue
        if _shape(value) != wanted and not (wanted == "scalar" and value is None):
            problems.append((f"{label}.{key}", _SHAPE_WORDS[wanted]))
        elif wanted == "mapping":
            known = base.get(key) if key in base else _sample(base)
            problems += override_problems(value, known, where, name)
    return problems


def _sample(table_: Mapping) -> Mapping:
    """A table's typical entry: the keys of all its entries (a new branch is checked against the known ones)."""
    sample: dict = {}
    for entry in table_.values():
        if isinstance(entry, Mapping):
            sample.update({k: v for k, v in entry.items() if sample.get(k) is None})
    return sample


def table(data: Any, *keys: str) -> dict:
    """A section of the (overridden) manifest or a profile; a non-mapping anywhere on the way reads as empty."""
    for key in keys:
        data = data.get(key) if isinstance(data, Mapping) else None
    return dict(data) if isinstance(data, Mapping) else {}


def as_bool(value: Any) -> bool:
    """A boolean as Ansible reads one (yes/no, true/false, on/off, 1/0)."""
    if isinstance(value, str):
        return value.strip().lower() in ("yes", "y", "true", "t", "on", "1")
    return bool(value)


def is_templated(value: Any) -> bool:
    """A Jinja expression's value is only known on the node: static checks leave it alone."""
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def is_empty(value: Any) -> bool:
    """The roles treat an empty setting as unset (`| default(x, true)`): so does the model."""
    return value is None or (isinstance(value, str) and value.strip() == "")


@dataclass(frozen=True)
class Value:
    value: Any
    origin: str  # "file: group X" / "file: host Y" / "profile X (default)" / "version manifest ... (default)" / ...
    explicit: bool  # set in the inventory (or on the command line)


class HostModel:
    """One host's effective settings: the inventory's value, else the profile's, the manifest's, the role's.

    `variables` are the host's variables as Ansible resolved them (inventory, group_vars, host_vars, -e);
    `origins` names where each was set, for messages.
    """

    def __init__(
        self,
        host: str,
        variables: Mapping[str, Any],
        origins: Mapping[str, str] | None = None,
        root: str | None = None,
    ):
        self.host = host
        self.variables = variables
        self.origins = origins if origins is not None else {}
        self.defaults = all_vars(root)
        # The roles see the manifest with the host's overrides merged in (nodeforge_manifest, lookup
        # nodeforge.gpu.manifest).
        self.manifest = manifest_with_overrides(variables, root)
        profile = variables.get("nodeforge_profile")
        self.profile_name = str(profile) if isinstance(profile, str) else ""
        # The roles see the profile with nodeforge_profile_overrides merged in, as nodeforge_hw.
        self.profile = host_profile(variables, root)

    @property
    def arch(self) -> str:
        return (self.profile or {}).get("gpu", {}).get("architecture", "")

    def origin(self, name: str) -> str:
        return self.origins.get(name, f"host {self.host}")

    def manifest_origin(self, path: str) -> str:
        """Where the effective manifest's entry at path (dotted: ofed.doca.key_fingerprints) comes from: the manifest
        override variable that sets it, with where that variable was set, else the shipped version manifest."""
        name = manifest_override_source(self.variables, path.split("."))
        if name is None:
            return f"version manifest {path}"
        origin, label = self.origin(name), f"{name} {path}"
        # On the node (resolve_settings) a variable's origin is its name.
        return label if origin == name else f"{origin} ({label})"

    def get(self, name: str) -> Value | None:
        """The effective value (typed as its argument spec says: model.typed), or None when unset or templated (a
        template's value is only known on the node)."""
        if name in self.variables and not is_empty(self.variables[name]):
            value = self.variables[name]
            return None if is_templated(value) else Value(typed(name, value), self.origin(name), True)
        if self.profile and not is_empty(self.profile.get("defaults", {}).get(name)):
            return Value(self.profile["defaults"][name], f"profile {self.profile_name} (default)", False)
        if name in MANIFEST_DEFAULTS:
            section, key = MANIFEST_DEFAULTS[name]
            value = table(self.manifest, section).get(key)
            if not is_empty(value):
                if manifest_override_source(self.variables, (section, key)) is None:
                    return Value(value, f"version manifest {section}.{key} (default)", False)
                return Value(value, self.manifest_origin(f"{section}.{key}"), False)
        spec = self.defaults.get(name)
        if spec is not None and not is_empty(spec.default):
            return Value(spec.default, f"role {spec.role} (default)", False)
        return None

    @property
    def vgpu(self) -> bool:
        return bool(table(self.profile, "gpu").get("vgpu"))

    def driver_source(self) -> Value:
        """nvidia_driver_source, else grid on a vGPU guest's profile, else the CUDA repository."""
        source = self.get("nvidia_driver_source")
        if source is not None:
            return source
        if self.vgpu:
            return Value("grid", f"profile {self.profile_name} (vGPU guest: source grid)", False)
        return Value("cuda_repo", "role nvidia_driver (default: cuda_repo)", False)

    def branch(self) -> tuple[int, Value] | None:
        value = self.get("nvidia_driver_branch")
        if value is None:
            return None
        try:
            return int(str(value.value)), value
        except ValueError:
            return None  # a type problem, reported by the schema check
