"""The reboot play of nodeforge.gpu.site on three local hosts (never a reboot: policy never, or no requirement):
bounded batches, and the decision read from the node's recorded state rather than from this run's changes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from nodeforge import content

pytestmark = pytest.mark.slow


def site_reboot_play(tmp_path: Path, policy: str, *extra: str) -> dict:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n  children:\n    gpu_nodes:\n      hosts:\n        n1:\n        n2:\n        n3:\n      vars:\n"
        f"        ansible_connection: local\n        ansible_python_interpreter: {sys.executable}\n"
        f"        nodeforge_profile: lab\n        nodeforge_reboot_policy: {policy}\n"
        f"        nodeforge_state_dir: {tmp_path}/state/{{{{ inventory_hostname }}}}\n"
    )
    env = {
        **os.environ,
        "ANSIBLE_COLLECTIONS_PATH": str(content.collections_dir()),
        "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
    }
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory), "nodeforge.gpu.site"]
    run = subprocess.run([*cmd, "--tags", "reboot", *extra], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr
    return json.loads(run.stdout)


def test_reboot_play_runs_in_bounded_batches(tmp_path):
    out = site_reboot_play(tmp_path, "if_needed", "-e", "nodeforge_reboot_batch=2")
    batches = [
        sorted({h for t in play["tasks"] for h in t["hosts"]})
        for play in out["plays"]
        if play["play"]["name"] == "Apply the reboot policy"
    ]
    assert batches == [["n1", "n2"], ["n3"]]
    # Nothing required anywhere: no node is rebooted.
    assert not [
        t
        for p in out["plays"]
        for t in p["tasks"]
        if t["task"]["name"].endswith("Reboot the node") and any(not r.get("skipped") for r in t["hosts"].values())
    ]


def test_the_decision_reads_the_recorded_requirement(tmp_path):
    """A requirement recorded in an earlier (say, interrupted) run counts: `--tags reboot` alone sees it."""
    boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    for host, recorded in (("n1", boot_id), ("n2", "00000000-0000-0000-0000-000000000000")):
        (tmp_path / "state" / host).mkdir(parents=True)
        (tmp_path / "state" / host / "reboot-required").write_text(f"{recorded}\nRecorded by nodeforge\n")
    out = site_reboot_play(tmp_path, "never")
    reported = {
        host: result["msg"]
        for play in out["plays"]
        for task in play["tasks"]
        if task["task"]["name"].endswith("Report a required reboot that the policy leaves to the operator")
        for host, result in task["hosts"].items()
        if not result.get("skipped")
    }
    assert list(reported) == ["n1"] and "reboot required" in reported["n1"]
    # n2's requirement was met by a boot since: its marker is gone; n1's stays.
    assert (tmp_path / "state" / "n1" / "reboot-required").exists()
    assert not (tmp_path / "state" / "n2" / "reboot-required").exists()


def test_the_provision_play_forces_handlers():
    """Without force_handlers, a task failing after a change dropped the handlers that change had notified (the
    initramfs rebuild, openibd, the runtime restarts): every play of site.yml that runs the component roles keeps
    them. (Static: the roles' own take-up of owed work after an interrupted run is proven in molecule.)"""
    plays = yaml.safe_load(content.playbook("site.yml").read_text())
    with_roles = [play for play in plays if play.get("roles")]
    assert [role["role"] for play in with_roles for role in play["roles"]][:2] == [
        "nodeforge.gpu.preflight",
        "nodeforge.gpu.nvidia_driver",
    ]
    assert all(play.get("force_handlers") is True for play in with_roles)
