"""Verify ofed with the inbox stack: Debian's own RDMA packages, memlock limits, IPoIB through ifupdown.

Commands run on the node as verify_lib.node_host reaches it; playbook runs use molecule's inventory.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import verify_lib
import yaml
from verify_lib import installed_version

SCENARIO_DIR = Path(__file__).resolve().parent.parent
CONVERGE = SCENARIO_DIR / "converge.yml"
MANIFEST = SCENARIO_DIR.parents[1] / "roles" / "nodeforge" / "files" / "manifest.yml"
# What the role installs for ofed_mode inbox: the version manifest's list (Debian's names).
PACKAGES = yaml.safe_load(MANIFEST.read_text())["ofed"]["inbox"]["packages"]
LIMITS = "/etc/security/limits.d/90-nodeforge-rdma.conf"
DEMO = "nodeforge-rdma-demo"
DROPIN = f"/etc/systemd/system/{DEMO}.service.d/10-nodeforge-memlock.conf"
IFUPDOWN_DIR = "/etc/network/interfaces.d"
SOFT_ROCE = "nodeforge-soft-roce.service"
SOFT_ROCE_MODULES = "/etc/modules-load.d/nodeforge-soft-roce.conf"


@pytest.fixture
def facts(node) -> dict:
    return json.loads(node.file("/root/ofed_facts.json").content_string)


def test_the_manifest_s_inbox_packages_are_installed_at_debian_s_candidate(node):
    # state: present: apt took the candidate it had when the role ran, from Debian's archive (its sources are listed
    # under the version), not from a vendor's.
    for package in PACKAGES:
        installed = installed_version(node, package)
        policy = node.check_output("apt-cache policy %s", package)
        assert re.search(rf"^  Candidate: {re.escape(installed)}$", policy, re.M), policy
        sources = re.search(rf"^ \*\*\* {re.escape(installed)} \d+\n((?:        .*\n?)+)", policy, re.M)
        assert sources and "http://deb.debian.org/debian" in sources.group(1), policy


def test_perftest_s_ib_write_bw_is_the_file_of_the_installed_package(node):
    assert node.check_output("dpkg-query --search /usr/bin/ib_write_bw") == "perftest: /usr/bin/ib_write_bw"
    # Every file of perftest is as the package shipped it (dpkg checks each against its md5sums).
    assert node.check_output("dpkg --verify perftest") == ""
    # It links against the verbs library of the rdma-core the role installed (Debian builds libibverbs1 from rdma-core,
    # at rdma-core's version), and every library it needs resolves.
    ldd = node.check_output("ldd /usr/bin/ib_write_bw")
    assert "not found" not in ldd, ldd
    [libibverbs] = re.findall(r"^\s*libibverbs\.so\.1 => (\S+)", ldd, re.M)
    real = node.check_output("readlink -f %s", libibverbs)
    owner = node.check_output("dpkg-query --search %s", real).split(":")[0]
    assert owner == "libibverbs1", real
    assert installed_version(node, owner) == installed_version(node, "rdma-core")
    assert node.check_output("dpkg-query --show --showformat='${source:Package}' %s", owner) == "rdma-core"


def test_facts_name_the_inbox_stack(node, facts):
    assert (facts["mode"], facts["stack"], facts["version"]) == ("inbox", "inbox", "")
    assert facts["installed_version"] == installed_version(node, "rdma-core")
    assert facts["ofed_info"] == "" and facts["in_container"] is True
    assert not node.exists("ofed_info")


def test_memlock_limits_for_rdma_users(node):
    limits = node.file(LIMITS)
    assert (limits.user, limits.group, limits.mode) == ("root", "root", 0o644)
    entries = [line.split() for line in limits.content_string.splitlines() if line and not line.startswith("#")]
    assert entries == [
        ["*", "soft", "memlock", "unlimited"],
        ["*", "hard", "memlock", "unlimited"],
        ["root", "soft", "memlock", "unlimited"],
        ["root", "hard", "memlock", "unlimited"],
    ]


def test_service_gets_unlimited_memlock_from_its_drop_in(node):
    assert "[Service]\nLimitMEMLOCK=infinity\n" in node.file(DROPIN).content_string
    # systemd itself read the drop-in: the limit it applies to the service.
    assert node.check_output("systemctl show --property=LimitMEMLOCK %s", DEMO) == "LimitMEMLOCK=infinity"
    assert DROPIN in node.check_output("systemctl show --property=DropInPaths %s", DEMO)
    # Only the listed service got one (the role's default list is replaced by the scenario's).
    assert not node.file("/etc/systemd/system/containerd.service.d").exists


def ifquery(node, interface: str) -> dict:
    """The options ifupdown parsed for an interface (ifquery prints "option: value" lines)."""
    lines = node.check_output("ifquery %s", interface).splitlines()
    return dict(line.split(": ", 1) for line in lines if ": " in line)


def address_of(options: dict) -> str:
    """address/prefix, whether ifupdown kept the CIDR form or split off a netmask."""
    if "/" in options["address"]:
        return options["address"]
    netmask = options["netmask"]
    prefix = netmask if netmask.isdigit() else sum(bin(int(octet)).count("1") for octet in netmask.split("."))
    return f"{options['address']}/{prefix}"


def test_ipoib_configuration_is_what_ifupdown_reads(node):
    ib0 = node.file(f"{IFUPDOWN_DIR}/nodeforge-ipoib-ib0").content_string
    assert "auto ib0\niface ib0 inet static\n" in ib0
    # ifupdown parses the file through /etc/network/interfaces (source .../interfaces.d/*).
    options = ifquery(node, "ib0")
    assert address_of(options) == "10.10.11.19/24"
    assert options["mtu"] == "65520"
    assert options["pre-up"] == "echo connected > /sys/class/net/ib0/mode"
    options = ifquery(node, "ib1")
    assert address_of(options) == "10.10.12.19/24"
    assert "mtu" not in options and "pre-up" not in options
    assert {"ib0", "ib1"} <= set(node.check_output("ifquery --list --allow=auto").split())


def test_soft_roce_is_persisted_for_a_real_boot_and_not_started_in_a_container(node):
    assert node.file(SOFT_ROCE_MODULES).content_string.splitlines()[-1] == "rdma_rxe"
    # systemd's own reading of the unit: enabled for the next boot, never started in a container.
    shown = node.check_output("systemctl show -p UnitFileState -p ActiveState -p ExecStart -p Requires %s", SOFT_ROCE)
    assert "UnitFileState=enabled" in shown and "ActiveState=inactive" in shown, shown
    assert "rdma link add rxe_eth0 type rxe netdev eth0" in shown
    assert "sys-subsystem-net-devices-eth0.device" in shown
    assert node.run("systemd-analyze verify /etc/systemd/system/%s", SOFT_ROCE).rc == 0


# Last: it changes the node's configuration.
def test_dropped_interface_and_service_are_cleaned_up(node):
    run = verify_lib.run_playbook(
        CONVERGE,
        {
            "ofed_ipoib_interfaces": [{"name": "ib0", "address": "10.10.11.19", "netmask": "255.255.255.0"}],
            "ofed_memlock_services": [],
            "ofed_soft_roce_netdevs": [],
        },
    )
    assert run.rc == 0, run.failed
    assert not node.file(f"{IFUPDOWN_DIR}/nodeforge-ipoib-ib1").exists
    assert "ib1" not in node.check_output("ifquery --list --allow=auto").split()
    assert "mtu" not in node.file(f"{IFUPDOWN_DIR}/nodeforge-ipoib-ib0").content_string
    assert not node.file(DROPIN).exists
    assert node.check_output("systemctl show --property=LimitMEMLOCK %s", DEMO) != "LimitMEMLOCK=infinity"
    assert not node.file(SOFT_ROCE_MODULES).exists and not node.file(f"/etc/systemd/system/{SOFT_ROCE}").exists
    assert node.check_output("systemctl show -p LoadState %s", SOFT_ROCE) == "LoadState=not-found"
    [note] = run.results("Report that the IPoIB configuration is not applied")
    assert "is a container" in note["msg"] and "no interface is brought up" in note["msg"]
    # The packages were there already: the stack itself did not change.
    assert not [name for name in run.changed if "RDMA packages" in name], run.changed
