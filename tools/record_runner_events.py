"""Record the ansible-runner events that tests/test_runner_events.py replays through nodeforge.runner.Progress.

Each scenario is a small playbook run for real, through nodeforge.runner.run_playbook (the product's own call of
ansible_runner.run_async), against hosts of this machine (the local connection) and, for the unreachable and
comes_and_goes scenarios, a host whose SSH port nothing listens on. For each run this writes
tests/data/runner_events/<scenario>.json:

    about, command, ansible_core, ansible_runner   how and with what it was recorded
    status, rc, stats, stdout                      what the ansible-runner Runner object said at the end (what
                                                   runner._result reads: status, rc, stats, and stdout for a run that
                                                   failed before any host)
    result                                         the RunResult of the real run (as_dict, duration_s and artifacts
                                                   left out)
    events                                         artifacts/<ident>/job_events/*.json in counter order, as
                                                   ansible-runner wrote them, less the fields no code reads (each
                                                   event's stdout text, line numbers, pid, timestamps, uuids but
                                                   task_uuid; event_data's playbook and path details)

Usage (offline, once; the tests only read the files):

    .venv/bin/python tools/record_runner_events.py [SCENARIO ...]

The playbooks and inventory live in a fixed directory (/tmp/nodeforge-record-events) so that the paths the events
carry are the same from one recording to the next.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import stat
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "data" / "runner_events"
WORK = Path("/tmp/nodeforge-record-events")
COMMAND = ".venv/bin/python tools/record_runner_events.py"

LOCAL = "ansible_connection: local\n          ansible_python_interpreter: '{{ ansible_playbook_python }}'"
INVENTORY = f"""all:
  children:
    gpu_nodes:
      hosts:
        localnode:
          {LOCAL}
        othernode:
          {LOCAL}
      vars:
        nodeforge_profile: lab
"""
DEAD_INVENTORY = f"""all:
  children:
    gpu_nodes:
      hosts:
        localnode:
          {LOCAL}
        deadnode:
          ansible_host: 127.0.0.1
          ansible_port: 1
          ansible_connection: ssh
      vars:
        nodeforge_profile: lab
"""

ROLE_TASKS = """---
- name: Announce from a role
  ansible.builtin.debug:
    msg: "role says:   {{ inventory_hostname }}\\n  restarts containerd"
- name: Change something in a role
  ansible.builtin.command: "true"
  changed_when: true
"""

PLAYBOOKS = {
    # ok, changed, a task skipped on one host, a task every host skips, the reboot fact (true on one host only).
    "success": """---
- name: A run that succeeds
  hosts: all
  gather_facts: false
  tasks:
    - name: Report ok
      ansible.builtin.debug:
        msg: hello
    - name: Write a marker file
      ansible.builtin.copy:
        dest: "/tmp/nodeforge-record-events/success/marker-{{ inventory_hostname }}"
        content: "x\\n"
        mode: "0644"
    - name: Only on localnode
      ansible.builtin.command: "true"
      changed_when: false
      when: inventory_hostname == 'localnode'
    - name: Skipped everywhere
      ansible.builtin.debug:
        msg: never
      when: false
    - name: Set the reboot-required fact
      ansible.builtin.set_fact:
        nodeforge_reboot_required: "{{ inventory_hostname == 'localnode' }}"
""",
    # An ignored failure, a failure on one host only, a task the failed host never reaches.
    "failing": """---
- name: A run with a failing task
  hosts: all
  gather_facts: false
  tasks:
    - name: Tolerated failure
      ansible.builtin.command: /bin/false
      changed_when: false
      ignore_errors: true
    - name: Refuse on purpose
      ansible.builtin.fail:
        msg: "  the node said no: {{ inventory_hostname }}  "
      when: inventory_hostname == 'othernode'
    - name: Fail through stderr
      ansible.builtin.command: sh -c 'echo broken pipe >&2; exit 3'
      changed_when: false
      when: inventory_hostname == 'localnode'
      ignore_errors: true
    - name: Never reached on othernode
      ansible.builtin.debug:
        msg: still here
""",
    # A failure in a block that its rescue handles: localnode ends rescued, not failed; on othernode the rescue
    # refuses in turn, so the host fails (rescued 1, failed 1) with the block's failure as its cause.
    "rescued": """---
- name: A run that rescues a failure
  hosts: localnode,othernode
  gather_facts: false
  tasks:
    - name: A block with a rescue
      block:
        - name: Fail inside the block
          ansible.builtin.fail:
            msg: rescued later
      rescue:
        - name: Rescue the failure
          ansible.builtin.debug:
            msg: rescued
        - name: Refuse on othernode
          ansible.builtin.fail:
            msg: "the rescue refused: {{ ansible_failed_result.msg }}"
          when: inventory_hostname == 'othernode'
""",
    # A host nothing answers on (ssh to port 1): unreachable at the first task that connects.
    "unreachable": """---
- name: A run with an unreachable host
  hosts: all
  gather_facts: false
  tasks:
    - name: Report ok
      ansible.builtin.debug:
        msg: hello
    - name: Touch the node
      ansible.builtin.command: "true"
      changed_when: false
""",
    # A loop whose items change, a loop with a skipped item, a handler that changes, a role's changed task.
    "loop_handler": """---
- name: A run with loops and a handler
  hosts: localnode
  gather_facts: false
  tasks:
    - name: Change each item
      ansible.builtin.command: "echo {{ item }}"
      changed_when: true
      loop: [a, b]
      notify: Restart the service
    - name: Skip one item
      ansible.builtin.debug:
        msg: "{{ item }}"
      loop: [c, d]
      when: item == 'c'
    - name: Run the role
      ansible.builtin.include_role:
        name: demo
  handlers:
    - name: Restart the service
      ansible.builtin.command: "true"
      changed_when: true
""",
    # Ansible's warnings (the validation module's, a disabled verification), announcements of every shape.
    "notices": """---
- name: A run that announces
  hosts: all
  gather_facts: false
  tasks:
    - name: Validate the inventory (a disabled verification is a warning)
      nodeforge.gpu.validate_inventory:
      run_once: true
    - name: Announce the restart
      ansible.builtin.debug:
        msg: "{{ inventory_hostname }}: docker is not restarted: 2 running container(s) would be stopped"
    - name: Announce it again
      ansible.builtin.debug:
        msg: "{{ inventory_hostname }}:   docker is not restarted: 2 running container(s)   would be stopped"
    - name: Report something routine
      ansible.builtin.debug:
        msg: routine detail that stays in the artifacts
    - name: Warn about a second NVIDIA CDI specification
      ansible.builtin.debug:
        msg: [two specifications, "/etc/cdi/nvidia.yaml", 2]
    - name: Announce nothing
      ansible.builtin.debug:
        msg: ""
    - name: Announce the skipped
      ansible.builtin.debug:
        msg: never said
      when: false
    - name: Run the role
      ansible.builtin.include_role:
        name: demo
      when: inventory_hostname == 'othernode'
""",
    # The acceptance checks, an upgrade's plan and record, the reboot fact false; values of the wrong shape ignored.
    "acceptance": """---
- name: A validate and upgrade run
  hosts: all
  gather_facts: false
  tasks:
    - name: Report the acceptance checks
      ansible.builtin.set_fact:
        validate_results: "{{ [{'check': 'nouveau', 'status': 'pass', 'measured': 'no', 'expected': 'no',
          'reason': '', 'unit': None}, {'check': 'gpu_count', 'status': 'fail', 'measured': 1, 'expected': 8,
          'reason': '1 GPUs visible', 'unit': None}] if inventory_hostname == 'localnode' else 'not a list' }}"
    - name: Report other checks
      ansible.builtin.set_fact:
        validate_results: [{check: other, status: pass}]
    - name: Probe the upgrade
      ansible.builtin.set_fact:
        upgrade_plan: "{{ {'action': 'todo', 'resume': false, 'components': [{'component': 'toolkit',
          'from': '1.20.0', 'to': '1.21.0', 'action': 'upgrade'}]} if inventory_hostname == 'localnode'
          else ['not', 'a', 'dict'] }}"
    - name: Read the upgrade record
      ansible.builtin.set_fact:
        upgrade_record: "{{ {'step': 'done', 'at': '2026-01-02T03:04:05Z'} if inventory_hostname == 'othernode'
          else 'none' }}"
    - name: Set the reboot-required fact
      ansible.builtin.set_fact:
        nodeforge_reboot_required: "{{ inventory_hostname == 'othernode' }}"
""",
    # A run canceled (Ctrl-C) while a task is at work: no stats event.
    "canceled": """---
- name: A run that takes long
  hosts: localnode
  gather_facts: false
  tasks:
    - name: Report ok
      ansible.builtin.debug:
        msg: hello
    - name: Sleep for a long time
      ansible.builtin.command: sleep 120
      changed_when: false
""",
    # A host whose failure a rescue handles and that then goes unreachable; its errors cleared, unreachable again.
    "comes_and_goes": """---
- name: A run whose host comes and goes
  hosts: all
  gather_facts: false
  tasks:
    - name: A block with a rescue
      block:
        - name: Fail inside the block
          ansible.builtin.fail:
            msg: rescued later
      rescue:
        - name: Rescue the failure
          ansible.builtin.debug:
            msg: rescued
    - name: Touch the node
      ansible.builtin.command: "true"
      changed_when: false
    - name: Clear the host errors
      ansible.builtin.meta: clear_host_errors
    - name: Touch the node again
      ansible.builtin.command: "true"
      changed_when: false
""",
    # A playbook ansible-playbook cannot parse: it fails before any host (rc 4).
    "parse_error": """---
- name: A play
  hosts: all
  tasks:
    - name: x
      ansible.builtin.debug: [
""",
}
INVENTORIES = {"unreachable": DEAD_INVENTORY, "comes_and_goes": DEAD_INVENTORY}
EXTRAVARS: dict[str, dict[str, Any]] = {"notices": {"ofed_validate_certs": False}}
CANCEL_AFTER_S = {"canceled": 6.0}

# Top-level event keys kept (the rest: stdout text, line numbers, pid, timestamps, uuids).
EVENT_KEYS = ("event", "counter", "event_data")
# event_data keys dropped: none that nodeforge reads (host, task, task_uuid, play, res, ignore_errors, and the stats).
DROPPED_DATA = (
    *("playbook_uuid", "play_uuid", "play_pattern", "task_path", "uuid", "parent_uuid", "pid", "playbook"),
    *("duration", "start", "end", "remote_addr", "event_loop", "task_args", "resolved_action", "is_conditional"),
)
# res keys dropped: the module's arguments, the lines twins of stdout/stderr, the diff.
DROPPED_RES = ("invocation", "stdout_lines", "stderr_lines", "diff")


def _event(raw: dict[str, Any]) -> dict[str, Any]:
    event = {key: raw[key] for key in EVENT_KEYS if key in raw}
    data = {k: v for k, v in (raw.get("event_data") or {}).items() if k not in DROPPED_DATA}
    if isinstance(data.get("res"), dict):
        data["res"] = {k: v for k, v in data["res"].items() if k not in DROPPED_RES}
    for item in data.get("res", {}).get("results") or []:
        for key in DROPPED_RES:
            item.pop(key, None)
    event["event_data"] = data
    return event


def record(name: str) -> Path:
    from nodeforge import runner

    project = WORK / name
    shutil.rmtree(project, ignore_errors=True)
    project.mkdir()  # in WORK, which _own_work made ours: a name planted in it meanwhile is an error, never followed
    (project / "roles" / "demo" / "tasks").mkdir(parents=True)
    (project / "roles" / "demo" / "tasks" / "main.yml").write_text(ROLE_TASKS)
    playbook = project / f"{name}.yml"
    playbook.write_text(PLAYBOOKS[name])
    inventory = project / "hosts.yml"
    inventory.write_text(INVENTORIES.get(name, INVENTORY))
    os.environ["NODEFORGE_STATE_DIR"] = str(project / "state")

    seen: dict[str, Any] = {}
    real_result = runner._result

    def keep(playbook_name: str, run: Any, progress: Any, duration: float) -> Any:
        seen.update(status=run.status, rc=run.rc, stats=run.stats, stdout=runner._stdout(run))
        return real_result(playbook_name, run, progress, duration)

    runner._result = keep
    canceller = runner.Canceller()
    timer = threading.Timer(CANCEL_AFTER_S.get(name, 0), canceller.request)
    if name in CANCEL_AFTER_S:
        timer.start()
    try:
        opts = runner.RunOptions(inventory=str(inventory), extravars=EXTRAVARS.get(name, {}))
        result = runner.run_playbook(str(playbook), opts, canceller=canceller, install_signal_handlers=False)
    finally:
        timer.cancel()
        runner._result = real_result
    files = sorted(Path(result.artifacts).glob("job_events/*.json"), key=lambda p: int(p.name.split("-", 1)[0]))
    summary = {k: v for k, v in result.as_dict().items() if k not in ("duration_s", "artifacts")}
    document = {
        "about": f"ansible-runner job events of the {name!r} playbook in {Path(__file__).name}, run through "
        "nodeforge.runner.run_playbook; each event trimmed to the keys nodeforge reads",
        "command": COMMAND + f" {name}",
        "ansible_core": importlib.metadata.version("ansible-core"),
        "ansible_runner": importlib.metadata.version("ansible-runner"),
        "status": seen["status"],
        "rc": seen["rc"],
        "stats": seen["stats"],
        "stdout": seen["stdout"] if not result.hosts else "",
        "result": summary,
        "events": [_event(json.loads(f.read_text())) for f in files],
    }
    OUT.mkdir(parents=True, exist_ok=True)
    target = OUT / f"{name}.json"
    target.write_text(json.dumps(document, indent=1, sort_keys=False) + "\n")
    return target


def _own_work() -> None:
    """WORK is a fixed path in /tmp (the events carry it): a real directory of this user, mode 0700, or an error; a
    link or another user's directory there is refused, never followed."""
    try:
        WORK.mkdir(mode=0o700)
    except FileExistsError:
        status = WORK.lstat()
        if not stat.S_ISDIR(status.st_mode) or status.st_uid != os.getuid():
            sys.exit(f"{WORK} is not a directory of this user (a link, a file or another's): remove it first")
        WORK.chmod(0o700)


def main(names: list[str]) -> None:
    _own_work()
    for name in names or list(PLAYBOOKS):
        started = time.monotonic()
        target = record(name)
        print(f"{target.relative_to(REPO)}: {time.monotonic() - started:.1f}s", flush=True)


if __name__ == "__main__":
    sys.path.insert(0, str(REPO / "src"))
    main(sys.argv[1:])
