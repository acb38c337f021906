"""molecule's strategy (molecule/shared/plugins/strategy/nodeforge_molecule.py), as ansible-playbook runs it: a play
whose connection is `local` (molecule's own create and destroy) runs under Ansible's linear strategy, every other play
under Mitogen's. The two are told apart by the id of an async job each play starts: Ansible's async_wrapper names a
job `j<digits>.<pid>`, Mitogen's async runner a 16-digit hex id. Both jobs must also be seen to finish through
async_status, which is what molecule's create play waits on."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow

PLAY_TASKS = """
  tasks:
    - name: Start a job
      ansible.builtin.command: "true"
      async: 60
      poll: 0
      register: job
      changed_when: false
    - name: Wait for it
      ansible.builtin.async_status:
        jid: "{{ job.ansible_job_id }}"
      register: waited
      until: waited is finished
      retries: 30
      delay: 1
    - name: Report the job
      ansible.builtin.debug:
        msg: "{{ job.ansible_job_id }}"
"""


def test_local_plays_keep_linear_and_node_plays_run_under_mitogen(tmp_path):
    (tmp_path / "hosts.yml").write_text(
        "all:\n  hosts:\n    node:\n      ansible_connection: local\n"
        f"      ansible_python_interpreter: {sys.executable}\n"
    )
    (tmp_path / "play.yml").write_text(
        "- name: Molecule's create\n  hosts: node\n  connection: local\n  gather_facts: false\n"
        + PLAY_TASKS
        + "- name: Converge\n  hosts: node\n  gather_facts: false\n"
        + PLAY_TASKS
    )
    env = {
        **os.environ,
        "ANSIBLE_STRATEGY": "nodeforge_molecule",
        "ANSIBLE_STRATEGY_PLUGINS": str(REPO / "molecule" / "shared" / "plugins" / "strategy"),
        "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
        "ANSIBLE_ASYNC_DIR": str(tmp_path / "async"),
    }
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(tmp_path / "hosts.yml"), "play.yml"]
    run = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr
    plays = json.loads(run.stdout)["plays"]
    jobs = {
        play["play"]["name"]: task["hosts"]["node"]["msg"]
        for play in plays
        for task in play["tasks"]
        if task["task"]["name"] == "Report the job"
    }
    assert re.fullmatch(r"j\d+\.\d+", jobs["Molecule's create"]), jobs
    assert re.fullmatch(r"[0-9a-f]{16}", jobs["Converge"]), jobs
