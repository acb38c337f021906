"""Verify ofed with DOCA-OFED from the signed fixture DOCA repository (stand-ins for NVIDIA's packages).

The node started on a legacy MLNX_OFED (prepare.yml ran the fixture tarball's installer): the role ran its
uninstaller, then set up the repository (keyring, signed-by source), installed doca-ofed 3.4.1 (the manifest's)
exactly, pinned and held it although 3.3.0 is there too. The last test puts the older DOCA back behind the role's
back: the role detects it, upgrades, and notifies the DKMS rebuild, the reboot record and openibd.
Commands run on the node as verify_lib.node_host reaches it; playbook runs use molecule's inventory.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import verify_lib
from verify_lib import held, installed_version

SCENARIO_DIR = Path(__file__).resolve().parent.parent
CONVERGE = SCENARIO_DIR / "converge.yml"
FIXTURE_REPO = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "fixtures" / "doca"

KEYRING = "/etc/apt/keyrings/nodeforge-doca.asc"
SOURCE_LIST = "/etc/apt/sources.list.d/nodeforge-doca.list"
PIN_FILE = "/etc/apt/preferences.d/nodeforge-doca"
REPO_URL = "http://127.0.0.1:8082/3.4.1/debian12/x86_64/"
PINNED = "3.4.1-1"
OLDER = "3.3.0-1"
UTILS = {PINNED: "26.01.OFED.26.01.0.4.2.1-1", OLDER: "25.10.OFED.25.10.1.2.8.1-1"}
OFED_INFO = {PINNED: "OFED-internal-26.01-0.4.2:", OLDER: "OFED-internal-25.10-1.2.8:"}
MARKER = "/var/lib/nodeforge/reboot-required"


def test_legacy_mlnx_ofed_was_uninstalled_first(node):
    log = node.file("/var/log/nodeforge-fixture/ofed_uninstall.log").content_string.splitlines()
    assert log == ["ofed_uninstall.sh --force (removed MLNX_OFED_LINUX-24.10-3.2.5.0:)"]
    assert not node.file("/usr/sbin/ofed_uninstall.sh").exists
    # ofed_info is DOCA's now (the package owns it).
    assert node.check_output("dpkg-query --search /usr/bin/ofed_info").startswith("mlnx-ofed-kernel-utils:")


def test_keyring_is_the_repository_key(node):
    keyring = node.file(KEYRING)
    assert keyring.content_string == (FIXTURE_REPO / "repo" / "fixture-archive-keyring.asc").read_text()
    fingerprint = json.loads((FIXTURE_REPO / "fixture-repo.json").read_text())["fingerprint"]
    colons = node.check_output("gpg --show-keys --with-colons %s", KEYRING)
    assert f"fpr:::::::::{fingerprint}:" in colons


def test_source_list_points_at_the_versioned_repository_signed_by_the_keyring(node):
    lines = [line for line in node.file(SOURCE_LIST).content_string.splitlines() if line and not line.startswith("#")]
    assert lines == [f"deb [signed-by={KEYRING}] {REPO_URL} ./"]
    policy = node.check_output("apt-cache policy doca-ofed")
    assert "http://127.0.0.1:8082/3.4.1/debian12/x86_64 ./ Packages" in policy
    # The key in that keyring verifies the signed index apt fetched from the repository.
    verify_lib.assert_apt_index_signed_by(node, KEYRING, "127.0.0.1:8082")


def test_pinned_doca_is_installed_and_held(node):
    assert installed_version(node, "doca-ofed") == PINNED
    assert installed_version(node, "mlnx-ofed-kernel-utils") == UTILS[PINNED]
    assert node.check_output("ofed_info -s") == OFED_INFO[PINNED]
    assert "doca-ofed" in held(node)
    pin = node.file(PIN_FILE).content_string
    assert "Package: doca-ofed\nPin: version 3.4.1-1\nPin-Priority: 1001\n" in pin
    policy = node.check_output("apt-cache policy doca-ofed")
    assert f"Candidate: {PINNED}" in policy and OLDER in policy


def test_facts_name_the_doca_stack(node):
    facts = json.loads(node.file("/root/ofed_facts.json").content_string)
    assert (facts["mode"], facts["mode_from"], facts["version"]) == ("doca", "ofed_mode", "3.4.1")
    assert (facts["stack"], facts["installed_version"], facts["ofed_info"]) == ("doca", PINNED, OFED_INFO[PINNED])
    assert facts["profile_package"] == "doca-ofed" and facts["in_container"] is True


def test_default_memlock_drop_ins_for_the_container_runtimes(node):
    for service in ("containerd", "crio"):
        dropin = node.file(f"/etc/systemd/system/{service}.service.d/10-nodeforge-memlock.conf")
        assert "[Service]\nLimitMEMLOCK=infinity\n" in dropin.content_string, service


# Last: it moves the installed version (and leaves the pinned one).
def test_an_older_doca_is_detected_upgraded_and_notified(node):
    downgrade = node.run(
        "DEBIAN_FRONTEND=noninteractive apt-get install --yes --allow-downgrades --allow-change-held-packages"
        " doca-ofed=%s mlnx-ofed-kernel-utils=%s",
        OLDER,
        UTILS[OLDER],
    )
    assert downgrade.rc == 0, downgrade.stderr
    assert node.check_output("ofed_info -s") == OFED_INFO[OLDER]
    node.run_expect([0], f"rm -f {MARKER}")

    run = verify_lib.run_playbook(CONVERGE)
    assert run.rc == 0, run.failed
    [detected] = run.results("Report the installed RDMA stack")[:1]
    assert f"installed RDMA stack doca {OLDER}" in detected["msg"]
    assert "Install the pinned DOCA profile package" in [name.split(" : ")[-1] for name in run.changed]
    assert installed_version(node, "doca-ofed") == PINNED
    assert installed_version(node, "mlnx-ofed-kernel-utils") == UTILS[PINNED]
    assert node.check_output("ofed_info -s") == OFED_INFO[PINNED]
    assert "doca-ofed" in held(node)

    # The three notifications: the NVIDIA DKMS rebuild (this role's fallback runs gpudirect_rdma's handler body; no
    # DKMS module here), the reboot record, and openibd (present, but never restarted in a container).
    [rebuild] = run.results("Report that there is no NVIDIA DKMS module to rebuild")
    assert "a rebuild of the NVIDIA DKMS modules was requested" in rebuild["msg"]
    [openibd] = run.results("Report that openibd is not restarted")
    assert "is a container: openibd is not restarted" in openibd["msg"]
    assert node.check_output("systemctl show --property=LoadState --value openibd.service") == "loaded"
    # (gpudirect_rdma's rebuild body has a task of that name too, skipped when nothing was rebuilt.)
    [record] = [res for res in run.results("Record that a reboot is required") if not res.get("skipped")]
    assert record["changed"]
    boot_id = node.file("/proc/sys/kernel/random/boot_id").content_string.strip()
    assert node.file(MARKER).content_string.splitlines()[0] == boot_id
