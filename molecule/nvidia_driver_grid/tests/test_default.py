"""Verify nvidia_driver's vGPU guest path (source grid) against a stand-in GRID guest driver package.

The role downloaded nvidia-linux-grid-580 580.95.05 from the manifest's URL (the node's loopback) with the
manifest's sha256, installed and held it, wrote gridd.conf (FeatureType 4) and the client configuration token,
and kept the token out of the Ansible log of check, converge and idempotence (all with --diff). nvidia-gridd is the
role's to keep enabled and running: disabled and stopped behind its back, a check run reports it and a converge run
enables and starts it again. The last test runs the converge playbook again in check mode without the package's
URL. Commands run on the node as verify_lib.node_host reaches it; the playbook runs use molecule's inventory.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import pytest
import verify_lib

SCENARIO_DIR = Path(__file__).resolve().parent.parent
CONVERGE = SCENARIO_DIR / "converge.yml"
EPHEMERAL = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"])
DEB_NAME = "nvidia-linux-grid-580_580.95.05_amd64.deb"
BUILT_DEB = EPHEMERAL / "fixture-grid" / "repo" / "pool" / "main" / "n" / "nvidia-linux-grid-580" / DEB_NAME
ANSIBLE_LOG = EPHEMERAL / "ansible.log"  # molecule.yml: ansible.env.ANSIBLE_LOG_PATH

PACKAGE = "nvidia-linux-grid-580"
VERSION = "580.95.05"
CACHED_DEB = f"/var/cache/nodeforge/nvidia_driver/{DEB_NAME}"
GRIDD_CONF = "/etc/nvidia/gridd.conf"
TOKEN_DIR = "/etc/nvidia/ClientConfigToken"
TOKEN_FILE = f"{TOKEN_DIR}/client_configuration_token.tok"
TOKEN = "NODEFORGE-FAKE-NLS-CLIENT-TOKEN-6b1f0c9e"  # molecule.yml's nvidia_driver_grid_client_token
FACTS = "/root/nvidia_driver_facts.json"


@pytest.fixture
def facts(node) -> dict:
    return json.loads(node.file(FACTS).content_string)


def test_package_is_installed_at_the_manifest_version_and_held(node):
    status = node.check_output("dpkg-query --show --showformat='${db:Status-Abbrev}${Version}' %s", PACKAGE)
    # h: held, i: installed.
    assert status == f"hi {VERSION}"
    assert PACKAGE in node.check_output("apt-mark showhold").split()
    # The role downloaded the manifest's file and checked it against the manifest's sha256.
    assert node.file(CACHED_DEB).sha256sum == hashlib.sha256(BUILT_DEB.read_bytes()).hexdigest()


def test_gridd_conf_requests_virtual_compute_server(node):
    conf = node.file(GRIDD_CONF)
    assert conf.mode == 0o644
    settings = dict(
        line.split("=", 1) for line in conf.content_string.splitlines() if line.strip() and not line.startswith("#")
    )
    assert settings == {"FeatureType": "4", "ClientConfigTokenPath": TOKEN_DIR}


def test_client_configuration_token_is_installed(node):
    token = node.file(TOKEN_FILE)
    assert token.is_file
    assert token.user == "root"
    # A bearer credential: root only (NVIDIA's guide shows 744, readable by every local user; nvidia-gridd is root).
    assert token.mode == 0o600 and token.group == "root"
    assert token.content_string == TOKEN


def task_statuses(log: str, name: str) -> list[str]:
    """The status (ok, changed, skipping...) that each run in the log printed for the role's task of that name."""
    # The role runs from the nodeforge.gpu collection: "TASK [nodeforge.gpu.nvidia_driver : ...]".
    task = rf"TASK \[(?:nodeforge\.gpu\.)?nvidia_driver : {re.escape(name)}\]"
    return re.findall(task + r"[^\n]*\n[^|\n]*\| (\w+): \[", log)


def test_token_never_reaches_the_ansible_log():
    log = ANSIBLE_LOG.read_text()
    # check (the token would be written), converge (written), idempotence (unchanged), all with --diff...
    assert task_statuses(log, "Install the client configuration token") == ["changed", "changed", "ok"]
    assert "+FeatureType=4" in log  # ...which shows the content of the files written...
    # ...except the token's.
    assert TOKEN not in log


def test_gridd_is_left_alone_in_a_container():
    log = " ".join(ANSIBLE_LOG.read_text().split())
    # The token and gridd.conf notified the handler in check and converge, which leaves nvidia-gridd alone here.
    assert log.count("nvidia-gridd was not restarted: a container never runs the driver.") == 2


def gridd_state(node) -> tuple[str, str]:
    """What systemd says of the unit: (is-enabled, is-active); both exit non-zero for disabled/inactive."""
    enabled = node.run("systemctl is-enabled nvidia-gridd.service").stdout.strip()
    active = node.run("systemctl is-active nvidia-gridd.service").stdout.strip()
    return enabled, active


def main_pid(node) -> str:
    return node.check_output("systemctl show --property=MainPID --value nvidia-gridd.service")


def test_the_role_keeps_gridd_enabled_and_running(node):
    # The package's postinst enabled and started it at install, so converge found it so; what the role owns is
    # keeping it so. A unit disabled and stopped since then is drift: check mode reports it, a real run repairs it.
    assert gridd_state(node) == ("enabled", "active")
    before = main_pid(node)
    node.run_expect([0], "systemctl disable --now nvidia-gridd.service")
    assert gridd_state(node) == ("disabled", "inactive")
    try:
        plan = verify_lib.run_playbook(CONVERGE, check=True)
        assert plan.rc == 0, plan.failed
        assert plan.host_result("Enable nvidia-gridd")["changed"] is True
        assert plan.host_result("Start nvidia-gridd")["changed"] is True
        assert gridd_state(node) == ("disabled", "inactive")  # check mode only reported it

        run = verify_lib.run_playbook(CONVERGE)
        assert run.rc == 0, run.failed
        assert run.changed == ["nvidia_driver : Enable nvidia-gridd", "nvidia_driver : Start nvidia-gridd"]
        assert gridd_state(node) == ("enabled", "active")
        # A new daemon: systemd started the unit again (the one the package started is gone).
        assert main_pid(node) not in ("0", before)
        # The container's driver is the host's: nothing waits for a boot, so the run said nothing about one.
        assert run.host_result("Report that nvidia-gridd starts with the driver").get("skipped") is True
    finally:
        node.run("systemctl enable --now nvidia-gridd.service")


def test_facts_report_the_grid_driver(node, facts):
    assert facts["managed"] is True
    assert (facts["source"], facts["branch"], facts["flavor"]) == ("grid", "580", "open")
    assert (facts["version"], facts["package_version"], facts["installed"]) == (VERSION, VERSION, True)
    assert facts["packages"] == [PACKAGE]
    assert facts["dkms_package"] == PACKAGE
    # The container builds for no kernel; the module names come from the package's dkms.conf.
    assert facts["dkms"] == {"name": "nvidia", "version": VERSION, "kernels": []}
    conf = node.file(f"/usr/src/nvidia-{VERSION}/dkms.conf").content_string
    built = re.findall(r'^BUILT_MODULE_NAME\[\d+\]="([^"]+)"', conf, re.M)
    assert sorted(facts["modules"]) == sorted(name.replace("-", "_") for name in built)
    assert facts["peermem_module"] == "nvidia-peermem"
    assert (facts["loaded_version"], facts["active"], facts["in_container"]) == ("", False, True)


GRID_URL = "http://127.0.0.1:8082/nvidia-linux-grid-580_580.95.05_amd64.deb"
REFUSED_BY_THE_ROLE = "Check that the manifest names the GRID guest driver"
REFUSED_AS_UNSAFE = "Resolve the driver settings (empty variables come from the profile, then the manifest)"


@pytest.mark.parametrize(
    ("deb", "task", "expected"),
    [
        (
            {"checksum": None},
            REFUSED_BY_THE_ROLE,
            "nvidia_driver.grid.version, .package, .deb.url (your local copy) or .deb.checksum (sha256:",
        ),
        # A URL without a checksum used to install (checksum: omit; the package is not in a signed repository).
        (
            {"url": GRID_URL, "checksum": None},
            REFUSED_BY_THE_ROLE,
            "nvidia_driver.grid.version, .package, .deb.url (your local copy) or .deb.checksum (sha256:",
        ),
        # md5 no longer vouches for a file: refused before any node task.
        (
            {"url": GRID_URL, "checksum": "md5:" + "0" * 32},
            REFUSED_AS_UNSAFE,
            "nodeforge_manifest_overrides.nvidia_driver.grid.deb.checksum: found 'md5:",
        ),
    ],
)
def test_missing_package_url_or_checksum_fails_naming_the_manifest_keys(node, deb, task, expected):
    overrides = {"nvidia_driver": {"grid": {"version": VERSION, "package": PACKAGE, "deb": deb}}}
    run = verify_lib.run_playbook(CONVERGE, {"nodeforge_manifest_overrides": overrides}, check=True)
    assert run.rc != 0
    (check,) = run.results(task)
    assert check["failed"] is True
    message = " ".join(check["msg"].split())
    assert expected in message, message
    assert "nodeforge_manifest_overrides" in message
    assert node.file(TOKEN_FILE).content_string == TOKEN
