# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Cross-variable rules: every inventory-wide rule lives here, once.

`nodeforge check`, the validation play that opens every playbook (action nodeforge.gpu.validate_inventory) and
so AWX and plain ansible-playbook runs all evaluate these same functions on each host's effective values
(model.HostModel). A violation names the source of the deciding value so the operator knows which file to edit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from ansible_collections.nodeforge.gpu.plugins.module_utils import k8s_images, k8s_objects
from ansible_collections.nodeforge.gpu.plugins.module_utils.model import (
    MANIFEST_OVERRIDES,
    HostModel,
    Value,
    as_bool,
    is_empty,
    is_templated,
    manifest_override_source,
    table,
)

PRE_TURING = ("kepler", "maxwell", "pascal", "volta")
LAST_BRANCH_PRE_TURING = 580
NVIDIA_PEERMEM_FIRST_BRANCH = 470


@dataclass(frozen=True)
class Violation:
    where: str  # the Value.origin of the deciding variable
    variable: str
    found: str
    expected: str


Rule = Callable[[HostModel], Iterator[Violation]]
RULES: list[Rule] = []


RPM_OSES = ("rhel", "rocky")


def _os_name(ctx: HostModel) -> str:
    """The node OS the inventory declares (nodeforge_os), "" when it does not."""
    value = ctx.get("nodeforge_os")
    return str(value.value) if value and value.value else ""


def rule(func: Rule) -> Rule:
    RULES.append(func)
    return func


def _overridden(ctx: HostModel, path: str) -> str:
    """The manifest override variable that sets the effective manifest's entry at path (dotted), "" when the shipped
    manifest's value stands: a problem with a manifest value names the variable that put it there."""
    return manifest_override_source(ctx.variables, path.split(".")) or ""


# Warnings: what check reports without refusing (a verification the operator turned off, on purpose or not).
WARNINGS: list[Rule] = []


def warning(func: Rule) -> Rule:
    WARNINGS.append(func)
    return func


@rule
def open_modules_need_turing(ctx: HostModel) -> Iterator[Violation]:
    flavor = ctx.get("nvidia_driver_flavor")
    if flavor and flavor.value == "open" and ctx.arch in PRE_TURING:
        yield Violation(
            flavor.origin,
            "nvidia_driver_flavor",
            f"'open' on profile {ctx.profile_name} ({ctx.arch})",
            "proprietary: NVIDIA's open kernel modules need Turing or newer and cannot drive this GPU",
        )


@rule
def branch_supports_architecture(ctx: HostModel) -> Iterator[Violation]:
    found = ctx.branch()
    if found and ctx.arch in PRE_TURING and found[0] > LAST_BRANCH_PRE_TURING:
        branch, value = found
        yield Violation(
            value.origin,
            "nvidia_driver_branch",
            f"{branch} on profile {ctx.profile_name} ({ctx.arch})",
            f"{LAST_BRANCH_PRE_TURING} or older: R{LAST_BRANCH_PRE_TURING} is the last branch for Maxwell/Pascal/Volta",
        )


@rule
def driver_version_matches_branch(ctx: HostModel) -> Iterator[Violation]:
    version = ctx.get("nvidia_driver_version")
    found = ctx.branch()
    if version and version.explicit and version.value and found and not str(version.value).startswith(f"{found[0]}."):
        yield Violation(
            version.origin,
            "nvidia_driver_version",
            f"{version.value} with nvidia_driver_branch {found[0]} (from {found[1].origin})",
            f"a {found[0]}.x version, or nvidia_driver_branch set to match",
        )


@rule
def peer_memory_module_matches_branch(ctx: HostModel) -> Iterator[Violation]:
    module = ctx.get("gpudirect_rdma_module")
    found = ctx.branch()
    if not module or not found:
        return
    branch = found[0]
    if module.value == "nv_peer_mem" and branch >= NVIDIA_PEERMEM_FIRST_BRANCH:
        yield Violation(
            module.origin,
            "gpudirect_rdma_module",
            f"nv_peer_mem with driver branch {branch}",
            f"nvidia-peermem: the driver ships it from R{NVIDIA_PEERMEM_FIRST_BRANCH} on and nv_peer_mem is "
            f"only for branches below {NVIDIA_PEERMEM_FIRST_BRANCH}",
        )
    if module.value == "nvidia-peermem" and branch < NVIDIA_PEERMEM_FIRST_BRANCH:
        yield Violation(
            module.origin,
            "gpudirect_rdma_module",
            f"nvidia-peermem with driver branch {branch}",
            f"nv_peer_mem, or a driver branch >= {NVIDIA_PEERMEM_FIRST_BRANCH}",
        )


@rule
def choices_supported_by_os(ctx: HostModel) -> Iterator[Violation]:
    os_value = ctx.get("nodeforge_os")
    if not os_value or not os_value.value:
        return
    os_name = str(os_value.value)
    for variable, choices in table(ctx.manifest, "os_support").items():
        choice = ctx.get(variable)
        if not choice or choice.value in (None, ""):
            continue
        supported = choices.get(str(choice.value)) if isinstance(choices, dict) else None
        if supported is not None and os_name not in supported:
            usable = [c for c, oses in choices.items() if os_name in (oses or [])]
            path = f"os_support.{variable}.{choice.value}"
            yield Violation(
                choice.origin,
                variable,
                f"{choice.value!r} on nodeforge_os {os_name} (from {os_value.origin})",
                f"a choice {os_name} can use: {', '.join(usable) or 'none'}"
                + (
                    f" (the OSes {choice.value} supports from {ctx.manifest_origin(path)})"
                    if _overridden(ctx, path)
                    else ""
                ),
            )


@rule
def distro_ships_the_branch(ctx: HostModel) -> Iterator[Violation]:
    source = ctx.get("nvidia_driver_source")
    os_value = ctx.get("nodeforge_os")
    found = ctx.branch()
    if not (source and source.value == "distro" and os_value and os_value.value and found):
        return
    shipped = [str(b) for b in table(ctx.manifest, "nvidia_driver", "distro_branches").get(str(os_value.value)) or []]
    if shipped and str(found[0]) not in shipped:
        path = f"nvidia_driver.distro_branches.{os_value.value}"
        listed = (
            ctx.manifest_origin(path) if _overridden(ctx, path) else "version manifest nvidia_driver.distro_branches"
        )
        yield Violation(
            found[1].origin,
            "nvidia_driver_branch",
            f"{found[0]} with nvidia_driver_source distro on nodeforge_os {os_value.value} (from {os_value.origin})",
            f"a branch {os_value.value} ships ({', '.join(shipped)}; {listed}), or nvidia_driver_source cuda_repo",
        )


def _missing(data: dict, *keys: str) -> list[str]:
    return [key for key in keys if is_empty(data.get(key))]


def _unverified_tarball(
    ctx: HostModel, prefix: str, section: tuple[str, str], why: str, deciding: Value
) -> Iterator[Violation]:
    """A tarball needs a URL and a checksum: the host's own <prefix>_url/_checksum, else the manifest's
    <component>.<tarball> table (section names both)."""
    component, tarball = section
    manifest = table(ctx.manifest, component, tarball)
    for field in ("url", "checksum"):
        # HostModel.get is None for an unset or empty own value.
        if ctx.get(f"{prefix}_{field}") is None and manifest.get(field) in (None, ""):
            path = f"{component}.{tarball}.{field}"
            emptied = f"; {path} left empty by {ctx.manifest_origin(path)}" if _overridden(ctx, path) else ""
            yield Violation(
                deciding.origin,
                f"{prefix}_{field}",
                f"no {field} for the {tarball} tarball ({why}, from {deciding.origin}{emptied})",
                f"{prefix}_{field}, or {path} in nodeforge_manifest_overrides"
                + ("; <algorithm>:<hex digest> of the tarball you verified" if field == "checksum" else ""),
            )


@rule
def source_tarballs_are_verified(ctx: HostModel) -> Iterator[Violation]:
    """nv_peer_mem and GDRCopy are built from tarballs: an unverifiable one is refused here, before any node."""
    module = ctx.get("gpudirect_rdma_module")
    if module and module.value == "nv_peer_mem":
        yield from _unverified_tarball(
            ctx,
            "gpudirect_rdma_nv_peer_mem",
            ("gpudirect_rdma", "nv_peer_mem"),
            "gpudirect_rdma_module: nv_peer_mem",
            module,
        )
    gdrcopy = ctx.get("gpudirect_rdma_gdrcopy")
    if gdrcopy and gdrcopy.value is True:
        yield from _unverified_tarball(
            ctx, "gpudirect_rdma_gdrcopy", ("gpudirect_rdma", "gdrcopy"), "gpudirect_rdma_gdrcopy: true", gdrcopy
        )


@rule
def mlnx_ofed_tarball_is_verified(ctx: HostModel) -> Iterator[Violation]:
    """The legacy MLNX_OFED tarball runs its installer as root: never without a checksum."""
    mode = ctx.get("ofed_mode")
    if mode and mode.value == "mlnx_ofed":
        yield from _unverified_tarball(ctx, "ofed_mlnx_ofed", ("ofed", "mlnx_ofed"), "ofed_mode: mlnx_ofed", mode)


@rule
def selinux_disabled_needs_opt_in(ctx: HostModel) -> Iterator[Violation]:
    """Turning SELinux off is never a side effect: selinux_modules_state disabled needs the explicit opt-in."""
    state = ctx.get("selinux_modules_state")
    allowed = ctx.get("selinux_modules_allow_disabled")
    if state and state.value == "disabled" and not (allowed and allowed.value is True):
        yield Violation(
            state.origin,
            "selinux_modules_state",
            "disabled (turns SELinux off at the next boot) without selinux_modules_allow_disabled: true",
            "enforcing or permissive (or leave it unset); disabled only together with selinux_modules_allow_disabled:"
            " true",
        )


@rule
def grid_driver_is_named(ctx: HostModel) -> Iterator[Violation]:
    """vGPU guests install the GRID guest driver from a local mirror the manifest must name."""
    source = ctx.driver_source()
    if source.value != "grid":
        return
    origin = source.origin
    grid = table(ctx.manifest, "nvidia_driver", "grid")
    os_name = _os_name(ctx)
    formats = ["rpm"] if os_name.startswith(RPM_OSES) else ["deb"] if os_name else ["deb", "rpm"]
    missing = _missing(grid, "version", "package")
    named = [fmt for fmt in formats if not is_empty(table(grid, fmt).get("url"))]
    if not named:
        missing.append(f"{'|'.join(formats)}.url")
    # The Licensing Portal package is installed without a signed repository: its checksum is what vouches for it.
    missing += [f"{fmt}.checksum" for fmt in named if is_empty(table(grid, fmt).get("checksum"))]
    if missing:
        # The override variables that left an entry empty (init's FILL IN placeholders), with where each was set.
        emptied: dict[str, list[str]] = {}
        for field in missing:
            for one in [f"{fmt}.url" for fmt in formats] if field == f"{'|'.join(formats)}.url" else [field]:
                name = _overridden(ctx, f"nvidia_driver.grid.{one}")
                if name:
                    emptied.setdefault(name, []).append(one)
        left = "".join(
            f"; left empty by {name}{'' if ctx.origin(name) == name else f' ({ctx.origin(name)})'}: {', '.join(fields)}"
            for name, fields in emptied.items()
        )
        yield Violation(
            origin,
            MANIFEST_OVERRIDES,
            "no GRID guest driver: version manifest nvidia_driver.grid lacks " + ", ".join(missing) + left,
            "nvidia_driver.grid.{version, package, deb|rpm: {url, checksum}} naming your local copy of the "
            "Licensing Portal package (nodeforge_manifest_overrides)",
        )


@rule
def driver_container_has_its_operator(ctx: HostModel) -> Iterator[Violation]:
    """nvidia_driver_source operator leaves the driver to the GPU Operator's driver container: the cluster must use
    the GPU Operator, the node must not need a host-only driver (vGPU GRID, nv_peer_mem), and the site's own chart
    values must not contradict what nodeforge installs (k8s_objects.gpu_operator_conflicts, also enforced by render)."""
    source = ctx.driver_source()
    enabled = ctx.get("k8s_gpu_operator_enabled")
    on = enabled is not None and as_bool(enabled.value)
    if source.value == "operator":
        if not on:
            yield Violation(
                source.origin,
                "nvidia_driver_source",
                "operator with k8s_gpu_operator_enabled false"
                + (f" (from {enabled.origin})" if enabled is not None and enabled.explicit else ""),
                "k8s_gpu_operator_enabled: true (the GPU Operator's driver container installs this node's driver; "
                "without it nothing would), or a host driver source (cuda_repo, distro, grid)",
            )
        if ctx.vgpu:
            yield Violation(
                source.origin,
                "nvidia_driver_source",
                f"operator on the vGPU guest profile {ctx.profile_name}",
                "grid: nodeforge installs the licensed vGPU guest driver on the host",
            )
        module = ctx.get("gpudirect_rdma_module")
        if module is not None and module.value == "nv_peer_mem":
            yield Violation(
                module.origin,
                "gpudirect_rdma_module",
                "nv_peer_mem with nvidia_driver_source operator",
                "nvidia-peermem (the GPU Operator's driver container loads it) or none",
            )
    own = ctx.get("k8s_gpu_operator_values")
    if not on or own is None or not isinstance(own.value, Mapping):
        return
    plugin = ctx.get("k8s_gpu_device_plugin_enabled")
    for found, expected in k8s_objects.gpu_operator_conflicts(
        own.value, str(source.value), plugin is None or as_bool(plugin.value)
    ):
        yield Violation(own.origin, "k8s_gpu_operator_values", found, expected)


@rule
def image_mirror_maps_by_digest(ctx: HostModel) -> Iterator[Violation]:
    """k8s_cluster_image_mirror as render and apply read it (k8s_images.mirror_map): each entry an image reference
    mapped to the site registry's image by digest; and not beside the GPU Operator, whose chart's images nodeforge does
    not mirror (k8s_objects.GPU_OPERATOR_UNMIRRORED, also enforced by render). A value that is no mapping is the
    schema's to report."""
    mirror = ctx.get(k8s_images.VARIABLE)
    if mirror is None or not isinstance(mirror.value, Mapping):
        return
    if any(is_templated(k) or is_templated(v) for k, v in mirror.value.items()):
        return  # known only when the play templates it
    try:
        mapping = k8s_images.mirror_map(mirror.value)
    except k8s_objects.K8sConfigError as exc:
        variable, _, message = str(exc).partition(": ")
        found, _, expected = message.partition("; expected ")
        yield Violation(
            mirror.origin,
            variable,
            found,
            expected
            or "an upstream image reference mapped to the same image in the site's registry by digest "
            "(registry/path@sha256:<64 hex digits>), as nodeforge mirror overrides --registry writes them",
        )
        return
    enabled = ctx.get("k8s_gpu_operator_enabled")
    if mapping and enabled is not None and as_bool(enabled.value):
        found, expected = k8s_objects.GPU_OPERATOR_UNMIRRORED
        where = f" (k8s_gpu_operator_enabled from {enabled.origin})" if enabled.explicit else ""
        yield Violation(mirror.origin, k8s_images.VARIABLE, found + where, expected)


VALIDATE_CERTS = (
    "nvidia_container_toolkit_validate_certs",
    "ofed_validate_certs",
    "gpudirect_rdma_validate_certs",
    "preflight_repository_validate_certs",
    "k8s_mpi_operator_validate_certs",
    "k8s_scale_csi_validate_certs",
)


@rule
def gpu_sharing_has_replicas(ctx: HostModel) -> Iterator[Violation]:
    """The device plugin's time-slicing and MPS need at least 2 replicas of each GPU, and MPS no mixed MIG strategy."""
    sharing, replicas = ctx.get("k8s_gpu_device_plugin_sharing"), ctx.get("k8s_gpu_device_plugin_replicas")
    if sharing is None or sharing.value == "none":
        return
    count = replicas.value if replicas is not None else 1
    if not isinstance(count, int) or count < 2:
        yield Violation(
            replicas.origin if replicas is not None and replicas.explicit else sharing.origin,
            "k8s_gpu_device_plugin_replicas",
            f"{count} with k8s_gpu_device_plugin_sharing {sharing.value}",
            "at least 2 replicas of each GPU for time-slicing or MPS",
        )
    strategy = ctx.get("k8s_gpu_device_plugin_mig_strategy")
    if sharing.value == "mps" and strategy is not None and strategy.value == "mixed":
        yield Violation(
            strategy.origin,
            "k8s_gpu_device_plugin_mig_strategy",
            "mixed with k8s_gpu_device_plugin_sharing mps",
            "none or single: the device plugin's MPS sharing does not support the mixed MIG strategy",
        )


@rule
def rdma_resources_name_the_profile_s_hcas(ctx: HostModel) -> Iterator[Violation]:
    """Explicit RDMA resources list netdevs of the node's profile (the ConfigMap names devices by them)."""
    resources = ctx.get("k8s_rdma_shared_device_plugin_resources")
    if resources is None or not isinstance(resources.value, list) or not ctx.profile:
        return
    known = [str(h.get("netdev")) for h in ctx.profile.get("hcas") or [] if h.get("netdev")]
    for index, resource in enumerate(resources.value):
        devices = resource.get("devices") if isinstance(resource, dict) else None
        name = resource.get("name") if isinstance(resource, dict) else None
        unknown = [d for d in devices or [] if d not in known]
        if not isinstance(name, str) or not name or not devices or unknown:
            yield Violation(
                resources.origin,
                f"k8s_rdma_shared_device_plugin_resources[{index}]",
                repr(resource),
                f"{{name: <resource name>, devices: [<netdevs>]}} with netdevs of profile {ctx.profile_name}'s HCAs: "
                f"{', '.join(known) or 'none (the profile has no HCA)'}",
            )


@warning
def certificates_are_validated(ctx: HostModel) -> Iterator[Violation]:
    for name in VALIDATE_CERTS:
        value = ctx.get(name)
        if value is not None and value.explicit and value.value is False:
            yield Violation(
                value.origin,
                name,
                "false: TLS certificates are not validated for these downloads",
                "true (the default); mirror with a certificate the node trusts instead",
            )


@warning
def cuda_keyring_is_verified(ctx: HostModel) -> Iterator[Violation]:
    """cuda-keyring is the trust anchor of NVIDIA's CUDA repository on apt nodes: without a checksum the .deb is
    trusted on HTTPS alone."""
    if ctx.driver_source().value != "cuda_repo":
        return
    if _os_name(ctx).startswith(RPM_OSES):
        return
    cuda_repo = table(ctx.manifest, "nvidia_driver", "cuda_repo")
    if is_empty(cuda_repo.get("keyring_checksum")) and not cuda_repo.get("keyring_fingerprints"):
        checksum, fingerprints = (
            "nvidia_driver.cuda_repo.keyring_checksum",
            "nvidia_driver.cuda_repo.keyring_fingerprints",
        )
        emptied = f" (keyring_fingerprints emptied by {ctx.manifest_origin(fingerprints)})"
        yield Violation(
            ctx.manifest_origin(checksum),
            _overridden(ctx, checksum) or _overridden(ctx, fingerprints) or MANIFEST_OVERRIDES,
            "neither a checksum nor a key fingerprint for cuda-keyring"
            + (emptied if _overridden(ctx, fingerprints) else "")
            + ": the repository's trust anchor is installed on HTTPS alone",
            "nvidia_driver.cuda_repo.keyring_fingerprints: [<40 hex digits>] of the key you checked out of band (or"
            " keyring_checksum: sha256:<hex> of the .deb)",
        )


def _unpinned(ctx: HostModel, section: str, key: str, what: str) -> Iterator[Violation]:
    if not table(ctx.manifest, *section.split(".")).get(key):
        path = f"{section}.{key}"
        yield Violation(
            ctx.manifest_origin(path),
            _overridden(ctx, path) or MANIFEST_OVERRIDES,
            f"no fingerprint pinned for the {what} signing key: it is trusted on its download alone",
            f"{section}.{key}: [<40 hex digits>] of the key you checked out of band",
        )


@warning
def signing_keys_are_pinned(ctx: HostModel) -> Iterator[Violation]:
    rpm = _os_name(ctx).startswith(RPM_OSES)
    yield from _unpinned(ctx, "nvidia_container_toolkit", "key_fingerprints", "NVIDIA Container Toolkit repository")
    mode = ctx.get("ofed_mode")
    if mode and mode.value == "doca":
        yield from _unpinned(ctx, "ofed.doca", "key_fingerprints", "DOCA repository")
        if table(ctx.manifest, "ofed", "doca").get("repo_gpgcheck") is False:
            yield Violation(
                ctx.manifest_origin("ofed.doca.repo_gpgcheck"),
                _overridden(ctx, "ofed.doca.repo_gpgcheck") or MANIFEST_OVERRIDES,
                "false: dnf does not verify the DOCA repository's metadata signature",
                "true (the default), with a mirror that keeps repomd.xml.asc",
            )
    if rpm and ctx.driver_source().value == "cuda_repo":
        yield from _unpinned(ctx, "nvidia_driver.cuda_repo", "key_fingerprints_rpm", "CUDA repository")


@rule
def scale_client_config_fits_the_profile(ctx: HostModel) -> Iterator[Violation]:
    """scale_client_config as the role can apply it: its sections (common, scale_client_node_class), attributes the
    role manages with values of their form, and verbsPorts entries that name HCAs of the host's profile."""
    from ansible_collections.nodeforge.gpu.plugins.module_utils import scale

    config, node_class = ctx.get("scale_client_config"), ctx.get("scale_client_node_class")
    if config is None:
        return
    hcas = (ctx.profile.get("hcas") or []) if ctx.profile else None
    for path, found, expected in scale.config_problems(
        config.value, node_class.value if node_class else "", hcas, ctx.profile_name
    ):
        origin = node_class.origin if path == "scale_client_node_class" and node_class else config.origin
        yield Violation(origin, path, found, expected)


def _positive(value: Value | None) -> float | None:
    """A threshold's number; None when unset or not a number (the schema check reports the type)."""
    if value is None or isinstance(value.value, bool):
        return None
    try:
        return float(value.value)
    except (TypeError, ValueError):
        return None


@rule
def validate_thresholds_fit(ctx: HostModel) -> Iterator[Violation]:
    """nodeforge validate's thresholds: positive, a fraction of the line rate in (0, 1], and an explicit ib_write_bw
    floor the profile's HCAs can reach (a floor above the line rate fails every node, whatever its state)."""
    for name, unit in (
        ("validate_rdma_min_bw_mbs", "MB/s"),
        ("validate_nccl_min_busbw_gbs", "GB/s"),
        ("validate_nccl_max_latency_us", "microseconds"),
        ("validate_perf_timeout", "seconds"),
        ("validate_ib_write_bw_attempts", "runs of ib_write_bw per HCA"),
    ):
        value = ctx.get(name)
        number = _positive(value)
        if value is not None and number is not None and number <= 0:
            yield Violation(value.origin, name, f"{value.value}", f"a number above 0 ({unit})")
    fraction = ctx.get("validate_rdma_fraction")
    share = _positive(fraction)
    if fraction is not None and share is not None and not 0 < share <= 1:
        yield Violation(
            fraction.origin,
            "validate_rdma_fraction",
            f"{fraction.value}",
            "a fraction of the HCAs' line rate above 0 and at most 1 (the default 0.9 is 11250 MB/s on 100 Gb/s EDR)",
        )
    floor = ctx.get("validate_rdma_min_bw_mbs")
    number = _positive(floor)
    rates = [h.get("rate_gbps") for h in (ctx.profile or {}).get("hcas") or [] if isinstance(h, Mapping)]
    rates = [float(r) for r in rates if isinstance(r, (int, float)) and not isinstance(r, bool)]
    if floor is not None and number and number > 0 and rates and number > min(rates) * 125:
        yield Violation(
            floor.origin,
            "validate_rdma_min_bw_mbs",
            f"{floor.value} MB/s on profile {ctx.profile_name} (HCAs at {min(rates):g} Gb/s: at most "
            f"{min(rates) * 125:g} MB/s)",
            "an ib_write_bw floor below the line rate of the profile's HCAs (MB/s of 10^6 bytes); unset, 90% of it",
        )
    peer = ctx.get("validate_rdma_peer")
    if peer is not None and peer.explicit and str(peer.value) == ctx.host:
        yield Violation(
            peer.origin, "validate_rdma_peer", f"{peer.value!r}, the host itself", "another host of gpu_nodes"
        )


def rdma_peer_problems(ctx: HostModel, workers: list[str]) -> Iterator[Violation]:
    """validate_rdma_peer names a host of gpu_nodes (an inventory-wide rule: the check's host loop calls it)."""
    peer = ctx.get("validate_rdma_peer")
    if peer is None or not peer.explicit or not isinstance(peer.value, str) or peer.value == ctx.host:
        return
    if peer.value not in workers:
        yield Violation(
            peer.origin,
            "validate_rdma_peer",
            f"{peer.value!r}, not a host of group gpu_nodes",
            "a host of gpu_nodes for ib_write_bw to measure against (unset: consecutive gpu_nodes pair up)",
        )


def evaluate(ctx: HostModel) -> Iterator[Violation]:
    for check in RULES:
        yield from check(ctx)


def evaluate_warnings(ctx: HostModel) -> Iterator[Violation]:
    for check in WARNINGS:
        yield from check(ctx)
