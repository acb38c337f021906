"""bench/run.py's no-op accounting: each host-task of a run read from its job events as on the node, on the
controller or skipped, the node calls named by task, and the same-shape playbook of the no-op's floor.

tests/data/bench_job_events.json holds the job events ansible-runner wrote for EVENTS_PROJECT (two hosts, local
connections), trimmed to the fields bench/run.py reads. `python tests/test_bench.py` writes it again from a fresh
run; test_fixture_events_are_what_this_ansible_core_writes checks that a fresh run still counts the same.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import ansible_runner

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("bench_run", ROOT / "bench" / "run.py")
bench = importlib.util.module_from_spec(spec)
sys.modules["bench_run"] = bench
spec.loader.exec_module(bench)

FIXTURE = ROOT / "tests" / "data" / "bench_job_events.json"

# A no-op's kinds of host-task on two hosts: controller actions, node modules (one hidden by no_log), skips (of a
# task, of one host, of a whole loop, of an include, in a role), a loop with one item skipped, a delegated task, a
# run_once, includes of a file and of a role (with its argument spec check), meta, a handler and an ignored failure.
EVENTS_PROJECT = {
    "play.yml": """\
- name: Events of every kind a no-op has
  hosts: all
  gather_facts: false
  tasks:
    - name: Check the inventory
      ansible.builtin.assert:
        that: inventory_hostname is defined
        quiet: true
    - name: Set a fact
      ansible.builtin.set_fact:
        answer: 42
    - name: Say something
      ansible.builtin.debug:
        msg: hello
    - name: Stat the root
      ansible.builtin.stat:
        path: /
    - name: A hidden command
      ansible.builtin.command: "true"
      changed_when: false
      no_log: true
    - name: Skipped by its condition
      ansible.builtin.command: "false"
      when: answer != 42
    - name: Skipped on one host only
      ansible.builtin.command: "true"
      changed_when: false
      when: inventory_hostname == 'node1'
    - name: A loop on the node, one item skipped
      ansible.builtin.stat:
        path: "{{ item }}"
      loop: [/, /tmp, /nonexistent-skipped]
      when: item != '/nonexistent-skipped'
    - name: A loop all of whose items are skipped
      ansible.builtin.stat:
        path: "{{ item }}"
      loop: [/a, /b]
      when: false
    - name: Delegated to the controller
      ansible.builtin.stat:
        path: /
      delegate_to: localhost
    - name: Once for all hosts
      ansible.builtin.set_fact:
        once: true
      run_once: true
    - name: Include a task file
      ansible.builtin.include_tasks: inc.yml
    - name: Skipped include
      ansible.builtin.include_tasks: inc.yml
      when: false
    - name: Include a role
      ansible.builtin.include_role:
        name: r1
    - name: Group the hosts
      ansible.builtin.group_by:
        key: bench_group
    - name: Include variables
      ansible.builtin.include_vars:
        file: vars.yml
    - name: Notify a handler
      ansible.builtin.debug:
        msg: notify
      changed_when: true
      notify: Read the kernel release
    - name: End the host, not now
      ansible.builtin.meta: end_host
      when: false
    - name: Flush handlers
      ansible.builtin.meta: flush_handlers
    - name: A failure ignored
      ansible.builtin.command: "false"
      changed_when: false
      failed_when: true
      ignore_errors: true
      when: inventory_hostname == 'node2'
  handlers:
    - name: Read the kernel release
      ansible.builtin.command: uname -r
      changed_when: false
""",
    "inc.yml": """\
- name: Read the hostname on the node (included)
  ansible.builtin.command: hostname
  changed_when: false
- name: A fact from the included file
  ansible.builtin.set_fact:
    included: true
""",
    "vars.yml": "bench_var: 1\n",
    "roles/r1/defaults/main.yml": "r1_flag: false\n",
    "roles/r1/meta/argument_specs.yml": """\
argument_specs:
  main:
    short_description: A role for the fixture
    options:
      r1_flag:
        type: bool
        default: false
        description: Never set.
""",
    "roles/r1/tasks/main.yml": """\
- name: Stat the root in the role
  ansible.builtin.stat:
    path: /
- name: Skipped in the role
  ansible.builtin.debug:
    msg: never
  when: r1_flag
""",
}
EVENTS_INVENTORY = "node1 ansible_connection=local\nnode2 ansible_connection=local\n"

# What the rule makes of that run, per host (the rule: bench/run.py, "How a no-op's host-tasks are counted").
EXPECTED_SHAPES = {
    # node: stat, hidden command, the one-host command, the loop, the included command, the role's stat, the
    # handler. controller: assert, set_fact, debug, the delegated stat, run_once set_fact (node1 only),
    # include_tasks, the included set_fact, include_role, its argument spec check, group_by, include_vars, the
    # notifying debug. skipped: the skipped command, the all-skipped loop, the skipped include, the role's
    # skipped debug, meta end_host; and the one-host command (node2) or the ignored failure (node1).
    "node1": {"node": 7, "controller": 12, "skipped": 6},
    "node2": {"node": 7, "controller": 11, "skipped": 6},
}
EXPECTED_NODE_CALLS_NODE2 = [
    # (role, task, action, host-tasks, module runs)
    ("", "A loop on the node, one item skipped", "ansible.builtin.stat", 1, 2),
    ("", "A failure ignored", "ansible.builtin.command", 1, 1),
    ("", "A hidden command", "ansible.builtin.command", 1, 1),
    ("", "Read the hostname on the node (included)", "ansible.builtin.command", 1, 1),
    ("", "Read the kernel release", "ansible.builtin.command", 1, 1),
    ("", "Stat the root", "ansible.builtin.stat", 1, 1),
    ("r1", "Stat the root in the role", "ansible.builtin.stat", 1, 1),
]

# The fields of a job event that bench/run.py reads, and of a result only what says where it ran.
EVENT_FIELDS = ("host", "task", "task_uuid", "task_action", "resolved_action", "role")
RESULT_FIELDS = ("censored", "_ansible_no_log", "_ansible_delegated_vars")
DROPPED_EVENTS = ("runner_on_start",)  # one per host-task before it runs: nothing the bench reads


def run_events_project(directory: Path) -> list[dict]:
    """EVENTS_PROJECT through ansible_runner.run; the run's job events, in order."""
    project = directory / "project"
    for name, text in EVENTS_PROJECT.items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(text)
    (directory / "runner").mkdir()
    run = ansible_runner.run(
        private_data_dir=str(directory / "runner"),
        project_dir=str(project),
        playbook="play.yml",
        inventory=EVENTS_INVENTORY,
        quiet=True,
        envvars={
            "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
            "ANSIBLE_ROLES_PATH": str(project / "roles"),
            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        },
    )
    assert run.status == "successful", run.stdout.read()
    return bench.job_events(run.config.artifact_dir)


def trimmed(events: list[dict]) -> list[dict]:
    def event_data(data: dict) -> dict:
        kept = {k: data[k] for k in EVENT_FIELDS if k in data}
        if isinstance(data.get("res"), dict):
            kept["res"] = {k: data["res"][k] for k in RESULT_FIELDS if k in data["res"]}
        return kept

    return [
        {"event": e["event"], "counter": e["counter"], "event_data": event_data(e.get("event_data") or {})}
        for e in events
        if e["event"] not in DROPPED_EVENTS
    ]


def fixture_events() -> list[dict]:
    return json.loads(FIXTURE.read_text())["events"]


def calls_table(events: list[dict], host: str) -> list[tuple]:
    return [(c["role"], c["task"], c["action"], c["count"], c["runs"]) for c in bench.node_calls(events, host)]


def test_host_tasks_per_node_from_captured_events():
    events = fixture_events()
    assert bench.shape_per_node(events) == EXPECTED_SHAPES
    # The per-node count is the one the bench reports and replays: the busiest node's.
    assert bench.busiest_node(events) == "node1"
    assert bench.task_shape(events) == EXPECTED_SHAPES["node1"]


def test_each_node_call_is_named_with_its_action_and_count():
    events = fixture_events()
    assert calls_table(events, "node2") == EXPECTED_NODE_CALLS_NODE2
    tasks = {(t["host"], t["task"]): t["kind"] for t in bench.host_tasks(events)}
    # A no_log result is censored in the events; it still counts by its action.
    assert tasks["node1", "A hidden command"] == "node"
    # A module delegated to the controller's local connection did not reach the node.
    assert tasks["node1", "Delegated to the controller"] == "controller"
    # Includes, their argument spec check and meta run on the controller; a skipped include is a skip.
    assert tasks["node1", "Include a role"] == "controller"
    assert {kind for (host, task), kind in tasks.items() if task.startswith("Validating arguments")} == {"controller"}
    assert tasks["node1", "Skipped include"] == "skipped"
    assert tasks["node1", "End the host, not now"] == "skipped"


def test_fixture_events_are_what_this_ansible_core_writes(tmp_path):
    """A fresh run of the same project on the ansible-core under test counts the same as the captured events."""
    events = run_events_project(tmp_path)
    assert bench.shape_per_node(events) == EXPECTED_SHAPES
    assert calls_table(events, "node2") == EXPECTED_NODE_CALLS_NODE2


def test_connectionless_actions_are_those_the_plugins_declare():
    """CONNECTIONLESS_ACTIONS is the list of action plugins, ansible-core's and the collection's, that declare
    `_requires_connection = False`, read through Ansible's own plugin loader."""
    script = """
import json, os, sys
import ansible.plugins.action
from ansible.plugins.loader import action_loader, init_plugin_loader
init_plugin_loader([sys.argv[1]])
names = [f"ansible.builtin.{f[:-3]}" for f in os.listdir(os.path.dirname(ansible.plugins.action.__file__))
         if f.endswith(".py") and f != "__init__.py"]
names += [f"nodeforge.gpu.{f[:-3]}" for f in os.listdir(sys.argv[2]) if f.endswith(".py") and f != "__init__.py"]
print(json.dumps(sorted(n for n in names if not action_loader.get(n, class_only=True)._requires_connection)))
"""
    collections = ROOT / "collections"
    actions = collections / "ansible_collections" / "nodeforge" / "gpu" / "plugins" / "action"
    out = subprocess.run(
        [sys.executable, "-c", script, str(collections), str(actions)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    assert set(json.loads(out)) == bench.CONNECTIONLESS_ACTIONS


def test_same_shape_playbook_runs_as_the_shape_it_was_built_from(tmp_path):
    shape = {"node": 3, "controller": 4, "skipped": 5}
    playbook = bench.shape_playbook(shape, tmp_path / "project" / "same_shape.yml")
    (tmp_path / "runner").mkdir()
    run = ansible_runner.run(
        private_data_dir=str(tmp_path / "runner"),
        playbook=str(playbook),
        inventory="localhost ansible_connection=local",
        quiet=True,
        envvars={
            "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        },
    )
    assert run.status == "successful"
    assert run.stats["ok"] == {"localhost": shape["node"] + shape["controller"]}
    assert run.stats["skipped"] == {"localhost": shape["skipped"]}
    # Read back from the run's own job events: the stats and the shape agree.
    assert bench.task_shape(bench.job_events(run.config.artifact_dir)) == shape


if __name__ == "__main__":
    # Capture the fixture again: python tests/test_bench.py
    import ansible

    with tempfile.TemporaryDirectory(prefix="nodeforge-bench-events-") as tmp:
        captured = trimmed(run_events_project(Path(tmp)))
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    about = {
        "about": "ansible-runner job events of tests/test_bench.py's EVENTS_PROJECT (runner_on_start left out), "
        "trimmed to the fields bench/run.py reads; written by `python tests/test_bench.py`",
        "ansible_core": ansible.__version__,
        "ansible_runner": importlib.metadata.version("ansible-runner"),
    }
    head = json.dumps(about, indent=1)[:-2]  # one event per line below, so that a diff shows which one changed
    FIXTURE.write_text(f'{head},\n "events": [\n' + ",\n".join(f"  {json.dumps(e)}" for e in captured) + "\n ]\n}\n")
    print(f"wrote {FIXTURE.relative_to(ROOT)}: {len(captured)} events")
