"""Verify nvidia_driver with Debian's own non-free driver (branch 535) in a Debian 12 container.

DKMS really built Debian's nvidia-current module for the kernel prepare.yml installed (the one linux-headers-amd64
points to) and for nothing else; the module files, their kernel names and the options modprobe would pass come
from the node, compared with nvidia_driver_facts. The version is pinned and held, the nouveau blacklist is inside
the initramfs the handler rebuilt, nvidia-persistenced is enabled and the reboot requirement is recorded.
Commands run on the node as verify_lib.node_host reaches it; nothing here loads a module.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import verify_lib
from verify_lib import assert_reboot_recorded_for_this_boot, held, installed_version

PIN_FILE = "/etc/apt/preferences.d/nodeforge-nvidia-driver"
BLACKLIST = "/etc/modprobe.d/nodeforge-nouveau-blacklist.conf"
OPTIONS = "/etc/modprobe.d/nodeforge-nvidia-options.conf"
FACTS = "/root/nvidia_driver_facts.json"
PENDING = "/var/lib/nodeforge/pending-initramfs-rebuild"
CONVERGE = Path(__file__).resolve().parent.parent / "converge.yml"
VERSIONED = ("nvidia-kernel-dkms", "nvidia-smi", "libcuda1")
HELD = {*VERSIONED, "nvidia-persistenced"}
EXPECTED_OPTIONS = {"NVreg_EnableStreamMemOPs": "1", "NVreg_RestrictProfilingToAdminUsers": "0"}


@pytest.fixture
def facts(node) -> dict:
    return json.loads(node.file(FACTS).content_string)


@pytest.fixture
def local(node) -> dict:
    """What prepare.yml chose: the kernel linux-headers-amd64 points to and the oldest 535 driver."""
    return json.loads(node.file("/etc/ansible/facts.d/molecule.fact").content_string)


def test_headers_are_installed_for_the_listed_kernel_only(node, local):
    # The image has no kernel headers; the role installed those of nvidia_driver_dkms_kernels and, in a container,
    # none of the running kernel (the host's), whether or not Debian has a package for it.
    installed = node.check_output(
        "dpkg-query --show --showformat='${db:Status-Abbrev} ${Package}\\n' 'linux-headers-*'"
    ).splitlines()
    # One package per kernel (linux-headers-6.1.0-NN-amd64); not the metapackage, not the -common ones.
    per_kernel = sorted(line.split()[1] for line in installed if re.fullmatch(r"ii +linux-headers-\d\S*-amd64", line))
    assert per_kernel == [f"linux-headers-{local['kernel']}"], installed


def test_dkms_built_the_module_for_the_listed_kernel_only(node, facts, local):
    kernel, dkms = local["kernel"], facts["dkms"]
    assert dkms["name"] == "nvidia-current"
    assert dkms["version"] == local["driver_version"] == facts["version"]
    assert dkms["kernels"] == [kernel]
    status = node.check_output("dkms status -m %s -v %s", dkms["name"], dkms["version"])
    assert re.search(
        rf"^{re.escape(dkms['name'])}/{re.escape(dkms['version'])}, {re.escape(kernel)}, x86_64: installed",
        status,
        re.M,
    )
    assert len(status.splitlines()) == 1, status
    # Proprietary modules (open ones say "Dual MIT/GPL"), built for this kernel, of this version.
    core = f"/lib/modules/{kernel}/updates/dkms/nvidia-current.ko"
    assert node.check_output("modinfo --field=license %s", core) == "NVIDIA"
    assert node.check_output("modinfo --field=version %s", core) == dkms["version"]
    assert node.check_output("modinfo --field=vermagic %s", core).startswith(f"{kernel} ")


def test_facts_name_the_modules_debian_installs(node, facts, local):
    assert (facts["source"], facts["flavor"], facts["branch"], facts["managed"]) == (
        "distro",
        "proprietary",
        "535",
        True,
    )
    assert facts["installed"] is True
    assert facts["modules"]["nvidia"] == {"modprobe": "nvidia-current", "kernel": "nvidia"}
    assert facts["modules"]["nvidia_peermem"] == {"modprobe": "nvidia-current-peermem", "kernel": "nvidia_peermem"}
    assert facts["peermem_module"] == "nvidia-current-peermem"
    assert set(facts["modules"]) == {"nvidia", "nvidia_modeset", "nvidia_drm", "nvidia_uvm", "nvidia_peermem"}
    # Each name is a real module file for the kernel, and the kernel calls it what the fact says.
    for module in facts["modules"].values():
        path = f"/lib/modules/{local['kernel']}/updates/dkms/{module['modprobe']}.ko"
        assert node.file(path).exists, path
        assert node.check_output("modinfo --field=name %s", path) == module["kernel"]
    # A container never loads the driver.
    assert (facts["loaded_version"], facts["active"], facts["in_container"]) == ("", False, True)


def test_exact_version_is_installed_pinned_and_held(node, facts):
    package_version = facts["package_version"]
    assert re.match(rf"{re.escape(facts['version'])}-", package_version)
    for package in VERSIONED:
        assert installed_version(node, package) == package_version, package
    assert held(node) >= HELD
    pin = node.file(PIN_FILE).content_string
    assert f"Pin: version {package_version}\n" in pin
    assert "Pin-Priority: 1001\n" in pin
    policy = node.check_output("apt-cache policy nvidia-kernel-dkms")
    assert f"Installed: {package_version}" in policy
    assert f"Candidate: {package_version}" in policy


def test_system_upgrades_do_not_move_the_driver(node, facts):
    package_version = facts["package_version"]
    versions = [
        line.split("|")[1].strip() for line in node.check_output("apt-cache madison nvidia-kernel-dkms").splitlines()
    ]
    if any(v != package_version for v in versions):
        # Control: Debian has another 535 build, and without the pin and the holds apt would take it.
        unpinned = node.check_output(
            "apt-get --simulate --ignore-hold -o Dir::Etc::PreferencesParts=/nonexistent upgrade 2>/dev/null"
        )
        assert re.search(rf"^Inst nvidia-kernel-dkms \[{re.escape(package_version)}\]", unpinned, re.M)
    for command in ("apt-get --simulate upgrade", "apt-get --simulate dist-upgrade"):
        plan = node.check_output(command)
        for package in HELD:
            assert not re.search(rf"^(Inst|Remv) {re.escape(package)} ", plan, re.M), (command, package)


def test_nouveau_blacklist_is_in_the_rebuilt_initramfs(node, local):
    blacklist = node.file(BLACKLIST)
    assert {"blacklist nouveau", "options nouveau modeset=0"} <= set(blacklist.content_string.splitlines())
    initrd = node.file(f"/boot/initrd.img-{local['kernel']}")
    assert initrd.exists
    # The handler rebuilt the initramfs after the blacklist was written...
    assert initrd.mtime >= blacklist.mtime
    # ...and early boot sees the same file.
    listing = node.check_output("lsinitramfs %s", initrd.path).splitlines()
    assert "etc/modprobe.d/nodeforge-nouveau-blacklist.conf" in listing
    unpacked = node.run(
        "d=$(mktemp -d) && unmkinitramfs %s $d"
        " && cat $(find $d -path '*/etc/modprobe.d/nodeforge-nouveau-blacklist.conf'); rm -rf $d",
        initrd.path,
    )
    assert unpacked.stdout == blacklist.content_string


def test_module_options_reach_the_module_debian_installs(node, local):
    lines = [line for line in node.file(OPTIONS).content_string.splitlines() if line.startswith("options ")]
    assert lines == ["options nvidia-current NVreg_EnableStreamMemOPs=1 NVreg_RestrictProfilingToAdminUsers=0"]
    # What modprobe would run for the listed kernel (it only prints; nothing is loaded).
    plan = node.check_output("modprobe --show-depends --set-version %s nvidia-current", local["kernel"]).splitlines()
    insmod = plan[-1].split()
    assert insmod[1].endswith("/updates/dkms/nvidia-current.ko")
    assert dict(option.split("=", 1) for option in insmod[2:]) == EXPECTED_OPTIONS
    # Every option is a parameter the built module has.
    params = {line.split(":")[0] for line in node.check_output("modinfo --field=parm %s", insmod[1]).splitlines()}
    assert set(EXPECTED_OPTIONS) <= params


def test_the_role_keeps_persistenced_enabled(node):
    # Debian's postinst enabled the unit at install, so converge found it so; what the role owns is keeping it so.
    assert node.package("nvidia-persistenced").is_installed
    node.run_expect([0], "systemctl disable nvidia-persistenced.service")
    try:
        run = verify_lib.run_playbook(CONVERGE)
        assert run.rc == 0, run.failed
        assert run.changed == ["nvidia_driver : Enable nvidia-persistenced"], run.changed
        assert node.service("nvidia-persistenced").is_enabled
    finally:
        node.run("systemctl enable nvidia-persistenced.service")


def test_reboot_requirement_is_recorded_for_this_boot(node):
    assert_reboot_recorded_for_this_boot(node)


def test_an_initramfs_rebuild_an_interrupted_run_owed_is_taken_up(node, local):
    """The rebuild is a handler: a run stopped after the blacklist changed but before its handlers used to lose it
    for good (the next run sees no change). The owed rebuild is recorded on the node until the handler has run."""
    # The first converge rebuilt the initramfs and cleared the record.
    assert not node.file(PENDING).exists
    # An interrupted run: modprobe.d changed and the record written, the initramfs not rebuilt.
    node.run_expect([0], f"mkdir -p {Path(PENDING).parent} && echo owed > {PENDING}")
    before = node.file(f"/boot/initrd.img-{local['kernel']}").mtime
    run = verify_lib.run_playbook(CONVERGE)
    assert run.rc == 0, run.failed
    [taken_up] = run.results("Take up the initramfs rebuild an earlier run left pending")
    assert taken_up["changed"] and "did not get to rebuild the initramfs" in taken_up["msg"]
    [rebuilt] = run.results("Rebuild the initramfs of every installed kernel")
    assert rebuilt["changed"] and rebuilt["cmd"] == ["update-initramfs", "-u", "-k", "all"]
    assert node.file(f"/boot/initrd.img-{local['kernel']}").mtime > before
    assert not node.file(PENDING).exists
