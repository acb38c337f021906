"""The lab: podman containers (Debian 12 + systemd) standing in for GPU nodes, reached with the podman connection."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from nodeforge import content
from nodeforge.runner import RunOptions, run_playbook, state_dir

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
    script = content.root() / "lab" / "base-image" / "build.sh"
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


# The lab's settings live in one place, the sample inventory shipped as inventories/lab/hosts.yml: what the lab's
# container nodes can do (Debian 12's own driver, branch 535; no kernel to build modules for, so
# gpudirect_rdma_require_module false; Debian's RDMA stack) and where a toolkit mirror is served on each node's
# loopback. `lab up` writes that inventory with its own node names.
SAMPLE = ("inventories", "lab", "hosts.yml")
GROUP = "gpu_nodes"
MIRROR_SECTION = "nvidia_container_toolkit"
MIRROR_ARCH = "amd64"


def sample() -> dict:
    return yaml.safe_load(content.root().joinpath(*SAMPLE).read_text())


def _mirror_urls(group_vars: dict) -> dict[str, str]:
    return group_vars["nodeforge_manifest_overrides"][MIRROR_SECTION]


def inventory(hosts: list[str], mirror: bool = True, fingerprints: list[str] | None = None) -> dict:
    """The lab's inventory: the sample's group vars for these nodes, the mirror key's fingerprints pinned (the role
    refuses any other key, as it does for NVIDIA's); without a mirror, NVIDIA's own repository."""
    data = sample()
    group = data["all"]["children"][GROUP]
    group["hosts"] = {h: None for h in hosts}
    if mirror and fingerprints:
        _mirror_urls(group["vars"])["key_fingerprints"] = list(fingerprints)
    if not mirror:
        overrides = group["vars"]["nodeforge_manifest_overrides"]
        overrides.pop(MIRROR_SECTION)
        if not overrides:
            group["vars"].pop("nodeforge_manifest_overrides")
    return data


def write_inventory(name: str, hosts: list[str], mirror: bool = True, fingerprints: list[str] | None = None) -> Path:
    path = inventory_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    header = "# Written by `nodeforge lab up` from the sample inventories/lab/hosts.yml: the lab's container nodes.\n"
    path.write_text(header + yaml.safe_dump(inventory(hosts, mirror, fingerprints), sort_keys=False))
    return path


def mirror_fingerprints(mirror: Path) -> list[str]:
    """The primary-key fingerprints of the mirror's signing key (the file the inventory's key_url names)."""
    from nodeforge.collection import parsers

    key = mirror / urlsplit(_mirror_urls(sample()["all"]["children"][GROUP]["vars"])["key_url"]).path.lstrip("/")
    try:
        return parsers.openpgp_fingerprints(key.read_text())["primary"]
    except (ValueError, UnicodeDecodeError) as exc:
        raise LabError(f"--toolkit-mirror: {key} is not an armored OpenPGP public key: {exc}") from exc


def check_mirror(mirror: Path) -> None:
    """A toolkit mirror has NVIDIA's layout: the signing key and the flat repository the inventory's URLs name."""
    urls = _mirror_urls(sample()["all"]["children"][GROUP]["vars"])
    wanted = [
        urlsplit(urls["key_url"]).path,
        urlsplit(urls["deb_url"]).path.replace("$(ARCH)", MIRROR_ARCH) + "/InRelease",
    ]
    missing = [p.lstrip("/") for p in wanted if not (mirror / p.lstrip("/")).is_file()]
    if not mirror.is_dir() or missing:
        raise LabError(
            f"--toolkit-mirror {mirror}: expected a copy of NVIDIA's container toolkit repository in its own layout; "
            f"missing: {', '.join(missing) if mirror.is_dir() else 'the directory itself'}"
        )


def up(name: str, count: int, toolkit_mirror: Path | None = None) -> Path:
    if count < 1:
        raise LabError(f"--nodes must be at least 1 (got {count})")
    if toolkit_mirror is not None:
        toolkit_mirror = toolkit_mirror.resolve()
        check_mirror(toolkit_mirror)
        mirror_fingerprints(toolkit_mirror)  # a key that cannot be read stops here, before any container starts
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
    # Nodes beyond --nodes are left running: `lab down` removes them; nothing is destroyed implicitly.
    fingerprints = mirror_fingerprints(toolkit_mirror) if toolkit_mirror is not None else None
    path = write_inventory(name, sorted(set(wanted) | set(existing)), toolkit_mirror is not None, fingerprints)
    if toolkit_mirror is not None:
        _serve_mirror(path, toolkit_mirror)
    return path


def _serve_mirror(inventory_file: Path, mirror: Path) -> None:
    """lab/serve_toolkit_mirror.yml: copy the mirror to every node and serve it on the node's loopback."""
    opts = RunOptions(
        inventory=str(inventory_file),
        extravars={"lab_toolkit_mirror": str(mirror)},
        envvars={"CONTAINERS_CONF": podman_env()["CONTAINERS_CONF"]},
    )
    result = run_playbook(str(content.root() / "lab" / "serve_toolkit_mirror.yml"), opts)
    if result.rc != 0:
        detail = "; ".join(f"{f.host}: {f.task}: {f.message}" for f in result.failures) or result.error
        raise LabError(f"serving the toolkit mirror to the lab's nodes failed ({result.artifacts}): {detail}")


def down(name: str) -> list[str]:
    removed = [n.name for n in nodes(name)]
    if removed:
        _podman("rm", "-f", "-t", "2", *removed)
    shutil.rmtree(lab_dir(name), ignore_errors=True)
    return removed
