"""The test harness's package cache: our own apt-cacher-ng instance on port 3142 of this machine.

The base image's apt hook (lab/base-image/apt-proxy-detect) sends Debian's archives through port 3142 of the node's
default gateway when something answers there: the podman bridge's gateway for containers, loopback for QEMU
user-networking guests (10.0.2.2). This instance listens on exactly those two addresses, never on every interface,
with its own configuration, and keeps its cache in a machine-level directory shared by every clone and every run
(like podman's images), so that each Debian package is downloaded once per machine, not once per scenario.

    python tools/apt_cache.py start [--owner PID]   start ours, or reuse the one of ours that runs; prints its state
    python tools/apt_cache.py stop [--owner PID]    stop it (with --owner: once no other owner is alive)
    python tools/apt_cache.py status                 exit 0 when ours runs

Owners (the pytest sessions that use it) are registered by pid: concurrent sessions share one instance, and the last
one to finish stops it. NODEFORGE_APT_CACHE_DIR moves the directory (default /var/cache/nodeforge/apt as root,
~/.cache/nodeforge/apt otherwise). apt-cacher-ng comes from Debian (tools/setup.sh installs it, with the system
service it ships disabled).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

PORT = 3142
BINARY = "apt-cacher-ng"
SUPPORT_DIR = Path("/usr/lib/apt-cacher-ng")
REPO = Path(__file__).resolve().parent.parent
BASE_IMAGE = "localhost/nodeforge-debian12:latest"


def default_root() -> Path:
    if env := os.environ.get("NODEFORGE_APT_CACHE_DIR"):
        return Path(env)
    if os.geteuid() == 0:
        return Path("/var/cache/nodeforge/apt")
    return Path.home() / ".cache" / "nodeforge" / "apt"


class AptCacheError(RuntimeError):
    pass


@dataclass(frozen=True)
class Layout:
    root: Path

    @property
    def cache(self) -> Path:
        return self.root / "cache"

    @property
    def logs(self) -> Path:
        return self.root / "log"

    @property
    def conf(self) -> Path:
        return self.root / "conf"

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def pidfile(self) -> Path:
        return self.run / "acng.pid"

    @property
    def owners(self) -> Path:
        return self.run / "owners"

    @property
    def transfer_log(self) -> Path:
        """One line per request: time|I (in from upstream) or O (out to a client)|bytes|client|path."""
        return self.logs / "apt-cacher.log"


def _podman_env() -> dict[str, str]:
    conf = os.environ.get("CONTAINERS_CONF", str(REPO / "containers" / "containers.conf"))
    return {**os.environ, "CONTAINERS_CONF": conf}


def podman_gateway() -> str | None:
    """The gateway address of podman's default network (10.88.0.1 unless configured otherwise), or None."""
    if not shutil.which("podman"):
        return None
    proc = subprocess.run(
        ["podman", "network", "inspect", "podman"], capture_output=True, text=True, env=_podman_env(), check=False
    )
    if proc.returncode != 0:
        return None
    for network in json.loads(proc.stdout or "[]"):
        # podman 4 (Debian 12) reports subnets; CNI-era output nests them in plugins.
        for subnet in network.get("subnets") or []:
            if subnet.get("gateway"):
                return subnet["gateway"]
        for plugin in network.get("plugins") or []:
            for ranges in (plugin.get("ipam") or {}).get("ranges") or []:
                for item in ranges:
                    if item.get("gateway"):
                        return item["gateway"]
    return None


def host_has_address(address: str) -> bool:
    try:
        with socket.socket(socket.AF_INET) as probe:
            probe.bind((address, 0))
    except OSError:
        return False
    return True


def ensure_bridge(gateway: str) -> bool:
    """podman creates its bridge (and the gateway address) at the first container start, not before: on a fresh
    machine start one trivial container on the default network, once. True when the address is on the host."""
    if host_has_address(gateway):
        return True
    image = os.environ.get("NODEFORGE_BASE_IMAGE", BASE_IMAGE)
    exists = subprocess.run(["podman", "image", "exists", image], env=_podman_env(), check=False)
    if exists.returncode != 0:
        return False
    subprocess.run(
        ["podman", "run", "--rm", "--network", "podman", "--entrypoint", "/bin/true", image],
        capture_output=True,
        env=_podman_env(),
        check=False,
    )
    return host_has_address(gateway)


def bind_addresses() -> list[str]:
    addresses = ["127.0.0.1"]
    gateway = podman_gateway()
    if gateway and ipaddress.ip_address(gateway).version == 4 and ensure_bridge(gateway):
        addresses.append(gateway)
    return addresses


def render_config(layout: Layout, addresses: list[str]) -> str:
    return (
        "# Written by nodeforge tools/apt_cache.py at each start; edits are lost.\n"
        f"CacheDir: {layout.cache}\n"
        f"LogDir: {layout.logs}\n"
        f"SupportDir: {SUPPORT_DIR}\n"
        f"Port: {PORT}\n"
        f"BindAddress: {' '.join(addresses)}\n"
        f"PidFile: {layout.pidfile}\n"
        f"SocketPath: {layout.run / 'acng.socket'}\n"
        "Remap-debrep: file:deb_mirror*.gz /debian ; file:backends_debian\n"
        "Remap-secdeb: security.debian.org security.debian.org/debian-security deb.debian.org/debian-security"
        " /debian-security ; deb.debian.org/debian-security security.debian.org\n"
        "ExThreshold: 4\n"
        # The transfer log is written as requests finish (tests read it) and the report page answers /acng-report.html
        # (a cheap readiness probe).
        "UnbufferLogs: 1\n"
        "ReportPage: acng-report.html\n"
    )


def write_config(layout: Layout, addresses: list[str]) -> None:
    for path in (layout.cache, layout.logs, layout.conf, layout.run, layout.owners):
        path.mkdir(parents=True, exist_ok=True)
    # Only what the nodes fetch through it (the apt hook sends deb.debian.org and security.debian.org): the Debian
    # archive and its security archive, each under one cache key whatever mirror name a node uses.
    (layout.conf / "backends_debian").write_text("http://deb.debian.org/debian/\n")
    (layout.conf / "acng.conf").write_text(render_config(layout, addresses))


def current_config(layout: Layout) -> str:
    try:
        return (layout.conf / "acng.conf").read_text()
    except OSError:
        return ""


def running_pid(layout: Layout) -> int | None:
    """The pid of our instance (the pidfile's process, an apt-cacher-ng reading our configuration), or None."""
    try:
        pid = int(layout.pidfile.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return None
    if Path(cmdline[0].decode()).name != BINARY or str(layout.conf).encode() not in cmdline:
        return None
    return pid


def bound_addresses(layout: Layout) -> list[str]:
    for line in current_config(layout).splitlines():
        if line.startswith("BindAddress:"):
            return line.split(":", 1)[1].split()
    return []


def answers(address: str = "127.0.0.1", timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((address, PORT), timeout=timeout):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def _locked(layout: Layout):
    layout.run.mkdir(parents=True, exist_ok=True)
    with open(layout.run / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _live_owners(layout: Layout) -> list[int]:
    owners = []
    for entry in layout.owners.glob("*") if layout.owners.is_dir() else []:
        if entry.name.isdigit() and _alive(int(entry.name)):
            owners.append(int(entry.name))
        else:
            entry.unlink(missing_ok=True)
    return owners


def _terminate(layout: Layout, pid: int) -> None:
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)
    layout.pidfile.unlink(missing_ok=True)


def start(layout: Layout | None = None, owner: int | None = None) -> dict:
    """Start our instance or reuse the running one; returns its state. Raises AptCacheError when it cannot run."""
    layout = layout or Layout(default_root())
    binary = shutil.which(BINARY) or (f"/usr/sbin/{BINARY}" if Path(f"/usr/sbin/{BINARY}").exists() else None)
    if not binary:
        raise AptCacheError(f"{BINARY} is not installed (tools/setup.sh installs it)")
    with _locked(layout):
        addresses = bind_addresses()
        pid = running_pid(layout)
        reused = pid is not None
        bound = bound_addresses(layout)
        # Restarted when started before podman's bridge existed (bind late, to the gateway too), or by an older
        # nodeforge with another configuration.
        if pid is not None and (set(addresses) - set(bound) or current_config(layout) != render_config(layout, bound)):
            _terminate(layout, pid)
            pid, reused = None, False
        if pid is None:
            if answers():
                raise AptCacheError(
                    f"port {PORT} on 127.0.0.1 is taken by something that is not ours (a system apt-cacher-ng? "
                    "tools/setup.sh disables it): not starting"
                )
            write_config(layout, addresses)
            proc = subprocess.run(
                [binary, "-c", str(layout.conf), "ForeGround=0"], capture_output=True, text=True, check=False
            )
            deadline = time.monotonic() + 10
            while not (answers() and running_pid(layout)) and time.monotonic() < deadline:
                time.sleep(0.1)
            pid = running_pid(layout)
            if pid is None:
                detail = (proc.stderr or proc.stdout).strip()
                raise AptCacheError(f"{BINARY} did not start (rc={proc.returncode}): {detail}")
        if owner is not None:
            layout.owners.mkdir(parents=True, exist_ok=True)
            (layout.owners / str(owner)).touch()
        addresses = bound_addresses(layout)
        return {"pid": pid, "reused": reused, "addresses": addresses, "port": PORT, "root": str(layout.root)}


def stop(layout: Layout | None = None, owner: int | None = None) -> bool:
    """Stop our instance; with owner, only once no other registered owner is alive. True when it was stopped."""
    layout = layout or Layout(default_root())
    with _locked(layout):
        if owner is not None:
            (layout.owners / str(owner)).unlink(missing_ok=True)
            if _live_owners(layout):
                return False
        pid = running_pid(layout)
        if pid is None:
            return False
        _terminate(layout, pid)
        return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["start", "stop", "status"])
    parser.add_argument("--owner", type=int, help="pid of the process that uses it (shared start/stop)")
    parser.add_argument("--dir", type=Path, help="default: $NODEFORGE_APT_CACHE_DIR, else /var/cache/nodeforge/apt")
    args = parser.parse_args(argv)
    layout = Layout(args.dir or default_root())
    try:
        if args.action == "start":
            print(json.dumps(start(layout, owner=args.owner)))
        elif args.action == "stop":
            print("stopped" if stop(layout, owner=args.owner) else "not stopped (not running, or still in use)")
        else:
            pid = running_pid(layout)
            print(json.dumps({"pid": pid, "addresses": bound_addresses(layout) if pid else []}))
            return 0 if pid else 1
    except AptCacheError as err:
        print(f"apt cache: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
