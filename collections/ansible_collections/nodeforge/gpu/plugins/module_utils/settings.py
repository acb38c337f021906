# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Each role's resolved settings, from the one model (model.HostModel): what the roles used to compute in chains of
set_fact. The action nodeforge.gpu.resolve_settings returns them as the role's facts; `nodeforge check` reads the
same values through the same model."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

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
    """Stack, version and sources; node: {os_id: e.g. debian12, inbox_names: Debian name -> this OS's name}."""
    manifest = table(m.manifest, "ofed")
    mode = m.get("ofed_mode")
    mode_text = _text(mode.value) if mode else ""
    os_id = _text(node.get("os_id"))
    distro = _text(table(manifest, "distros").get(os_id)) or os_id
    own_version = _text(m.variables.get("ofed_version"))

    def source_url(kind: str, own: str) -> str:
        if own:
            return own
        url = _text(table(manifest, kind).get("baseurl" if kind == "doca" else "url"))
        return url.replace("{version}", own_version or _text(table(manifest, kind).get("version"))).replace(
            "{distro}", distro
        )

    mlnx_url_own = _text(m.variables.get("ofed_mlnx_ofed_url"))
    checksum, checksum_from = _own_or_manifest(
        m, "ofed_mlnx_ofed_checksum", table(manifest, "mlnx_ofed").get("checksum"), "ofed.mlnx_ofed.checksum"
    )
    names = node.get("inbox_names") or {}
    inbox = m.variables.get("ofed_inbox_packages") or table(manifest, "inbox").get("packages") or []
    return {
        "__ofed_mode": mode_text,
        "__ofed_mode_from": mode.origin if mode else "nowhere",
        "__ofed_distro": distro,
        "__ofed_version": (own_version or _text(table(manifest, mode_text).get("version")))
        if mode_text != "inbox"
        else "",
        "__ofed_version_from": "ofed_version" if own_version else f"version manifest ofed.{mode_text}.version",
        "__ofed_doca_repo_url": source_url("doca", _text(m.variables.get("ofed_doca_repo_url"))),
        "__ofed_doca_key_url": _own_or_manifest(m, "ofed_doca_key_url", table(manifest, "doca").get("key_url"), "")[0],
        "__ofed_doca_profile_package": _own_or_manifest(
            m, "ofed_doca_profile_package", table(manifest, "doca").get("profile_package") or "doca-ofed", ""
        )[0],
        "__ofed_mlnx_url": source_url("mlnx_ofed", mlnx_url_own),
        "__ofed_mlnx_url_from": "ofed_mlnx_ofed_url" if mlnx_url_own else "version manifest ofed.mlnx_ofed.url",
        "__ofed_mlnx_checksum": checksum,
        "__ofed_mlnx_checksum_from": checksum_from,
        # The manifest lists Debian's names; the role's vars/<os>.yml maps the ones that differ.
        "__ofed_inbox_pkgs": [names.get(name, name) for name in inbox],
    }


RESOLVERS: dict[str, Callable[[HostModel, Mapping[str, Any]], dict]] = {
    "nvidia_driver": nvidia_driver,
    "ofed": ofed,
}
