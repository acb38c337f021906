"""Verify the preflight role against the real container node.

The facts preflight sets are compared with what the node says through independent probes (os-release, uname,
lspci, df, /sys), and a second run with impossible expectations must fail with one message that names the host
and every unmet expectation. The playbook runs use molecule's own inventory, ansible.cfg and roles path (the
verifier inherits molecule's provisioner environment) and the ansible.posix.json callback, so results are parsed
rather than grepped.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

import pytest
import verify_lib

SCENARIO_DIR = Path(__file__).resolve().parent.parent
CONVERGE = SCENARIO_DIR / "converge.yml"
REPO_URL = "http://127.0.0.1:8080/dists/bookworm/Release"
# Port 9 (discard) has no listener in the container: connection refused.
DEAD_URL = "http://127.0.0.1:9/dists/bookworm/Release"
PREPARED_MARKER = "/run/nodeforge-preflight.prepared"
ASSERT_TASK = "Assert that every preflight expectation is met"
PROBE_TASK = "Read the node (kernel headers, Secure Boot, loaded modules, PCI devices, free space)"
SECURE_BOOT_EFIVAR = "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
RESULT_TASK = "Set the preflight result"
CONTAINER_TASK = "Report what preflight cannot tell about the node"


@cache
def run_preflight(extra_vars: str = "{}") -> verify_lib.PlaybookRun:
    """The converge playbook (the role) with extra vars as JSON (a string, so that runs are cached)."""
    return verify_lib.run_playbook(CONVERGE, json.loads(extra_vars))


@pytest.fixture
def hostname() -> str:
    return verify_lib.node_name()


def free_gib(node, path: str) -> float:
    """Free space as df reports it (POSIX format, 1 KiB blocks), in GiB."""
    return int(node.check_output("df -P -k %s", path).splitlines()[-1].split()[3]) / 1048576


@pytest.fixture(scope="module")
def free_around_the_run(node) -> dict[str, tuple[float, float]]:
    """df of / and /var read just before and just after the first preflight run. Other scenarios write to the same
    disk in parallel, so free space is compared with the readings that bracket the role's own, not with a later one."""
    paths = ("/", "/var")
    before = {path: free_gib(node, path) for path in paths}
    run_preflight()
    return {path: (before[path], free_gib(node, path)) for path in paths}


@pytest.fixture
def result(hostname, free_around_the_run) -> dict:
    run = run_preflight()
    assert run.rc == 0, f"preflight failed on the lab node: {run.failed}"
    return run.host_result(RESULT_TASK)["ansible_facts"]["preflight_result"]


def test_os_and_kernel_facts_match_the_node(node, result):
    os_release = dict(
        line.split("=", 1) for line in node.file("/etc/os-release").content_string.splitlines() if "=" in line
    )
    assert result["os_id"] == os_release["ID"] + os_release["VERSION_ID"].strip('"')
    assert result["os_id"] == "debian12"
    assert result["os_supported"] is True
    kernel = node.check_output("uname -r")
    assert result["kernel"] == kernel
    assert result["kernel_headers_package"] == f"linux-headers-{kernel}"
    policy = node.check_output(
        "apt-cache -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache= policy %s", f"linux-headers-{kernel}"
    )
    has_candidate = "Candidate:" in policy and "Candidate: (none)" not in policy
    assert result["kernel_headers_installable"] is has_candidate


def test_container_is_recorded_and_host_state_is_not_enforced(node, result, hostname):
    assert node.file("/run/.containerenv").exists
    assert result["in_container"] is True
    assert result["pci_enforced"] is False
    # Nothing is skipped silently: the run says what it did not enforce, and why.
    message = " ".join(run_preflight().host_result(CONTAINER_TASK)["msg"])
    assert f"{hostname} is a container" in message
    assert "Recorded, not enforced: kernel headers" in message
    assert "not enforced against the profile" in message


def secure_boot_on(node, in_container: bool) -> str:
    """Secure Boot as the node itself says it: mokutil's answer, else the EFI variable's data byte (read here with
    Python, after its 4 attribute bytes), else disabled on a machine that did not boot through UEFI, else unknown (a
    container, whose runtime hides /sys/firmware: the host's firmware is not the container's to read)."""
    if node.exists("mokutil"):
        found = re.search(r"SecureBoot (enabled|disabled)", node.run("mokutil --sb-state").stdout)
        if found:
            return found.group(1)
    if node.file(SECURE_BOOT_EFIVAR).exists:
        data = node.check_output(
            "python3 -c 'import sys; print(open(sys.argv[1], \"rb\").read()[4])' %s", SECURE_BOOT_EFIVAR
        )
        return "enabled" if data == "1" else "disabled"
    if not node.file("/sys/firmware/efi").exists and not in_container:
        return "disabled"
    return "unknown"


def test_secure_boot_selinux_and_nouveau_match_the_node(node, result):
    assert result["secure_boot"] == secure_boot_on(node, node.file("/run/.containerenv").exists)
    selinux_enforce = node.file("/sys/fs/selinux/enforce")
    expected_selinux = (
        ("enforcing" if selinux_enforce.content_string.strip() == "1" else "permissive")
        if selinux_enforce.exists
        else "disabled"
    )
    assert result["selinux_mode"] == expected_selinux
    modules = node.file("/proc/modules")
    loaded = node.file("/sys/module/nouveau").exists or (
        modules.exists and any(line.startswith("nouveau ") for line in modules.content_string.splitlines())
    )
    assert result["nouveau_loaded"] is loaded


def lspci(node) -> list[tuple[str, str, str]]:
    """lspci -Dn, an independent reading of the bus the node sees: (address, vendor:device, class without prog-if)."""
    # "DOMAIN:BUS:DEV.FN CLASS: VENDOR:DEVICE [(rev NN)] [(prog-if NN)]"
    lines = [line.split() for line in node.check_output("lspci -Dn").splitlines() if line.strip()]
    return [(f[0], f[2], f[1].rstrip(":")) for f in lines]


def test_pci_counts_match_lspci(node, result):
    devices = lspci(node)
    gpus = [pci_id for _, pci_id, cls in devices if pci_id.startswith("10de:") and cls in ("0300", "0302")]
    mellanox = [pci_id for _, pci_id, cls in devices if pci_id.startswith("15b3:") and cls.startswith("02")]
    # On a node without GPUs or HCAs both sides say 0: what the role counted from is compared too, device by device.
    assert result["nvidia_gpus"] == len(gpus)
    assert sorted(result["nvidia_gpu_pci_ids"]) == sorted(gpus)
    assert result["mellanox_hcas"] == len(mellanox)
    probe = run_preflight().host_result(PROBE_TASK)["commands"]["pci"]["stdout_lines"]
    assert sorted(tuple(line.split()) for line in probe) == sorted(devices)


def test_the_profile_s_hcas_are_counted_by_their_pci_id(node, hostname):
    """A profile that names its HCAs by PCI ID (vSphere's PVRDMA: not Mellanox) counts the network functions with that
    ID: here the container's own network functions stand in for HCAs, so the count is not 0 on both sides."""
    network = [pci_id for _, pci_id, cls in lspci(node) if cls.startswith("02")]
    if not network:
        pytest.skip("lspci shows this container no network function to count")
    pci_id = network[0]
    seen = network.count(pci_id)
    extra = {
        "preflight_enforce_pci_in_containers": True,
        "nodeforge_profile_overrides": {"hcas": [{"name": "hca0", "pci_id": pci_id}], "expected": {"hcas": seen}},
    }
    run = run_preflight(json.dumps(extra))
    assert run.rc == 0, run.failed
    counted = run.host_result(RESULT_TASK)["ansible_facts"]["preflight_result"]
    assert (counted["profile_hcas"], counted["unmet"]) == (seen, [])
    extra["nodeforge_profile_overrides"]["expected"]["hcas"] = seen + 1
    run = run_preflight(json.dumps({**extra, "preflight_fail_on_error": False}))
    counted = run.host_result(RESULT_TASK)["ansible_facts"]["preflight_result"]
    unmet = f"expected at least {seen + 1} HCAs (profile lab: {pci_id}), found {seen} on the PCI bus"
    assert counted["unmet"] == [unmet]


def test_free_disk_matches_df(result, free_around_the_run):
    assert set(result["free_disk_gb"]) == {"/", "/var"}
    for path, free_gb in result["free_disk_gb"].items():
        low, high = sorted(free_around_the_run[path])
        # The role rounds to one decimal.
        assert low - 0.051 <= free_gb <= high + 0.051, f"{path}: role {free_gb} GiB, df {low:.2f}..{high:.2f} GiB"


def test_repository_is_reachable_and_all_expectations_met(node, result):
    # An independent fetch from the node: what preflight reported is what the node reaches.
    fetched = node.run("python3 -c 'import sys, urllib.request as u; u.urlopen(sys.argv[1], timeout=10)' %s", REPO_URL)
    assert result["repositories"] == {REPO_URL: fetched.rc == 0} == {REPO_URL: True}, fetched.stderr
    assert result["unmet"] == []
    assert result["passed"] is True


def test_impossible_expectations_fail_with_one_message_listing_each(hostname):
    extra = {
        "nodeforge_profile": "dgx-1",
        "nodeforge_os": "rhel9",
        "preflight_enforce_pci_in_containers": True,
        "preflight_repository_urls": [REPO_URL, DEAD_URL],
        "preflight_min_free_gb": {"/": 1000000, "/nonexistent": 1},
    }
    run = run_preflight(json.dumps(extra))
    assert run.rc == 2
    # Every problem surfaces in the one final assert, not in the probes.
    assert run.failed == [f"preflight : {ASSERT_TASK}"]
    msg = run.host_result(ASSERT_TASK)["msg"]
    assert isinstance(msg, list)
    assert msg[0] == f"preflight failed on {hostname}: 6 unmet expectation(s)"
    lines = msg[1:]
    assert all(line.startswith(f"{hostname}: ") for line in lines)
    expected = [
        "nodeforge_os is rhel9 in the inventory, but the node runs debian12",
        "expected exactly 8 NVIDIA GPUs (profile dgx-1), found 0 on the PCI bus",
        "expected at least 4 HCAs (profile dgx-1: 15b3:1013), found 0 on the PCI bus",
        "free space on / is ",
        "path /nonexistent does not exist",
        f"repository {DEAD_URL} is unreachable from the node",
    ]
    assert len(lines) == len(expected)
    for line, fragment in zip(lines, expected, strict=True):
        assert line.startswith(f"{hostname}: {fragment}")
    assert "expected at least 1000000 GiB" in lines[3]
    assert not any(REPO_URL in line for line in lines)


def test_fail_on_error_false_only_reports(hostname):
    extra = {
        "nodeforge_profile": "dgx-1",
        "preflight_enforce_pci_in_containers": True,
        "preflight_fail_on_error": False,
    }
    run = run_preflight(json.dumps(extra))
    assert run.rc == 0
    res = run.host_result(RESULT_TASK)["ansible_facts"]["preflight_result"]
    assert res["passed"] is False
    assert res["unmet"] == [
        "expected exactly 8 NVIDIA GPUs (profile dgx-1), found 0 on the PCI bus",
        "expected at least 4 HCAs (profile dgx-1: 15b3:1013), found 0 on the PCI bus",
    ]
    # The assert passes; its message is the warning.
    warning = run.host_result(ASSERT_TASK)["msg"]
    assert warning[0] == f"preflight on {hostname}: 2 unmet expectation(s), not failing"


# Last in the file: it also covers the playbook runs above.
def test_preflight_wrote_nothing_to_the_node(node):
    assert node.file(PREPARED_MARKER).exists
    assert not node.file("/var/lib/nodeforge").exists
    # Everything on the root filesystem newer than the end of prepare, except Ansible's own remote temp dir.
    # /run, /tmp, /proc, /sys and the journal are other filesystems (-xdev); the /tmp and /run mount points themselves
    # are listed (sshd and logind write under /run at each SSH login).
    newer = node.check_output(
        "find / -xdev -newer %s -not -path /tmp -not -path /run"
        " -not -path '/root/.ansible' -not -path '/root/.ansible/*' -print",
        PREPARED_MARKER,
    )
    assert newer == ""
