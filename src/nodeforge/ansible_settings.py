"""The Ansible settings nodeforge ships for every run: what a fleet of SSH-reached nodes needs, in one place.

docs/ansible-settings.md explains each one and the measurements behind it. Every setting is a default: a variable
already in the caller's environment wins (ANSIBLE_PIPELINING=False nodeforge provision ...), inventory variables
win over both as they always do in Ansible (ansible_ssh_pipelining, ansible_ssh_args, ...), and `--forks` wins
over the forks chosen from the inventory's size.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import ansible_mitogen

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
# Mitogen's linear strategy without its CPU pinning (src/nodeforge/strategy/nodeforge_linear.py).
STRATEGY = "nodeforge_linear"
STRATEGY_DIR = Path(__file__).resolve().parent / "strategy"
# ssh's ControlPath is a UNIX socket: 108 bytes, of which %C takes 40 and ssh's temporary suffix 17 more.
CONTROL_PATH_DIR_MAX = 48


@dataclass(frozen=True)
class Setting:
    name: str
    value: str
    why: str


def control_path_dir(state: Path) -> Path:
    """Where SSH master sockets live: under the state directory when its path is short enough for a socket."""
    preferred = state / "cp"
    if len(str(preferred)) <= CONTROL_PATH_DIR_MAX:
        return preferred
    digest = hashlib.sha256(str(state).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"nodeforge-cp-{os.getuid()}-{digest}"


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
            "the master sockets, private to this state directory",
        ),
        Setting("ANSIBLE_GATHERING", "smart", "a play gathers facts only for hosts whose cached facts expired"),
        Setting("ANSIBLE_CACHE_PLUGIN", "jsonfile", "facts kept between runs, one JSON file per host"),
        Setting("ANSIBLE_CACHE_PLUGIN_CONNECTION", str(state / "facts"), "the fact cache, under the state directory"),
        Setting("ANSIBLE_CACHE_PLUGIN_TIMEOUT", str(FACT_CACHE_TIMEOUT_S), "cached facts expire after 30 minutes"),
        Setting(
            "NODEFORGE_TEMPLATE_CACHE",
            str(state / "templates.marshal"),
            "nodeforge's strategies keep the Jinja templates a run compiled for the next runs, as Python keeps "
            "bytecode: a re-run compiles only templates no earlier run did (docs/ansible-settings.md)",
        ),
        Setting(
            "ANSIBLE_STRATEGY_PLUGINS",
            os.pathsep.join([str(STRATEGY_DIR), str(mitogen_strategy_dir())]),
            "nodeforge's strategy, then Mitogen's, from the mitogen package nodeforge depends on (a caller's own "
            "directories are kept, after them)",
        ),
        Setting(
            "ANSIBLE_STRATEGY",
            STRATEGY,
            "linear's order (one task at a time on every host, which the output, the failure report and the reboot "
            "batches rely on) over Mitogen's connections: one Python interpreter per node for the whole run instead "
            "of one per task; Mitogen's CPU pinning left off; skipped tasks, includes and actions that need no "
            "connection answered in the strategy's own process, without a forked worker; each node's interpreter "
            "started with ansible-core's run_command free of its one-second stall; measured in "
            "docs/ansible-settings.md",
        ),
    ]


def prepare_strategy_process() -> None:
    """What nodeforge's strategies (nodeforge_linear and the molecule harness's nodeforge_molecule) do in their process
    when Ansible loads them, before Mitogen's multiplexer forks from it: Mitogen's CPU pinning off, the collection's
    plugins loaded once, each node's interpreter started without run_command's one-second stall, and the facts,
    compiled templates and compiled module files each task would compute again kept (nodeforge/controller_caches.py).
    """
    from nodeforge import controller_caches, mitogen_node

    unpin_mitogen()
    share_ssh_masters_with_mitogen()
    preload_plugins()
    mitogen_node.install()
    controller_caches.install_fact_memo()
    controller_caches.install_template_cache(
        controller_caches.TemplateCache(store=controller_caches.template_store_from_environment())
    )
    controller_caches.install_module_scan_cache()
    controller_caches.install_collection_dirs_once()


def size_mitogen_muxes(hosts: int, environ: dict | None = None) -> None:
    """Mitogen starts one connection multiplexer per CPU at a run's first play, one after the other, each assigned a
    share of the hosts by their name's hash; with fewer hosts in the inventory than CPUs the others would only start
    and wait. MITOGEN_CPU_COUNT, Mitogen's own setting, becomes the smaller of the two, unless the caller set it
    (nodeforge's strategies call this with the inventory's host count, before the first play)."""
    environ = os.environ if environ is None else environ
    if "MITOGEN_CPU_COUNT" not in environ:
        environ["MITOGEN_CPU_COUNT"] = str(max(1, min(os.cpu_count() or 1, hosts)))


def mitogen_control_path(ssh_args: list[str], option: Callable[[str], object], host: str, port, user) -> list[str]:
    """The `-o ControlPath=...` that ansible-core's ssh connection adds to its ssh command when the args ask for a
    persistent master (ControlPersist) and name no socket, for Mitogen's ssh command: the same socket for the same
    host, port and user (the `control_path` option, ansible_control_path, when set; else ansible-core's hash), in
    the `control_path_dir` directory. [] when the args name a socket or want no master."""
    from ansible.plugins.connection.ssh import Connection as SshConnection

    persist, named = SshConnection._persistence_controls([arg.encode() for arg in ssh_args])
    if not persist or named:
        return []
    directory = os.path.expanduser(str(option("control_path_dir") or "~/.ansible/cp"))
    os.makedirs(directory, mode=0o700, exist_ok=True)
    path = option("control_path") or SshConnection._create_control_path(host, port, user)
    return ["-o", f"ControlPath={str(path) % {'directory': directory}}"]


def share_ssh_masters_with_mitogen() -> None:
    """Mitogen starts ssh with ANSIBLE_SSH_ARGS but, unlike ansible-core's ssh connection, adds no ControlPath, so
    its ControlMaster=auto and ControlPersist had no socket to share: every run paid a fresh SSH handshake to each
    node. Its ssh arguments get the socket ansible-core's ssh connection would use (mitogen_control_path), so that
    the master a run opens carries the next run's connection for ControlPersist's two minutes (nodeforge's
    strategies call this in their process, before Mitogen's multiplexer forks from it)."""
    import ansible_mitogen.transport_config as transport_config

    spec = transport_config.PlayContextSpec
    if getattr(spec.ssh_args, "nodeforge_control_path", False):
        return
    original = spec.ssh_args

    def ssh_args(self) -> list[str]:
        args = original(self)
        return args + mitogen_control_path(
            args, self._connection_option, self.remote_addr(), self.port(), self.remote_user()
        )

    ssh_args.nodeforge_control_path = True
    spec.ssh_args = ssh_args


def unpin_mitogen() -> None:
    """Switch off Mitogen's CPU pinning in this process, before its strategy starts: its policy object, looked up at
    each use, becomes the base policy, whose every step does nothing (nodeforge's strategies call this)."""
    import ansible_mitogen.affinity

    ansible_mitogen.affinity.policy = ansible_mitogen.affinity.Policy()


def preload_plugins(collections: tuple[str, ...] = ("nodeforge.gpu",)) -> None:
    """Import the plugins every task's worker would otherwise import again, once, in the strategy's process.

    Ansible forks a worker per task and host; a worker that templates a filter or runs an action plugin imports its
    file unless the process it forked from already had. Looking up one collection filter imports every filter file
    of that collection (ansible.plugins.loader.Jinja2Loader), so each `when:` or argument using one of ours paid for
    all of them, jsonschema included, and the first builtin filter or test a worker used built the table of all
    builtin ones. Called by nodeforge's strategies before the first task; forked workers inherit the result.
    """
    import importlib
    import pkgutil

    from ansible.plugins.loader import PluginLoader, action_loader, filter_loader, test_loader

    for loader in (filter_loader, test_loader):
        list(loader.all())  # the table of builtin filters and tests (Jinja2Loader._ensure_non_collection_wrappers)
    list(action_loader.all(class_only=True))
    for collection in collections:
        for kind, loader in (("filter", filter_loader), ("test", test_loader), ("action", action_loader)):
            try:
                package = importlib.import_module(f"ansible_collections.{collection}.plugins.{kind}")
            except ImportError:
                continue
            for module in pkgutil.iter_modules(package.__path__):
                # The file itself (a filter file holds several filters): PluginLoader's lookup, not Jinja2Loader's.
                PluginLoader.get_with_context(loader, f"{collection}.{module.name}", class_only=True)


def mitogen_strategy_dir() -> Path:
    """The directory of Mitogen's strategy plugins (mitogen_linear, ...), inside the installed ansible_mitogen."""
    return Path(ansible_mitogen.__file__).resolve().parent / "plugins" / "strategy"


def environment(state: Path, caller: Mapping[str, str] | None = None) -> dict[str, str]:
    """The settings as environment variables for ansible-playbook, without those the caller already set."""
    caller = os.environ if caller is None else caller
    ours = {s.name: s.value for s in settings(state)}
    chosen = {name: value for name, value in ours.items() if name not in caller}
    if "ANSIBLE_STRATEGY_PLUGINS" in caller:  # the caller's strategies and Mitogen's: either strategy name resolves
        chosen["ANSIBLE_STRATEGY_PLUGINS"] = os.pathsep.join(
            [ours["ANSIBLE_STRATEGY_PLUGINS"], caller["ANSIBLE_STRATEGY_PLUGINS"]]
        )
    if "ANSIBLE_SSH_CONTROL_PATH_DIR" in chosen:
        Path(chosen["ANSIBLE_SSH_CONTROL_PATH_DIR"]).mkdir(parents=True, exist_ok=True, mode=0o700)
    return chosen


def forks(caller: Mapping[str, str] | None = None) -> int | None:
    """The forks a run gets: at most 64 workers; None when ANSIBLE_FORKS is set. ansible-core starts
    min(forks, hosts in the play's batch) workers (TaskQueueManager.run), so a run over 16 nodes works on all 16 at
    once and a 1-node run starts one worker, without reading the inventory before ansible-playbook starts."""
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
