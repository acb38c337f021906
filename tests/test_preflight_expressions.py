"""preflight's parsing expressions, rendered straight from the role's task files with Ansible's own templar.

The molecule scenario cannot reach these branches (a container has no mokutil state, no nouveau, and its kernel is
the host's, whose headers no apt list carries), so the expressions are exercised here with the command output a
real node prints. A regex escaped for the wrong layer (as in the fix of b5d4f96) fails these tests.
"""

from __future__ import annotations

import base64
import os
import subprocess
from functools import partial

import pytest

from tests import role_expressions

task = partial(role_expressions.task, "preflight")
render = partial(role_expressions.render, "preflight")


@pytest.mark.parametrize(
    ("stdout", "expected"),
    [
        ("SecureBoot enabled\n", "enabled"),
        ("SecureBoot disabled\nPlatform is in Setup Mode\n", "disabled"),
    ],
)
def test_secure_boot_state_from_mokutil(stdout, expected):
    state = render(
        "main.yml", "Record the Secure Boot state", "__preflight_secure_boot", __preflight_mokutil={"stdout": stdout}
    )
    assert state == expected


def test_secure_boot_from_the_efi_variable_when_mokutil_says_nothing():
    state = render(
        "main.yml",
        "Record the Secure Boot state",
        "__preflight_secure_boot",
        __preflight_mokutil={"stdout": "EFI variables are not supported on this system\n"},
        __preflight_sb_byte={"stdout": "   1\n"},
    )
    assert state == "enabled"


@pytest.mark.parametrize(
    ("modules", "expected"),
    [
        ("nouveau 2875392 0 - Live 0x0000000000000000\nttm 98304 1 nouveau, Live 0x0\n", True),
        ("nvidia 56807424 0 - Live 0x0\nnouveau_fake_name 1 0 - Live 0x0\n", False),
    ],
)
def test_nouveau_loaded_from_proc_modules(modules, expected):
    loaded = render(
        "main.yml",
        "Record whether nouveau is loaded",
        "__preflight_nouveau_loaded",
        __preflight_proc_modules={"content": base64.b64encode(modules.encode()).decode()},
        __preflight_module_paths={"results": [{"stat": {"exists": True}}, {"stat": {"exists": False}}]},
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
    registered = {"__preflight_apt_policy": {"stdout": POLICY.format(installed=installed, candidate=candidate)}}
    name = "Record the kernel headers' apt state"
    found = render("setup-Debian.yml", name, "__preflight_kernel_headers_installable", **registered)
    assert str(found) == str(installable)
    assert render("setup-Debian.yml", name, "__preflight_kernel_headers_detail", **registered).startswith(detail)


@pytest.mark.parametrize("package", ["coreutils", "nodeforge-no-such-package"])
def test_kernel_headers_probe_on_this_debian_machine(package):
    """The probe's own script, run on this Debian machine: dpkg answers for an installed package (no apt-cache), apt
    for one that is not; the role's expressions read either answer as dpkg itself reports the package."""
    probe = task(
        "setup-Debian.yml", "Ask dpkg, then apt, whether the running kernel's headers are installed or available"
    )
    environment = {**os.environ, "LC_ALL": "C", "PACKAGE": package}
    run = subprocess.run(
        ["/bin/sh", "-c", probe["ansible.builtin.shell"]["cmd"]],
        capture_output=True,
        text=True,
        env=environment,
        check=True,
    )
    dpkg = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True)
    name = "Record the kernel headers' apt state"
    registered = {"__preflight_apt_policy": {"stdout": run.stdout}}
    detail = render("setup-Debian.yml", name, "__preflight_kernel_headers_detail", **registered)
    if dpkg.returncode == 0:
        assert "Candidate:" not in run.stdout  # dpkg answered; apt-cache did not run
        assert detail == f"installed {dpkg.stdout}"
    else:
        assert detail.startswith("no candidate in the apt lists")
    assert str(render("setup-Debian.yml", name, "__preflight_kernel_headers_installable", **registered)) == str(
        dpkg.returncode == 0
    )
