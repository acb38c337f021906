"""The Ansible settings nodeforge ships for every run: what a fleet of SSH-reached nodes needs, in one place.

docs/ansible-settings.md explains each one and the measurements behind it. Every setting is one of Ansible's own
configuration variables, and a default: a variable already in the caller's environment wins
(ANSIBLE_PIPELINING=False nodeforge provision ...), inventory variables win over both as they always do in Ansible
(ansible_ssh_pipelining, ansible_ssh_args, ...), and `--forks` wins over the shipped cap. The strategy is Ansible's
own: nodeforge sets none, so a run uses `linear` unless the operator set ANSIBLE_STRATEGY (or ansible.cfg) themselves.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import click

# How long gathered facts stay valid in the cache. A re-provision within this time reuses them (no setup round
# trip per play); the reboot task clears a rebooted node's facts at once. Facts that a role reads and a node can
# change under it (kernel, distribution, virtualization) only change across a reboot or an OS upgrade.
FACT_CACHE_TIMEOUT_S = 1800
# How long an idle SSH master connection stays open: long enough to span the gaps between plays and between the
# `lab up` provision and an immediate re-run, short enough not to pile up connections to nodes left alone.
CONTROL_PERSIST_S = 120
# A master connection whose node stops answering (it rebooted, its link went down) gives up after this many seconds
# without a reply (ServerAliveInterval x ServerAliveCountMax) instead of holding every later command on it forever:
# the reboot module's boot-id checks go through the master, and a master opened just before the node went down hung
# them past any timeout (ConnectTimeout covers new connections only).
SERVER_ALIVE_INTERVAL_S = 5
SERVER_ALIVE_COUNT_MAX = 3
FORKS_MAX = 64  # each fork is a controller process and an SSH session
# ssh's ControlPath is a UNIX socket path of at most 107 bytes. Ansible names each socket <dir>/<10 hex digits>
# (a hash of host, port and user: the ssh connection's control_path option left unset) and ssh appends a
# 17-character temporary suffix while it sets a master up: 107 - 1 - 10 - 17 = 79 bytes for the directory.
CONTROL_PATH_DIR_MAX = 79


class UnsafeControlPathDir(click.ClickException):
    """The SSH control-socket directory is not this user's private directory: the CLI prints the message and exits
    before ansible-playbook starts."""


@dataclass(frozen=True)
class Setting:
    name: str
    value: str
    why: str


def _candidates(state: Path) -> list[Path]:
    """Where SSH master sockets may live, preferred first: under the state directory, else Ansible's own default
    (~/.ansible/cp). Both are inside directories the user owns; a shared temporary directory never is a candidate."""
    return [state / "cp", Path(os.path.expanduser("~/.ansible/cp"))]


def control_path_dir(state: Path) -> Path:
    """The directory of SSH master sockets: the first candidate whose path is short enough for a socket."""
    for candidate in _candidates(state):
        if len(str(candidate)) <= CONTROL_PATH_DIR_MAX:
            return candidate
    raise UnsafeControlPathDir(
        f"no directory for SSH control sockets: {state / 'cp'} and ~/.ansible/cp are longer than "
        f"{CONTROL_PATH_DIR_MAX} characters (a socket's path has a length limit); set NODEFORGE_STATE_DIR to a "
        "shorter directory, or ANSIBLE_SSH_CONTROL_PATH_DIR to a private one"
    )


def private_dir(path: Path) -> Path:
    """Create `path` (mode 0700) if missing, then verify that it is a real directory (not a symlink) owned by this
    user that nobody else may enter: a socket directory another user controls would let them answer for the nodes.
    Raises UnsafeControlPathDir naming what is wrong."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    info = path.lstat()
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise UnsafeControlPathDir(f"SSH control-socket directory {path}: not a directory (a symlink or a file)")
    if info.st_uid != os.getuid():
        raise UnsafeControlPathDir(
            f"SSH control-socket directory {path}: owned by uid {info.st_uid}, expected this user (uid {os.getuid()})"
        )
    if info.st_mode & 0o077:
        raise UnsafeControlPathDir(
            f"SSH control-socket directory {path}: mode {stat.S_IMODE(info.st_mode):04o}, expected 0700 (others "
            "could reach the sockets)"
        )
    return path


def settings(state: Path) -> list[Setting]:
    """The settings, with the paths under this state directory."""
    return [
        Setting(
            "ANSIBLE_PIPELINING",
            "True",
            "one SSH round trip per task: the module goes to the node's Python on stdin, no temporary files",
        ),
        Setting(
            "ANSIBLE_SSH_ARGS",
            f"-C -o ControlMaster=auto -o ControlPersist={CONTROL_PERSIST_S}s "
            f"-o ServerAliveInterval={SERVER_ALIVE_INTERVAL_S} -o ServerAliveCountMax={SERVER_ALIVE_COUNT_MAX}",
            "one SSH connection per node for the whole run (and the next run soon after), not one per task; one "
            "whose node stopped answering (a reboot) is dropped after 15 s",
        ),
        Setting(
            "ANSIBLE_SSH_CONTROL_PATH_DIR",
            str(control_path_dir(state)),
            "the master sockets, in a directory this user owns (mode 0700, checked before every run)",
        ),
        Setting("ANSIBLE_GATHERING", "smart", "a play gathers facts only for hosts whose cached facts expired"),
        Setting("ANSIBLE_CACHE_PLUGIN", "jsonfile", "facts kept between runs, one JSON file per host"),
        Setting("ANSIBLE_CACHE_PLUGIN_CONNECTION", str(state / "facts"), "the fact cache, under the state directory"),
        Setting("ANSIBLE_CACHE_PLUGIN_TIMEOUT", str(FACT_CACHE_TIMEOUT_S), "cached facts expire after 30 minutes"),
    ]


def environment(state: Path, caller: Mapping[str, str] | None = None) -> dict[str, str]:
    """The settings as environment variables for ansible-playbook, without those the caller already set. The
    control-socket directory (the shipped one or the caller's) is verified private (private_dir)."""
    caller = os.environ if caller is None else caller
    chosen = {s.name: s.value for s in settings(state) if s.name not in caller}
    sockets = caller.get("ANSIBLE_SSH_CONTROL_PATH_DIR") or chosen["ANSIBLE_SSH_CONTROL_PATH_DIR"]
    private_dir(Path(os.path.expanduser(sockets)))
    return chosen


def forks(caller: Mapping[str, str] | None = None) -> int | None:
    """The forks a run gets: at most 64 workers; None when ANSIBLE_FORKS is set. ansible-core starts
    min(forks, hosts in the play's batch) workers, so a run over 16 nodes works on all 16 at once and a 1-node run
    starts one worker, without reading the inventory before ansible-playbook starts."""
    caller = os.environ if caller is None else caller
    if "ANSIBLE_FORKS" in caller:
        return None
    return FORKS_MAX


def fact_cache(state: Path, caller: Mapping[str, str] | None = None) -> dict[str, str]:
    """ansible-runner's own fact cache options (it sets the cache variables itself, to a directory per run unless
    told otherwise): the plugin and the directory the run uses, the caller's when set."""
    caller = os.environ if caller is None else caller
    plugin = caller.get("ANSIBLE_CACHE_PLUGIN", "jsonfile")
    if plugin != "jsonfile":
        return {"fact_cache_type": plugin}
    ours = next(s.value for s in settings(state) if s.name == "ANSIBLE_CACHE_PLUGIN_CONNECTION")
    return {"fact_cache_type": plugin, "fact_cache": caller.get("ANSIBLE_CACHE_PLUGIN_CONNECTION", ours)}
