"""preflight's parsing of what its probes read (filter nodeforge.gpu.preflight_probed, plugins/filter/preflight.py)
and the role's task that sets preflight_result from it, rendered straight from the role's task file with Ansible's own
templar.

The molecule scenario cannot reach these branches (a container has no mokutil state, no nouveau, and its kernel is
the host's, whose headers no apt list carries), so they are exercised here with the command output a real node
prints. A regex escaped for the wrong layer (as in the fix of b5d4f96) fails these tests.
"""

from __future__ import annotations

import os
import subprocess
from functools import partial

import pytest
import yaml

from nodeforge import collection
from tests import role_expressions
from tests.conftest import REPO

from ansible_collections.nodeforge.gpu.plugins.filter import preflight as preflight_filter  # isort: skip

assert collection.model

render = partial(role_expressions.render, "preflight")

ROLE = REPO / "roles" / "preflight"
ROLE_VARS = role_expressions.load(ROLE / "vars" / "main.yml")
EFIVAR = ROLE_VARS["__preflight_secure_boot_efivar"]
RESULT = "Set the preflight result"
NOTES = "Report what preflight cannot tell about the node"


def command(stdout: str, rc: int | None = 0, stderr: str = "") -> dict:
    """One command's answer as nodeforge.gpu.probe returns it."""
    return {
        "rc": rc,
        "stdout": stdout,
        "stdout_lines": stdout.splitlines(),
        "stderr": stderr,
        "stderr_lines": stderr.splitlines(),
        "skipped": rc is None,
    }


def probed(
    mokutil: str = "",
    byte: str = "",
    modules: str = "",
    exists: tuple[str, ...] = (),
    pci: str = "",
    df: str = "Avail File\n52428800 /\n10485760 /var",
    headers: str | None = None,
) -> dict:
    """What nodeforge.gpu.probe returns for preflight's reading of a node; headers None: the command did not run."""
    paths = (EFIVAR, "/sys/firmware/efi", "/sys/module/nouveau")
    return {
        "commands": {
            "mokutil": command(mokutil),
            "secure_boot_byte": command(byte),
            "modules": command(modules),
            "pci": command(pci),
            "df": command(df),
            "headers": command("", rc=None) if headers is None else command(headers),
        },
        "paths": {path: {"exists": path in exists} for path in paths},
    }


@pytest.mark.parametrize(
    ("stdout", "expected"),
    [
        ("SecureBoot enabled\n", "enabled"),
        ("SecureBoot disabled\nPlatform is in Setup Mode\n", "disabled"),
    ],
)
def test_secure_boot_state_from_mokutil(stdout, expected):
    assert preflight_filter.secure_boot(probed(stdout, exists=(EFIVAR,)), EFIVAR, in_container=False) == expected


@pytest.mark.parametrize(
    ("byte", "exists", "in_container", "expected"),
    [
        ("   1", (EFIVAR, "/sys/firmware/efi"), False, "enabled"),
        ("   0", (EFIVAR, "/sys/firmware/efi"), False, "disabled"),
        ("", ("/sys/firmware/efi",), False, "unknown"),  # UEFI without the variable: cannot tell
        ("", (), False, "disabled"),  # no UEFI boot (BIOS, a direct kernel boot): no Secure Boot
        ("", (), True, "unknown"),  # a container: runtimes hide /sys/firmware
    ],
)
def test_secure_boot_from_the_efi_variable_when_mokutil_says_nothing(byte, exists, in_container, expected):
    probe = probed("EFI variables are not supported on this system", byte, exists=exists)
    assert preflight_filter.secure_boot(probe, EFIVAR, in_container) == expected


@pytest.mark.parametrize(
    ("modules", "exists", "expected"),
    [
        ("nouveau 2875392 0 - Live 0x0000000000000000\nttm 98304 1 nouveau, Live 0x0", (), True),
        ("nvidia 56807424 0 - Live 0x0\nnouveau_fake_name 1 0 - Live 0x0", (), False),
        ("nvidia 56807424 0 - Live 0x0", ("/sys/module/nouveau",), True),  # built into the kernel
    ],
)
def test_nouveau_loaded_from_proc_modules(modules, exists, expected):
    assert preflight_filter.nouveau_loaded(probed(modules=modules, exists=exists)) is expected


# The probe's PCI lines: address, vendor:device, class (without the programming interface).
PCI = """0000:00:00.0 8086:1237 0600
0000:06:00.0 10de:1db1 0302
0000:07:00.0 10de:1db5 0302
0000:0a:00.0 10de:20b0 0300
0000:0b:00.0 10de:10f0 0403
0000:05:00.0 15b3:1013 0207
0000:05:00.1 15b3:1013 0207
0000:0c:00.0 15b3:a2d6 0108
0000:0d:00.0 15ad:0820 0200
0000:0e:00.0 8086:1572 0200"""


@pytest.mark.parametrize(
    ("hcas", "profile_hcas"),
    [
        ([{"pci_id": "15b3:1013"}, {"pci_id": "15b3:1013"}], 2),
        ([{"name": "pvrdma0", "pci_id": "15ad:0820"}], 1),  # a non-Mellanox HCA the profile names (vSphere PVRDMA)
        ([], 2),  # no PCI IDs named: the Mellanox network functions
        ([{"name": "mlx5_0"}, {"pci_id": ""}], 2),
    ],
)
def test_pci_devices_counted(hcas, profile_hcas):
    counted = preflight_filter.pci_devices(PCI.splitlines(), hcas)
    # NVIDIA display and 3D controllers only (not its audio function); Mellanox network functions only (not its DPU's
    # storage controller).
    assert counted == {
        "nvidia_gpu_pci_ids": ["10de:1db1", "10de:1db5", "10de:20b0"],
        "mellanox_hcas": 2,
        "profile_hcas": profile_hcas,
    }


def test_pci_devices_on_a_bus_without_any():
    assert preflight_filter.pci_devices([], []) == {"nvidia_gpu_pci_ids": [], "mellanox_hcas": 0, "profile_hcas": 0}


POLICY = """linux-headers-6.1.0-56-amd64:
  Installed: {installed}
  Candidate: {candidate}
  Version table:
     6.1.0-56 500
        500 http://deb.debian.org/debian-security bookworm-security/main amd64 Packages
"""


@pytest.mark.parametrize(
    ("installed", "candidate", "installable", "detail"),
    [
        ("(none)", "6.1.0-56", True, "candidate 6.1.0-56"),
        ("6.1.0-56", "6.1.0-56", True, "installed 6.1.0-56"),
        ("(none)", "(none)", False, "no candidate in the apt lists"),
    ],
)
def test_kernel_headers_from_apt_cache_policy(installed, candidate, installable, detail):
    probe = probed(headers=POLICY.format(installed=installed, candidate=candidate))
    found = preflight_filter.kernel_headers(probe, None, None)
    assert found["kernel_headers_installable"] is installable
    assert found["kernel_headers_detail"].startswith(detail)


@pytest.mark.parametrize(
    ("installed_rc", "available", "installable", "detail"),
    [
        (0, {"changed": False, "skipped": True}, True, "installed"),  # available is not asked then
        (1, {"rc": 0, "stderr": ""}, True, "available"),
        (1, {"rc": 1, "stderr": ""}, False, "not available from the enabled repositories: no matching packages"),
        (
            1,
            {"rc": 1, "stderr": "Error: No matching Packages to list\n"},
            False,
            "not available from the enabled repositories: Error: No matching Packages to list",
        ),
    ],
)
def test_kernel_headers_from_dnf(installed_rc, available, installable, detail):
    found = preflight_filter.kernel_headers(probed(), {"rc": installed_rc, "stdout": ""}, available)
    assert found == {"kernel_headers_installable": installable, "kernel_headers_detail": detail}


def test_kernel_headers_not_probed_without_a_headers_command():
    found = preflight_filter.kernel_headers(probed(headers=None), None, None)
    assert found == {"kernel_headers_installable": False, "kernel_headers_detail": "not probed"}


def test_headers_command_only_where_apt_answers():
    facts = {"os_family": "Debian"}
    argv = render_vars_value("__preflight_headers_argv", ansible_facts=facts, __preflight_kernel_headers_package="p")
    assert argv == ["sh", "-c", ROLE_VARS["__preflight_dpkg_headers_script"], "sh", "p"]
    assert (
        render_vars_value("__preflight_headers_argv", ansible_facts=facts, __preflight_kernel_headers_package="") == []
    )
    el = {"os_family": "RedHat"}
    assert render_vars_value("__preflight_headers_argv", ansible_facts=el, __preflight_kernel_headers_package="p") == []


def render_vars_value(name: str, **variables) -> object:
    """One value of the role's vars/main.yml, rendered as Ansible renders it with the given variables."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar

    return Templar(loader=DataLoader(), variables={**ROLE_VARS, **variables}).template(ROLE_VARS[name])


@pytest.mark.parametrize("package", ["coreutils", "nodeforge-no-such-package"])
def test_kernel_headers_probe_on_this_debian_machine(package):
    """The probe's own command, run on this Debian machine: dpkg answers for an installed package (no apt-cache), apt
    for one that is not; the filter reads either answer as dpkg itself reports the package."""
    argv = render_vars_value(
        "__preflight_headers_argv", ansible_facts={"os_family": "Debian"}, __preflight_kernel_headers_package=package
    )
    run = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "LC_ALL": "C"}, check=True)
    dpkg = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True)
    found = preflight_filter.kernel_headers(probed(headers=run.stdout.rstrip("\n")), None, None)
    if dpkg.returncode == 0:
        assert "Candidate:" not in run.stdout  # dpkg answered; apt-cache did not run
        assert found["kernel_headers_detail"] == f"installed {dpkg.stdout}"
    else:
        assert found["kernel_headers_detail"].startswith("no candidate in the apt lists")
    assert found["kernel_headers_installable"] is (dpkg.returncode == 0)


# The role's task "Set the preflight result", rendered whole: the filter's answer and the checks wired into one fact.

MANIFEST = yaml.safe_load((REPO / "roles" / "nodeforge" / "files" / "manifest.yml").read_text())
DEBIAN_FACTS = {
    "distribution": "Debian",
    "distribution_major_version": "12",
    "distribution_version": "12.8",
    "os_family": "Debian",
    "kernel": "6.1.0-56-amd64",
    "selinux": {"status": "disabled"},
}


def profile(name: str) -> dict:
    return yaml.safe_load((REPO / "roles" / "nodeforge" / "files" / "profiles" / f"{name}.yml").read_text())


def role_variables(**overrides) -> dict:
    """The role's defaults and vars (Debian's over main.yml's) with a Debian 12 node's facts, as the task sees them."""
    defaults = role_expressions.load(ROLE / "defaults" / "main.yml")
    return {
        **defaults,
        **ROLE_VARS,
        **role_expressions.load(ROLE / "vars" / "Debian.yml"),
        "inventory_hostname": "n1",
        "ansible_facts": DEBIAN_FACTS,
        "nodeforge_manifest": MANIFEST,
        "nodeforge_profile": "lab",
        "nodeforge_hw": profile("lab"),
        "nodeforge_os": "",
        "nodeforge_in_container": False,
        **overrides,
    }


def preflight_result(**overrides) -> dict:
    return render("main.yml", RESULT, "preflight_result", **role_variables(**overrides))


def test_preflight_result_of_a_node_that_meets_every_expectation():
    probe = probed(
        "SecureBoot disabled", exists=("/sys/firmware/efi",), headers=POLICY.format(installed="(none)", candidate="6.1")
    )
    repo = {"results": [{"item": "https://repo.example/", "status": 200}]}
    result = preflight_result(__preflight_probe=probe, __preflight_repo_probe=repo)
    assert result == {
        "os_id": "debian12",
        "os_supported": True,
        "kernel": "6.1.0-56-amd64",
        "kernel_headers_package": "linux-headers-6.1.0-56-amd64",
        "kernel_headers_installable": True,
        "kernel_headers_detail": "candidate 6.1",
        "secure_boot": "disabled",
        "selinux_mode": "disabled",
        "nouveau_loaded": False,
        "free_disk_gb": {"/": 50.0, "/var": 10.0},
        "nvidia_gpus": 0,
        "nvidia_gpu_pci_ids": [],
        "mellanox_hcas": 0,
        "profile_hcas": 0,
        "pci_enforced": True,
        "in_container": False,
        "repositories": {"https://repo.example/": True},
        "unmet": [],
        "passed": True,
    }
    assert tuple(result) == documented_keys()


@pytest.mark.parametrize(
    ("allow", "in_container", "unmet"),
    [(False, False, True), (True, False, False), ("yes", False, False), ("false", False, True), (False, True, False)],
)
def test_secure_boot_is_unmet_unless_allowed(allow, in_container, unmet):
    """Secure Boot enabled stops the node (the unsigned DKMS modules would not load), unless the inventory says a MOK
    key is enrolled (preflight_allow_secure_boot, read as Ansible reads a bool) or the node is a container."""
    probe = probed(
        "SecureBoot enabled",
        exists=(EFIVAR, "/sys/firmware/efi"),
        headers=POLICY.format(installed="(none)", candidate="6.1"),
    )
    result = preflight_result(
        __preflight_probe=probe,
        __preflight_repo_probe={"results": []},
        preflight_allow_secure_boot=allow,
        nodeforge_in_container=in_container,
    )
    said = [line for line in result["unmet"] if line.startswith("Secure Boot is enabled")]
    assert (bool(said), result["passed"]) == (unmet, not unmet), result["unmet"]


def documented_keys() -> tuple[str, ...]:
    """preflight_result's keys in the order the README documents them."""
    readme = (ROLE / "README.md").read_text().split("## Facts set", 1)[1].split("## Variables", 1)[0]
    rows = [line.split("|")[1].strip() for line in readme.splitlines() if line.startswith("| ") and "---" not in line]
    return tuple(rows[1:])


def test_preflight_result_lists_every_unmet_expectation():
    probe = probed(
        "SecureBoot enabled",
        modules="nouveau 2875392 0 - Live 0x0",
        exists=(EFIVAR, "/sys/firmware/efi"),
        pci=PCI,
        df="Avail File\n1048576 /",
        headers=POLICY.format(installed="(none)", candidate="(none)"),
    )
    repo = {"results": [{"item": "https://down.example/", "status": -1, "msg": "Request failed"}]}
    result = preflight_result(
        __preflight_probe=probe,
        __preflight_repo_probe=repo,
        nodeforge_profile="dgx-1",
        nodeforge_hw=profile("dgx-1"),
        nodeforge_os="rhel9",
        ansible_facts={**DEBIAN_FACTS, "distribution_major_version": "11", "distribution_version": "11.9"},
    )
    assert result["passed"] is False
    assert result["unmet"] == [
        "OS Debian 11.9 is not supported (supported: Debian 12/13, Ubuntu 22.04/24.04, RedHat 8/9, Rocky 8/9)",
        "nodeforge_os is rhel9 in the inventory, but the node runs debian11",
        "kernel headers for the running kernel 6.1.0-56-amd64 are not installable (linux-headers-6.1.0-56-amd64: "
        "no candidate in the apt lists: an unknown package, or stale lists (preflight does not run apt-get update)); "
        "DKMS cannot build the NVIDIA modules",
        "Secure Boot is enabled: the unsigned DKMS modules (nvidia, nvidia-peermem) will not load; enroll a MOK "
        "signing key and set preflight_allow_secure_boot",
        "the nouveau module is loaded: the NVIDIA driver cannot bind until nouveau is blacklisted and the node "
        "rebooted",
        "expected exactly 8 NVIDIA GPUs (profile dgx-1), found 3 on the PCI bus",
        "NVIDIA GPUs with PCI IDs 10de:20b0 are not in profile dgx-1 (10de:1db1, 10de:1db5)",
        "expected at least 4 HCAs (profile dgx-1: 15b3:1013), found 2 on the PCI bus",
        "free space on / is 1.0 GiB, expected at least 10 GiB",
        "path /var does not exist, so its free space (at least 10 GiB) cannot be checked",
        "repository https://down.example/ is unreachable from the node (status -1: Request failed)",
    ]
    assert (result["nvidia_gpus"], result["mellanox_hcas"], result["profile_hcas"]) == (3, 2, 2)


def test_a_container_records_the_host_state_without_enforcing_it():
    probe = probed("SecureBoot enabled", modules="nouveau 1 0 - Live 0x0", pci=PCI)
    result = preflight_result(
        __preflight_probe=probe, nodeforge_in_container=True, nodeforge_hw=profile("dgx-1"), nodeforge_profile="dgx-1"
    )
    assert (result["in_container"], result["pci_enforced"], result["secure_boot"]) == (True, False, "enabled")
    assert result["kernel_headers_detail"] == "not probed"
    assert result["repositories"] == {}
    assert result["unmet"] == [] and result["passed"] is True


ROCKY_FACTS = {**DEBIAN_FACTS, "distribution": "Rocky", "os_family": "RedHat", "distribution_major_version": "9"}


def test_el_reads_the_kernel_headers_from_dnf():
    result = preflight_result(
        __preflight_probe=probed(),
        __preflight_dnf_installed={"rc": 1, "stdout": ""},
        __preflight_dnf_available={"rc": 0, "stderr": ""},
        **role_expressions.load(ROLE / "vars" / "RedHat.yml"),
        ansible_facts=ROCKY_FACTS,
    )
    assert result["os_id"] == "rocky9" and result["os_supported"] is True
    assert result["kernel_headers_package"] == "kernel-devel-6.1.0-56-amd64"
    assert (result["kernel_headers_installable"], result["kernel_headers_detail"]) == (True, "available")


@pytest.mark.parametrize(
    ("in_container", "os_family", "package", "expected"),
    [
        (False, "Debian", "linux-headers-6.1.0-56-amd64", None),
        (True, "Debian", "linux-headers-6.1.0-56-amd64", ["n1 is a container: ", "PCI devices seen (the host's)"]),
        (False, "Suse", "", ["n1: no kernel headers probe for os_family Suse (Debian)"]),
        (True, "Suse", "", ["n1 is a container: ", "n1: no kernel headers probe"]),
    ],
)
def test_what_preflight_cannot_tell_is_reported(in_container, os_family, package, expected):
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar

    variables = role_variables(
        ansible_facts={**DEBIAN_FACTS, "os_family": os_family},
        __preflight_kernel_headers_package=package,
        nodeforge_in_container=in_container,
        __preflight_probe=probed(),
    )
    notes = role_expressions.task("preflight", "main.yml", NOTES)
    result = render("main.yml", RESULT, "preflight_result", **variables)
    variables = {**variables, **notes["vars"], "preflight_result": result}
    templar = Templar(loader=DataLoader(), variables=variables)
    assert templar.template(role_expressions.trusted("{{ " + notes["when"] + " }}")) is (expected is not None)
    if expected:
        msg = templar.template(notes["ansible.builtin.debug"]["msg"])
        assert len(msg) == (3 if in_container else 0) + (1 if not package else 0)
        assert msg[0].startswith(expected[0]) and msg[-1].startswith(expected[-1])
