# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""What the roles decide from what they found on the node (packages installed, policy stores, build inputs): the
decisions the roles used to compute in Jinja loops that mutate a dict. Filters in plugins/filter/decisions.py."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

from ansible_collections.nodeforge.gpu.plugins.module_utils.model import as_bool
from ansible_collections.nodeforge.gpu.plugins.module_utils.parsers import booleans_local, rpm_spec


def selinux_boolean_changes(wanted: Mapping[str, Any], booleans_local_text: str) -> dict[str, bool]:
    """The booleans of `wanted` whose value booleans.local does not already hold (name -> the value to write)."""
    local = booleans_local(booleans_local_text)
    return {
        name: as_bool(value) for name, value in wanted.items() if local.get(name) != ("1" if as_bool(value) else "0")
    }


def by_name(items: list[Mapping[str, Any]], fields: list[str], key: str = "name") -> dict[str, dict]:
    """[{name, a, b, ...}] -> {name: {a, b}} with only `fields` kept."""
    return {item[key]: {field: item.get(field) for field in fields} for item in items}


def nv_peer_mem_builds(
    kernels: list[str],
    spec_text: str,
    package_format: str,
    package_prefix: str,
    packages: Mapping[str, list[Mapping[str, Any]]],
    inputs: list[Any],
    fingerprint: list[str],
    build_time: str,
) -> list[dict]:
    """One nv_peer_mem package per kernel, and whether it must be built.

    Version: the spec's Version-Release, then "nf<UTC build time>.<digest>" where the digest covers everything the
    module is built from (`inputs`: tarball checksum, driver source, OFED tree, module location; plus the kernel's
    ib_core line of `fingerprint`). An installed package whose release carries the same digest is current; a
    different digest rebuilds, and the build time keeps versions increasing so the package manager upgrades."""
    spec = rpm_spec(spec_text)
    sep = "+" if package_format == "deb" else "."
    builds = []
    for kernel in kernels:
        lines = [line for line in fingerprint if re.match(re.escape(kernel) + " ", line)]
        digest = hashlib.sha1("|".join(str(part) for part in [*inputs, *lines]).encode()).hexdigest()[:10]
        release = f"{spec['release']}{sep}nf{build_time}.{digest}"
        name = f"{package_prefix}{kernel}"
        installed = (packages.get(name) or [{}])[0]
        have = ""
        if installed:
            # package_facts: every entry has a version; rpm's have a release, Debian's none.
            have = str(installed["version"]) + (f"-{installed['release']}" if installed.get("release") else "")
        wanted = "^" + re.escape(f"{spec['version']}-{spec['release']}{sep}") + "nf[0-9]+[.]" + digest + "$"
        builds.append(
            {
                "kernel": kernel,
                "package": name,
                "version": spec["version"],
                "release": release,
                "full_version": f"{spec['version']}-{release}",
                "installed": have,
                "needed": re.match(wanted, have) is None,
            }
        )
    return builds


def runtime_restart(
    runtime: str,
    allowed: bool,
    running_containers: int | None,
    live_restore: bool,
    gpu_processes: int,
    check_mode: bool = False,
) -> dict:
    """Whether a running container runtime is restarted after its configuration changed, and what the operator is
    told. containerd and CRI-O restart without touching running containers (their shims / conmon keep them);
    dockerd stops its containers on restart unless daemon.json has live-restore, so Docker with running containers
    and no live-restore is not restarted (the change applies at its next start, in a maintenance window)."""
    gpu = f"; {gpu_processes} GPU process(es) running on the node" if gpu_processes else ""
    if not allowed:
        return {
            "restart": False,
            "message": f"{runtime} is not restarted (nvidia_container_toolkit_restart_runtimes: false): the nvidia "
            f"runtime configuration applies at its next start{gpu}.",
        }
    if runtime == "docker" and not live_restore and running_containers != 0:
        stopped = (
            f"{running_containers} running container(s) would be stopped"
            if running_containers
            else "its containers could not be counted, and any running one would be stopped"
        )
        return {
            "restart": False,
            "message": f"docker is not restarted: {stopped} (daemon.json has no live-restore); the nvidia runtime "
            f"configuration applies at its next start: restart it in a maintenance window, or set live-restore: "
            f"true{gpu}.",
        }
    if runtime == "docker":
        keeps = (
            "running containers keep running (live-restore)"
            if live_restore
            else "no container is running (daemon.json has no live-restore)"
        )
    else:
        keeps = "running containers keep running (their shims are not restarted)"
    return {
        "restart": True,
        "message": f"{runtime} {'would be restarted (check mode)' if check_mode else 'is restarted now'} to apply the "
        f"nvidia runtime configuration: {keeps}{gpu}.",
    }


def driver_reboot_reasons(
    loaded: str,
    installed: str,
    in_container: bool,
    changed: bool,
    nouveau_loaded: bool,
    nouveau_blacklisted: bool,
    nouveau_blacklist_changed: bool,
    options_changed: bool,
) -> list[str]:
    """Why the node needs a reboot for the NVIDIA driver ([] = it does not).

    Read from the node's state, not from what changed in this run, so that a run interrupted before its handlers
    recorded the requirement is followed by one that records it: a loaded driver that is not the installed one, or
    a loaded nouveau that the blacklist already keeps out of the next boot. A container never loads modules, and
    /sys/module there is the host's: only what this run changed counts there. Options written under a loaded driver
    cannot be read back from the module, so they count when they changed."""
    reasons = []
    differs = bool(installed) and loaded != installed
    if differs and (changed or (loaded and not in_container)):
        running = f"driver {loaded} is running" if loaded else "no NVIDIA driver is running"
        where = " (a container: modules are never loaded there)" if in_container else ""
        reasons.append(f"NVIDIA driver {installed} is installed, {running}{where}")
    if nouveau_loaded and nouveau_blacklisted and (nouveau_blacklist_changed or not in_container):
        reasons.append("nouveau is loaded and blacklisted for the next boot")
    if options_changed and loaded:
        reasons.append(f"the nvidia module options changed under the loaded driver {loaded}")
    return reasons


def apt_lists_stale(refreshed: Any, valid_time: Any, now: Any) -> bool:
    """Whether apt lists last refreshed at `refreshed` (seconds since the epoch, as `stat --format=%Y` prints it) are
    valid_time seconds old or older at `now`: the one freshness rule of the nodeforge role's apt_lists.yml and of the
    roles that skip including it. A time not known ('', None, not a number) counts as old."""
    try:
        return float(now) - int(str(refreshed).strip()) >= int(valid_time)
    except ValueError:
        return True
