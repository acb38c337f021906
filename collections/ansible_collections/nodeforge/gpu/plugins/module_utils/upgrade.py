# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Rolling upgrades (nodeforge upgrade, playbooks/upgrade.yml): what each node needs, the batches, the per-node state.

One set of rules for the playbook (filters nodeforge.gpu.upgrade_*) and the CLI (its plan and summary): a node is
upgraded when a component's installed version differs from the target, skipped when it is at the target, refused
(before any node is touched) when the target is lower and downgrades are not allowed, when the component is not
installed, or when an earlier upgrade left it mid-way and the run does not resume."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.nodeforge.gpu.plugins.module_utils.parsers import deb_version_compare

COMPONENTS = ("driver", "ofed", "toolkit")
# --component stack upgrades every component the node has, in the node stack's order.
CHOICES = (*COMPONENTS, "stack")
# The roles each component's install step runs, in site.yml's order (one code path with provision): what depends on
# the component is rebuilt after it (GPUDirect's peer-memory module after the driver or OFED, the CDI spec after the
# driver).
ROLES = {
    "driver": ["nvidia_driver", "gpudirect_rdma", "nvidia_container_toolkit"],
    "ofed": ["ofed", "gpudirect_rdma"],
    "toolkit": ["nvidia_container_toolkit"],
    "stack": ["nvidia_driver", "ofed", "gpudirect_rdma", "selinux_modules", "nvidia_container_toolkit"],
}
# The role variable --to sets, per component.
VERSION_VARS = {
    "driver": "nvidia_driver_version",
    "ofed": "ofed_version",
    "toolkit": "nvidia_container_toolkit_version",
}
# Per node: the steps in order. Each is recorded in the node's state file before it runs.
STEPS = (
    "cordon",
    "drain",
    "stop_consumers",
    "unload_modules",
    "install",
    "reboot",
    "validate",
    "start_consumers",
    "uncordon",
)
STARTED, FAILED, STOPPED, DONE = "upgrade-started", "upgrade-failed", "upgrade-stopped", "upgrade-done"
UNFINISHED = (STARTED, FAILED, STOPPED)
# Kernel modules a driver upgrade unloads, users first (nvidia needs every other one gone).
DRIVER_MODULES = ("nvidia_peermem", "nv_peer_mem", "nvidia_uvm", "nvidia_drm", "nvidia_modeset", "nvidia")


class UpgradeError(ValueError):
    pass


def upstream(version: Any) -> str:
    """A package version as the manifest writes it: 1:580.126.20-1~deb12u1 -> 580.126.20."""
    text = "" if version is None else str(version).strip()
    return re.sub(r"-[^-]*$", "", re.sub(r"^[0-9]+:", "", text))


def compare(a: str, b: str) -> int:
    """dpkg's order of two versions (-1, 0, 1)."""
    return deb_version_compare(a, b)


def components(component: str) -> list[str]:
    if component not in CHOICES:
        raise UpgradeError(f"component {component!r}: expected one of {', '.join(CHOICES)}")
    return list(COMPONENTS) if component == "stack" else [component]


def install_roles(component: str, container_runtimes: Any = None) -> list[str]:
    """The roles the component's install step runs on a node, in the node stack's order. A node whose inventory lists
    no container runtime (nvidia_container_toolkit_runtimes empty; None: unset, the role's default) has no toolkit to
    follow the driver: only a toolkit upgrade runs that role there."""
    components(component)
    roles = list(ROLES[component])
    if component != "toolkit" and container_runtimes is not None and len(container_runtimes) == 0:
        roles = [role for role in roles if role != "nvidia_container_toolkit"]
    return roles


def read_state(text: Any) -> dict[str, Any]:
    """The node's state file (JSON, or the mapping Ansible's templating already made of it) -> its record; {} when
    there is none. A damaged file is an error naming it."""
    if isinstance(text, Mapping):
        record: Any = dict(text)
    elif text is None or not str(text).strip():
        return {}
    else:
        try:
            record = json.loads(str(text))
        except json.JSONDecodeError as exc:
            raise UpgradeError(f"the upgrade state file is not JSON ({exc}): {str(text)[:200]!r}") from exc
    if not isinstance(record, dict) or record.get("state") not in (*UNFINISHED, DONE):
        raise UpgradeError(f"the upgrade state file names no known state: {str(text)[:200]!r}")
    return record


def record_problems(record: Mapping[str, Any], consumers: Sequence[str] = ()) -> list[str]:
    """Why a node's upgrade record does not fit what an upgrade writes (state_record, tasks/record.yml), [] when it
    does: a record edited by hand (a failure turned into done, units added to stopped_units) is reported, never acted
    on. consumers: the units an upgrade stops (the role's __upgrade_consumer_units), the only ones a record may name."""
    problems = []
    state, step = record.get("state"), record.get("step")
    if record.get("component") not in CHOICES:
        problems.append(f"component {record.get('component')!r} is none of {', '.join(CHOICES)}")
    if state == DONE:
        if step != "done":
            problems.append(f"state {DONE} names step {step!r}, where a finished upgrade's record says step done")
        if "message" in record:
            problems.append(f"state {DONE} carries a failure's message")
    elif step not in STEPS:
        problems.append(f"step {step!r} is none of the upgrade's steps ({', '.join(STEPS)})")
    for key in ("from", "to"):
        versions = record.get(key, {})
        if not isinstance(versions, Mapping) or any(
            name not in COMPONENTS or not isinstance(version, str) for name, version in versions.items()
        ):
            problems.append(f"{key} is not a mapping of {', '.join(COMPONENTS)} to versions")
    units = record.get("stopped_units", [])
    if not isinstance(units, list) or not all(isinstance(unit, str) for unit in units):
        problems.append("stopped_units is not a list of unit names")
    else:
        unknown = [unit for unit in units if unit not in consumers]
        if unknown:
            stops = ", ".join(consumers) or "none"
            problems.append(f"stopped_units names {', '.join(unknown)}, which no upgrade stops (it stops {stops})")
    return problems


def component_plan(name: str, installed: str | None, target: str | None, allow_downgrade: bool) -> dict[str, Any]:
    """One component on one node: action upgrade, downgrade, current or refused, with the reason (a version not
    known, None, is none: upstream() reads it as "")."""
    have, want = upstream(installed), upstream(target)
    entry = {"component": name, "from": have, "to": want}
    if not want:
        return {**entry, "action": "refused", "reason": f"no target version: give --to or set {VERSION_VARS[name]}"}
    if not have:
        return {**entry, "action": "refused", "reason": f"{name} is not installed: run nodeforge provision first"}
    order = compare(have, want)
    if order == 0:
        return {**entry, "action": "current", "reason": f"already at {want}"}
    if order > 0 and not allow_downgrade:
        return {**entry, "action": "refused", "reason": f"{want} is older than the installed {have}: a downgrade "
                "needs --allow-downgrade"}  # fmt: skip
    return {**entry, "action": "downgrade" if order > 0 else "upgrade", "reason": f"{have} -> {want}"}


def node_plan(
    found: dict[str, dict[str, str]],
    component: str,
    state: Any = None,
    allow_downgrade: bool = False,
    resume: bool = False,
    consumers: Sequence[str] = (),
) -> dict[str, Any]:
    """A node's plan from what it runs: found = {component: {installed, target}} for the components asked (stack:
    the ones the node has; a component found with neither version does not apply). The node is `todo` when any
    component moves, or when an earlier upgrade left it unfinished and this run resumes; `refused` (with the
    reasons) when any component is refused, an unfinished upgrade is not resumed, or the node's record does not fit
    an upgrade's schedule (record_problems, with the units an upgrade stops: consumers)."""
    record = read_state(state)
    problems = record_problems(record, consumers) if record else []
    if problems:
        return {
            "action": "refused",
            "components": [],
            "refused": [
                f"the node's upgrade record does not fit an upgrade's schedule ({'; '.join(problems)}): nothing of "
                "it is acted on; check the node, then remove the record to plan afresh"
            ],
            "resume": False,
            "state": {},
            "downgrade": False,
        }
    unfinished = record.get("state") in UNFINISHED
    same = unfinished and record.get("component") == component
    entries = []
    for name in components(component):
        versions = dict(found.get(name) or {})
        if same and not versions.get("installed"):
            # A failed install can leave the package half-configured (not installed to dpkg): the unfinished run
            # knew what was there.
            versions["installed"] = (record.get("from") or {}).get(name)
        if component == "stack" and (versions.get("na") or not versions.get("installed")):
            continue  # a stack upgrade moves what the node has
        if versions.get("na"):
            entries.append({"component": name, "from": "", "to": "", "action": "refused", "reason": versions["na"]})
        else:
            entries.append(component_plan(name, versions.get("installed"), versions.get("target"), allow_downgrade))
    refused = [f"{e['component']}: {e['reason']}" for e in entries if e["action"] == "refused"]
    moving = [e for e in entries if e["action"] in ("upgrade", "downgrade")]
    if unfinished and not resume:
        refused.append(
            f"an earlier upgrade ({_versions(record)}) stopped in state "
            f"{record['state']} at step {record.get('step')}: fix what it reported, then run again with --resume"
        )
    if unfinished and resume and record.get("component") != component:
        refused.append(
            f"the unfinished upgrade is of {record.get('component')}, not {component}: resume it with --component "
            f"{record.get('component')}"
        )
    if component == "stack" and not entries:
        refused.append("none of driver, ofed, toolkit is installed: run nodeforge provision first")
    action = "refused" if refused else ("todo" if moving or unfinished else "current")
    return {
        "action": action,
        "components": entries,
        "refused": refused,
        "resume": bool(unfinished and resume),
        "state": record,
        "downgrade": any(e["action"] == "downgrade" for e in entries),
    }


def _versions(record: dict[str, Any]) -> str:
    """An upgrade record's components and targets, as the plan shows them: 'toolkit to 1.21.0'."""
    to = record.get("to") or {}
    if isinstance(to, dict) and to:
        return ", ".join(f"{name} to {version}" for name, version in to.items())
    return f"{record.get('component')} to {to or '?'}"


def batch_size(total: int, batch: int | None = None, max_unavailable: str | int | None = None) -> int:
    """Nodes per batch: --batch N, or --max-unavailable P% of the targeted nodes (at least 1), or N nodes; 1 when
    neither is given."""
    if batch is not None and max_unavailable is not None:
        raise UpgradeError("give --batch or --max-unavailable, not both")
    if batch is not None:
        if int(batch) < 1:
            raise UpgradeError(f"--batch {batch}: expected a number of nodes >= 1")
        return int(batch)
    if max_unavailable is None or str(max_unavailable).strip() == "":
        return 1
    text = str(max_unavailable).strip()
    match = re.fullmatch(r"([0-9]+)(%?)", text)
    if not match or int(match.group(1)) < 1 or (match.group(2) and int(match.group(1)) > 100):
        raise UpgradeError(f"--max-unavailable {text}: expected a percentage 1%..100% or a number of nodes >= 1")
    if match.group(2):
        return max(1, math.floor(total * int(match.group(1)) / 100))
    return int(match.group(1))


def play_batch_size(total: int, batch: int | None = None, max_unavailable: str | int | None = None) -> int:
    """The upgrade play's batch size (playbooks/upgrade.yml, over its `total` targeted nodes): upgrade_max_unavailable
    when it is set, else upgrade_batch (which has a default, so that giving both is not an error here)."""
    if max_unavailable is not None and str(max_unavailable).strip() != "":
        return batch_size(total, None, max_unavailable)
    return batch_size(total, batch)


def schedule(plans: dict[str, dict[str, Any]], size: int) -> dict[str, Any]:
    """The run's schedule from every node's plan: batches of `size` over the nodes to do, in host name order (the
    play's `order: sorted`), the nodes at the target and the refused ones."""
    todo = sorted(h for h, p in plans.items() if p["action"] == "todo")
    return {
        "batch_size": size,
        "batches": [todo[i : i + size] for i in range(0, len(todo), size)],
        "current": sorted(h for h, p in plans.items() if p["action"] == "current"),
        "refused": {h: p["refused"] for h, p in sorted(plans.items()) if p["action"] == "refused"},
    }


def loaded_in_order(proc_modules: Any) -> list[str]:
    """/proc/modules -> the driver's modules that are loaded, in the order they must be unloaded."""
    loaded = {line.split()[0] for line in str(proc_modules or "").splitlines() if line.strip()}
    return [m for m in DRIVER_MODULES if m in loaded]


def state_record(
    state: str, component: str, step: str, plan: dict[str, Any], message: str = "", extra: Any = None
) -> dict[str, Any]:
    """What the node's state file holds: the state, the step, the component's versions and, on failure, why."""
    if state not in (*UNFINISHED, DONE):
        raise UpgradeError(f"unknown upgrade state {state!r}")
    record = {
        "state": state,
        "component": component,
        "step": step,
        "from": {e["component"]: e["from"] for e in plan.get("components", [])},
        "to": {e["component"]: e["to"] for e in plan.get("components", [])},
    }
    if message:
        record["message"] = " ".join(str(message).split())[:2000]
    if extra:
        record.update(dict(extra))
    return record


def gpu_pods(pods: Any, resource: str = "nvidia.com/gpu") -> list[str]:
    """Running pods (k8s_info resources) that hold GPUs, DaemonSet pods left out: the jobs an upgrade waits for."""
    found = []
    for pod in pods or []:
        meta = pod.get("metadata") or {}
        if any(ref.get("kind") == "DaemonSet" for ref in meta.get("ownerReferences") or []):
            continue
        if (pod.get("status") or {}).get("phase") not in (None, "Pending", "Running"):
            continue
        containers = (pod.get("spec") or {}).get("containers") or []
        wants = any(
            str((c.get("resources") or {}).get(kind, {}).get(resource, "0")) not in ("0", "")
            for c in containers
            for kind in ("limits", "requests")
        )
        if wants:
            found.append(f"{meta.get('namespace', 'default')}/{meta.get('name', '?')}")
    return found
