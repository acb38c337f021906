"""nodeforge benchmark: static check at scale, lab provision and idempotent rerun, CLI overhead over ansible-runner.

A script, not a test: it prints one table (metric, value, target, met) and writes bench/results/latest.json.
It exits 0 when targets are missed (it reports them) and 1 when a run fails outright (a CLI call exits with an
unexpected code, a playbook fails, output cannot be parsed). See bench/README.md.

    .venv/bin/python bench/run.py [--quick] [--only check|lab|overhead ...]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
VENV_BIN = ROOT / ".venv" / "bin"
PYTHON = str(VENV_BIN / "python") if (VENV_BIN / "python").exists() else sys.executable
NODEFORGE = [str(VENV_BIN / "nodeforge")] if (VENV_BIN / "nodeforge").exists() else [PYTHON, "-m", "nodeforge"]
CALL_TIMEOUT_S = 1800  # a 16-node first provision on 2 cores takes longer than 10 minutes
RERUNS = 3  # no-op re-provisions of the 1-, 2- and 4-node labs; their median is the one reported
SECTIONS = ("check", "lab", "overhead")
# The targets, reported (the table's `met`), never asserted: they are ratios and counts of one run on a shared machine.
FOCUS_NODES = 2  # the lab whose no-op the targets are for; its no-op also gets the floor and the node-call table
NOOP_TARGET = 0.25  # its no-op re-provision's wall time, over its first converge's
HOST_TASKS_TARGET = 150  # host-tasks per node in a no-op: on the node, on the controller and skipped together

# ---------------------------------------------------------------------------------------------------------------
# Results


@dataclass
class Row:
    metric: str
    value: str
    target: str = "-"
    met: str = "-"
    section: str = ""  # the table groups rows by section, in SECTIONS order


class BenchFailure(RuntimeError):
    """A run failed outright (not a missed target)."""


class Bench:
    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.rows: list[Row] = []
        self.samples: dict[str, Any] = {}
        self.failures: list[str] = []
        self.section = ""

    def row(self, metric: str, value: str, target: str = "-", met: bool | None = None) -> None:
        met_text = "-" if met is None else ("yes" if met else "no")
        self.rows.append(Row(metric, value, target, met_text, self.section))

    def call(
        self, args: list[str], expect: tuple[int, ...] = (0,), what: str = "", env: dict[str, str] | None = None
    ) -> tuple[float, str]:
        """Run a subprocess; (wall seconds, stdout). Raises BenchFailure on an unexpected exit code."""
        started = time.perf_counter()
        try:
            proc = subprocess.run(
                args, capture_output=True, text=True, env=env or self.env, timeout=CALL_TIMEOUT_S, check=False, cwd=ROOT
            )
        except subprocess.TimeoutExpired as exc:
            raise BenchFailure(f"{what or ' '.join(args)}: no answer within {CALL_TIMEOUT_S}s") from exc
        wall = time.perf_counter() - started
        if proc.returncode not in expect:
            tail = "\n".join((proc.stderr.strip() or proc.stdout.strip()).splitlines()[-20:])
            raise BenchFailure(
                f"{what or ' '.join(args)}: exit {proc.returncode} (expected {'/'.join(map(str, expect))})\n{tail}"
            )
        return wall, proc.stdout


def _json(stdout: str, what: str) -> dict[str, Any]:
    try:
        data = json.loads(stdout)
    except json.JSONDecodeError as exc:
        raise BenchFailure(f"{what}: stdout is not JSON ({exc}): {stdout[:300]!r}") from exc
    if not isinstance(data, dict):
        raise BenchFailure(f"{what}: expected a JSON object, got {type(data).__name__}")
    return data


def _s(seconds: float) -> str:
    return f"{seconds:.2f} s"


def _median(samples: list[float]) -> str:
    """The median, and the range when there are several samples (run-to-run noise is part of the reading)."""
    median = _s(statistics.median(samples))
    return f"{median} ({min(samples):.2f}-{max(samples):.2f})" if len(samples) > 1 else median


def job_events(artifacts: str) -> list[dict[str, Any]]:
    """A run's ansible-runner job events, in the order they happened."""
    events = [json.loads(path.read_text()) for path in Path(artifacts, "job_events").glob("*.json")]
    return sorted(events, key=lambda e: e["counter"])


def task_times(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each task's wall time in a run, from its job events: from its start to the next task's (or the end of the
    run), so that every second of the play is on some task; with the role it belongs to."""
    events = [
        e
        for e in events
        if e.get("event") in ("playbook_on_task_start", "playbook_on_handler_task_start", "playbook_on_stats")
    ]

    def stamp(event: dict[str, Any]) -> float:
        return datetime.fromisoformat(event["created"]).timestamp()

    tasks = []
    for current, following in itertools.pairwise(events):
        if current["event"] == "playbook_on_stats":
            continue
        data = current.get("event_data") or {}
        tasks.append(
            {
                "role": data.get("role") or f"play: {data.get('play', '')}",
                "task": data.get("task", ""),
                "wall_s": max(stamp(following) - stamp(current), 0.0),
            }
        )
    return tasks


def role_times(tasks: list[dict[str, Any]]) -> dict[str, float]:
    times: dict[str, float] = {}
    for task in tasks:
        times[task["role"]] = times.get(task["role"], 0.0) + task["wall_s"]
    return {role: round(wall, 2) for role, wall in sorted(times.items(), key=lambda kv: -kv[1])}


def busy_cpu_seconds() -> float:
    """CPU time this machine has spent busy since boot, all CPUs and processes together (/proc/stat): the
    controller, podman, the lab nodes' containers, the package cache."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


# How a no-op's host-tasks are counted (bench/README.md, "Counting a no-op's host-tasks"). A host-task is one task's
# result for one host: a runner_on_ok, runner_on_failed, runner_on_unreachable or runner_on_skipped event (a loop's
# runner_item_on_* events are parts of its host-task). Each is one of:
# - skipped: runner_on_skipped, its conditional (or every item's) false; nothing ran, on the node or elsewhere;
# - controller: Ansible answered it without the host's connection: an include or meta (the strategy's own work), an
#   action whose plugin declares `_requires_connection = False` (CONNECTIONLESS_ACTIONS; tests/test_bench.py compares
#   the list with the installed ansible-core's and the collection's plugins), or a task delegated to a host with the
#   `local` connection (its result's `_ansible_delegated_vars`);
# - node: everything else: a module or action that went through the host's connection (a template or copy is one
#   host-task and two or more round trips).
# The rule reads the event's type, its task's action and the delegation only, never the result's content: a no_log
# result is censored to {"censored": ...} in the events, yet it is counted like any other.
RESULT_EVENTS = ("runner_on_ok", "runner_on_failed", "runner_on_unreachable", "runner_on_skipped")
# Handled by the strategy itself: no action plugin runs.
STRATEGY_ACTIONS = frozenset(
    f"ansible.builtin.{name}" for name in ("import_role", "import_tasks", "include_role", "include_tasks", "meta")
)
# Action plugins that declare `_requires_connection = False`: ansible-core's (the same in 2.19 and 2.21) and the
# collection's (collections/ansible_collections/nodeforge/gpu/plugins/action/).
CONNECTIONLESS_ACTIONS = frozenset(
    [
        *(
            f"ansible.builtin.{name}"
            for name in (
                "add_host",
                "assert",
                "debug",
                "fail",
                "group_by",
                "include_vars",
                "set_fact",
                "set_stats",
                "validate_argument_spec",
            )
        ),
        *(
            f"nodeforge.gpu.{name}"
            for name in (
                "acceptance_report",
                "k8s_objects",
                "k8s_render",
                "k8s_verify",
                "resolve_settings",
                "scale_config",
                "validate_inventory",
            )
        ),
    ]
)
CONTROLLER_ACTIONS = STRATEGY_ACTIONS | CONNECTIONLESS_ACTIONS


def _action(data: dict[str, Any]) -> str:
    """The task's action by its full name: the resolved one where ansible-runner gives it (a short `set_fact` or an
    `ansible.legacy.set_fact` resolves to `ansible.builtin.set_fact`)."""
    action = data.get("resolved_action") or data.get("task_action") or ""
    if action.startswith("ansible.legacy."):
        action = "ansible.builtin." + action.removeprefix("ansible.legacy.")
    return action if "." in action else f"ansible.builtin.{action}"


def _delegated_local(data: dict[str, Any]) -> bool:
    res = data.get("res")
    delegated = res.get("_ansible_delegated_vars") if isinstance(res, dict) else None
    return isinstance(delegated, dict) and delegated.get("ansible_connection") in ("local", "ansible.builtin.local")


def host_tasks(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A run's host-tasks from its job events, in order: host, role, task, action, kind (node, controller or
    skipped) and, for a loop, how many of its items ran."""
    items: dict[tuple[str, str], int] = {}
    for event in events:
        data = event.get("event_data") or {}
        if event.get("event") in ("runner_item_on_ok", "runner_item_on_failed"):
            key = (data.get("task_uuid", ""), data.get("host", ""))
            items[key] = items.get(key, 0) + 1
    result = []
    for event in events:
        if event.get("event") not in RESULT_EVENTS:
            continue
        data = event.get("event_data") or {}
        action = _action(data)
        if event["event"] == "runner_on_skipped":
            kind = "skipped"
        elif action in CONTROLLER_ACTIONS or _delegated_local(data):
            kind = "controller"
        else:
            kind = "node"
        result.append(
            {
                "host": data.get("host", ""),
                "role": data.get("role") or "",
                "task": data.get("task", ""),
                "action": action,
                "kind": kind,
                "items": items.get((data.get("task_uuid", ""), data.get("host", ""))),
            }
        )
    return result


def shape_per_node(events: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Each host's host-tasks in a run: how many reached the node, ran on the controller alone, were skipped."""
    shapes: dict[str, dict[str, int]] = {}
    for task in host_tasks(events):
        shape = shapes.setdefault(task["host"], {"node": 0, "controller": 0, "skipped": 0})
        shape[task["kind"]] += 1
    return shapes


def busiest_node(events: list[dict[str, Any]]) -> str:
    """The host with the most host-tasks in a run (the lab's nodes are alike; this one stands for them)."""
    shapes = shape_per_node(events)
    return max(sorted(shapes), key=lambda host: sum(shapes[host].values()), default="")


def task_shape(events: list[dict[str, Any]]) -> dict[str, int]:
    """The busiest node's host-tasks: on the node, on the controller, skipped (what shape_playbook replays)."""
    return shape_per_node(events).get(busiest_node(events), {"node": 0, "controller": 0, "skipped": 0})


def node_calls(events: list[dict[str, Any]], host: str) -> list[dict[str, Any]]:
    """The host-tasks of one host that reached the node, by task (role, task name, action): how many times each ran
    (a task of a file included twice runs twice) and, for loops, how many items ran on the node. Most first."""
    calls: dict[tuple[str, str, str], dict[str, Any]] = {}
    for task in host_tasks(events):
        if task["host"] != host or task["kind"] != "node":
            continue
        key = (task["role"], task["task"], task["action"])
        call = calls.setdefault(key, {"role": key[0], "task": key[1], "action": key[2], "count": 0, "runs": 0})
        call["count"] += 1
        call["runs"] += task["items"] if task["items"] is not None else 1
    return sorted(calls.values(), key=lambda c: (-c["runs"], c["role"], c["task"]))


def shape_playbook(shape: dict[str, int], path: Path) -> Path:
    """A playbook of the same shape made of the cheapest tasks there are: a stat of / for each task that reached the
    node, a set_fact for each controller task, a `when: false` debug for each skipped one, interleaved."""
    kinds = ["node"] * shape["node"] + ["controller"] * shape["controller"] + ["skipped"] * shape["skipped"]
    kinds = [kinds[i] for i in sorted(range(len(kinds)), key=lambda i: (i * 7919) % len(kinds))]
    tasks: list[dict[str, Any]] = []
    for i, kind in enumerate(kinds):
        if kind == "node":
            tasks.append({"name": f"task {i}", "ansible.builtin.stat": {"path": "/"}})
        elif kind == "controller":
            tasks.append({"name": f"task {i}", "ansible.builtin.set_fact": {f"bench_fact_{i}": "{{ 1 + 1 }}"}})
        else:
            tasks.append({"name": f"task {i}", "ansible.builtin.debug": {"msg": "skipped"}, "when": False})
    play = {"name": "Same shape as the no-op re-provision", "hosts": "all", "gather_facts": False, "tasks": tasks}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump([play], sort_keys=False))
    return path


def _changed(summary: dict[str, Any]) -> int:
    return sum(int(h.get("changed", 0)) for h in (summary.get("hosts") or {}).values())


def _provision_ok(summary: dict[str, Any], what: str, hosts: int) -> None:
    problems = []
    if summary.get("status") != "successful":
        problems.append(f"status {summary.get('status')!r}")
    for host, counts in (summary.get("hosts") or {}).items():
        if counts.get("failed") or counts.get("unreachable"):
            problems.append(f"{host}: failed {counts.get('failed')}, unreachable {counts.get('unreachable')}")
    if len(summary.get("hosts") or {}) != hosts:
        problems.append(f"{len(summary.get('hosts') or {})} host(s) in the summary, expected {hosts}")
    if problems:
        failures = "; ".join(f"{f.get('host')}: {f.get('task')}: {f.get('message')}" for f in summary["failures"][:5])
        raise BenchFailure(f"{what}: {', '.join(problems)} {failures} {summary.get('error', '')}".strip())


# ---------------------------------------------------------------------------------------------------------------
# 1. nodeforge check on a generated 1,000-host inventory

# Hardware groups under gpu_nodes: (group, profile, OS, share of the hosts, extra group vars).
HW_GROUPS: list[tuple[str, str, str, float, dict[str, Any]]] = [
    ("dgx1_sjc", "dgx-1", "rhel8", 0.12, {"nvidia_driver_branch": "580"}),
    ("dgx1_ams", "dgx-1", "rocky9", 0.08, {"nodeforge_reboot_policy": "never"}),
    ("c4140_sjc", "dell-c4140", "rocky9", 0.15, {"nvidia_driver_flavor": "proprietary"}),
    ("c4140_fra", "dell-c4140", "rhel9", 0.10, {}),
    ("smc4029_fra", "supermicro-4029gp-tvrt", "ubuntu22.04", 0.15, {"preflight_enforce_pci": True}),
    (
        "vsphere_t4_ams",
        "vsphere-t4-vgpu",
        "ubuntu22.04",
        0.10,
        {
            "preflight_enforce_pci": False,
            # The vGPU guest driver comes from the site's own copy of the Licensing Portal package.
            "nodeforge_manifest_overrides": {
                "nvidia_driver": {
                    "grid": {
                        "version": "580.95.05",
                        "package": "nvidia-linux-grid-580",
                        "deb": {
                            "url": "http://mirror.ams.example.com/nvidia/nvidia-linux-grid-580_580.95.05_amd64.deb",
                            "checksum": "sha256:" + "5" * 64,
                        },
                    }
                }
            },
        },
    ),
    ("dgxh100_sjc", "dgx-h100", "ubuntu24.04", 0.18, {"nvidia_driver_branch": "595"}),
    ("dgxh100_fra", "dgx-h100", "ubuntu24.04", 0.12, {"nodeforge_manifest_overrides": {"ofed": {"mode": "doca"}}}),
]
SITES = {"sjc": "10.10", "ams": "10.20", "fra": "10.30"}


def _keep(known: set[str], prefixes: tuple[str, ...]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """Drop variables with a role prefix that no role declares (yet): the inventory must stay valid as roles land."""

    def keep(variables: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in variables.items() if k in known or not k.startswith(prefixes)}

    return keep


def _dump(path: Path, data: Any, header: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("---\n" + header + yaml.safe_dump(data, sort_keys=False, default_flow_style=False))


def generate_inventory(directory: Path, hosts: int = 1000, problems: bool = False) -> int:
    """Write a realistic directory inventory (hosts.yml, group_vars/, host_vars/); with problems, inject some.

    Returns the number of problem sites injected (0 for the valid one)."""
    from nodeforge import specs

    keep = _keep(set(specs.all_vars()), specs.prefixes())
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    counts = [int(hosts * share) for *_, share, _ in HW_GROUPS]
    counts[0] += hosts - sum(counts)
    gpu_children: dict[str, Any] = {}
    site_hosts: dict[str, dict[str, None]] = {site: {} for site in SITES}
    host_vars_files: dict[str, dict[str, Any]] = {}
    host_vars_dirs: dict[str, dict[str, dict[str, Any]]] = {}
    serial = 0
    for (group, _profile, _os, _share, _extra), count in zip(HW_GROUPS, counts, strict=True):
        site = group.rsplit("_", 1)[1]
        members: dict[str, Any] = {}
        for i in range(1, count + 1):
            serial += 1
            host = f"{group.replace('_', '-')}-{i:03d}"
            rack = 1 + (i - 1) // 16
            hvars: dict[str, Any] = {
                "ansible_host": f"{SITES[site]}.{rack}.{(i - 1) % 16 + 10}",
                "rack": f"r{rack:02d}",
            }
            if i % 7 == 0:
                hvars["bmc_address"] = f"{SITES[site]}.{100 + rack}.{(i - 1) % 16 + 10}"
            if i % 11 == 0:
                hvars["preflight_allow_nouveau"] = False
            members[host] = hvars
            site_hosts[site][host] = None
            if serial % 4 == 0:  # a quarter of the hosts have a host_vars file
                host_vars_files[host] = keep(
                    {
                        "serial_number": f"SN{serial:07d}",
                        "preflight_min_free_gb": {"/": 20, "/var": 40 + serial % 3 * 10},
                        "nodeforge_reboot_policy": "if_needed" if serial % 8 == 0 else "never",
                    }
                )
            elif serial % 25 == 1:  # a few have a host_vars directory of files
                host_vars_dirs[host] = {
                    "main.yml": {"serial_number": f"SN{serial:07d}", "asset_tag": f"AT-{serial:05d}"},
                    "preflight.yml": keep(
                        {
                            "preflight_allow_secure_boot": serial % 2 == 0,
                            "preflight_repository_urls": [f"https://mirror.{site}.example.com/nodeforge/"],
                        }
                    ),
                }
        gpu_children[group] = {"hosts": members}
    inventory = {
        "all": {
            "children": {
                "gpu_nodes": {"children": gpu_children},
                "k8s_control": {"hosts": {f"k8s-cp-{i}": {"ansible_host": f"10.0.0.{10 + i}"} for i in range(1, 4)}},
                "scale_clients": {"children": {"gpu_nodes": None}},
                **{f"site_{site}": {"hosts": members} for site, members in site_hosts.items()},
            }
        }
    }
    injected = 0
    if problems:
        # Every kind of problem check reports: bad YAML, unknown profile, bad choice, bad type, typo'd variable,
        # a cross-variable rule, a worker without a profile.
        inventory["all"]["children"]["gpu_nodes"]["children"]["staging"] = {
            "hosts": {f"staging-{i:02d}": {"ansible_host": f"10.99.0.{i}"} for i in range(1, 4)}
        }
        injected += 1
    header = "# Generated by bench/run.py: a 1,000-host nodeforge inventory.\n"
    _dump(directory / "hosts.yml", inventory, header)

    all_vars = {
        "ansible_user": "ops",
        "ansible_become": True,
        "nodeforge_reboot_policy": "if_needed",
        "nodeforge_state_dir": "/var/lib/nodeforge",
        "preflight_fail_on_error": True,
        "preflight_repository_urls": [
            "https://developer.download.nvidia.com/compute/cuda/repos/",
            "https://linux.mellanox.com/public/repo/doca/",
        ],
        "preflight_repository_method": "HEAD",
        "preflight_repository_timeout": 15,
        "preflight_repository_validate_certs": True,
        "ntp_servers": ["0.pool.ntp.org", "1.pool.ntp.org"],
    }
    if problems:
        all_vars["nodeforge_reboot_policy"] = "sometimes"  # not a choice
        all_vars["preflight_repository_timeout"] = "ten"  # not an int
        injected += 2
    _dump(directory / "group_vars" / "all.yml", keep(all_vars))
    _dump(
        directory / "group_vars" / "gpu_nodes.yml",
        keep({"preflight_min_free_gb": {"/": 20, "/var": 50}, "preflight_enforce_pci_in_containers": False}),
    )
    _dump(directory / "group_vars" / "k8s_control.yml", {"kubeconfig_path": "/etc/kubernetes/admin.conf"})
    for group, profile, os_name, _share, extra in HW_GROUPS:
        gvars = keep({"nodeforge_profile": profile, "nodeforge_os": os_name, **extra})
        if problems and group == "dgx1_ams":
            gvars["nodeforge_profile"] = "dgx1"  # typo of dgx-1
            injected += 1
        if problems and group == "c4140_fra":
            gvars["nvidia_driver_flavor"] = "open"  # rule: open modules need Turing or newer (V100 is Volta)
            injected += 1
        _dump(directory / "group_vars" / f"{group}.yml", gvars)
    for site in SITES:  # group_vars as directories of files
        _dump(
            directory / "group_vars" / f"site_{site}" / "main.yml", {"site": site, "dns_domain": f"{site}.example.com"}
        )
        _dump(
            directory / "group_vars" / f"site_{site}" / "repos.yml",
            keep({"preflight_repository_urls": [f"https://mirror.{site}.example.com/nodeforge/"]}),
        )
    for n, (host, hvars) in enumerate(sorted(host_vars_files.items())):
        if problems and n == 3:
            hvars = {**hvars, "preflight_enforce_pcie": False}  # typo of preflight_enforce_pci
            injected += 1
        _dump(directory / "host_vars" / f"{host}.yml", hvars)
        if problems and n == 5:
            (directory / "host_vars" / f"{host}.yml").write_text("---\nrack: [r01\nserial_number: SN0\n")
            injected += 1
    for host, files in host_vars_dirs.items():
        for name, data in files.items():
            _dump(directory / "host_vars" / host / name, data)
    return injected


def bench_check(b: Bench, reps: int, work: Path) -> None:
    valid, broken = work / "inv-1000-valid", work / "inv-1000-problems"
    generate_inventory(valid)
    injected = generate_inventory(broken, problems=True)
    files = sum(1 for p in valid.rglob("*") if p.is_file())
    cmd = [*NODEFORGE, "check", "-i"]

    # Warm the page cache and pyc files once; then alternate the two inventories.
    b.call([*cmd, str(valid)], what="nodeforge check (valid inventory)")
    times: dict[str, list[float]] = {"valid": [], "problems": []}
    for _ in range(reps):
        times["valid"].append(b.call([*cmd, str(valid)], what="nodeforge check (valid inventory)")[0])
        times["problems"].append(
            b.call([*cmd, str(broken)], expect=(1,), what="nodeforge check (inventory with problems)")[0]
        )
    _, out = b.call([*cmd, str(broken), "--json"], expect=(1,), what="nodeforge check --json (problems)")
    report = _json(out, "nodeforge check --json")
    found = len(report.get("problems") or [])
    b.samples["check"] = {**times, "files": files, "injected": injected, "problems_reported": found}
    for kind, label in (("valid", f"valid, {files} files"), ("problems", f"{injected} injected problems")):
        median = statistics.median(times[kind])
        b.row(f"check 1,000 hosts ({label}): wall, median of {reps}", _median(times[kind]), "< 2 s", median < 2.0)
    b.row(
        "check with problems: exit code, problems reported",
        f"exit 1, {found} problems",
        f"exit 1, >= {injected}",
        found >= injected,
    )


# ---------------------------------------------------------------------------------------------------------------
# 2. Lab provision from nothing, then an immediate rerun


def lab_down(b: Bench, name: str) -> None:
    try:
        b.call([*NODEFORGE, "lab", "down", "--name", name], what=f"lab down --name {name}")
    except BenchFailure as exc:
        b.failures.append(str(exc))


def toolkit_mirror(b: Bench) -> Path:
    """NVIDIA's toolkit repository is out of reach here: the signed stand-in in its layout, as `make lab` uses."""
    mirror = ROOT / "build" / "lab-toolkit-mirror"
    if "toolkit_mirror" not in b.samples:
        b.call([PYTHON, str(ROOT / "tools" / "lab_mirror.py"), str(mirror)], what="lab_mirror.py")
        b.samples["toolkit_mirror"] = str(mirror)
    return mirror


def bench_lab(b: Bench, nodes: int, then: Callable[[str], None] | None = None) -> None:
    name = f"bench{nodes}"
    lab_down(b, name)  # from nothing: no containers, no inventory
    try:
        what = f"lab up --nodes {nodes} --provision --json --name {name} --mirror {toolkit_mirror(b)}"
        busy = busy_cpu_seconds()
        first_wall, out = b.call([*NODEFORGE, *what.split()], what=what)
        first_cpu = busy_cpu_seconds() - busy
        first = _json(out, what)
        _provision_ok(first, what, nodes)
        what = f"lab provision --json --name {name}"
        # One no-op's wall time moves 10-20% with the machine's phase: the median of three (one at 16 nodes, whose
        # no-op takes over a minute), each checked; the last one's events give the per-task times.
        rerun_walls, changed = [], 0
        for _ in range(RERUNS if nodes <= 4 else 1):
            wall, out = b.call([*NODEFORGE, *what.split()], what=what)
            rerun = _json(out, what)
            _provision_ok(rerun, what, nodes)
            rerun_walls.append(wall)
            changed += _changed(rerun)
        rerun_wall = statistics.median(rerun_walls)
        ratio = rerun_wall / first_wall
        rerun_events = job_events(rerun["artifacts"])
        first_tasks, rerun_tasks = task_times(job_events(first["artifacts"])), task_times(rerun_events)
        b.samples[f"lab{nodes}"] = {
            "first_wall_s": first_wall,
            "first_duration_s": first.get("duration_s"),
            "first_changed": _changed(first),
            "first_busy_cpu_s": first_cpu,
            "rerun_wall_s": rerun_wall,
            "rerun_walls_s": rerun_walls,
            "rerun_duration_s": rerun.get("duration_s"),
            "rerun_hosts": rerun.get("hosts"),
            "first_roles_s": role_times(first_tasks),
            "rerun_roles_s": role_times(rerun_tasks),
            "rerun_top_tasks": sorted(rerun_tasks, key=lambda t: -t["wall_s"])[:10],
        }
        label = f"lab {nodes} node{'s' if nodes > 1 else ''}"
        b.row(f"{label}: up --provision from nothing: wall", _s(first_wall))
        b.row(f"{label}: first provision duration_s (JSON)", _s(float(first.get("duration_s", 0))))
        b.row(f"{label}: busy CPU time of the machine during up --provision", _s(first_cpu))
        runs = f"median of {len(rerun_walls)}" if len(rerun_walls) > 1 else "one run"
        b.row(f"{label}: no-op re-provision: wall, {runs}", _s(rerun_wall))
        target = f"<= {NOOP_TARGET:.0%}" if nodes == FOCUS_NODES else "-"
        b.row(
            f"{label}: no-op re-provision / first converge (wall)",
            f"{ratio:.0%}",
            target,
            ratio <= NOOP_TARGET if nodes == FOCUS_NODES else None,
        )
        b.row(
            f"{label}: no-op / first, playbook duration_s only",
            f"{float(rerun.get('duration_s', 0)) / max(float(first.get('duration_s', 0)), 1e-9):.0%}",
        )
        b.row(f"{label}: no-op re-provisions changed (total of all)", str(changed), "0", changed == 0)
        noop_shape_rows(b, label, nodes, rerun_events)
        if nodes == FOCUS_NODES:
            bench_floor(b, name, task_shape(rerun_events), first_wall)
        if then:
            then(name)
    finally:
        lab_down(b, name)


def noop_shape_rows(b: Bench, label: str, nodes: int, events: list[dict[str, Any]]) -> None:
    """The no-op's host-tasks per node (on the node / on the controller / skipped) and the node calls that remain,
    by task, for the busiest node (bench/README.md, "Counting a no-op's host-tasks")."""
    shapes = shape_per_node(events)
    host = busiest_node(events)
    shape = shapes.get(host, {"node": 0, "controller": 0, "skipped": 0})
    total = sum(shape.values())
    calls = node_calls(events, host)
    sample = b.samples[f"lab{nodes}"]
    sample["rerun_shape_per_node"] = shapes
    sample["rerun_node_calls"] = {"host": host, "calls": calls}
    b.row(
        f"{label}: host-tasks per node in the no-op (on the node / on the controller / skipped)",
        f"{total} ({shape['node']} / {shape['controller']} / {shape['skipped']})",
        f"<= {HOST_TASKS_TARGET}",
        total <= HOST_TASKS_TARGET,
    )
    b.row(
        f"{label}: node calls per node in the no-op (module runs, loop items counted)",
        str(sum(c["runs"] for c in calls)),
    )


def bench_strategy(b: Bench, name: str, reps: int = 2) -> None:
    """No-op re-provisions of the same lab with Ansible's `linear` (what a run gets: nodeforge sets no strategy)
    and `free`, alternated: what linear's per-task lockstep costs (docs/ansible-settings.md, "Strategy")."""
    strategies = ["linear", "free"]
    times: dict[str, list[float]] = {s: [] for s in strategies}
    for i in range(reps):
        for strategy in strategies if i % 2 == 0 else list(reversed(strategies)):
            what = f"lab provision --json --name {name}"
            env = {**b.env, "ANSIBLE_STRATEGY": strategy}
            wall, out = b.call([*NODEFORGE, *what.split()], what=f"{what} (strategy {strategy})", env=env)
            _provision_ok(_json(out, what), what, int(name.removeprefix("bench")))
            times[strategy].append(wall)
    b.samples["strategy"] = times
    for strategy in strategies:
        b.row(f"no-op, {name}, strategy {strategy}: wall, median of {reps}", _median(times[strategy]))
    b.row("free / linear (medians)", f"{statistics.median(times['free']) / statistics.median(times['linear']):.0%}")


def scaling_rows(b: Bench) -> None:
    one, sixteen = b.samples.get("lab1"), b.samples.get("lab16")
    cpus = os.cpu_count() or 1
    if one:
        # The machine's CPUs run the controller and every node: N nodes need at least N times one node's CPU time,
        # spread over the CPUs at best.
        floor = 16 * one["first_busy_cpu_s"] / cpus / one["first_wall_s"]
        b.row(
            f"16 nodes / 1 node on {cpus} CPUs, floor from 1 node's busy CPU time (16 x CPU / {cpus} / wall)",
            f"{floor:.2f}x",
        )
    if one and sixteen:
        # The 16-node run's own CPU time (nodes share downloads through the package cache, so it is less than 16
        # times one node's): its wall cannot be shorter than that time spread over the CPUs.
        busy = sixteen["first_busy_cpu_s"] / cpus
        b.row(
            f"16 nodes / 1 node, floor from the 16-node run's busy CPU time (CPU / {cpus} / 1 node's wall)",
            f"{busy / one['first_wall_s']:.2f}x (the CPUs were busy {busy / sixteen['first_wall_s']:.0%} of its wall)",
        )
    for nodes in (2, 4, 16):
        many = b.samples.get(f"lab{nodes}")
        if not one or not many:
            continue
        ratio = many["first_wall_s"] / one["first_wall_s"]
        target = "<= 3x" if nodes == 16 else "-"
        b.row(
            f"{nodes} nodes / 1 node, up --provision wall", f"{ratio:.2f}x", target, ratio <= 3 if nodes == 16 else None
        )


def chart(samples: dict[str, Any], path: Path) -> Path | None:
    """Per-role wall time of the 1-node lab's first provision and its no-op re-run, as a PNG."""
    lab = samples.get("lab1")
    if not lab:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    roles = list(dict.fromkeys([*lab["first_roles_s"], *lab["rerun_roles_s"]]))
    first = [lab["first_roles_s"].get(r, 0.0) for r in roles]
    rerun = [lab["rerun_roles_s"].get(r, 0.0) for r in roles]
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(roles) + 1.5))
    y = range(len(roles))
    ax.barh([i - 0.2 for i in y], first, height=0.4, label=f"first provision ({sum(first):.0f} s)")
    ax.barh([i + 0.2 for i in y], rerun, height=0.4, label=f"no-op re-provision ({sum(rerun):.0f} s)")
    ax.set_yticks(list(y), [r.removeprefix("nodeforge.gpu.") for r in roles])
    ax.invert_yaxis()
    ax.set_xlabel("wall time per role (s), 1 lab node over SSH")
    ax.set_title("nodeforge: where a provision spends its time")
    ax.legend(loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


# ---------------------------------------------------------------------------------------------------------------
# 3. CLI overhead against ansible-runner called directly

DIRECT = """
import json, sys, tempfile
import ansible_runner
cfg = json.loads(sys.argv[1])
with tempfile.TemporaryDirectory(prefix="nodeforge-bench-runner-") as tmp:
    r = ansible_runner.run(private_data_dir=tmp, playbook=cfg["playbook"], project_dir=cfg["project_dir"],
                           inventory=cfg["inventory"], quiet=True, envvars=cfg["envvars"], **cfg["fact_cache"])
    print(json.dumps({"status": r.status, "rc": r.rc, "stats": r.stats}))
"""


def _direct_cfg(b: Bench, inventory: str, playbook: Path) -> dict[str, Any]:
    """What DIRECT needs to run a playbook with the CLI's settings, without the CLI."""
    from nodeforge import ansible_settings, content, runner

    return {
        "playbook": str(playbook),
        "project_dir": str(playbook.parent),  # the CLI runs from the playbook's directory too (ansible.cfg lookup)
        "inventory": inventory,
        "envvars": {
            "ANSIBLE_COLLECTIONS_PATH": str(content.collections_dir()),
            "CONTAINERS_CONF": b.env["CONTAINERS_CONF"],
            # The same shipped settings (pipelining, SSH multiplexing, fact cache) and known_hosts checking:
            # what is compared is the CLI's own cost, or the tasks', not the settings.
            "ANSIBLE_HOST_KEY_CHECKING": "True",
            **ansible_settings.environment(runner.state_dir()),
        },
        "fact_cache": ansible_settings.fact_cache(runner.state_dir()),
    }


def _run_direct(b: Bench, cfg: dict[str, Any], what: str) -> float:
    wall, out = b.call([PYTHON, "-c", DIRECT, json.dumps(cfg)], what=what)
    result = _json(out, what)
    if result.get("status") != "successful" or result.get("rc") != 0:
        raise BenchFailure(f"{what}: status {result.get('status')!r}, rc {result.get('rc')}")
    return wall


def bench_floor(b: Bench, lab_name: str, shape: dict[str, int], first_wall: float, reps: int = 2) -> None:
    """The floor of a no-op at its task count: the same number of host-tasks per node on the node, on the controller
    and skipped, each the cheapest of its kind, through ansible-runner with the same settings on the same lab's
    nodes."""
    from nodeforge import lab

    playbook = shape_playbook(shape, Path(b.env["NODEFORGE_STATE_DIR"]) / "bench-floor" / "same_shape.yml")
    cfg = _direct_cfg(b, str(lab.inventory_path(lab_name)), playbook)
    times = [_run_direct(b, cfg, "ansible_runner.run (same-shape trivial playbook)") for _ in range(reps)]
    floor = statistics.median(times)
    b.samples[f"floor_{lab_name}"] = {"shape": shape, "wall_s": times}
    label = f"{lab_name.removeprefix('bench')}-node lab"
    b.row(
        f"{label}: same shape of trivial tasks (stat, set_fact, skipped debug): wall, median of {reps}",
        _median(times),
    )
    b.row(
        f"{label}: same shape of trivial tasks / first converge (the no-op's floor at this task count)",
        f"{floor / first_wall:.0%}",
    )


def bench_overhead(b: Bench, reps: int, lab_name: str) -> None:
    from nodeforge import content, lab

    inventory = str(lab.inventory_path(lab_name))
    cfg = _direct_cfg(b, inventory, content.playbook("site.yml").resolve())
    cli = [*NODEFORGE, "provision", "-i", inventory, "--json"]

    def run_cli() -> float:
        wall, out = b.call(cli, what="nodeforge provision --json (overhead)")
        _provision_ok(_json(out, "nodeforge provision --json"), "nodeforge provision (overhead)", 1)
        return wall

    def run_direct() -> float:
        return _run_direct(b, cfg, "ansible_runner.run (overhead)")

    times: dict[str, list[float]] = {"cli": [], "direct": []}
    for i in range(reps):  # alternate which goes first, against drift
        order = [("cli", run_cli), ("direct", run_direct)]
        for kind, func in order if i % 2 == 0 else reversed(order):
            times[kind].append(func())
    cli_median, direct_median = statistics.median(times["cli"]), statistics.median(times["direct"])
    overhead = cli_median / direct_median - 1
    b.samples["overhead"] = times
    b.section = "overhead"
    b.row(f"provision 1 node via nodeforge CLI: wall, median of {reps}", _median(times["cli"]))
    b.row(f"same via ansible_runner.run directly: wall, median of {reps}", _median(times["direct"]))
    b.row(
        "CLI overhead over ansible-runner (medians)",
        f"{overhead:+.1%} ({cli_median - direct_median:+.2f} s)",
        "<= 3%",
        overhead <= 0.03,
    )


def bench_overhead_own_lab(b: Bench, reps: int) -> None:
    """--only overhead: a 1-node lab of its own, provisioned once (not measured) so every measured run is a rerun."""
    name = "benchoh"
    lab_down(b, name)
    try:
        what = f"lab up --nodes 1 --provision --json --name {name} --mirror {toolkit_mirror(b)}"
        _, out = b.call([*NODEFORGE, *what.split()], what=what)
        _provision_ok(_json(out, what), what, 1)
        bench_overhead(b, reps, name)
    finally:
        lab_down(b, name)


# ---------------------------------------------------------------------------------------------------------------


def print_markdown(head: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(cells[i]) for cells in [head, *rows]) for i in range(len(head))]

    def line(cells: tuple[str, ...]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    print(line(head))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for cells in rows:
        print(line(cells))


def print_table(rows: list[Row]) -> None:
    print_markdown(("metric", "value", "target", "met"), [(r.metric, r.value, r.target, r.met) for r in rows])


def print_node_calls(samples: dict[str, Any], lab_sizes: list[int]) -> None:
    """The node calls left in the no-op of the focus lab (else the smallest lab measured), one row per task, for
    one node: each one named, so that each one can be questioned."""
    measured = [n for n in lab_sizes if "rerun_node_calls" in samples.get(f"lab{n}", {})]
    if not measured:
        return
    nodes = FOCUS_NODES if FOCUS_NODES in measured else measured[0]
    calls = samples[f"lab{nodes}"]["rerun_node_calls"]
    print(f"\nnode calls in the {nodes}-node lab's no-op re-provision, host {calls['host']}:")
    rows = [
        (f"{c['role']} : {c['task']}" if c["role"] else c["task"], c["action"], str(c["count"]), str(c["runs"]))
        for c in calls["calls"]
    ]
    total = ("total", "", str(sum(c["count"] for c in calls["calls"])), str(sum(c["runs"] for c in calls["calls"])))
    print_markdown(("task", "action", "host-tasks", "module runs"), [*rows, total])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions; the 1- and 2-node labs only")
    parser.add_argument("--only", action="append", choices=SECTIONS, help="run only this section (repeatable)")
    parser.add_argument("--sizes", help="lab sizes to measure, comma-separated (default 1,2,4,16; 1,2 with --quick)")
    parser.add_argument("--reps", type=int, help="repetitions of the check and overhead measurements")
    args = parser.parse_args(argv)
    sections = [s for s in SECTIONS if s in (args.only or SECTIONS)]
    check_reps = 3 if args.quick else 5
    overhead_reps = 3 if args.quick else 5  # K >= 3: each run is a full provision
    lab_sizes = [1, 2] if args.quick else [1, 2, 4, 16]
    if args.sizes:
        lab_sizes = sorted({int(n) for n in args.sizes.split(",")})
    if args.reps:
        check_reps = overhead_reps = args.reps

    state = Path(tempfile.mkdtemp(prefix="nodeforge-bench-"))
    env = dict(os.environ)
    env.setdefault("CONTAINERS_CONF", str(ROOT / "containers" / "containers.conf"))
    env["NODEFORGE_STATE_DIR"] = str(state / "state")  # the bench's labs and runner artifacts stay apart
    env["PATH"] = os.pathsep.join([str(VENV_BIN), env.get("PATH", os.defpath)])
    os.environ.update({k: env[k] for k in ("CONTAINERS_CONF", "NODEFORGE_STATE_DIR")})  # for lab.inventory_path
    b = Bench(env)
    load_start = os.getloadavg()
    started = time.perf_counter()
    mode = " (quick)" if args.quick else ""
    print(
        f"nodeforge bench: {', '.join(sections)}{mode}; {os.cpu_count()} CPUs, load {load_start[0]:.1f}",
        file=sys.stderr,
    )

    steps: list[tuple[str, Callable[[], None]]] = []
    if "check" in sections:
        steps.append(("check", lambda: bench_check(b, check_reps, state)))
    if "lab" in sections:
        for n in lab_sizes:
            then = None
            if n == 1 and "overhead" in sections:
                then = lambda name: bench_overhead(b, overhead_reps, name)  # noqa: E731
            elif n == 4:
                then = lambda name: bench_strategy(b, name)  # noqa: E731
            extra = {1: " + overhead", 4: " + strategy"}.get(n, "") if then else ""
            steps.append((f"lab {n}{extra}", lambda n=n, then=then: bench_lab(b, n, then)))
    if "overhead" in sections and not ("lab" in sections and 1 in lab_sizes):
        steps.append(("overhead", lambda: bench_overhead_own_lab(b, overhead_reps)))
    # Debian's packages through the test harness's cache (tools/apt_cache.py), as `make test` does: 16 nodes would
    # otherwise download the same packages 16 times. NODEFORGE_APT_CACHE=0 measures without it.
    apt_cache = [PYTHON, str(ROOT / "tools" / "apt_cache.py")]
    use_cache = "lab" in sections and os.environ.get("NODEFORGE_APT_CACHE", "1") != "0"
    if use_cache:
        try:
            b.call([*apt_cache, "start", "--owner", str(os.getpid())], what="apt_cache.py start")
        except BenchFailure as exc:
            print(f"package cache not started, nodes fetch direct: {exc}", file=sys.stderr)
            use_cache = False
    b.samples["apt_cache"] = use_cache
    for label, step in steps:
        b.section = label.split()[0]
        t0 = time.perf_counter()
        print(f"-- {label} ...", file=sys.stderr, flush=True)
        try:
            step()
        except BenchFailure as exc:
            b.failures.append(str(exc))
            print(f"FAILED: {exc}", file=sys.stderr, flush=True)
        print(f"-- {label}: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    if use_cache:
        b.call([*apt_cache, "stop", "--owner", str(os.getpid())], what="apt_cache.py stop")
    b.section = "lab"
    scaling_rows(b)
    total = time.perf_counter() - started

    print_table(sorted(b.rows, key=lambda r: SECTIONS.index(r.section)))
    print_node_calls(b.samples, lab_sizes)
    load = f"load average {load_start[0]:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    print(f"\ntotal wall time: {total:.0f} s ({load})")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(time.time() - total)),
        "sections": sections,
        "quick": args.quick,
        "machine": {
            "cpus": os.cpu_count(),
            "loadavg_start": load_start,
            "loadavg_end": os.getloadavg(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "total_wall_s": round(total, 2),
        "rows": [asdict(r) for r in b.rows],
        "samples": b.samples,
        "failures": b.failures,
    }
    (RESULTS / "latest.json").write_text(json.dumps(out, indent=2) + "\n")
    print(f"results: {(RESULTS / 'latest.json').relative_to(ROOT)}")
    png = chart(b.samples, RESULTS / "latest.png")
    if png:
        print(f"chart: {png.relative_to(ROOT)}")
    if b.failures:
        print(f"\n{len(b.failures)} run(s) failed outright; bench state kept in {state}:", file=sys.stderr)
        for failure in b.failures:
            print(f"- {failure}", file=sys.stderr)
        return 1
    shutil.rmtree(state, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
