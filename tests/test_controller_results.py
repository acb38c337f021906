"""nodeforge_linear answers skipped tasks and includes, and runs actions that need no connection, in its own process
(nodeforge/controller_results.py).

The same playbook runs under Ansible's own `linear` strategy and under `nodeforge_linear`; every task's result, as
Ansible's json callback prints it, and the stats must be the same. Where templating happened is read through a filter
that records the process it runs in: under nodeforge_linear a skipped task's conditional and a set_fact's value are
templated in the ansible-playbook process, under linear in a forked worker. Tasks the shortcut must leave to the
worker (a loop, a conditional that raises) are in the playbook too, with the results linear gives them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests import local_playbook

PIDLOG_FILTER = """
import os


def pidlog(value, path):
    with open(path, "a", encoding="utf-8") as out:
        out.write(f"{os.getpid()}\\n")
    return value


class FilterModule:
    def filters(self):
        return {"pidlog": pidlog}
"""

PLAYBOOK = """
- name: Skips and includes
  hosts: all
  gather_facts: false
  vars:
    flag: false
    included_file: included.yml
  tasks:
    - name: Skipped, its conditional through the pid filter
      ansible.builtin.debug:
        msg: never
      when: flag | pidlog(pid_file)
    - name: Skipped with no_log
      ansible.builtin.debug:
        msg: secret
      no_log: true
      when: flag
    - name: Skipped by a block's conditional and its own
      when: included_file == 'other.yml'
      block:
        - name: In the block
          ansible.builtin.debug:
            msg: never
          when: not flag
    - name: Runs, its conditional true
      ansible.builtin.debug:
        msg: "ran with {{ included_file }}"
      when: not flag
    - name: A loop, each item its own conditional
      ansible.builtin.debug:
        msg: "{{ item }}"
      loop: [1, 7]
      when: item > 5
    - name: A conditional that raises
      ansible.builtin.debug:
        msg: never
      when: missing_variable
      ignore_errors: true
    - name: An include whose file name is templated, with a variable
      ansible.builtin.include_tasks: "{{ included_file }}"
      vars:
        passed: from the include
    - name: A skipped include
      ansible.builtin.include_tasks: missing.yml
      when: flag
    - name: A role included with tasks_from
      ansible.builtin.include_role:
        name: probe
        tasks_from: other
    - name: A skipped role include
      ansible.builtin.include_role:
        name: missing_role
      when: flag
    - name: A fact set on the controller, its value through the pid filter
      ansible.builtin.set_fact:
        computed: "{{ (included_file ~ '!') | pidlog(pid_file) }}"
      register: fact_result
      changed_when: computed.endswith('!')
    - name: Check the fact and the registered result
      ansible.builtin.assert:
        that:
          - computed == 'included.yml!'
          - fact_result is changed
    - name: An assertion that fails
      ansible.builtin.assert:
        that: computed == 'other'
        fail_msg: "computed is {{ computed }}"
      ignore_errors: true
    - name: A failure on purpose, hidden
      ansible.builtin.fail:
        msg: secret
      no_log: true
      ignore_errors: true
    - name: A filter that does not exist
      ansible.builtin.set_fact:
        broken: "{{ 1 | no_such_filter }}"
      ignore_errors: true
    - name: Each host its own name, templated from the same task
      ansible.builtin.debug:
        msg: "{{ inventory_hostname }}"
    - name: Variables from a file
      ansible.builtin.include_vars:
        file: more_vars.yml
    - name: Report one of them
      ansible.builtin.debug:
        var: from_file
    - name: The magic variables of the connection in a conditional
      ansible.builtin.debug:
        msg: never
      when: (ansible_host != inventory_hostname or ansible_connection != 'local') | pidlog(pid_file)
"""

INCLUDED = """
- name: In the included file
  ansible.builtin.set_fact:
    from_include: "{{ passed }}"
- name: Report the fact
  ansible.builtin.debug:
    var: from_include
"""

MORE_VARS = "from_file: read on the controller\n"

ROLE_TASKS = """
- name: In the role's other tasks
  ansible.builtin.debug:
    msg: "role says {{ greeting }}"
"""


def run(project: Path, strategy: str) -> tuple[dict, list[int], int]:
    pid_file = project / f"{strategy}.pids"
    env = {
        "ANSIBLE_FILTER_PLUGINS": str(project / "filter_plugins"),
        "ANSIBLE_ROLES_PATH": str(project / "roles"),
    }
    report, pid = local_playbook.run(project, strategy, env, ("-e", f"pid_file={pid_file}"))
    pids = [int(line) for line in pid_file.read_text().split()]
    return report, pids, pid


def results(report: dict, host: str = "node") -> list[tuple[str, dict]]:
    """Each task's name and its result on a host, in order, without what differs between any two runs. (Under
    Mitogen's linear strategy the json callback lists a task once per host, under Ansible's once for all hosts.)"""
    volatile = {"start", "end", "duration", "delta"}
    return [
        (task["task"]["name"], {k: v for k, v in task["hosts"][host].items() if k not in volatile})
        for play in report["plays"]
        for task in play["tasks"]
        if host in task["hosts"]
    ]


@pytest.fixture
def project(tmp_path):
    (tmp_path / "hosts.yml").write_text(
        "all:\n  vars:\n    ansible_connection: local\n"
        f"    ansible_python_interpreter: {sys.executable}\n  hosts:\n    node:\n    other:\n"
    )
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    (tmp_path / "included.yml").write_text(INCLUDED)
    (tmp_path / "more_vars.yml").write_text(MORE_VARS)
    (tmp_path / "filter_plugins").mkdir()
    (tmp_path / "filter_plugins" / "pidlog.py").write_text(PIDLOG_FILTER)
    tasks = tmp_path / "roles" / "probe" / "tasks"
    tasks.mkdir(parents=True)
    (tasks / "other.yml").write_text(ROLE_TASKS)
    (tmp_path / "roles" / "probe" / "defaults").mkdir()
    (tmp_path / "roles" / "probe" / "defaults" / "main.yml").write_text("greeting: hello\n")
    return tmp_path


def test_skips_and_includes_from_the_strategy_process_match_linear(project):
    linear, linear_pids, linear_pid = run(project, "linear")
    ours, our_pids, our_pid = run(project, "nodeforge_linear")

    assert results(ours) == results(linear)
    assert results(ours, "other") == results(linear, "other")
    assert ours["stats"] == linear["stats"]
    # The results the shortcut gives, as linear gives them.
    by_name = dict(results(ours))
    skipped = by_name["Skipped, its conditional through the pid filter"]
    assert skipped["skipped"] is True
    assert skipped["false_condition"] == "flag | pidlog(pid_file)"
    assert by_name["Skipped with no_log"]["censored"].startswith("the output has been hidden")
    assert by_name["In the block"]["skipped"] is True
    assert by_name["Report the fact"]["from_include"] == "from the include"
    assert by_name["probe : In the role's other tasks"]["msg"] == "role says hello"
    loop = by_name["A loop, each item its own conditional"]["results"]
    assert [item.get("skipped", False) for item in loop] == [True, False]
    assert "missing_variable" in by_name["A conditional that raises"]["msg"]
    assert by_name["The magic variables of the connection in a conditional"]["skipped"] is True
    assert ours["stats"]["node"]["skipped"] == 6
    assert by_name["Check the fact and the registered result"]["msg"] == "All assertions passed"
    assert by_name["An assertion that fails"]["failed"] is True
    assert by_name["An assertion that fails"]["msg"] == "computed is included.yml!"
    assert by_name["A failure on purpose, hidden"]["censored"].startswith("the output has been hidden")
    assert "no_such_filter" in by_name["A filter that does not exist"]["msg"]
    assert by_name["Report one of them"]["from_file"] == "read on the controller"
    assert by_name["Each host its own name, templated from the same task"]["msg"] == "node"
    assert dict(results(ours, "other"))["Each host its own name, templated from the same task"]["msg"] == "other"
    assert ours["stats"]["node"]["ignored"] == 4

    # Where the skipped tasks' conditionals and the set_fact's value were templated (ansible_host is one of the
    # variables the connection's settings add): forked workers under linear, ansible-playbook itself under ours.
    assert len(linear_pids) == 6 and linear_pid not in linear_pids
    assert our_pids == [our_pid] * 6
