"""The Ansible settings nodeforge ships for every run: what a fleet of SSH-reached nodes needs, in one place.

docs/ansible-settings.md explains each one and the measurements behind it. Every setting is one of Ansible's own
configuration variables, and a default beneath the operator's own configuration: a variable already in the caller's
environment wins (ANSIBLE_PIPELINING=False nodeforge provision ...), then the ansible.cfg that ansible-playbook would
read from the caller's working directory (operator_config, in Ansible's order), then the shipped value; inventory
variables win over all of them as they always do in Ansible (ansible_ssh_pipelining, ansible_ssh_args, ...), and
`--forks` wins over the shipped cap. The strategy is Ansible's
own: nodeforge sets none, so a run uses `linear` unless the operator set ANSIBLE_STRATEGY (or ansible.cfg) themselves.
"""

from __future__ import annotations

import configparser
import contextlib
import os
import stat
from collections.abc import Iterable, Mapping
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
    # Where else Ansible reads it: the ansible.cfg (section, key) pairs and other environment variables, as
    # `ansible-config list` gives them (tests/test_ansible_settings.py compares): any of them set means the operator's.
    ini: tuple[tuple[str, str], ...] = ()
    aliases: tuple[str, ...] = ()

    def set_by(self, caller: Mapping[str, str], config_keys: Iterable[tuple[str, str]]) -> bool:
        """Whether the caller's environment or ansible.cfg sets it."""
        return any(name in caller for name in (self.name, *self.aliases)) or bool(set(self.ini) & set(config_keys))


def operator_config(environ: Mapping[str, str] | None = None, cwd: Path | None = None) -> Path | None:
    """The ansible.cfg ansible-playbook would read if the operator ran it here, in Ansible's documented order:
    ANSIBLE_CONFIG (a file, or a directory holding one), ansible.cfg in the working directory (not in a world-writable
    one, which Ansible ignores), ~/.ansible.cfg, /etc/ansible/ansible.cfg. The run hands it to ansible-playbook as
    ANSIBLE_CONFIG: ansible-playbook itself runs in the playbook's directory."""
    environ = os.environ if environ is None else environ
    cwd = Path.cwd() if cwd is None else cwd
    candidates = []
    named = environ.get("ANSIBLE_CONFIG")
    if named:
        named_path = Path(os.path.expanduser(named))
        candidates.append(named_path / "ansible.cfg" if named_path.is_dir() else named_path)
    with contextlib.suppress(OSError):
        if not cwd.stat().st_mode & stat.S_IWOTH:
            candidates.append(cwd / "ansible.cfg")
    candidates += [Path(os.path.expanduser("~/.ansible.cfg")), Path("/etc/ansible/ansible.cfg")]
    return next((path.absolute() for path in candidates if path.is_file()), None)


def read_config(path: Path | None) -> configparser.ConfigParser | None:
    """The ansible.cfg's sections and keys as Ansible's INI reader sees them (keys lower-case, no interpolation);
    None when there is none or it cannot be read (ansible-playbook then reports it, naming the file)."""
    if path is None:
        return None
    parser = configparser.ConfigParser(interpolation=None, inline_comment_prefixes=(";",))
    try:
        parser.read(path, encoding="utf-8")
    except (OSError, UnicodeError, configparser.Error):
        return None
    return parser


def config_keys(parser: configparser.ConfigParser | None) -> set[tuple[str, str]]:
    if parser is None:
        return set()
    return {(section, key) for section in parser.sections() for key in parser[section]}


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
            ini=(("defaults", "pipelining"), ("connection", "pipelining"), ("ssh_connection", "pipelining")),
            aliases=("ANSIBLE_SSH_PIPELINING",),
        ),
        Setting(
            "ANSIBLE_SSH_ARGS",
            f"-C -o ControlMaster=auto -o ControlPersist={CONTROL_PERSIST_S}s "
            f"-o ServerAliveInterval={SERVER_ALIVE_INTERVAL_S} -o ServerAliveCountMax={SERVER_ALIVE_COUNT_MAX}",
            "one SSH connection per node for the whole run (and the next run soon after), not one per task; one "
            "whose node stopped answering (a reboot) is dropped after 15 s",
            ini=(("ssh_connection", "ssh_args"),),
        ),
        Setting(
            "ANSIBLE_SSH_CONTROL_PATH_DIR",
            str(control_path_dir(state)),
            "the master sockets, in a directory this user owns (mode 0700, checked before every run)",
            ini=(("ssh_connection", "control_path_dir"),),
        ),
        Setting(
            "ANSIBLE_GATHERING",
            "smart",
            "a play gathers facts only for hosts whose cached facts expired",
            ini=(("defaults", "gathering"),),
        ),
        Setting(
            "ANSIBLE_CACHE_PLUGIN",
            "jsonfile",
            "facts kept between runs, one JSON file per host",
            ini=(("defaults", "fact_caching"),),
        ),
        Setting(
            "ANSIBLE_CACHE_PLUGIN_CONNECTION",
            str(state / "facts"),
            "the fact cache, under the state directory",
            ini=(("defaults", "fact_caching_connection"),),
        ),
        Setting(
            "ANSIBLE_CACHE_PLUGIN_TIMEOUT",
            str(FACT_CACHE_TIMEOUT_S),
            "cached facts expire after 30 minutes",
            ini=(("defaults", "fact_caching_timeout"),),
        ),
    ]


FORKS_INI = ("defaults", "forks")


def environment(
    state: Path, caller: Mapping[str, str] | None = None, config: configparser.ConfigParser | None = None
) -> dict[str, str]:
    """The settings as environment variables for ansible-playbook, without those the caller's environment or its
    ansible.cfg (`config`: read_config(operator_config())) already set. The control-socket directory (the shipped one,
    the caller's or the ansible.cfg's) is verified private (private_dir)."""
    caller = os.environ if caller is None else caller
    keys = config_keys(config)
    chosen = {s.name: s.value for s in settings(state) if not s.set_by(caller, keys)}
    sockets = (
        caller.get("ANSIBLE_SSH_CONTROL_PATH_DIR")
        or chosen.get("ANSIBLE_SSH_CONTROL_PATH_DIR")
        or (config.get("ssh_connection", "control_path_dir", fallback="") if config is not None else "")
    )
    if sockets:
        private_dir(Path(os.path.expanduser(sockets)))
    return chosen


def forks(caller: Mapping[str, str] | None = None, config: configparser.ConfigParser | None = None) -> int | None:
    """The forks a run gets: at most 64 workers; None when ANSIBLE_FORKS or the ansible.cfg's forks is set.
    ansible-core starts min(forks, hosts in the play's batch) workers, so a run over 16 nodes works on all 16 at once
    and a 1-node run starts one worker, without reading the inventory before ansible-playbook starts."""
    caller = os.environ if caller is None else caller
    if "ANSIBLE_FORKS" in caller or FORKS_INI in config_keys(config):
        return None
    return FORKS_MAX


def fact_cache(
    state: Path, caller: Mapping[str, str] | None = None, config: configparser.ConfigParser | None = None
) -> dict[str, str]:
    """ansible-runner's own fact cache options (it sets the cache variables itself, to a directory per run unless
    told otherwise): the plugin and the directory the run uses, the caller's environment's or ansible.cfg's when set."""
    caller = os.environ if caller is None else caller

    def chosen(name: str, key: str, default: str) -> str:
        if name in caller:
            return caller[name]
        return config.get("defaults", key, fallback=default) if config is not None else default

    plugin = chosen("ANSIBLE_CACHE_PLUGIN", "fact_caching", "jsonfile")
    if plugin != "jsonfile":
        return {"fact_cache_type": plugin}
    ours = next(s.value for s in settings(state) if s.name == "ANSIBLE_CACHE_PLUGIN_CONNECTION")
    connection = chosen("ANSIBLE_CACHE_PLUGIN_CONNECTION", "fact_caching_connection", ours)
    return {"fact_cache_type": plugin, "fact_cache": os.path.expanduser(connection)}
