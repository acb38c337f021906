"""Verify the nodeforge role's shared mechanisms against the real container node."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import testinfra

SCENARIO_DIR = Path(__file__).resolve().parent.parent
MARKER = "/var/lib/nodeforge/reboot-required"


@pytest.fixture(scope="module")
def host():
    return testinfra.get_host(
        "podman://nodeforge-nodeforge", ansible_inventory=os.environ.get("MOLECULE_INVENTORY_FILE")
    )


def converge() -> dict:
    """Run the converge playbook again; return the facts its last task shows."""
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    inventory = str(Path(os.environ["MOLECULE_INVENTORY_FILE"]).parent)
    proc = subprocess.run(
        [shutil.which("ansible-playbook") or "ansible-playbook", "-i", inventory, str(SCENARIO_DIR / "converge.yml")],
        capture_output=True, text=True, env=env, cwd=SCENARIO_DIR, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    # included role tasks are named "role : task"
    tasks = {t["task"]["name"].split(" : ")[-1]: t["hosts"] for play in out["plays"] for t in play["tasks"]}
    [shown] = tasks["Show the facts the verifier reads"].values()
    [container_note] = tasks["Report that a container is never rebooted"].values()
    return {"facts": shown["msg"], "container_note": container_note.get("msg", "")}


def test_marker_records_the_current_boot(host):
    marker = host.file(MARKER)
    assert marker.exists and marker.mode == 0o644
    boot_id = host.file("/proc/sys/kernel/random/boot_id").content_string.strip()
    assert marker.content_string.splitlines()[0] == boot_id


def test_facts_from_manifest_profile_and_container_check():
    result = converge()
    facts = result["facts"]
    assert facts["in_container"] is True
    assert facts["reboot_required"] is True  # still the boot it was recorded in
    assert facts["driver_branch"] == "570"  # nodeforge_manifest_overrides deep-merged
    assert facts["toolkit_version"] == "1.20.0"  # the rest of the manifest kept
    assert facts["gpus"] == "8"  # profile dgx-1 (debug renders templated values as strings)
    # policy if_needed would reboot, but never a container: it says so
    assert "is a container: skipped" in result["container_note"]


def test_a_reboot_meets_the_requirement(host):
    # A marker from an earlier boot: as if the node had rebooted since it was recorded.
    host.run_expect([0], f"sed -i '1s/.*/00000000-0000-0000-0000-000000000000/' {MARKER}")
    facts = converge()["facts"]
    assert facts["reboot_required"] is False
    assert not host.file(MARKER).exists
