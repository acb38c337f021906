"""The node's interpreter under nodeforge's strategy: ansible-core's run_command without its one-second stall
(nodeforge/mitogen_node.py).

The race is made certain rather than waited for: a Popen whose first poll() waits for the command to exit and
still answers "running", so the loop's next poll() sees it exited and neither of its two exits is taken. ansible-core's
own run_command then sleeps a full second in a select on nothing; with the selectors nodeforge gives it, it returns
as soon as the command has. A playbook under nodeforge_linear (Mitogen's local connection: a child interpreter, as
on a node) reads which selectors run_command has there, and under Ansible's linear which it has by default.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ansible.module_utils import basic

from nodeforge import mitogen_node
from tests import local_playbook


class RacingPopen(subprocess.Popen):
    """A Popen whose first poll() lets the command exit and still reports it running: the interleaving in which the
    command exits between run_command's two poll() calls."""

    polled = False

    def poll(self):
        if not self.polled:
            self.polled = True
            self.wait()
            return None
        return super().poll()


@pytest.fixture
def module(monkeypatch):
    monkeypatch.setattr(basic, "_ANSIBLE_ARGS", json.dumps({"ANSIBLE_MODULE_ARGS": {}}).encode())
    monkeypatch.setattr(basic, "selectors", basic.selectors)  # restored after the test
    return basic.AnsibleModule(argument_spec={})


def timed_run(module, monkeypatch) -> tuple[float, tuple]:
    fake_subprocess = type(sys)("subprocess")
    fake_subprocess.__dict__.update(vars(subprocess))
    fake_subprocess.Popen = RacingPopen
    monkeypatch.setattr(basic, "subprocess", fake_subprocess)
    start = time.monotonic()
    result = module.run_command(["sh", "-c", "echo out; echo err >&2"])
    return time.monotonic() - start, result


def test_ansible_cores_run_command_sleeps_a_second_when_the_command_exits_between_its_polls(module, monkeypatch):
    # The bug the node's interpreter is started without (if this fails, ansible-core fixed it: see the module).
    elapsed, result = timed_run(module, monkeypatch)
    assert result == (0, "out\n", "err\n")
    assert elapsed >= 0.9


def test_run_command_with_nodeforges_selectors_returns_when_the_command_has(module, monkeypatch):
    mitogen_node.patch_run_command()
    assert basic.selectors is not selectors
    elapsed, result = timed_run(module, monkeypatch)
    assert result == (0, "out\n", "err\n")
    assert elapsed < 0.5
    # Patched once: a second call keeps the same module.
    patched = basic.selectors
    mitogen_node.patch_run_command()
    assert basic.selectors is patched


def test_a_selector_with_something_registered_still_waits_and_reports(tmp_path):
    shim = mitogen_node.selectors_without_idle_wait()
    for name in mitogen_node.SELECTORS:
        assert issubclass(getattr(shim, name), getattr(selectors, name))
    assert shim.EVENT_READ == selectors.EVENT_READ
    read_end, write_end = os.pipe()
    try:
        with shim.PollSelector() as selector:
            selector.register(read_end, shim.EVENT_READ)
            start = time.monotonic()
            assert selector.select(0.3) == []  # nothing to read: the whole timeout
            assert time.monotonic() - start >= 0.25
            os.write(write_end, b"x")
            [(key, events)] = selector.select(1)
            assert key.fd == read_end and events == shim.EVENT_READ
            selector.unregister(read_end)
            start = time.monotonic()
            assert selector.select(5) == []  # nothing registered: at once
            assert time.monotonic() - start < 1
    finally:
        os.close(read_end)
        os.close(write_end)


PROBE_MODULE = """#!/usr/bin/python
import os

from ansible.module_utils import basic
from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(argument_spec={})
    cls = basic.selectors.PollSelector
    module.exit_json(changed=False, selector=cls.__module__ + "." + cls.__qualname__, pid=os.getpid())


main()
"""

PLAYBOOK = """
- name: Read the selectors run_command has on the node
  hosts: all
  gather_facts: false
  tasks:
    - name: Probe
      selector_probe:
    - name: A command
      ansible.builtin.command: echo ran
      changed_when: false
"""


def run_playbook(project: Path, strategy: str) -> tuple[dict, int]:
    report, pid = local_playbook.run(project, strategy, {"ANSIBLE_LIBRARY": str(project / "library")})
    return {task["task"]["name"]: task["hosts"]["node"] for task in report["plays"][0]["tasks"]}, pid


def test_the_nodes_interpreter_has_them_under_nodeforge_linear_only(tmp_path):
    (tmp_path / "hosts.yml").write_text(
        f"all:\n  vars:\n    ansible_connection: local\n    ansible_python_interpreter: {sys.executable}\n"
        "  hosts:\n    node:\n"
    )
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    (tmp_path / "library").mkdir()
    (tmp_path / "library" / "selector_probe.py").write_text(PROBE_MODULE)

    ours, our_pid = run_playbook(tmp_path, "nodeforge_linear")
    assert ours["Probe"]["selector"] == "nodeforge.mitogen_node.PollSelector"
    assert ours["Probe"]["pid"] != our_pid  # Mitogen's child interpreter, not ansible-playbook
    assert ours["A command"]["stdout"] == "ran"

    linear, _ = run_playbook(tmp_path, "linear")
    assert linear["Probe"]["selector"] == "selectors.PollSelector"
    assert linear["A command"]["stdout"] == "ran"
