"""Verify GPU Operator mode (nvidia_driver_source operator): the host is prepared for the driver container and has
no driver of its own.

Probes are the node's own: dpkg's database (no driver package, the headers installed), the modprobe.d file, the
toolkit's config.toml read as TOML, modules-load.d. The last test installs a host driver package behind the role's
back (a stand-in nvidia-kernel-dkms built on the node with dpkg-deb) and runs converge.yml again: the role refuses
the node, naming the package, and removes nothing. Commands run on the node as verify_lib.node_host reaches it.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest
import verify_lib

SCENARIO_DIR = Path(__file__).resolve().parent.parent
CONVERGE = SCENARIO_DIR / "converge.yml"
FACTS = "/root/nvidia_driver_facts.json"
TOOLKIT_PACKAGES = {
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
}


def installed(node) -> dict[str, str]:
    """Installed packages (held or not: ii, hi) and their versions, from dpkg's database."""
    out = node.check_output("dpkg-query -W -f '${Package} ${db:Status-Abbrev} ${Version}\\n'")
    return {p: v for p, status, v in (line.split() for line in out.splitlines()) if status[1:2] == "i"}


@pytest.fixture
def facts(node) -> dict:
    return json.loads(node.file(FACTS).content_string)


def test_no_driver_package_on_the_host(node):
    nvidia = {name for name in installed(node) if re.search(r"nvidia|cuda", name)}
    assert nvidia == TOOLKIT_PACKAGES, f"only the toolkit may be installed, found {sorted(nvidia)}"
    assert not node.file("/usr/bin/nvidia-smi").exists


def test_headers_of_the_target_kernel_are_installed(node):
    kernel = json.loads(node.file("/etc/ansible/facts.d/molecule.fact").content_string)["kernel"]
    assert f"linux-headers-{kernel}" in installed(node)
    assert node.file(f"/usr/src/linux-headers-{kernel}/Makefile").exists


def test_nouveau_is_blacklisted(node):
    lines = node.file("/etc/modprobe.d/nodeforge-nouveau-blacklist.conf").content_string.splitlines()
    assert "blacklist nouveau" in lines
    assert "options nouveau modeset=0" in lines


def test_toolkit_looks_for_the_driver_in_the_driver_container(node):
    config = tomllib.loads(node.file("/etc/nvidia-container-runtime/config.toml").content_string)
    assert config["nvidia-container-cli"]["root"] == "/run/nvidia/driver"
    # Nothing else of the packaged file changed: ldconfig and the runtimes are upstream's.
    assert config["nvidia-container-cli"]["ldconfig"] == "@/sbin/ldconfig"
    assert config["nvidia-container-runtime"]["runtimes"] == ["docker-runc", "runc", "crun"]


def test_peer_memory_and_gdrcopy_are_left_to_the_container(node):
    for module in ("nvidia-peermem", "nvidia_peermem", "nv_peer_mem"):
        assert not node.file(f"/etc/modules-load.d/{module}.conf").exists
    assert not {name for name in installed(node) if name.startswith(("gdrcopy", "gdrdrv", "libgdrapi"))}


def test_facts_say_the_driver_comes_from_the_container(facts):
    assert facts["source"] == "operator"
    assert facts["driver_container"] is True
    assert facts["installed"] is False
    assert facts["packages"] == []


def test_a_host_driver_next_to_the_container_is_refused_and_kept(node):
    build = "/root/standin-nvidia-kernel-dkms"
    node.check_output(f"mkdir -p {build}/DEBIAN")
    node.check_output(
        f"printf 'Package: nvidia-kernel-dkms\\nVersion: 535.216.01-1\\nArchitecture: amd64\\n"
        f"Maintainer: nodeforge <ci@nodeforge.invalid>\\nDescription: stand-in host driver\\n' > {build}/DEBIAN/control"
    )
    node.check_output(f"dpkg-deb --build {build} /root/standin.deb && dpkg -i /root/standin.deb")
    try:
        run = verify_lib.run_playbook(CONVERGE)
        assert run.rc != 0
        (refusal,) = run.results("Refuse a host driver next to the GPU Operator's driver container")
        message = " ".join(refusal["msg"].split())
        assert "host has NVIDIA driver packages installed: nvidia-kernel-dkms" in message, message
        assert "nodeforge removes nothing" in message
        # Nothing after the refusal ran, and the package is still there.
        assert not run.results("Install the kernel headers the driver container builds against")
        assert installed(node)["nvidia-kernel-dkms"] == "535.216.01-1"
    finally:
        node.run("dpkg --purge nvidia-kernel-dkms")
