"""Verify ofed with MLNX_OFED from its tarball (the fixture tarball, real layout, stand-in scripts).

The role downloaded the tarball from the node's loopback (URL from the manifest override with {version} and {distro}
filled in), verified its checksum, extracted it and ran mlnxofedinstall once with the configured flags plus
--add-kernel-support (the tarball's kernel packages are for 6.1.0-18-amd64, not for the container's kernel). The
idempotence run did not run it again (ofed_info -s reports the pinned version).
Commands run on the node as verify_lib.node_host reaches it; playbook runs use molecule's inventory.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import verify_lib

SCENARIO_DIR = Path(__file__).resolve().parent.parent
CONVERGE = SCENARIO_DIR / "converge.yml"
NAME = "MLNX_OFED_LINUX-24.10-3.2.5.0-debian12-x86_64"
TARBALL = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "fixtures" / f"{NAME}.tgz"
SHA256 = hashlib.sha256(TARBALL.read_bytes()).hexdigest()
WORK = f"/var/cache/nodeforge/ofed/MLNX_OFED-24.10-3.2.5.0-{SHA256[:16]}"
INSTALL_LOG = "/var/log/nodeforge-fixture/mlnxofedinstall.log"
FLAGS = "--all --without-fw-update --force --add-kernel-support"


def test_tarball_was_verified_and_extracted(node):
    tarball = node.file(f"{WORK}.tgz")
    assert tarball.sha256sum == SHA256
    assert node.file(f"{WORK}/mlnxofedinstall").mode == 0o755
    assert node.file(f"{WORK}/.mlnx").content_string.strip() == "24.10-3.2.5.0"


def test_installer_ran_once_with_the_flags(node):
    assert node.file(INSTALL_LOG).content_string.splitlines() == [FLAGS]
    assert node.check_output("uname -r") != "6.1.0-18-amd64"


def test_ofed_info_reports_the_pinned_version(node):
    assert node.check_output("ofed_info -s") == "MLNX_OFED_LINUX-24.10-3.2.5.0:"
    assert node.file("/usr/sbin/ofed_uninstall.sh").mode == 0o755
    facts = json.loads(node.file("/root/ofed_facts.json").content_string)
    assert (facts["mode"], facts["stack"], facts["version"]) == ("mlnx_ofed", "mlnx_ofed", "24.10-3.2.5.0")
    assert facts["installed_version"] == "24.10-3.2.5.0"


def test_an_unset_ofed_mode_keeps_the_installed_mlnx_ofed(node):
    """An unset ofed_mode used to resolve to the default mode (the manifest's doca; profile lab's own, inbox, since
    that profile says it) and uninstall MLNX_OFED: the installed stack is kept, and the report says which default it
    would otherwise be."""
    run = verify_lib.run_playbook(CONVERGE, {"ofed_mode": ""})
    assert run.rc == 0, run.failed
    # Only the verifier's copy of ofed_facts changes (mode_from says why the stack was kept); the node's stack not.
    assert run.changed == ["Record ofed_facts for the verifier"], run.changed
    facts = json.loads(node.file("/root/ofed_facts.json").content_string)
    assert (facts["mode"], facts["stack"]) == ("mlnx_ofed", "mlnx_ofed")
    assert facts["mode_from"].startswith("the installed stack (ofed_mode unset")
    report = run.results("Check the settings and report what ofed works with")[-1]["msg"][0]
    assert "stack mlnx_ofed (from the installed stack (ofed_mode unset; the default would be inbox))" in report
    assert node.check_output("ofed_info -s") == "MLNX_OFED_LINUX-24.10-3.2.5.0:"


def test_replacing_mlnx_ofed_needs_the_opt_in_and_plan_announces_it(node):
    run = verify_lib.run_playbook(CONVERGE, {"ofed_mode": "inbox"})
    assert run.rc != 0
    [refusal] = run.results("Refuse to replace an installed OFED without the opt-in")
    message = " ".join(refusal["msg"].split())
    assert "the node runs mlnx_ofed 24.10-3.2.5.0 and ofed_mode is inbox (from ofed_mode)" in message
    assert "run /usr/sbin/ofed_uninstall.sh --force" in message and "ofed_allow_stack_change: true" in message
    assert run.changed == []
    # check mode (nodeforge plan) with the opt-in: the uninstall is announced; nothing changes on the node.
    plan = verify_lib.run_playbook(CONVERGE, {"ofed_mode": "inbox", "ofed_allow_stack_change": True}, check=True)
    [announce] = plan.results("Announce the replacement of the installed OFED")
    assert "would replace mlnx_ofed 24.10-3.2.5.0 with inbox (ofed_allow_stack_change)" in " ".join(
        announce["msg"].split()
    )
    assert "/usr/sbin/ofed_uninstall.sh --force" in announce["msg"]
    assert node.check_output("ofed_info -s") == "MLNX_OFED_LINUX-24.10-3.2.5.0:"
    assert node.file("/usr/sbin/ofed_uninstall.sh").exists


def test_an_openibd_restart_an_interrupted_run_owed_is_taken_up(node):
    """openibd's restart is a handler: a run cut off after the stack changed but before its handlers used to lose it
    (the next run sees no change). With ofed_restart_openibd the owed restart is recorded on the node until the
    handler has run; a container never restarts it, and says so."""
    pending = "/var/lib/nodeforge/pending-openibd-restart"
    assert not node.file(pending).exists
    node.run_expect([0], f"mkdir -p /var/lib/nodeforge && echo owed > {pending}")
    run = verify_lib.run_playbook(CONVERGE, {"ofed_restart_openibd": True})
    assert run.rc == 0, run.failed
    [taken_up] = run.results("Take up the openibd restart an earlier run owes")
    assert taken_up["changed"] and "did not get to restart openibd" in taken_up["msg"]
    [report] = run.results("Report that openibd is not restarted")
    assert "is a container: openibd is not restarted" in report["msg"]
    assert not node.file(pending).exists
    # Nothing else changed on the node: the stack stays, and a further run owes nothing.
    assert node.check_output("ofed_info -s") == "MLNX_OFED_LINUX-24.10-3.2.5.0:"
    again = verify_lib.run_playbook(CONVERGE, {"ofed_restart_openibd": True})
    assert again.results("Take up the openibd restart an earlier run owes")[0].get("skipped")


# Last: it uninstalls MLNX_OFED and installs it again.
def test_a_bad_checksum_installs_nothing_and_says_why(node):
    node.run_expect([0], "/usr/sbin/ofed_uninstall.sh --force")
    bad = "sha256:" + "0" * 64
    run = verify_lib.run_playbook(CONVERGE, {"ofed_mlnx_ofed_checksum": bad})
    assert run.rc != 0
    [failure] = run.results("Explain why the MLNX_OFED tarball is not installed")
    message = failure["msg"]
    assert f"http://127.0.0.1:8083/{NAME}.tgz failed checksum verification and was not installed" in message
    assert f"The expected checksum {bad} comes from ofed_mlnx_ofed_checksum" in message
    assert node.file(INSTALL_LOG).content_string.splitlines() == [FLAGS]
    assert not node.exists("ofed_info")
    assert not node.file(f"/var/cache/nodeforge/ofed/MLNX_OFED-24.10-3.2.5.0-{'0' * 16}.tgz").exists

    # The manifest's checksum: installed again from the tarball already downloaded (not fetched again).
    again = verify_lib.run_playbook(CONVERGE)
    assert again.rc == 0, again.failed
    assert not again.host_result("Download the MLNX_OFED tarball").get("changed")
    assert node.file(INSTALL_LOG).content_string.splitlines() == [FLAGS, FLAGS]
    assert node.check_output("ofed_info -s") == "MLNX_OFED_LINUX-24.10-3.2.5.0:"
    [rebuild] = again.results("Report that there is no NVIDIA DKMS module to rebuild")
    assert "a rebuild of the NVIDIA DKMS modules was requested" in rebuild["msg"]
