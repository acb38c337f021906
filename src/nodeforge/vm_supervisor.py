"""Runs one lab VM node's QEMU and starts it again when its guest reboots (`python -m nodeforge.vm_supervisor DIR`).

QEMU runs with -no-reboot, so a guest reboot ends the process; the kernel's last console line tells a reboot
("reboot: Restarting system") from a power-off, after which the node stays stopped. A fresh QEMU boots the guest
about twice as fast as a reset inside the same process does under software emulation (measured: 47 s against 84 s
to SSH for the same disk), and a node's reboot is what the VM tier waits for most.

DIR holds qemu.argv (the command line, JSON), console.log (the serial console, appended to across boots),
supervisor.pid and, for a node on a private link, link.sock: QEMU runs in DIR and binds that datagram socket, which
a QEMU that ended leaves behind and the supervisor removes before the next one starts. SIGTERM stops QEMU, then the
supervisor. Standard library only: it outlives the command that started it."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

RESTART_LINE = b"reboot: Restarting system"
PIDFILE = "supervisor.pid"  # in DIR, while the supervisor runs
LINK_SOCKET = "link.sock"  # in DIR: this node's end of its private link


def remove_stale_socket(here: Path) -> None:
    """The link socket of a QEMU that ended (binding it again fails while it exists); anything else of that name is
    left for QEMU to refuse."""
    path = here / LINK_SOCKET
    try:
        if stat.S_ISSOCK(path.lstat().st_mode):
            path.unlink()
    except FileNotFoundError:
        pass


def rebooted(console: Path, offset: int) -> bool:
    """Whether the guest asked for a restart since offset of its console log (a power-off or a crash did not)."""
    try:
        with console.open("rb") as log:
            log.seek(offset)
            return RESTART_LINE in log.read()
    except OSError:
        return False


def supervise(here: Path) -> int:
    argv = json.loads((here / "qemu.argv").read_text())
    console = here / "console.log"
    (here / PIDFILE).write_text(f"{os.getpid()}\n")
    state: dict[str, subprocess.Popen | bool | None] = {"proc": None, "stop": False}

    def stop(*_: object) -> None:
        state["stop"] = True
        proc = state["proc"]
        if isinstance(proc, subprocess.Popen) and proc.poll() is None:
            proc.terminate()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    code = 0
    try:
        # A SIGTERM between two QEMUs (a guest rebooting) ends the loop before the next one starts.
        while not state["stop"]:
            offset = console.stat().st_size if console.exists() else 0
            remove_stale_socket(here)
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, cwd=here)
            state["proc"] = proc
            if state["stop"]:  # a SIGTERM while QEMU was starting found no process to stop
                proc.terminate()
            code = proc.wait()
            if state["stop"] or code != 0 or not rebooted(console, offset):
                break
        return code
    finally:
        (here / PIDFILE).unlink(missing_ok=True)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m nodeforge.vm_supervisor NODE_DIR")
    sys.exit(supervise(Path(sys.argv[1])))
