"""The upgrade's drain step on the Kubernetes path, run by ansible-playbook against the kubernetes.core stand-in
(tests/data/standins: the real modules' options, every call recorded): the wait for the node's GPU pods, a Pending
GPU pod among them, and what happens when the wait runs out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nodeforge import ansible_settings
from tests.conftest import REPO

pytestmark = pytest.mark.slow

STANDINS = REPO / "tests" / "data" / "standins" / "collections"
PLAY = """\
- name: The upgrade's drain step on one node
  hosts: localhost
  connection: local
  gather_facts: false
  vars:
    ansible_python_interpreter: "{{ ansible_playbook_python }}"
    nodeforge_profile: lab
    upgrade_drain: kubernetes
    upgrade_kubeconfig: /etc/nodeforge-test/kubeconfig
    upgrade_k8s_node_name: gpu-node-7
    upgrade_job_timeout: 3
    upgrade_job_poll: 1
    upgrade_drain_timeout: 45
  tasks:
    - name: Drain
      ansible.builtin.include_role:
        name: nodeforge.gpu.upgrade
        tasks_from: step-drain
"""


def pod(name: str, phase: str, owner: str = "Job") -> dict:
    return {
        "metadata": {"name": name, "namespace": "research", "ownerReferences": [{"kind": owner}]},
        "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": 1}}}]},
        "status": {"phase": phase},
    }


def drain(tmp_path: Path, pods: list[dict]) -> tuple[list[dict], list[str]]:
    """The calls the stand-in recorded and the messages the play printed."""
    (tmp_path / "play.yml").write_text(PLAY)
    (tmp_path / "pods.json").write_text(json.dumps(pods))
    calls = tmp_path / "calls.jsonl"
    env = {
        **os.environ,
        **ansible_settings.environment(tmp_path / "state", caller={}),
        "ANSIBLE_COLLECTIONS_PATH": f"{STANDINS}:{REPO / 'collections'}",
        "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
        "NODEFORGE_STANDIN_K8S_PODS": str(tmp_path / "pods.json"),
        "NODEFORGE_STANDIN_K8S_CALLS": str(calls),
    }
    run = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "play.yml"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr
    report = json.loads(run.stdout)
    messages = [
        result["msg"]
        for play in report["plays"]
        for task in play["tasks"]
        for result in task["hosts"].values()
        if isinstance(result.get("msg"), str) and not result.get("skipped")
    ]
    return [json.loads(line) for line in calls.read_text().splitlines()], messages


def test_a_pending_gpu_pod_is_waited_for_until_the_timeout_then_evicted_by_the_drain(tmp_path):
    calls, messages = drain(tmp_path, [pod("queued", "Pending"), pod("agent", "Running", owner="DaemonSet")])
    looks = [c for c in calls if c["module"] == "k8s_info"]
    # The first look and one per poll until upgrade_job_timeout (3 s at 1 s): the Pending pod never left.
    assert len(looks) == 1 + 3
    assert all(c["args"]["field_selectors"] == ["spec.nodeName=gpu-node-7"] for c in looks)
    [evicted] = [m for m in messages if "evicted by the drain" in m]
    assert evicted == "localhost: GPU pods still running after 3 s, evicted by the drain: research/queued"
    [drained] = [c for c in calls if c["module"] == "k8s_drain"]
    assert calls[-1] is drained and drained["args"]["name"] == "gpu-node-7" and drained["args"]["state"] == "drain"
    options = drained["args"]["delete_options"]
    assert options["wait_timeout"] == 45 and options["ignore_daemonsets"] is True


def test_a_node_without_gpu_jobs_is_drained_after_one_look(tmp_path):
    calls, messages = drain(tmp_path, [pod("done", "Succeeded"), pod("agent", "Running", owner="DaemonSet")])
    assert [c["module"] for c in calls] == ["k8s_info", "k8s_drain"]
    assert not [m for m in messages if "evicted by the drain" in m]
