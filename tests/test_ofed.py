"""Role ofed's logic that runs on the controller, rendered from the role's own files: the settings check (one assert
whose failure names the first setting that is wrong, with the messages the role always gave), the IPoIB entry filter
it uses, and the condition under which a run goes into the stack's install path at all. The molecule scenarios
(ofed_inbox, ofed_doca, ofed_mlnx) prove the install paths on a node; these cover the branches they cannot reach."""

from __future__ import annotations

import importlib

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from nodeforge import content
from tests import role_expressions
from tests.role_expressions import trusted

ofed_filters = importlib.import_module("ansible_collections.nodeforge.gpu.plugins.filter.ofed")
invalid = ofed_filters.FilterModule().filters()["ofed_ipoib_invalid"]

CHECK = ("resolve.yml", "Check the settings and report what ofed works with")
STACK = ("main.yml", "Install, replace or keep the RDMA stack")
ROLE_VARS = role_expressions.load(content.roles_dir() / "ofed" / "vars" / "main.yml")

# What resolve_settings and the Debian vars give an inbox node, with the role's defaults.
SETTINGS = {
    "inventory_hostname": "node-01",
    "ansible_facts": {"distribution": "Debian", "distribution_version": "12.11"},
    "__ofed_mode": "inbox",
    "__ofed_mode_from": "ofed_mode",
    "__ofed_version": "",
    "__ofed_version_from": "version manifest ofed.inbox.version",
    "__ofed_pkg_family": "apt",
    "__ofed_inbox_pkgs": ["rdma-core", "ibverbs-utils"],
    "__ofed_doca_repo_url": "https://linux.mellanox.com/public/repo/doca/3.4.1/debian12/x86_64/",
    "__ofed_doca_key_url": "https://linux.mellanox.com/public/repo/doca/GPG-KEY-Mellanox.pub",
    "__ofed_doca_profile_package": "doca-ofed",
    "__ofed_mlnx_url": "https://example.com/MLNX_OFED_LINUX-24.10-3.2.5.0-debian12-x86_64.tgz",
    "__ofed_mlnx_url_from": "version manifest ofed.mlnx_ofed.url",
    "__ofed_mlnx_checksum": "",
    "__ofed_mlnx_packages_dir": "DEBS",
    "__ofed_checksum_pattern": ROLE_VARS["__ofed_checksum_pattern"],
    "ofed_memlock_limit": "unlimited",
    "ofed_memlock_users": ["*", "root"],
    "ofed_memlock_services": ["containerd", "crio"],
    "ofed_ipoib_interfaces": [],
}

IB0 = {"name": "ib0", "address": "10.10.11.19", "netmask": "255.255.255.0", "mode": "connected", "mtu": 65520}
IB1 = {"name": "ib1", "address": "10.10.12.19", "netmask": "24"}


@pytest.mark.parametrize(
    "entry",
    [
        IB0,
        IB1,
        {**IB1, "netmask": 0},
        {**IB1, "netmask": "255.255.254.0"},
        {**IB1, "mtu": 4092},
        {**IB1, "mtu": "576"},
        {**IB1, "name": "ibp12s0f1.8001"},
    ],
)
def test_valid_ipoib_entries_pass(entry):
    assert invalid([entry]) == []


@pytest.mark.parametrize(
    "entry",
    [
        {**IB1, "name": "ib0-with-a-long-name"},
        {**IB1, "name": "ib 0"},
        {k: v for k, v in IB1.items() if k != "name"},
        {**IB1, "address": "10.10.12.256"},
        {**IB1, "address": "10.10.12"},
        {**IB1, "netmask": "33"},
        {**IB1, "netmask": "255.0.255.0"},
        {**IB1, "netmask": "255.255.255"},
        {**IB1, "mode": "bonded"},
        {**IB1, "mtu": 575},
        {**IB1, "mtu": 4093},
        {**IB0, "mtu": 65521},
        {**IB1, "mtu": "jumbo"},
        "ib0",
    ],
)
def test_invalid_ipoib_entries_are_named(entry):
    assert invalid([IB0, entry]) == [entry]


def check(**changes) -> tuple[bool, str, object]:
    """Whether the settings check passes with these changes, its failure message and its success message."""
    task = role_expressions.task("ofed", *CHECK)
    templar = Templar(loader=DataLoader(), variables={**SETTINGS, **changes, **task["vars"]})
    conditions = task["ansible.builtin.assert"]["that"]
    passed = all(templar.template(trusted("{{ (" + condition + ") | bool }}")) for condition in conditions)
    fail_msg = templar.template(task["ansible.builtin.assert"]["fail_msg"])
    return passed, " ".join(fail_msg.split()), templar.template(task["ansible.builtin.assert"]["success_msg"])


def test_good_settings_pass_and_report_what_ofed_works_with():
    passed, _, report = check(ofed_ipoib_interfaces=[IB0, IB1])
    assert passed
    assert report == [
        "node-01: stack inbox (from ofed_mode) packages rdma-core, ibverbs-utils",
        "distribution packages",
        "IPoIB interfaces: ib0, ib1; memlock unlimited for *, root and services containerd, crio",
    ]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"__ofed_mode": "rdma"}, "node-01: ofed_mode is rdma (from ofed_mode); expected doca, mlnx_ofed or inbox."),
        (
            {"__ofed_pkg_family": "none"},
            "node-01: the ofed role has no package support for Debian 12.11"
            " (supported: Debian, Ubuntu, RHEL and rebuilds).",
        ),
        ({"__ofed_mode": "doca", "__ofed_version": ""}, "node-01: no doca version: set ofed_version or the version"),
        (
            {"__ofed_mode": "doca", "__ofed_version": "3.4.1", "__ofed_doca_repo_url": "http://mirror/doca"},
            "node-01: ofed_mode doca needs a repository URL ending with / (ofed_doca_repo_url or the manifest's"
            " ofed.doca.baseurl: http://mirror/doca), a key URL (ofed_doca_key_url or ofed.doca.key_url:"
            " https://linux.mellanox.com/public/repo/doca/GPG-KEY-Mellanox.pub) and a profile package name"
            " (doca-ofed).",
        ),
        (
            {"__ofed_mode": "mlnx_ofed", "__ofed_version": "24.10-3.2.5.0"},
            "node-01: ofed_mode mlnx_ofed needs the MLNX_OFED tarball's URL and checksum. URL:"
            " https://example.com/MLNX_OFED_LINUX-24.10-3.2.5.0-debian12-x86_64.tgz (ofed_mlnx_ofed_url, else the"
            " version manifest's ofed.mlnx_ofed.url); checksum: not set (ofed_mlnx_ofed_checksum, else"
            " ofed.mlnx_ofed.checksum; expected <algorithm>:<hex digest>, e.g. sha256:...). Nothing unverified is"
            " installed.",
        ),
        (
            {"ofed_memlock_limit": "lots"},
            "node-01: ofed_memlock_limit must be unlimited or a size in KiB (found lots); ofed_memlock_users must be"
            " limits.conf domains without spaces (found ['*', 'root']); ofed_memlock_services must be unit names"
            " without .service (found ['containerd', 'crio']).",
        ),
        (
            {"ofed_ipoib_interfaces": [IB0, {**IB1, "mtu": 9000}]},
            "node-01: ofed_ipoib_interfaces entry"
            " {'name': 'ib1', 'address': '10.10.12.19', 'netmask': '24', 'mtu': 9000} is not valid: expected name"
            " (an interface name such as ib0), address (IPv4, e.g. 10.10.11.19), netmask (255.255.255.0 or 24),"
            " optional mode (datagram or connected) and optional mtu (576 to 4092 in datagram mode, up to 65520 in"
            " connected mode).",
        ),
        (
            {"ofed_ipoib_interfaces": [IB1, {**IB1, "address": "10.10.13.19"}]},
            "node-01: ofed_ipoib_interfaces names an interface twice: ['ib1', 'ib1']",
        ),
    ],
)
def test_a_wrong_setting_fails_with_its_own_message(changes, message):
    passed, fail_msg, _ = check(**changes)
    assert not passed
    assert fail_msg.startswith(message), fail_msg


def test_the_first_wrong_setting_is_the_one_named():
    # A stack the role does not know and broken IPoIB entries: the stack comes first, as its check always did.
    _, fail_msg, _ = check(__ofed_mode="rdma", ofed_ipoib_interfaces=["ib0"])
    assert "ofed_mode is rdma" in fail_msg and "ofed_ipoib_interfaces" not in fail_msg


def goes_into_the_stack(installed: str, mode: str = "inbox", dpkg: str = "", pending: bool = False, family="apt"):
    task = role_expressions.task("ofed", *STACK)
    variables = {
        **SETTINGS,
        "__ofed_mode": mode,
        "__ofed_pkg_family": family,
        "__ofed_openibd_pending": "/var/lib/nodeforge/pending-openibd-restart",
        "__ofed_installed": {"stack": installed},
        "__ofed_probe": {
            "paths": {"/var/lib/nodeforge/pending-openibd-restart": {"exists": pending}},
            "commands": {"inbox": {"stdout_lines": dpkg.splitlines()}},
        },
    }
    return Templar(loader=DataLoader(), variables=variables).template(trusted("{{ (" + task["when"] + ") | bool }}"))


CONVERGED = "rdma-core ii 44.0-2\nibverbs-utils ii 44.0-2\n"


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        # A converged inbox node (the lab's no-op run): nothing to install, replace or take up.
        ({"installed": "inbox", "dpkg": CONVERGED}, False),
        # A package removed by hand, or never installed.
        ({"installed": "inbox", "dpkg": "rdma-core ii 44.0-2\nibverbs-utils un \n"}, True),
        ({"installed": "none", "dpkg": "rdma-core un \n"}, True),
        # Another stack installed: leaving it (or keeping it when ofed_mode is unset) goes through stack.yml.
        ({"installed": "mlnx_ofed", "dpkg": CONVERGED}, True),
        ({"installed": "doca", "dpkg": CONVERGED}, True),
        # An openibd restart an earlier run owes.
        ({"installed": "inbox", "dpkg": CONVERGED, "pending": True}, True),
        # dnf installs through the package module on every run; DOCA and MLNX_OFED always ask their sources.
        ({"installed": "inbox", "dpkg": "", "family": "dnf"}, True),
        ({"installed": "doca", "mode": "doca"}, True),
        ({"installed": "mlnx_ofed", "mode": "mlnx_ofed"}, True),
    ],
)
def test_only_a_node_with_something_to_do_goes_into_the_stack(case, expected):
    assert goes_into_the_stack(**case) is expected


def test_the_memlock_handler_learns_the_services_whose_drop_in_changed():
    # The handler restarts these services: their names, not the regex's group reference, and only the drop-ins that
    # changed (not another file of the same directory).
    dropin = "nodeforge-memlock.conf"
    variables = {
        "__ofed_memlock_dropin": dropin,
        "__ofed_memlock_files": {
            "changed_paths": [
                f"/etc/systemd/system/containerd.service.d/{dropin}",
                "/etc/systemd/system/crio.service.d/other.conf",
                f"/etc/systemd/system/crio.service.d/{dropin}",
            ]
        },
    }
    templar = Templar(loader=DataLoader(), variables=variables)
    assert templar.template(ROLE_VARS["__ofed_memlock_changed_services"]) == ["containerd", "crio"]
