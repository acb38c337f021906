"""Verify nvidia_container_toolkit's dnf path on an EL tier node (Rocky Linux identity, Debian's dnf and rpm).

The role wrote NVIDIA's .repo (metadata signed, repo_gpgcheck=1), imported the verified key into the rpm database,
installed python3-dnf-plugin-versionlock from the release's AppStream (a signed package: gpgcheck on), then the
manifest's toolkit 1.20.0 exactly and locked it with dnf versionlock, although 1.21.0 is in the repository. Every
check reads the node's own package manager: `rpm -q`, `dnf versionlock list`, `dnf repolist`, the rpm database's
gpg-pubkey entries. Commands run on the node as verify_lib.node_host reaches it.
"""

from __future__ import annotations

import configparser
import json
import os
import re
from pathlib import Path

import pytest
import verify_lib

EPHEMERAL = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"])
REPO_FILE = "/etc/yum.repos.d/nodeforge-nvidia-container-toolkit.repo"
RPM_KEY = "/etc/pki/rpm-gpg/RPM-GPG-KEY-nodeforge-nvidia-container-toolkit"
LOCK_LIST = "/etc/dnf/plugins/versionlock.list"
PACKAGES = verify_lib.TOOLKIT_PACKAGES
PINNED = "1.20.0-1"  # the version manifest's 1.20.0
NEWER = "1.21.0-1"
NODE_OS = os.environ.get("NODEFORGE_NODE_OS", "rocky9")
# The versionlock plugin each release's AppStream ships (specs/el<major>_appstream.yml): dnf-plugins-core's release.
VERSIONLOCK = {"rocky8": "4.0.21-25.el8", "rocky9": "4.3.0-13.el9"}[NODE_OS]


def fixture_fingerprint(repo: str) -> str:
    return json.loads((EPHEMERAL / repo / "fixture-repo.json").read_text())["fingerprint"]


def rpm_query(node, fmt: str, *names: str) -> list[str]:
    result = node.run("rpm --query --queryformat %s " + " ".join(["%s"] * len(names)), fmt + r"\n", *names)
    return result.stdout.splitlines()


def test_the_node_is_an_el_node_to_ansible(node):
    """What the role's vars files were chosen by: a Rocky release, dnf over an rpm database."""
    release = node.file("/etc/redhat-release").content_string
    assert re.fullmatch(rf"Rocky Linux release {NODE_OS.removeprefix('rocky')}\.\d+ \(.+\)\n", release), release
    assert node.check_output("rpm --query --whatprovides redhat-release").startswith("rocky-release-")


@pytest.mark.parametrize("package", PACKAGES)
def test_each_toolkit_package_is_installed_at_the_pinned_version(node, package):
    assert rpm_query(node, "%{NAME} %{VERSION}-%{RELEASE} %{ARCH}", package) == [f"{package} {PINNED} x86_64"]


def test_the_newer_version_is_in_the_repository_but_locked_out(node):
    available = node.check_output("dnf --quiet --showduplicates list --available nvidia-container-toolkit")
    assert re.search(rf"^nvidia-container-toolkit\.x86_64\s+{NEWER}\s", available, re.MULTILINE), available
    # Without the lock dnf would take the newer version; with it, an upgrade changes nothing.
    unlocked = node.run("dnf --disableplugin=versionlock --assumeno upgrade nvidia-container-toolkit")
    assert re.search(rf"^ nvidia-container-toolkit\s+x86_64\s+{NEWER}\s", unlocked.stdout, re.MULTILINE), (
        unlocked.stdout
    )
    node.run_expect([0], "dnf --assumeyes --quiet upgrade nvidia-container-toolkit")
    assert rpm_query(node, "%{VERSION}-%{RELEASE}", *PACKAGES) == [PINNED] * len(PACKAGES)


def test_versionlock_holds_the_four_packages_at_that_version(node):
    locks = node.check_output("dnf --quiet versionlock list").split()
    assert sorted(locks) == sorted(f"{package}-0:{PINNED}.*" for package in PACKAGES)
    assert sorted(
        line for line in node.file(LOCK_LIST).content_string.splitlines() if line and line[0] != "#"
    ) == sorted(locks)


def test_the_versionlock_plugin_came_from_the_release_repository_signed(node):
    installed = node.check_output("dnf --quiet list --installed python3-dnf-plugin-versionlock").splitlines()[-1]
    assert installed.split() == ["python3-dnf-plugin-versionlock.noarch", VERSIONLOCK, "@appstream"], installed
    signature = node.check_output("rpm --query --queryformat %s python3-dnf-plugin-versionlock", "%{RSAHEADER:pgpsig}")
    assert signature.lower().endswith(fixture_fingerprint("appstream-repo")[-16:].lower())


def test_the_repo_file_is_nvidias_with_the_verified_key(node):
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(node.file(REPO_FILE).content_string)
    assert parser.sections() == ["nvidia-container-toolkit"]
    section = parser["nvidia-container-toolkit"]
    assert section["baseurl"] == "http://127.0.0.1:8083/stable/rpm/$basearch"
    assert (section["enabled"], section["gpgcheck"], section["repo_gpgcheck"]) == ("1", "0", "1")
    assert section["gpgkey"] == f"file://{RPM_KEY}"
    assert "nvidia.github.io" not in node.file(REPO_FILE).content_string


def test_the_imported_key_is_the_pinned_one(node):
    """rpm names an imported key gpg-pubkey-<last 8 hex of its id>; the role imported the toolkit's only."""
    fingerprint = fixture_fingerprint("toolkit-repo")
    keys = rpm_query(node, "%{VERSION}", "gpg-pubkey")
    assert fingerprint[-8:].lower() in keys, keys
    listed = node.check_output("gpg --show-keys --with-colons %s", RPM_KEY)
    assert f"fpr:::::::::{fingerprint}:" in listed


def test_dnf_verifies_the_repository_metadata_with_that_key(node):
    """repo_gpgcheck: a fresh metadata download checks repomd.xml.asc; a tampered signature is refused."""
    node.run_expect([0], "dnf --quiet --repo nvidia-container-toolkit makecache --refresh")
    repolist = node.check_output("dnf repolist --enabled")
    assert re.search(r"^nvidia-container-toolkit\s", repolist, re.MULTILINE), repolist
    repodata = "/srv/el-repos/stable/rpm/x86_64/repodata"
    node.run_expect([0], f"cp {repodata}/repomd.xml.asc /root/repomd.xml.asc.good")
    try:
        node.run_expect([0], f"sed -i 's/^[A-Za-z0-9+/]\\{{10\\}}/AAAAAAAAAA/' {repodata}/repomd.xml.asc")
        tampered = node.run("dnf --quiet --repo nvidia-container-toolkit makecache --refresh")
        assert tampered.rc != 0
        assert "signature" in (tampered.stderr + tampered.stdout).lower(), tampered.stderr
    finally:
        node.run_expect([0], f"cp /root/repomd.xml.asc.good {repodata}/repomd.xml.asc")
        node.run_expect([0], "dnf --quiet --repo nvidia-container-toolkit makecache --refresh")


def test_the_role_reports_what_it_installed(node):
    facts = json.loads(node.file("/root/nvidia_container_toolkit_facts.json").content_string)
    assert facts["version"] == "1.20.0"
    assert facts["runtimes"] == ["crio", "podman"]
    assert (facts["cdi"], facts["gpus"]) == ("skipped", False)
