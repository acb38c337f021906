"""The lab: podman containers (Debian 12 + systemd) standing in for GPU nodes, reached with the podman connection."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from nodeforge import content
from nodeforge.runner import state_dir

IMAGE = os.environ.get("NODEFORGE_BASE_IMAGE", "localhost/nodeforge-debian12:latest")
LABEL = "org.nodeforge.lab"


class LabError(RuntimeError):
    pass


@dataclass
class Node:
    name: str
    state: str


def lab_dir(name: str) -> Path:
    return state_dir() / "lab" / name


def inventory_path(name: str) -> Path:
    return lab_dir(name) / "hosts.yml"


def podman_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("CONTAINERS_CONF", str(content.root() / "containers" / "containers.conf"))
    return env


def _podman(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    if not shutil.which("podman"):
        raise LabError("podman is not installed (apt-get install podman runc)")
    proc = subprocess.run(["podman", *args], capture_output=True, text=True, env=podman_env(), check=False)
    if check and proc.returncode != 0:
        raise LabError(f"podman {' '.join(args[:2])} failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def ensure_image() -> None:
    """Build the base image when missing or stale (the build script caches on its own checksum)."""
    script = content.root() / "base-image" / "build.sh"
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=podman_env(), check=False)
    if proc.returncode != 0:
        raise LabError(f"building the base image failed ({script}):\n{proc.stderr.strip()}")


def nodes(name: str) -> list[Node]:
    proc = _podman("ps", "-a", "--filter", f"label={LABEL}={name}", "--format", "json")
    data = json.loads(proc.stdout or "[]")
    return sorted((Node(c["Names"][0], c.get("State", "unknown")) for c in data), key=lambda n: n.name)


def _wait_booted(container: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        proc = _podman("exec", container, "systemctl", "is-system-running", check=False)
        state = proc.stdout.strip()
        if state in ("running", "degraded"):
            return
        time.sleep(0.5)
    raise LabError(f"lab node {container} did not finish booting within {timeout:.0f}s (systemd: {state or '?'})")


# What the lab's container nodes can do: Debian 12's own driver (branch 535, the only one bookworm ships); no
# kernel to build modules for (a container runs the host's kernel, whose headers are not packaged), so DKMS builds
# nothing and nvidia-peermem is persisted for the next boot but not required to be installed.
# NVIDIA's container toolkit repository cannot be reached from here: each node serves signed stand-in toolkit
# packages (fixture_repo/specs/nvidia_container_toolkit.yml, "nodeforge fixture stand-in" in their descriptions) on
# its own loopback, laid out like NVIDIA's repository, and the lab's manifest overrides point there.
LAB_REPO_PORT = 8083
LAB_REPO_ROOT = "/srv/nodeforge-lab-repo"
LAB_REPO_PATH = "stable/deb/amd64"
LAB_VARS = {
    "nvidia_driver_source": "distro",
    "nvidia_driver_branch": "535",
    "gpudirect_rdma_require_module": False,
    "ofed_mode": "inbox",
    "nodeforge_manifest_overrides": {
        "nvidia_container_toolkit": {
            "deb_url": f"http://127.0.0.1:{LAB_REPO_PORT}/stable/deb/$(ARCH)",
            "key_url": f"http://127.0.0.1:{LAB_REPO_PORT}/gpgkey",
        }
    },
}


def inventory(hosts: list[str]) -> dict:
    """The lab's inventory: its container nodes over the podman connection, profile lab, LAB_VARS."""
    return {
        "all": {
            "children": {
                "gpu_nodes": {
                    "hosts": {h: None for h in hosts},
                    "vars": {
                        "ansible_connection": "containers.podman.podman",
                        "ansible_python_interpreter": "/usr/bin/python3",
                        "nodeforge_profile": "lab",
                        **LAB_VARS,
                    },
                }
            }
        }
    }


def write_inventory(name: str, hosts: list[str]) -> Path:
    path = inventory_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    header = "# Written by `nodeforge lab up`: the lab's container nodes (podman connection, profile lab).\n"
    path.write_text(header + yaml.safe_dump(inventory(hosts), sort_keys=False))
    return path


def up(name: str, count: int) -> Path:
    if count < 1:
        raise LabError(f"--nodes must be at least 1 (got {count})")
    ensure_image()
    wanted = [f"nodeforge-{name}-{i}" for i in range(1, count + 1)]
    existing = {n.name: n for n in nodes(name)}
    for container in wanted:
        node = existing.get(container)
        if node is None:
            _podman(
                "run", "-d", "--name", container, "--hostname", container, "--label", f"{LABEL}={name}",
                "--systemd=always", "--tmpfs", "/tmp", IMAGE, "/sbin/init",
            )  # fmt: skip
        elif node.state != "running":
            _podman("start", container)
    for container in wanted:
        _wait_booted(container)
    repo = _toolkit_repo(name)
    for container in wanted:
        _serve_toolkit_repo(container, repo)
    # Nodes beyond --nodes are left running: `lab down` removes them; nothing is destroyed implicitly.
    return write_inventory(name, sorted(set(wanted) | set(existing)))


def _toolkit_repo(name: str) -> Path:
    """The stand-in toolkit repository, built once per lab (signed with the lab's own throwaway key)."""
    out = lab_dir(name) / "toolkit-repo"
    if not (out / "repo" / "InRelease").exists():
        builder = content.root() / "fixture_repo"
        argv = [sys.executable, str(builder / "fixture_repo.py"), "build", "--flat", "--out", str(out)]
        argv += ["--spec", str(builder / "specs" / "nvidia_container_toolkit.yml")]
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            detail = proc.stderr.strip() or proc.stdout.strip()
            raise LabError(f"building the lab's toolkit repository failed:\n{detail}")
    return out / "repo"


def _serve_toolkit_repo(container: str, repo: Path, timeout: float = 30.0) -> None:
    """Copy the repository into the node and serve it on the node's loopback (a transient systemd unit)."""
    unit = "nodeforge-lab-repo"
    if _podman("exec", container, "systemctl", "is-active", "--quiet", unit, check=False).returncode == 0:
        return
    target = f"{LAB_REPO_ROOT}/{LAB_REPO_PATH}"
    _podman("exec", container, "mkdir", "-p", target)
    _podman("cp", f"{repo}/.", f"{container}:{target}/")
    _podman("exec", container, "cp", f"{target}/fixture-archive-keyring.asc", f"{LAB_REPO_ROOT}/gpgkey")
    _podman(
        "exec", container, "systemd-run", f"--unit={unit}", "--description=nodeforge lab: stand-in toolkit repo",
        "/usr/bin/python3", "-m", "http.server", str(LAB_REPO_PORT), "--bind", "127.0.0.1",
        "--directory", LAB_REPO_ROOT,
    )  # fmt: skip
    probe = f"import urllib.request; urllib.request.urlopen('http://127.0.0.1:{LAB_REPO_PORT}/gpgkey', timeout=2)"
    deadline = time.monotonic() + timeout
    while _podman("exec", container, "python3", "-c", probe, check=False).returncode != 0:
        if time.monotonic() > deadline:
            raise LabError(f"the lab's toolkit repository did not answer on {container} within {timeout:.0f}s")
        time.sleep(0.5)


def down(name: str) -> list[str]:
    removed = [n.name for n in nodes(name)]
    if removed:
        _podman("rm", "-f", "-t", "2", *removed)
    shutil.rmtree(lab_dir(name), ignore_errors=True)
    return removed
