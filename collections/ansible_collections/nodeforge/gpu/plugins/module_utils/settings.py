# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Each role's resolved settings, from the one model (model.HostModel): what the roles used to compute in chains of
set_fact. The action nodeforge.gpu.resolve_settings returns them as the role's facts; `nodeforge check` reads the
same values through the same model."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from ansible_collections.nodeforge.gpu.plugins.module_utils import parsers
from ansible_collections.nodeforge.gpu.plugins.module_utils.model import HostModel, as_bool, is_empty, table


def _text(value: Any) -> str:
    return "" if is_empty(value) else str(value).strip()


def nvidia_driver(m: HostModel, node: Mapping[str, Any]) -> dict:
    """Source, branch, flavor and the wanted version; node: {dgx_os: whether /etc/dgx-release exists}."""
    source = m.driver_source().value
    branch = m.get("nvidia_driver_branch")
    branch_text = _text(branch.value) if branch else ""
    flavor = m.get("nvidia_driver_flavor")
    version = m.get("nvidia_driver_version")
    if version is not None:
        wanted = _text(version.value)
    elif source == "grid":
        wanted = _text(table(m.manifest, "nvidia_driver", "grid").get("version"))
    else:
        wanted = _text(table(m.manifest, "nvidia_driver", "branches", branch_text).get("version"))
    return {
        "__nvidia_driver_source": source,
        "__nvidia_driver_branch": branch_text,
        "__nvidia_driver_flavor": flavor.value if flavor else "open",
        "__nvidia_driver_managed": not as_bool(node.get("dgx_os"))
        or as_bool(m.variables.get("nvidia_driver_manage_on_dgx")),
        "__nvidia_driver_in_container": as_bool(m.variables.get("nodeforge_in_container")),
        "__nvidia_driver_wanted_version": wanted,
    }


def _own_or_manifest(m: HostModel, name: str, manifest_value: Any, manifest_path: str) -> tuple[str, str]:
    own = m.variables.get(name)
    if not is_empty(own):
        return _text(own), name
    return _text(manifest_value), f"version manifest {manifest_path}"


def ofed(m: HostModel, node: Mapping[str, Any]) -> dict:
    """Stack, version and sources; node: {os_id: e.g. debian12, mlnx_os_id: MLNX_OFED's label where it differs
    (rhel9.4: its EL tarballs are per minor release, DOCA's repositories per major), inbox_names: Debian name -> this
    OS's name, installed_stack: doca | mlnx_ofed | inbox | none | "" (not read yet)}."""
    manifest = table(m.manifest, "ofed")
    mode = m.get("ofed_mode")
    mode_text = _text(mode.value) if mode else ""
    mode_from = mode.origin if mode else "nowhere"
    installed = _text(node.get("installed_stack"))
    if installed in ("doca", "mlnx_ofed", "inbox") and not (mode and mode.explicit):
        # Unset: the node keeps what it runs (a default must never replace an installed stack).
        mode_text, mode_from = installed, f"the installed stack (ofed_mode unset; the default would be {mode_text})"
    os_id = _text(node.get("os_id"))
    distro = _text(table(manifest, "distros").get(os_id)) or os_id
    own_version = _text(m.variables.get("ofed_version"))

    mlnx_distro = _text(node.get("mlnx_os_id")) or distro

    def source_url(kind: str, own: str) -> str:
        if own:
            return own
        url = _text(table(manifest, kind).get("baseurl" if kind == "doca" else "url"))
        return url.replace("{version}", own_version or _text(table(manifest, kind).get("version"))).replace(
            "{distro}", distro if kind == "doca" else mlnx_distro
        )

    mlnx_url_own = _text(m.variables.get("ofed_mlnx_ofed_url"))
    checksum, checksum_from = _own_or_manifest(
        m, "ofed_mlnx_ofed_checksum", table(manifest, "mlnx_ofed").get("checksum"), "ofed.mlnx_ofed.checksum"
    )
    names = node.get("inbox_names") or {}
    inbox = m.variables.get("ofed_inbox_packages") or table(manifest, "inbox").get("packages") or []
    return {
        "__ofed_mode": mode_text,
        "__ofed_mode_from": mode_from,
        "__ofed_distro": distro,
        "__ofed_version": (own_version or _text(table(manifest, mode_text).get("version")))
        if mode_text != "inbox"
        else "",
        "__ofed_version_from": "ofed_version" if own_version else f"version manifest ofed.{mode_text}.version",
        "__ofed_doca_repo_url": source_url("doca", _text(m.variables.get("ofed_doca_repo_url"))),
        "__ofed_doca_key_url": _text(m.variables.get("ofed_doca_key_url"))
        or _text(table(manifest, "doca").get("key_url")),
        "__ofed_doca_key_fingerprints": list(table(manifest, "doca").get("key_fingerprints") or []),
        "__ofed_doca_repo_gpgcheck": table(manifest, "doca").get("repo_gpgcheck") is not False,
        "__ofed_doca_profile_package": _text(m.variables.get("ofed_doca_profile_package"))
        or _text(table(manifest, "doca").get("profile_package") or "doca-ofed"),
        "__ofed_mlnx_url": source_url("mlnx_ofed", mlnx_url_own),
        "__ofed_mlnx_url_from": "ofed_mlnx_ofed_url" if mlnx_url_own else "version manifest ofed.mlnx_ofed.url",
        "__ofed_mlnx_checksum": checksum,
        "__ofed_mlnx_checksum_from": checksum_from,
        # The manifest lists Debian's names; the role's vars/<os>.yml maps the ones that differ.
        "__ofed_inbox_pkgs": [names.get(name, name) for name in inbox],
    }


def _first(candidates: list[tuple[Any, str]]) -> tuple[str, str]:
    """The first non-empty candidate and where it came from; ("", "nowhere") when none is set."""
    return next(((_text(value), origin) for value, origin in candidates if _text(value)), ("", "nowhere"))


def _major(version: Any) -> str:
    return _text(version).split(".")[0]


def gpudirect_rdma(m: HostModel, node: Mapping[str, Any]) -> dict:
    """The NVIDIA driver GPUDirect works with (flavor, branch, version, peermem module, each with its origin), the
    driver's DKMS modules and the kernels to build for. node: {dkms_status: `dkms status` output, kernel: running}.

    First non-empty source wins: the role's own variable, what the nvidia_driver role found (nvidia_driver_facts),
    the nvidia_driver role's variables, the hardware profile, the version manifest."""
    v = m.variables
    facts = v.get("nvidia_driver_facts")
    facts = facts if isinstance(facts, Mapping) else {}
    profile_defaults = table(m.profile, "defaults")
    profile = f"hardware profile {_text(v.get('nodeforge_profile'))}"
    own_version = v.get("gpudirect_rdma_driver_version")
    sources = {
        "flavor": [
            (v.get("gpudirect_rdma_driver_flavor"), "gpudirect_rdma_driver_flavor"),
            (facts.get("flavor"), "nvidia_driver_facts.flavor"),
            (v.get("nvidia_driver_flavor"), "nvidia_driver_flavor"),
            (profile_defaults.get("nvidia_driver_flavor"), profile),
        ],
        "version": [
            (own_version, "gpudirect_rdma_driver_version"),
            (facts.get("version"), "nvidia_driver_facts.version"),
            (v.get("nvidia_driver_version"), "nvidia_driver_version"),
        ],
        "branch": [
            (v.get("gpudirect_rdma_driver_branch"), "gpudirect_rdma_driver_branch"),
            (_major(own_version), "gpudirect_rdma_driver_version"),
            (facts.get("branch"), "nvidia_driver_facts.branch"),
            (_major(facts.get("version")), "nvidia_driver_facts.version"),
            (v.get("nvidia_driver_branch"), "nvidia_driver_branch"),
            (_major(v.get("nvidia_driver_version")), "nvidia_driver_version"),
            (profile_defaults.get("nvidia_driver_branch"), profile),
            (table(m.manifest, "nvidia_driver").get("branch"), "version manifest nvidia_driver.branch"),
        ],
        "peermem_module": [
            (v.get("gpudirect_rdma_peermem_module_name"), "gpudirect_rdma_peermem_module_name"),
            (
                table(facts, "modules", "nvidia_peermem").get("modprobe"),
                "nvidia_driver_facts.modules.nvidia_peermem.modprobe",
            ),
        ],
    }
    driver: dict[str, str] = {}
    for key, candidates in sources.items():
        driver[key], driver[f"{key}_from"] = _first(candidates)

    # The driver's DKMS modules, per kernel (a module only added to DKMS, for no kernel yet, is not a build): those
    # the pattern names, and the one the nvidia_driver role named when it ran.
    built = [e for e in parsers.dkms_status(node.get("dkms_status") or "") if e["kernel"]]
    pattern = re.compile(_text(v.get("gpudirect_rdma_nvidia_dkms_pattern")) or "^$")
    named = _text(table(facts, "dkms").get("name"))
    nvidia_dkms = [e for e in built if pattern.match(e["name"])]
    nvidia_dkms += [e for e in built if named and e["name"] == named and not pattern.match(e["name"])]

    own_kernels = v.get("gpudirect_rdma_kernels") or []
    facts_kernels = table(facts, "dkms").get("kernels") or []
    dkms_kernels = list(dict.fromkeys(e["kernel"] for e in nvidia_dkms))
    kernels, kernels_from = next(
        (found, origin)
        for found, origin in (
            (list(own_kernels), "gpudirect_rdma_kernels"),
            (list(facts_kernels), "nvidia_driver_facts.dkms.kernels"),
            (dkms_kernels, "the NVIDIA DKMS modules (dkms status)"),
            ([_text(node.get("kernel"))], "the running kernel"),
        )
        if found
    )
    return {
        "__gpudirect_rdma_driver": driver,
        "__gpudirect_rdma_nvidia_dkms": nvidia_dkms,
        "__gpudirect_rdma_kernels": kernels,
        "__gpudirect_rdma_kernels_from": kernels_from,
        "__gpudirect_rdma_min_branch": int(table(m.manifest, "gpudirect_rdma").get("nvidia_peermem_min_branch") or 0),
        "__gpudirect_rdma_driver_container": driver_container(m),
    }


def driver_container(m: HostModel) -> bool:
    """Whether the GPU Operator's driver container provides this node's driver (nvidia_driver_source operator): what
    the nvidia_driver role found when it ran, else the configuration."""
    facts = m.variables.get("nvidia_driver_facts")
    if isinstance(facts, Mapping) and "driver_container" in facts:
        return as_bool(facts["driver_container"])
    return m.driver_source().value == "operator"


def nvidia_container_toolkit(m: HostModel, node: Mapping[str, Any]) -> dict:
    """Version, packages, repository and key, the default runtime, whether OCI hooks are wanted.
    node: {url_key: the manifest's repository URL for this OS's package family (deb_url or rpm_url)}."""
    v = m.variables
    manifest = table(m.manifest, "nvidia_container_toolkit")
    own_version = _text(v.get("nvidia_container_toolkit_version"))
    runtimes = v.get("nvidia_container_toolkit_runtimes") or []
    return {
        "__nvidia_container_toolkit_version": own_version or _text(manifest.get("version")),
        "__nvidia_container_toolkit_version_from": "nvidia_container_toolkit_version"
        if own_version
        else "version manifest nvidia_container_toolkit.version",
        "__nvidia_container_toolkit_packages": list(manifest.get("packages") or []),
        "__nvidia_container_toolkit_repo_url": _text(v.get("nvidia_container_toolkit_repo_url"))
        or _text(manifest.get(_text(node.get("url_key")))),
        "__nvidia_container_toolkit_key_url": _text(v.get("nvidia_container_toolkit_key_url"))
        or _text(manifest.get("key_url")),
        "__nvidia_container_toolkit_key_fingerprints": list(manifest.get("key_fingerprints") or []),
        "__nvidia_container_toolkit_default": _text(v.get("__nvidia_container_toolkit_runtime_name"))
        if as_bool(v.get("nvidia_container_toolkit_set_as_default"))
        else "",
        "__nvidia_container_toolkit_hooks": "podman" in runtimes
        or ("crio" in runtimes and v.get("nvidia_container_toolkit_crio_mode") == "hooks"),
        "__nvidia_container_toolkit_driver_container": driver_container(m),
    }


def selinux_modules(m: HostModel, node: Mapping[str, Any]) -> dict:
    """Nothing to resolve from the configuration (the policy type comes from the node); the action's value check
    still runs for the role's variables."""
    return {}


RESOLVERS: dict[str, Callable[[HostModel, Mapping[str, Any]], dict]] = {
    "nvidia_driver": nvidia_driver,
    "ofed": ofed,
    "gpudirect_rdma": gpudirect_rdma,
    "nvidia_container_toolkit": nvidia_container_toolkit,
    "selinux_modules": selinux_modules,
}
