"""The lab, end to end through the real CLI: two podman container nodes provisioned, summarised, removed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner

from nodeforge import lab
from nodeforge.cli import main
from tests.conftest import REPO

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("podman") is None, reason="podman is not installed (make setup installs it)"),
]


@pytest.fixture
def lab_name():
    name = f"pytest{os.getpid()}"
    yield name
    lab.down(name)


def test_lab_up_provision_down(lab_name, tmp_path):
    runner = CliRunner()
    # NVIDIA's toolkit repository is out of reach here: the signed stand-in, in NVIDIA's layout, as the mirror.
    mirror = tmp_path / "toolkit-mirror"
    subprocess.run([sys.executable, str(REPO / "tools" / "lab_toolkit_mirror.py"), str(mirror)], check=True)
    argv = ["lab", "up", "--nodes", "2", "--toolkit-mirror", str(mirror), "--provision", "--json", "--name", lab_name]
    up = runner.invoke(main, argv)
    assert up.exit_code == 0, up.output
    summary = json.loads(up.stdout)
    nodes = [f"nodeforge-{lab_name}-1", f"nodeforge-{lab_name}-2"]
    assert sorted(summary["hosts"]) == nodes
    for host in nodes:
        counts = summary["hosts"][host]
        assert counts["failed"] == 0 and counts["unreachable"] == 0
        assert counts["ok"] > 0
    assert summary["status"] == "successful"
    assert summary["failures"] == []

    for host in nodes:
        # The lab runs the driver roles: Debian's open 535 driver installed and held, nouveau blacklisted,
        # nvidia-peermem persisted for the next boot (never loaded in a container).
        held = lab._podman("exec", host, "apt-mark", "showheld").stdout.split()
        assert "nvidia-open-kernel-dkms" in held and "nvidia-smi" in held, held
        version = lab._podman("exec", host, "dpkg-query", "-W", "-f", "${Version}", "nvidia-open-kernel-dkms").stdout
        assert version.startswith("535."), version
        blacklist = lab._podman("exec", host, "cat", "/etc/modprobe.d/nodeforge-nouveau-blacklist.conf").stdout
        assert "blacklist nouveau" in blacklist and "options nouveau modeset=0" in blacklist
        loads = lab._podman("exec", host, "sh", "-c", "cat /etc/modules-load.d/*peermem*.conf").stdout
        assert "peermem" in loads
        # ofed_mode inbox: Debian's RDMA stack and perftest, and the memlock limits RDMA users need.
        for package in ("rdma-core", "ibverbs-utils", "infiniband-diags", "perftest"):
            state = lab._podman("exec", host, "dpkg-query", "-W", "-f", "${db:Status-Abbrev}", package).stdout
            assert state.startswith("ii"), (package, state)
        limits = lab._podman("exec", host, "cat", "/etc/security/limits.d/90-nodeforge-rdma.conf").stdout
        assert "* hard memlock unlimited" in limits, limits
        # nvidia_container_toolkit from the lab's stand-in repository: the manifest's version, held; containerd's
        # drop-in imported (containerd itself is not installed on the lab's nodes, which the role reports).
        held_toolkit = [p for p in held if "nvidia-container" in p]
        assert sorted(held_toolkit) == [
            "libnvidia-container-tools",
            "libnvidia-container1",
            "nvidia-container-toolkit",
            "nvidia-container-toolkit-base",
        ], held
        toolkit = lab._podman("exec", host, "dpkg-query", "-W", "-f", "${Version}", "nvidia-container-toolkit").stdout
        assert toolkit.startswith("1.20.0-"), toolkit
        dropin = lab._podman("exec", host, "cat", "/etc/containerd/conf.d/99-nvidia.toml").stdout
        assert 'BinaryName = "/usr/bin/nvidia-container-runtime"' in dropin
        config = lab._podman("exec", host, "cat", "/etc/containerd/config.toml").stdout
        assert '"/etc/containerd/conf.d/*.toml"' in config
        # The mirror is served by lab/serve_toolkit_mirror.yml's unit, enabled for the node's next start too.
        unit = lab._podman("exec", host, "systemctl", "is-enabled", "nodeforge-lab-repo.service", check=False)
        assert unit.stdout.strip() == "enabled", unit.stdout + unit.stderr
        # selinux_modules: the lab's Debian nodes have no SELinux policy store; the role says so and builds nothing.
        assert lab._podman("exec", host, "test", "-e", "/var/cache/nodeforge/selinux_modules", check=False).returncode

    status = runner.invoke(main, ["lab", "status", "--name", lab_name])
    assert status.exit_code == 0
    for host in nodes:
        assert f"{host}  running" in status.output

    again = runner.invoke(main, ["lab", "provision", "--json", "--name", lab_name])
    assert again.exit_code == 0, again.output
    assert all(c["changed"] == 0 for c in json.loads(again.stdout)["hosts"].values())

    down = runner.invoke(main, ["lab", "down", "--name", lab_name])
    assert down.exit_code == 0
    assert lab.nodes(lab_name) == []
    assert not lab.inventory_path(lab_name).exists()


def test_lab_provision_without_lab_says_so():
    result = CliRunner().invoke(main, ["lab", "provision", "--name", "never-started"])
    assert result.exit_code != 0
    assert "is not up" in result.output and "nodeforge lab up" in result.output
