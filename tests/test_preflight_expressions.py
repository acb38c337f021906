"""preflight's parsing expressions, rendered straight from the role's task files with Ansible's own templar.

The molecule scenario cannot reach these branches (a container has no mokutil state, no nouveau, and its kernel is
the host's, whose headers no apt list carries), so the expressions are exercised here with the command output a
real node prints. A regex escaped for the wrong layer (as in the fix of b5d4f96) fails these tests.
"""

from __future__ import annotations

import os
import subprocess
from functools import partial

import pytest

from tests import role_expressions
from tests.conftest import REPO

task = partial(role_expressions.task, "preflight")
render = partial(role_expressions.render, "preflight")


ROLE_VARS = role_expressions.load(REPO / "roles" / "preflight" / "vars" / "main.yml")
EFIVAR = ROLE_VARS["__preflight_secure_boot_efivar"]
NODE = "Record the Secure Boot state and whether nouveau is loaded"


def probed(mokutil: str = "", byte: str = "", modules: str = "", exists: tuple[str, ...] = ()) -> dict:
    """What nodeforge.gpu.probe returns for preflight's reading of a node (the parts these expressions use)."""

    def command(stdout: str) -> dict:
        return {"rc": 0, "stdout": stdout, "stdout_lines": stdout.splitlines(), "stderr": "", "stderr_lines": []}

    paths = (EFIVAR, "/sys/firmware/efi", "/sys/module/nouveau")
    return {
        "commands": {"mokutil": command(mokutil), "secure_boot_byte": command(byte), "modules": command(modules)},
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
    state = render(
        "main.yml",
        NODE,
        "__preflight_secure_boot",
        __preflight_probe=probed(stdout, exists=(EFIVAR,)),
        nodeforge_in_container=False,
    )
    assert state == expected


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
    state = render(
        "main.yml",
        NODE,
        "__preflight_secure_boot",
        __preflight_probe=probed("EFI variables are not supported on this system", byte, exists=exists),
        nodeforge_in_container=in_container,
        __preflight_secure_boot_efivar=EFIVAR,
    )
    assert state == expected


@pytest.mark.parametrize(
    ("modules", "exists", "expected"),
    [
        ("nouveau 2875392 0 - Live 0x0000000000000000\nttm 98304 1 nouveau, Live 0x0", (), True),
        ("nvidia 56807424 0 - Live 0x0\nnouveau_fake_name 1 0 - Live 0x0", (), False),
        ("nvidia 56807424 0 - Live 0x0", ("/sys/module/nouveau",), True),  # built into the kernel
    ],
)
def test_nouveau_loaded_from_proc_modules(modules, exists, expected):
    loaded = render(
        "main.yml",
        NODE,
        "__preflight_nouveau_loaded",
        __preflight_probe=probed(modules=modules, exists=exists),
        nodeforge_in_container=False,
        __preflight_secure_boot_efivar=EFIVAR,
    )
    assert loaded is expected or str(loaded) == str(expected)


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
    registered = headers_answer(POLICY.format(installed=installed, candidate=candidate))
    name = "Record the kernel headers' apt state"
    found = render("setup-Debian.yml", name, "__preflight_kernel_headers_installable", **registered)
    assert str(found) == str(installable)
    assert render("setup-Debian.yml", name, "__preflight_kernel_headers_detail", **registered).startswith(detail)


def headers_answer(stdout: str) -> dict:
    """What setup-Debian.yml reads: the answer of main.yml's probe to its headers command."""
    return {"__preflight_probe": {"commands": {"headers": {"stdout": stdout}}}}


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
    for one that is not; the role's expressions read either answer as dpkg itself reports the package."""
    argv = render_vars_value(
        "__preflight_headers_argv", ansible_facts={"os_family": "Debian"}, __preflight_kernel_headers_package=package
    )
    run = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "LC_ALL": "C"}, check=True)
    dpkg = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True)
    name = "Record the kernel headers' apt state"
    registered = headers_answer(run.stdout)
    detail = render("setup-Debian.yml", name, "__preflight_kernel_headers_detail", **registered)
    if dpkg.returncode == 0:
        assert "Candidate:" not in run.stdout  # dpkg answered; apt-cache did not run
        assert detail == f"installed {dpkg.stdout}"
    else:
        assert detail.startswith("no candidate in the apt lists")
    assert str(render("setup-Debian.yml", name, "__preflight_kernel_headers_installable", **registered)) == str(
        dpkg.returncode == 0
    )
