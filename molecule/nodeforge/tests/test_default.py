"""Verify the nodeforge role's shared mechanisms against the real container node."""

from __future__ import annotations

from pathlib import Path

import pytest
import verify_lib

SCENARIO_DIR = Path(__file__).resolve().parent.parent
MARKER = "/var/lib/nodeforge/reboot-required"


@pytest.fixture(scope="module")
def host():
    return verify_lib.node_host()


def converge() -> dict:
    """Run the converge playbook again; return the facts its last task shows."""
    run = verify_lib.run_playbook(SCENARIO_DIR / "converge.yml", timeout=300)
    assert run.rc == 0, run.failed
    shown = run.host_result("Show the facts the verifier reads")
    container_note = run.host_result("Report that a container is never rebooted")
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
    # profile dgx-1; before ansible-core 2.19 the template renders the count as a string, since 2.19 as an int
    assert str(facts["gpus"]) == "8"
    # policy if_needed would reboot, but never a container: it says so
    assert "is a container: skipped" in result["container_note"]


def test_a_reboot_meets_the_requirement(host):
    # A marker from an earlier boot: as if the node had rebooted since it was recorded.
    host.run_expect([0], f"sed -i '1s/.*/00000000-0000-0000-0000-000000000000/' {MARKER}")
    facts = converge()["facts"]
    assert facts["reboot_required"] is False
    assert not host.file(MARKER).exists
