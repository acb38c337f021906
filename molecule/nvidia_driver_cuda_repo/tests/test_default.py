"""Verify nvidia_driver against the signed fixture CUDA repository (stand-ins for NVIDIA's packages).

The node got cuda-keyring from the repository, a source list signed-by its key, nvidia-driver-pinning-580 before
any driver package, and nvidia-open 580.105.08 exactly, pinned and held although 580.126.20 is there too. The
last test moves the pin up (to the manifest's version) and back down through the role, the only way the version
moves. Commands run on the node as verify_lib.node_host reaches it; playbook runs use molecule's inventory.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import pytest
import verify_lib
from verify_lib import held, installed_version

SCENARIO_DIR = Path(__file__).resolve().parent.parent
CONVERGE = SCENARIO_DIR / "converge.yml"
FIXTURE_KEYRING = (
    Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "fixture-repo" / "repo" / "fixture-archive-keyring.gpg"
)

KEYRING = "/usr/share/keyrings/cuda-archive-keyring.gpg"
NODE_OS = os.environ.get("NODEFORGE_NODE_OS", "debian12")  # molecule/run.sh's
# cuda-keyring's own list, named after the repository (debian12, debian13).
SOURCE_LIST = f"/etc/apt/sources.list.d/cuda-{NODE_OS}-x86_64.list"
REPO_URL = "http://127.0.0.1:8081/"
PIN_FILE = "/etc/apt/preferences.d/nodeforge-nvidia-driver"
FACTS = "/root/nvidia_driver_facts.json"
PINNED = "580.105.08-1"
NEWER = "580.126.20-1"  # the version manifest's 580.126.20
DRIVER_PACKAGES = ("nvidia-open", "nvidia-kernel-open-dkms", "nvidia-persistenced")
HELD = {"nvidia-open", "nvidia-kernel-open-dkms"}


@pytest.fixture
def facts(node) -> dict:
    return json.loads(node.file(FACTS).content_string)


def test_keyring_is_the_repository_key_from_cuda_keyring(node):
    keyring = node.file(KEYRING)
    assert keyring.exists
    assert keyring.sha256sum == hashlib.sha256(FIXTURE_KEYRING.read_bytes()).hexdigest()
    assert node.check_output("dpkg-query --search %s", KEYRING).startswith("cuda-keyring:")
    assert installed_version(node, "cuda-keyring") == "1.1-1"
    # The key really verifies the repository's signed index that apt fetched.
    verify = node.run("gpgv --keyring %s /var/lib/apt/lists/127.0.0.1:8081_InRelease", KEYRING)
    assert verify.rc == 0, verify.stderr
    assert "Good signature" in verify.stderr


def test_source_list_points_at_the_repository_signed_by_the_keyring(node):
    lines = [line for line in node.file(SOURCE_LIST).content_string.splitlines() if line and not line.startswith("#")]
    assert lines == [f"deb [signed-by={KEYRING}] {REPO_URL} /"]
    # cuda-keyring shipped the file with NVIDIA's URL; the role owns it now (mirror or fixture URL).
    assert "developer.download.nvidia.com" not in node.file(SOURCE_LIST).content_string
    policy = node.check_output("apt-cache policy nvidia-open")
    assert "http://127.0.0.1:8081" in policy


def test_pinning_package_is_installed_before_any_driver_package(node):
    assert node.package("nvidia-driver-pinning-580").is_installed
    log = node.file("/var/log/dpkg.log").content_string.splitlines()
    first_install = {}
    for index, line in enumerate(log):
        match = re.match(r"\S+ \S+ install (\S+?):\S+ ", line)
        if match:
            first_install.setdefault(match.group(1), index)
    pinning = first_install["nvidia-driver-pinning-580"]
    assert first_install["cuda-keyring"] < pinning
    for package in DRIVER_PACKAGES:
        assert pinning < first_install[package], package


def test_exact_version_is_installed_pinned_and_held(node):
    for package in DRIVER_PACKAGES:
        assert installed_version(node, package) == PINNED, package
    assert held(node) >= HELD
    pin = node.file(PIN_FILE).content_string
    assert f"Pin: version {PINNED}\n" in pin
    assert "Pin-Priority: 1001\n" in pin
    assert re.search(r"^Package: .*\*nvidia\*", pin, re.M)
    policy = node.check_output("apt-cache policy nvidia-open")
    assert f"Candidate: {PINNED}" in policy
    assert NEWER in policy  # the newer version is there and not chosen


def test_apt_get_upgrade_does_not_move_the_driver(node):
    # Control: without nodeforge's pin and the holds, apt would upgrade the driver to the newer version.
    unpinned = node.check_output(
        "apt-get --simulate --ignore-hold -o Dir::Etc::PreferencesParts=/nonexistent upgrade 2>/dev/null"
    )
    assert re.search(rf"^Inst nvidia-open \[{re.escape(PINNED)}\] \({re.escape(NEWER)} ", unpinned, re.M)
    # A real upgrade from the CUDA repository (only that source: no Debian updates are pulled in here).
    upgrade = node.run(
        "DEBIAN_FRONTEND=noninteractive apt-get --yes"
        " -o Dir::Etc::SourceList=%s -o Dir::Etc::SourceParts=/nonexistent upgrade",
        SOURCE_LIST,
    )
    assert upgrade.rc == 0, upgrade.stderr
    assert "0 upgraded" in upgrade.stdout
    for package in DRIVER_PACKAGES:
        assert installed_version(node, package) == PINNED, package
    # Nor would a dist-upgrade with every source.
    dist = node.check_output("apt-get --simulate dist-upgrade")
    assert not re.search(r"^(Inst|Remv) \S*(nvidia|cuda)", dist, re.M)


def test_facts_name_the_modules_the_source_installs(node, facts):
    assert facts["managed"] is True
    assert (facts["source"], facts["flavor"], facts["branch"]) == ("cuda_repo", "open", "580")
    assert (facts["version"], facts["package_version"], facts["installed"]) == ("580.105.08", PINNED, True)
    # The container never loads a module: the installed driver is not the running one.
    assert (facts["loaded_version"], facts["active"], facts["in_container"]) == ("", False, True)
    assert facts["dkms_package"] == "nvidia-kernel-open-dkms"
    # No kernel to build for in this container (the stand-ins carry no module source), so none is built.
    assert facts["dkms"] == {"name": "nvidia", "version": "580.105.08", "kernels": []}
    conf = node.file("/usr/src/nvidia-580.105.08/dkms.conf").content_string
    built = re.findall(r'^BUILT_MODULE_NAME\[\d+\]="([^"]+)"', conf, re.M)
    assert sorted(facts["modules"]) == sorted(name.replace("-", "_") for name in built)
    assert facts["modules"]["nvidia_peermem"] == {"modprobe": "nvidia-peermem", "kernel": "nvidia_peermem"}
    assert facts["modules"]["nvidia"] == {"modprobe": "nvidia", "kernel": "nvidia"}
    assert facts["peermem_module"] == "nvidia-peermem"


def test_nouveau_is_blacklisted(node):
    lines = [line for line in node.file("/etc/modprobe.d/nodeforge-nouveau-blacklist.conf").content_string.splitlines()]
    assert "blacklist nouveau" in lines
    assert "options nouveau modeset=0" in lines
    # No initramfs generator in this container: the handler said so instead of rebuilding.
    assert not node.exists("update-initramfs")


def test_module_options_name_the_module_of_the_source(node):
    verify_lib.assert_driver_module_options(node)


def test_the_role_keeps_persistenced_enabled(node):
    # The package's postinst enabled the unit at install, so converge found it so and left the module out; what the
    # role owns is keeping it so. A unit disabled since then is drift: check mode reports it, a real run repairs it.
    node.run_expect([0], "systemctl disable nvidia-persistenced.service")
    try:
        assert not node.service("nvidia-persistenced").is_enabled
        plan = verify_lib.run_playbook(CONVERGE, check=True)
        assert plan.rc == 0, plan.failed
        assert plan.host_result("Enable nvidia-persistenced")["changed"] is True
        assert not node.service("nvidia-persistenced").is_enabled  # check mode only reported it

        run = verify_lib.run_playbook(CONVERGE)
        assert run.rc == 0, run.failed
        assert run.changed == ["nvidia_driver : Enable nvidia-persistenced"], run.changed
        assert node.service("nvidia-persistenced").is_enabled

        # Enabled again, the next run leaves the module out.
        again = verify_lib.run_playbook(CONVERGE)
        assert again.rc == 0, again.failed
        assert again.changed == [], again.changed
        assert again.host_result("Enable nvidia-persistenced").get("skipped") is True
    finally:
        node.run("systemctl enable nvidia-persistenced.service")


def test_reboot_requirement_is_recorded_for_this_boot(node):
    verify_lib.assert_reboot_recorded_for_this_boot(node)


def test_dgx_os_keeps_its_vendor_managed_driver(node):
    # On DGX OS (/etc/dgx-release) the role leaves the driver alone: a different pin moves nothing.
    node.run_expect([0], 'printf \'DGX_NAME="DGX Server"\\nDGX_OTA_VERSION="6.3.1"\\n\' > /etc/dgx-release')
    try:
        run = verify_lib.run_playbook(CONVERGE, {"nvidia_driver_version": NEWER.split("-")[0]})
        assert run.rc == 0, run.failed
        # Only the verifier's own copy of the facts changes; nothing of the driver's.
        assert run.changed == ["Record nvidia_driver_facts for the verifier"], run.changed
        [note] = run.results("Report that DGX OS keeps its vendor-managed driver")
        assert "runs DGX OS (/etc/dgx-release)" in note["msg"] and "nvidia_driver_manage_on_dgx: true" in note["msg"]
        facts = json.loads(node.file(FACTS).content_string)
        assert facts["managed"] is False and facts["source"] == "dgx-os"
        for package in DRIVER_PACKAGES:
            assert installed_version(node, package) == PINNED, package
        assert f"Pin: version {PINNED}\n" in node.file(PIN_FILE).content_string
    finally:
        node.run("rm -f /etc/dgx-release")


def test_a_cuda_keyring_with_another_key_is_not_installed(node):
    """cuda-keyring, the repository's trust anchor, was installed on HTTPS alone: now the key inside the package must
    be the one the manifest pins (here NVIDIA's real 3bf863cc key, which the stand-in's is not)."""
    node.run_expect([0], "dpkg --purge cuda-keyring")
    nvidia = "EB693B3035CD5710E231E123A4B469963BF863CC"
    try:
        # An -e value replaces the inventory's overrides whole: the scenario's os_support claim (molecule.yml) again.
        overrides = {
            "os_support": {"nvidia_driver_source": {"cuda_repo": [NODE_OS]}},
            "nvidia_driver": {"cuda_repo": {"keyring_fingerprints": [nvidia]}},
        }
        run = verify_lib.run_playbook(CONVERGE, {"nodeforge_manifest_overrides": overrides})
        assert run.rc != 0
        [refusal] = run.results("Check the key in cuda-keyring against the pinned fingerprints")
        message = " ".join(refusal["msg"].split())
        fixture = json.loads((FIXTURE_KEYRING.parent.parent / "fixture-repo.json").read_text())["fingerprint"]
        assert f"ships the key(s) {fixture}, of which the version manifest does not pin {fixture}" in message
        assert f"keyring_fingerprints: {nvidia}); it was not installed" in message
        assert node.run("dpkg-query --show cuda-keyring").rc != 0
        assert not node.file(KEYRING).exists
    finally:
        # The scenario's own pin (the stand-in key): installed again.
        again = verify_lib.run_playbook(CONVERGE)
    assert again.rc == 0, again.failed
    assert installed_version(node, "cuda-keyring") == "1.1-1"
    assert node.file(KEYRING).sha256sum == hashlib.sha256(FIXTURE_KEYRING.read_bytes()).hexdigest()


# Last: it changes the installed version (and restores it).
def test_a_changed_pin_is_what_moves_the_version(node):
    # An empty nvidia_driver_version falls back to the manifest's version of the branch: 580.126.20.
    up = verify_lib.run_playbook(CONVERGE, {"nvidia_driver_version": ""})
    assert up.rc == 0, up.failed
    for package in DRIVER_PACKAGES:
        assert installed_version(node, package) == NEWER, package
    assert held(node) >= HELD
    assert f"Pin: version {NEWER}\n" in node.file(PIN_FILE).content_string
    # The pin back at 580.105.08 (the inventory's): the role downgrades, nothing else would.
    down = verify_lib.run_playbook(CONVERGE)
    assert down.rc == 0, down.failed
    for package in DRIVER_PACKAGES:
        assert installed_version(node, package) == PINNED, package
    assert held(node) >= HELD
    assert f"Pin: version {PINNED}\n" in node.file(PIN_FILE).content_string
