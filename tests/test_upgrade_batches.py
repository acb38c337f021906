"""The batch keywords of the upgrade play (playbooks/upgrade.yml: order, serial, max_fail_percentage) under real
ansible-playbook, on four local hosts listed last to first: the batches go in host name order, and a batch where one
host of two fails is the last one that runs. The play's own tasks (the upgrade role) are replaced by two that record
the batch and fail one host: what is tested is what Ansible does with the keywords upgrade.yml gives the play.
`make test-full`'s tests/test_lab_upgrade.py proves the same on a 4-node lab with the real role."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

UPGRADE = REPO / "collections" / "ansible_collections" / "nodeforge" / "gpu" / "playbooks" / "upgrade.yml"
KEYWORDS = ("hosts", "order", "serial", "max_fail_percentage", "force_handlers")
NODES = ["node1", "node2", "node3", "node4"]


def _batch_play() -> dict:
    (play,) = (p for p in yaml.safe_load(UPGRADE.read_text()) if p.get("name") == "Upgrade the nodes in batches")
    return {key: play[key] for key in KEYWORDS if key in play}


def _run(tmp_path: Path, failing: str) -> tuple[int, list[str]]:
    log = tmp_path / "batches.log"
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {host: None for host in reversed(NODES)},
                    "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
                }
            },
            sort_keys=False,  # the inventory lists the nodes last to first
        )
    )
    plan = {
        # What the plan play of upgrade.yml leaves behind: every node to upgrade in nodeforge_upgrade_todo, each with
        # the batch size it computed.
        "name": "Plan",
        "hosts": "all",
        "gather_facts": False,
        "tasks": [
            {"ansible.builtin.set_fact": {"upgrade_batch_size": 2}},
            {"ansible.builtin.group_by": {"key": "nodeforge_upgrade_todo"}},
        ],
    }
    batches = {
        **_batch_play(),
        "name": "Upgrade the nodes in batches",
        "gather_facts": False,
        "tasks": [
            {
                "name": "Record the batch",
                "ansible.builtin.shell": "echo '{{ ansible_play_batch | join(\",\") }} {{ inventory_hostname }}' >> "
                + str(log),
                "changed_when": False,
            },
            {
                "name": "Fail the node that cannot upgrade",
                "ansible.builtin.fail": {"msg": "no"},
                "when": f"inventory_hostname == '{failing}'",
            },
        ],
    }
    playbook = tmp_path / "batches.yml"
    playbook.write_text(yaml.safe_dump([plan, batches], sort_keys=False))
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_RETRY_FILES_ENABLED": "0"}
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory), str(playbook)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    return proc.returncode, sorted(log.read_text().splitlines()) if log.exists() else []


def test_the_upgrade_play_keeps_its_batch_keywords():
    play = _batch_play()
    # Without these the tests below would test Ansible's defaults.
    assert set(play) == set(KEYWORDS), play


def test_batches_go_in_host_name_order_whatever_the_inventory_order(tmp_path):
    code, lines = _run(tmp_path, failing="none")
    assert code == 0
    assert lines == [
        "node1,node2 node1",
        "node1,node2 node2",
        "node3,node4 node3",
        "node3,node4 node4",
    ]


@pytest.mark.parametrize("failing", ["node1", "node2"])
def test_one_failed_host_of_a_batch_of_two_halts_the_run_there(tmp_path, failing):
    code, lines = _run(tmp_path, failing=failing)
    # Ansible alone would stop only a batch whose hosts all failed: the other host of the batch succeeded.
    assert code == 2
    assert lines == ["node1,node2 node1", "node1,node2 node2"]
