"""Verify nvidia_driver's RedHat path (cuda_repo) on an EL tier node (Rocky Linux 9 identity, Debian's dnf and rpm).

The role fetched the CUDA repository's key, checked it against the pinned fingerprint and imported it into the rpm
database, wrote NVIDIA's .repo (gpgcheck on, the verified key file), installed python3-dnf-plugin-versionlock from the
release's AppStream, enabled the nvidia-driver module's 580-open stream, installed nvidia-open 580.105.08 exactly (its
DKMS package requires dkms, from EPEL) and locked the whole driver package set at that version with dnf versionlock,
although 580.126.20 is in the stream too. Every check reads the node's own package manager: `rpm -q`, the signatures
rpm checked, `dnf module list`, /etc/dnf/modules.d, `dnf versionlock list`, `dnf repolist`. The last tests move the
flavor and the pin through the role and back. Commands run on the node as verify_lib.node_host reaches it; playbook
runs use molecule's inventory. What the driver's Debian scenario proves of code no OS selects (persistenced drift,
DGX OS keeping its driver) is not repeated here.
"""

from __future__ import annotations

import configparser
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

REPO_ID = "cuda-rhel9-x86_64"  # NVIDIA's own section name: cuda-<distro>-<arch>
REPO_FILE = f"/etc/yum.repos.d/{REPO_ID}.repo"
REPO_URL = "http://127.0.0.1:8081/compute/cuda/repos/rhel9/x86_64/"
SERVED = "/srv/el-repos/compute/cuda/repos/rhel9/x86_64"
KEY_URL = "http://127.0.0.1:8081/compute/cuda/repos/{distro}/x86_64/D42D0685.pub"
RPM_KEY = "/etc/pki/rpm-gpg/RPM-GPG-KEY-nodeforge-cuda"
MODULE_STATE = "/etc/dnf/modules.d/nvidia-driver.module"
LOCK_LIST = "/etc/dnf/plugins/versionlock.list"
FACTS = "/root/nvidia_driver_facts.json"
PINNED = "580.105.08"
NEWER = "580.126.20"  # the version manifest's
STREAMS = {"580-open", "580-dkms", "open-dkms", "latest-dkms"}
# nvidia-open's closure in the 580-open stream, with each package's arch (NVIDIA's: the meta and kmod packages noarch).
OPEN_PACKAGES = {
    "nvidia-open": "noarch",
    "kmod-nvidia-open-dkms": "noarch",
    "nvidia-kmod-common": "noarch",
    "nvidia-modprobe": "x86_64",
    "nvidia-driver": "x86_64",
    "nvidia-driver-libs": "x86_64",
    "nvidia-driver-cuda": "x86_64",
    "nvidia-driver-cuda-libs": "x86_64",
    "libnvidia-ml": "x86_64",
    "nvidia-persistenced": "x86_64",
    "nvidia-settings": "x86_64",
}
PROPRIETARY_PACKAGES = {"cuda-drivers", "kmod-nvidia-latest-dkms"}


def evr(version: str) -> str:
    """NVIDIA's driver RPMs carry Epoch 3 and an el9 release."""
    return f"3:{version}-1.el9"


def fixture_fingerprint(repo: str) -> str:
    return json.loads((EPHEMERAL / repo / "fixture-repo.json").read_text())["fingerprint"]


def rpm_query(node, fmt: str, *names: str) -> list[str]:
    result = node.run("rpm --query --queryformat %s " + " ".join(["%s"] * len(names)), fmt + r"\n", *names)
    return result.stdout.splitlines()


def driver_packages(node) -> dict[str, str]:
    """Every installed package the role locks (its globs *nvidia* and cuda-drivers*): name -> epoch:version-release."""
    lines = rpm_query(node, "%{NAME} %{EPOCH}:%{VERSION}-%{RELEASE}", "--all", "*nvidia*", "cuda-drivers*")
    return dict(line.split() for line in lines)


def locks(node) -> list[str]:
    return sorted(node.check_output("dnf --quiet versionlock list").split())


@pytest.fixture
def facts(node) -> dict:
    return json.loads(node.file(FACTS).content_string)


def test_the_node_is_an_el9_node_to_ansible(node):
    """What the role's vars files (vars/RedHat.yml) and the manifest's distros (rocky9 -> rhel9) were chosen by."""
    release = node.file("/etc/redhat-release").content_string
    assert re.fullmatch(r"Rocky Linux release 9\.\d+ \(.+\)\n", release), release
    assert node.check_output("rpm --query --whatprovides redhat-release").startswith("rocky-release-9")


def test_the_repo_file_is_nvidias_with_the_verified_key(node):
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(node.file(REPO_FILE).content_string)
    assert parser.sections() == [REPO_ID]
    section = parser[REPO_ID]
    assert section["baseurl"] == REPO_URL
    assert (section["enabled"], section["gpgcheck"]) == ("1", "1")
    # The verified file, never the URL: dnf would import whatever key a URL serves on its own.
    assert section["gpgkey"] == f"file://{RPM_KEY}"
    # NVIDIA signs the CUDA RPMs, not the metadata: its .repo has no repo_gpgcheck.
    assert "repo_gpgcheck" not in section
    assert "developer.download.nvidia.com" not in node.file(REPO_FILE).content_string
    # dnf reads it so (the options it resolved for the repository).
    dumped = node.check_output("dnf --quiet config-manager --dump %s", REPO_ID)
    assert re.search(r"^gpgcheck = 1$", dumped, re.M), dumped
    assert re.search(rf"^baseurl = {re.escape(REPO_URL)}$", dumped, re.M), dumped
    repolist = node.check_output("dnf repolist --enabled")
    assert re.search(rf"^{REPO_ID}\s", repolist, re.M), repolist


def test_the_imported_key_is_the_pinned_one_from_nvidias_key_url(node):
    """rpm names an imported key gpg-pubkey-<last 8 hex of its id>; the role fetched it from key_url_rpm with {distro}
    replaced (rhel9) and imported that file only after its fingerprint matched the pinned one."""
    fingerprint = fixture_fingerprint("cuda-repo")
    assert fingerprint[-8:].lower() in rpm_query(node, "%{VERSION}", "gpg-pubkey")
    key = node.file(RPM_KEY)
    fixture_key = (EPHEMERAL / "cuda-repo" / "repo" / "RPM-GPG-KEY-nodeforge-fixture").read_bytes()
    assert key.sha256sum == hashlib.sha256(fixture_key).hexdigest()
    assert key.sha256sum == node.file(f"{SERVED}/D42D0685.pub").sha256sum
    assert (key.user, key.group, key.mode) == ("root", "root", 0o644)
    listed = node.check_output("gpg --show-keys --with-colons %s", RPM_KEY)
    assert f"fpr:::::::::{fingerprint}:" in listed


def test_every_driver_package_is_signed_by_that_key_and_rpm_checks_it(node):
    """gpgcheck is meaningful: each installed package carries the CUDA key's signature, which verifies against the rpm
    database that holds the imported key and not against one without it."""
    key_id = fixture_fingerprint("cuda-repo")[-16:].lower()
    for package in OPEN_PACKAGES:
        [signature] = rpm_query(node, "%{RSAHEADER:pgpsig}", package)
        assert signature.lower().endswith(key_id), (package, signature)
    served = f"{SERVED}/Packages/nvidia-open-{PINNED}-1.el9.noarch.rpm"
    assert node.check_output("rpm --checksig %s", served).endswith("digests signatures OK")
    node.run_expect(
        [0], "rm -rf /root/empty-rpmdb && mkdir /root/empty-rpmdb && rpm --dbpath /root/empty-rpmdb --initdb"
    )
    unknown = node.run("rpm --dbpath /root/empty-rpmdb --checksig %s", served)
    assert unknown.rc != 0
    assert "SIGNATURES NOT OK" in unknown.stdout, unknown.stdout


def test_the_580_open_stream_is_enabled(node):
    """Profile lab: open modules, branch 580. The role enabled the stream and installed packages, not a profile."""
    state = configparser.ConfigParser(interpolation=None)
    state.read_string(node.file(MODULE_STATE).content_string)
    assert dict(state["nvidia-driver"]) == {
        "name": "nvidia-driver",
        "stream": "580-open",
        "profiles": "",
        "state": "enabled",
    }
    enabled = node.check_output("dnf module list --enabled nvidia-driver")
    assert re.search(r"^nvidia-driver\s+580-open \[e\]", enabled, re.M), enabled
    # The repository's module metadata offers NVIDIA's DKMS streams.
    listed = node.check_output("dnf module list nvidia-driver")
    assert set(re.findall(r"^nvidia-driver\s+(\S+)", listed, re.M)) == STREAMS, listed


@pytest.mark.parametrize("package", sorted(OPEN_PACKAGES))
def test_each_driver_package_is_installed_at_the_pinned_version(node, package):
    assert rpm_query(node, "%{NAME} %{EPOCH}:%{VERSION}-%{RELEASE} %{ARCH}", package) == [
        f"{package} {evr(PINNED)} {OPEN_PACKAGES[package]}"
    ]


def test_the_driver_came_from_the_cuda_repository_and_dkms_from_epel(node):
    origins = node.check_output(
        "dnf --quiet repoquery --installed --queryformat %s %s %s", "%{name} %{from_repo}", "*nvidia*", "dkms"
    )
    assert dict(line.split() for line in origins.splitlines()) == {
        **dict.fromkeys(OPEN_PACKAGES, REPO_ID),
        "dkms": "epel",
    }
    [signature] = rpm_query(node, "%{RSAHEADER:pgpsig}", "dkms")
    assert signature.lower().endswith(fixture_fingerprint("epel-repo")[-16:].lower())
    # Nothing of the proprietary flavor.
    assert driver_packages(node).keys() == OPEN_PACKAGES.keys()


def test_versionlock_holds_the_whole_driver_package_set_at_that_version(node):
    expected = sorted(f"{package}-{evr(PINNED)}.*" for package in OPEN_PACKAGES)
    assert locks(node) == expected
    assert (
        sorted(line for line in node.file(LOCK_LIST).content_string.splitlines() if line and line[0] != "#") == expected
    )


def test_the_newer_version_is_in_the_stream_but_locked_out(node):
    unlocked = node.check_output("dnf --quiet --disableplugin=versionlock --showduplicates list available nvidia-open")
    assert evr(NEWER) in unlocked, unlocked
    # Control: without the locks, an upgrade would take the whole set to the newer version.
    control = node.run("dnf --disableplugin=versionlock --assumeno upgrade")
    assert re.search(rf"^ nvidia-open\s+noarch\s+{re.escape(evr(NEWER))}\s+{REPO_ID}\s", control.stdout, re.M), (
        control.stdout
    )
    # The locks exclude it: not installable by name, and a real upgrade leaves every package where it is.
    refused = node.run("dnf --quiet --assumeno install nvidia-open-%s", NEWER)
    assert refused.rc != 0
    assert f"Unable to find a match: nvidia-open-{NEWER}" in refused.stderr, refused.stderr
    node.run_expect([0], "dnf --assumeyes --quiet upgrade")
    assert driver_packages(node) == dict.fromkeys(OPEN_PACKAGES, evr(PINNED))


def test_the_proprietary_flavor_is_filtered_out_by_the_stream(node):
    """The enabled 580-open stream hides the other flavor's packages (modular filtering), as NVIDIA's repository
    does."""
    filtered = node.run("dnf --assumeno install cuda-drivers")
    assert filtered.rc != 0
    assert "filtered out by modular filtering" in filtered.stdout + filtered.stderr, filtered.stdout + filtered.stderr


def test_facts_name_the_modules_the_source_installs(node, facts):
    assert facts["managed"] is True
    assert (facts["source"], facts["flavor"], facts["branch"]) == ("cuda_repo", "open", "580")
    # rpm's %{VERSION}: the version without Epoch and release.
    assert (facts["version"], facts["package_version"], facts["installed"]) == (PINNED, PINNED, True)
    assert facts["packages"] == ["nvidia-open"]
    # The container never loads a module: the installed driver is not the running one.
    assert (facts["loaded_version"], facts["active"], facts["in_container"]) == ("", False, True)
    assert facts["dkms_package"] == "kmod-nvidia-open-dkms"
    # No kernel to build for in this container (no kernel-devel asked for, the stand-ins carry no module source).
    assert facts["dkms"] == {"name": "nvidia", "version": PINNED, "kernels": []}
    conf_path = f"/usr/src/nvidia-{PINNED}/dkms.conf"
    assert node.check_output("rpm --query --file %s", conf_path) == f"kmod-nvidia-open-dkms-{PINNED}-1.el9.noarch"
    built = re.findall(r'^BUILT_MODULE_NAME\[\d+\]="([^"]+)"', node.file(conf_path).content_string, re.M)
    assert sorted(facts["modules"]) == sorted(name.replace("-", "_") for name in built)
    assert facts["modules"]["nvidia_peermem"] == {"modprobe": "nvidia-peermem", "kernel": "nvidia_peermem"}
    assert facts["modules"]["nvidia"] == {"modprobe": "nvidia", "kernel": "nvidia"}
    assert facts["peermem_module"] == "nvidia-peermem"


def test_nouveau_is_blacklisted(node):
    lines = node.file("/etc/modprobe.d/nodeforge-nouveau-blacklist.conf").content_string.splitlines()
    assert "blacklist nouveau" in lines
    assert "options nouveau modeset=0" in lines
    # No dracut in this container: the handler said so instead of rebuilding, and left nothing pending.
    assert not node.exists("dracut")
    assert not node.file("/var/lib/nodeforge/pending-initramfs-rebuild").exists


def test_module_options_name_the_module_of_the_source(node):
    verify_lib.assert_driver_module_options(node)


def test_reboot_requirement_is_recorded_for_this_boot(node):
    verify_lib.assert_reboot_recorded_for_this_boot(node)


def test_a_key_other_than_the_pinned_one_is_not_imported(node):
    """The CUDA key is trusted only when the manifest pins its fingerprint (here: EPEL's fixture key is pinned instead,
    a real key, just not this repository's): the role stops before it writes or imports anything."""
    cuda = fixture_fingerprint("cuda-repo")
    other = fixture_fingerprint("epel-repo")
    node.run_expect([0], f"mv {RPM_KEY} /root/cuda-key.saved")
    try:
        # Extra vars replace the scenario's whole override (no merge): the key's URL comes along.
        overrides = {"nvidia_driver": {"cuda_repo": {"key_url_rpm": KEY_URL, "key_fingerprints_rpm": [other]}}}
        run = verify_lib.run_playbook(CONVERGE, {"nodeforge_manifest_overrides": overrides})
        assert run.rc != 0
        [refusal] = run.results("Check the key against the pinned fingerprints")
        message = " ".join(refusal["msg"].split())
        assert (
            f"holds the key(s) {cuda}, of which the version manifest does not pin {cuda} (pinned: {other})" in message
        )
        assert "nothing was installed" in message
        assert not node.file(RPM_KEY).exists
    finally:
        node.run(f"mv /root/cuda-key.saved {RPM_KEY}")
    # The scenario's own pin (the stand-in key): the same key file again, nothing else to do.
    again = verify_lib.run_playbook(CONVERGE)
    assert again.rc == 0, again.failed
    assert node.file(RPM_KEY).sha256sum == node.file(f"{SERVED}/D42D0685.pub").sha256sum


# The two last tests change the installed driver (and restore it).
def test_a_flavor_change_switches_the_stream_and_the_package_set(node):
    """open -> proprietary: stream 580-dkms, cuda-drivers and kmod-nvidia-latest-dkms at the same pinned version in
    place of nvidia-open and kmod-nvidia-open-dkms, locked; then back."""
    proprietary = {package: evr(PINNED) for package in OPEN_PACKAGES.keys() - {"nvidia-open", "kmod-nvidia-open-dkms"}}
    proprietary |= dict.fromkeys(PROPRIETARY_PACKAGES, evr(PINNED))
    try:
        run = verify_lib.run_playbook(CONVERGE, {"nvidia_driver_flavor": "proprietary"})
        assert run.rc == 0, run.failed
        assert re.search(r"^stream=580-dkms$", node.file(MODULE_STATE).content_string, re.M)
        assert driver_packages(node) == proprietary
        assert locks(node) == sorted(f"{package}-{version}.*" for package, version in proprietary.items())
        facts = json.loads(node.file(FACTS).content_string)
        assert (facts["flavor"], facts["dkms_package"], facts["version"]) == (
            "proprietary",
            "kmod-nvidia-latest-dkms",
            PINNED,
        )
    finally:
        back = verify_lib.run_playbook(CONVERGE)
    assert back.rc == 0, back.failed
    assert re.search(r"^stream=580-open$", node.file(MODULE_STATE).content_string, re.M)
    assert driver_packages(node) == dict.fromkeys(OPEN_PACKAGES, evr(PINNED))
    assert locks(node) == sorted(f"{package}-{evr(PINNED)}.*" for package in OPEN_PACKAGES)


def test_a_changed_pin_is_what_moves_the_version(node):
    # An empty nvidia_driver_version falls back to the manifest's version of the branch: 580.126.20.
    up = verify_lib.run_playbook(CONVERGE, {"nvidia_driver_version": ""})
    assert up.rc == 0, up.failed
    assert driver_packages(node) == dict.fromkeys(OPEN_PACKAGES, evr(NEWER))
    assert locks(node) == sorted(f"{package}-{evr(NEWER)}.*" for package in OPEN_PACKAGES)
    # The pin back at 580.105.08 (the inventory's): the role downgrades the whole set, nothing else would.
    down = verify_lib.run_playbook(CONVERGE)
    assert down.rc == 0, down.failed
    assert driver_packages(node) == dict.fromkeys(OPEN_PACKAGES, evr(PINNED))
    assert locks(node) == sorted(f"{package}-{evr(PINNED)}.*" for package in OPEN_PACKAGES)
    assert re.search(r"^stream=580-open$", node.file(MODULE_STATE).content_string, re.M)
