"""Run a playbook through ansible-runner: live progress, clean cancel, per-host summary, artifacts.

The CLI never shells out to ansible-playbook; everything goes through `ansible_runner.run_async(quiet=True)`.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ansible_runner
import yaml

from nodeforge import ansible_settings, content

DEFAULT_KEEP_RUNS = int(os.environ.get("NODEFORGE_KEEP_RUNS", "10"))
# ansible-playbook's exit codes, which operators script against (docs/cli-reference.md, "Exit codes"): 1 an error
# (an inventory check refused), 2 a host failed, 3 a host unreachable, 4 input that cannot be parsed, 5 bad or
# missing options, 99 interrupted, 250 unexpected.
EXIT_OK, EXIT_ERROR, EXIT_HOST_FAILED, EXIT_UNREACHABLE = 0, 1, 2, 3
EXIT_PARSE, EXIT_OPTIONS, EXIT_INTERRUPTED, EXIT_UNEXPECTED = 4, 5, 99, 250
EXIT_CANCELED = EXIT_INTERRUPTED
# What each means, for docs/cli-reference.md (generated).
EXIT_MEANINGS = {
    EXIT_OK: "success (check: the inventory is valid; upgrade without --yes: the schedule could be made)",
    EXIT_ERROR: "an error: the inventory check refused the input (no node was touched), an upgrade refused, or a run "
    "that failed before reporting on any host",
    EXIT_HOST_FAILED: "a host failed: a task, or a validate check (the upgrade halted there)",
    EXIT_UNREACHABLE: "a host was unreachable (and none failed)",
    EXIT_PARSE: "input that cannot be parsed: an -e value or file that is no key=value, YAML or JSON; a playbook "
    "ansible-playbook could not parse",
    EXIT_OPTIONS: "bad or missing options: no -i, an -e, vault password or output path that cannot be used, a value "
    "an option refuses, an unknown command",
    EXIT_INTERRUPTED: "interrupted: Ctrl-C (a run is canceled cleanly)",
    EXIT_UNEXPECTED: "unexpected: a nodeforge bug, said in one line (NODEFORGE_TRACEBACK=1 prints the traceback)",
}
# ansible-playbook's own codes for a run that ended before any host result: passed on as they are.
_PLAYBOOK_CODES = (EXIT_PARSE, EXIT_OPTIONS, EXIT_UNEXPECTED)
COUNTERS = ("ok", "changed", "failed", "unreachable", "skipped", "rescued", "ignored")
STATS_KEYS = {
    "ok": "ok",
    "changed": "changed",
    "failed": "failures",
    "unreachable": "dark",
    "skipped": "skipped",
    "rescued": "rescued",
    "ignored": "ignored",
}


def state_dir() -> Path:
    base = os.environ.get("NODEFORGE_STATE_DIR") or os.path.join(
        os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state"), "nodeforge"
    )
    return Path(base)


@dataclass
class RunOptions:
    inventory: str | list[str] | None = None  # one source, or several (-i repeated)
    limit: str | None = None
    tags: str | None = None
    skip_tags: str | None = None
    extravars: dict[str, Any] = field(default_factory=dict)
    # The operator's -e values as given (k=v, JSON/YAML, @file), read by ansible-playbook itself, in order; the
    # caller's own `extravars` come after them and win.
    extra_vars_args: tuple[str, ...] = ()
    check: bool = False
    diff: bool = False
    verbosity: int = 0
    forks: int | None = None
    keep_runs: int = DEFAULT_KEEP_RUNS
    envvars: dict[str, str] = field(default_factory=dict)
    vault: list[str] = field(default_factory=list)  # --vault-id / --vault-password-file arguments
    # ansible-playbook's connection and become arguments as given (-u, -b, --become-user, --private-key, -T, -K, -k,
    # --start-at-task: connection.take), and the answers to its password prompts (pattern -> password).
    connection: tuple[str, ...] = ()
    passwords: dict[str, str] = field(default_factory=dict)
    # --list-hosts, --list-tasks, --list-tags, --syntax-check: ansible-playbook prints (RunResult.output), touches no
    # host, and the inventory check does not gate it.
    listing: tuple[str, ...] = ()


@dataclass
class Failure:
    host: str
    task: str
    message: str
    unreachable: bool = False


@dataclass
class RunResult:
    playbook: str
    status: str
    rc: int
    artifacts: str
    hosts: dict[str, dict[str, int]]
    failures: list[Failure]
    changes: dict[str, list[str]]
    reboot_required: dict[str, bool]
    duration_s: float
    error: str = ""  # what ansible-playbook printed when it failed before reporting on any host
    output: str = ""  # what ansible-playbook printed for a listing (--list-hosts, --list-tasks, ...)
    # Per host: Ansible's warnings and the roles' announcements (tasks named "Announce ..." / "Warn ...": a runtime
    # restart, a stack replacement, an unmet expectation), which the operator must see, not only the artifacts.
    notices: dict[str, list[str]] = field(default_factory=dict)
    # Per host: the check results of role validate's "Report the acceptance checks" task (nodeforge validate).
    acceptance: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    # Per host (nodeforge upgrade): the plan of role upgrade's probe (fact upgrade_plan) and the last record it wrote
    # on the node (fact upgrade_record).
    upgrade_plans: dict[str, dict[str, Any]] = field(default_factory=dict)
    upgrade_records: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        if self.status == "canceled":
            return EXIT_CANCELED
        if any(h["failed"] for h in self.hosts.values()):
            return EXIT_HOST_FAILED
        if any(h["unreachable"] for h in self.hosts.values()):
            return EXIT_UNREACHABLE
        if self.status != "successful" or self.rc != 0:
            return self.rc if not self.hosts and self.rc in _PLAYBOOK_CODES else EXIT_ERROR
        return EXIT_OK

    def as_dict(self) -> dict[str, Any]:
        return {
            "playbook": self.playbook,
            "status": self.status,
            "rc": self.rc,
            "exit_code": self.exit_code,
            "duration_s": round(self.duration_s, 2),
            "artifacts": self.artifacts,
            "hosts": self.hosts,
            "failures": [f.__dict__ for f in self.failures],
            "changes": self.changes,
            "reboot_required": self.reboot_required,
            "notices": self.notices,
            "acceptance": self.acceptance,
            "upgrade_plans": self.upgrade_plans,
            "upgrade_records": self.upgrade_records,
            "error": self.error,
            **({"output": self.output} if self.output else {}),
        }


def _message(res: dict[str, Any]) -> str:
    for key in ("msg", "stderr", "reason", "module_stderr", "stdout"):
        value = res.get(key)
        if value:
            return str(value).strip()
    return "no message"


NOTICE_TASKS = ("Announce ", "Warn ")
# The task of role validate whose result carries a host's acceptance check results (ansible_facts.validate_results).
ACCEPTANCE_TASK = "Report the acceptance checks"
# The task of role k8s_cluster whose result carries nodeforge k8s verify's checks by node
# (ansible_facts.k8s_verify_results).
VERIFY_TASK = "Report the cluster's checks"


class Progress:
    """Folds ansible-runner events into live state: current play/task, per-host counters, failures.

    A task is shown (`task`, `tasks`) once it does something on a host: a result other than skipped, or a host still
    at it SHOW_AFTER_S after it started (or after its last skipped loop item). ansible-runner reports a task's start
    on each host before its `when` is evaluated there, so a task every host skips (render's apply tasks) would
    otherwise pass for work: it is never shown."""

    # A skip takes milliseconds: a host this long at a task without a result is at work on it.
    SHOW_AFTER_S = 1.0
    _STARTS = ("playbook_on_task_start", "playbook_on_handler_task_start")
    _WORK = (
        "runner_on_ok",
        "runner_on_failed",
        "runner_on_unreachable",
        "runner_item_on_ok",
        "runner_item_on_failed",
        "runner_retry",
        "runner_on_async_poll",
        "runner_on_async_ok",
        "runner_on_async_failed",
    )
    _ENDS = ("runner_on_ok", "runner_on_failed", "runner_on_unreachable", "runner_on_skipped")

    def __init__(self) -> None:
        self.play = ""
        self._task = ""
        self.tasks: list[tuple[str, str]] = []  # (play, task) of each task shown, in the order shown
        self._started: dict[str, dict[str, Any]] = {}  # by task uuid: play, name, hosts, done, since, shown
        self._latest: dict[str, Any] | None = None
        self._show_lock = threading.Lock()
        self.counts: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(COUNTERS, 0))
        self.failures: list[Failure] = []
        self.changes: dict[str, list[str]] = defaultdict(list)
        self.reboot_required: dict[str, bool] = {}
        self.notices: dict[str, list[str]] = defaultdict(list)
        self.acceptance: dict[str, list[dict[str, Any]]] = {}
        self.upgrade_plans: dict[str, dict[str, Any]] = {}
        self.upgrade_records: dict[str, dict[str, Any]] = {}
        self.lock = threading.Lock()

    def _notice(self, host: str, text: str) -> None:
        text = " ".join(str(text).split())
        if text and text not in self.notices[host]:
            self.notices[host].append(text)

    @property
    def task(self) -> str:
        """The task at work: the latest that did something on a host, or that a host has been at for SHOW_AFTER_S."""
        entry = self._latest
        if entry is not None and not entry["shown"]:
            running = entry["hosts"] - entry["done"] or not (entry["hosts"] or entry["done"])
            if running and time.monotonic() - entry["since"] >= self.SHOW_AFTER_S:
                self._show(entry)
        return self._task

    def _show(self, entry: dict[str, Any]) -> None:
        with self._show_lock:
            if not entry["shown"]:
                entry["shown"] = True
                self.tasks.append((entry["play"], entry["name"]))
                self._task = entry["name"]

    def _track(self, kind: str, data: dict[str, Any], host: str) -> None:
        """Which task is at work, from its start, each host's start and each host's result."""
        uuid = data.get("task_uuid") or ""
        entry = self._started.get(uuid)
        if entry is None or kind in self._STARTS:
            entry = {"play": data.get("play") or self.play, "name": data.get("task", ""), "hosts": set(), "done": set()}
            entry.update(since=time.monotonic(), shown=False)
            if uuid:
                self._started[uuid] = entry
        if kind in self._STARTS:
            self._latest = entry
        elif kind == "runner_on_start":
            entry["hosts"].add(host)
        if kind in self._WORK:
            self._show(entry)
        if kind in self._ENDS:
            entry["done"].add(host)
        if kind in ("runner_on_skipped", "runner_item_on_skipped"):
            entry["since"] = time.monotonic()

    def _rescued(self, rescued: Mapping[str, Any], failed: Mapping[str, Any]) -> None:
        """The failures a block's rescue handled, known only from the stats at the end: counted rescued, not failed,
        as Ansible counts them. On a host the run did not fail, they are no failures at all; on a host that failed in
        the end (a rescue that refuses, say) they stay listed, as the cause the last failure follows from."""
        for host, number in rescued.items():
            moved = min(int(number or 0), self.counts[host]["failed"])
            self.counts[host]["failed"] -= moved
            self.counts[host]["rescued"] += moved
        self.failures = [f for f in self.failures if f.unreachable or not rescued.get(f.host) or failed.get(f.host)]

    def handle(self, event: dict[str, Any]) -> bool:
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        host = data.get("host") or ""
        res = data.get("res") or {}
        with self.lock:
            if kind in self._STARTS or kind.startswith("runner_"):
                self._track(kind, data, host)
            if kind == "playbook_on_play_start":
                self.play = data.get("play", "")
            elif kind == "runner_on_ok":
                for warning in res.get("warnings") or []:
                    self._notice(host, f"warning: {warning}")
                # The task's own name. ansible-runner 2.4 sends it as is with the role beside it; a "ROLE : " prefix
                # (older callbacks) is taken off, but a " : " that is part of the name stays.
                task = data.get("task", "")
                task_name = task.removeprefix(f"{data['role']} : ") if data.get("role") else task
                if task_name.startswith(NOTICE_TASKS) and res.get("msg"):
                    msg = res["msg"]
                    self._notice(host, " ".join(map(str, msg)) if isinstance(msg, list) else msg)
                counts = self.counts[host]
                counts["ok"] += 1
                if res.get("changed"):
                    counts["changed"] += 1
                    self.changes[host].append(data.get("task", ""))
                facts = res.get("ansible_facts") or {}
                if task_name == ACCEPTANCE_TASK and isinstance(facts.get("validate_results"), list):
                    self.acceptance[host] = list(facts["validate_results"])
                if task_name == VERIFY_TASK and isinstance(facts.get("k8s_verify_results"), dict):
                    # nodeforge k8s verify: one run on the k8s_control host judges every GPU node (and the cluster).
                    for node, checks in facts["k8s_verify_results"].items():
                        self.acceptance[str(node)] = list(checks)
                if isinstance(facts.get("upgrade_plan"), dict):
                    self.upgrade_plans[host] = dict(facts["upgrade_plan"])
                if isinstance(facts.get("upgrade_record"), dict):
                    self.upgrade_records[host] = dict(facts["upgrade_record"])
                if "nodeforge_reboot_required" in facts:
                    self.reboot_required[host] = bool(facts["nodeforge_reboot_required"])
            elif kind == "runner_on_failed":
                if data.get("ignore_errors"):  # Ansible counts an ignored failure ok as well
                    self.counts[host]["ok"] += 1
                    self.counts[host]["ignored"] += 1
                else:
                    self.counts[host]["failed"] += 1
                    self.failures.append(Failure(host, data.get("task", ""), _message(res)))
            elif kind == "runner_on_unreachable":
                self.counts[host]["unreachable"] += 1
                self.failures.append(Failure(host, data.get("task", ""), _message(res), unreachable=True))
            elif kind == "runner_on_skipped":
                self.counts[host]["skipped"] += 1
            elif kind == "playbook_on_stats":
                self._rescued(data.get("rescued") or {}, data.get("failures") or {})
        return True  # keep the event in the artifacts


class Canceller:
    """Ctrl-C (SIGINT/SIGTERM) asks ansible-runner to stop through its cancel_callback."""

    def __init__(self) -> None:
        self.requested = threading.Event()

    def __call__(self) -> bool:
        return self.requested.is_set()

    def request(self, *_: Any) -> None:
        self.requested.set()


# The validation play (nodeforge.gpu.validate_inventory) waits for the verdict the CLI writes to this file, while
# the process of this pid lives: a run the CLI checks beside ansible-playbook's start touches no node before it passed.
GATE_ENV, GATE_PID_ENV = "NODEFORGE_CHECK_GATE", "NODEFORGE_CHECK_GATE_PID"
VALIDATION_PLAYBOOK = "nodeforge.gpu.validate_inventory"
PEXPECT_TIMEOUT_S = 0.2


VAULT_PASSWORD_FILE = "--vault-password-file="


def _vault_arg(arg: str) -> str:
    """A --vault-password-file with its file by its absolute path, as -e @file: ansible-playbook runs in the
    playbook's directory, where a path relative to the caller's names nothing."""
    if arg.startswith(VAULT_PASSWORD_FILE):
        return VAULT_PASSWORD_FILE + os.path.abspath(os.path.expanduser(arg.removeprefix(VAULT_PASSWORD_FILE)))
    return arg


def _cmdline(opts: RunOptions, extra_vars: list[str]) -> str | None:
    parts = [*map(_vault_arg, opts.vault), *extra_vars, *opts.connection, *opts.listing]
    if opts.check:
        parts.append("--check")
    if opts.diff:
        parts.append("--diff")
    return shlex.join(parts) or None


def _extra_vars_args(values: tuple[str, ...], directory: Path, ident: str) -> tuple[list[str], list[Path]]:
    """The operator's -e values as ansible-playbook arguments, each `-e @file`: a file named by the operator by its
    absolute path (ansible-playbook runs in the playbook's directory), an inline value through a 0600 file removed
    after the run, never on the argv that ps and the artifacts show. Inline values are read as ansible-core reads -e:
    JSON/YAML when they open with { or [, else k=v pairs."""
    args: list[str] = []
    files: list[Path] = []
    for n, value in enumerate(values):
        if value.startswith("@"):
            args += ["-e", "@" + os.path.abspath(os.path.expanduser(value[1:]))]
            continue
        text = value
        if value[:1] not in ("{", "["):
            from ansible.parsing.splitter import parse_kv

            try:
                text = json.dumps(parse_kv(value))
            except Exception:  # the check names this -e, and the run stops before any node task
                text = value
        files.append(_write_private(directory / f"{ident}.{n}.yml", text))
        args += ["-e", f"@{files[-1]}"]
    return args, files


def _skipped_tags(
    opts: RunOptions, environ: Mapping[str, str], config_path: Path | None, parser: Any
) -> set[str] | None:
    """The tags the run skips, from wherever Ansible takes them: --skip-tags, added to ANSIBLE_SKIP_TAGS or else the
    [tags] skip of its ansible.cfg (at config_path, as read_config parsed it). None when the ansible.cfg cannot be read
    (the run may skip anything)."""
    tags = set(_words(opts.skip_tags))
    if "ANSIBLE_SKIP_TAGS" in environ:
        return tags | set(_words(environ["ANSIBLE_SKIP_TAGS"]))
    if config_path is None:
        return tags
    if parser is None:
        return None
    return tags | set(_words(parser.get("tags", "skip", fallback="")))


def _words(value: str | None) -> list[str]:
    return [word.strip() for word in (value or "").split(",") if word.strip()]


def _gated(playbook: Path, opts: RunOptions, environ: Mapping[str, str], config_path: Path | None, config: Any) -> bool:
    """Whether the playbook opens with the validation play and the run keeps it: it is tagged always, which only
    skipping `always` or `tagged` skips, wherever that is set, and a run that starts at a later task passes (else the
    check runs before ansible-playbook starts)."""
    skipped = _skipped_tags(opts, environ, config_path, config)
    if skipped is None or skipped & {"always", "tagged"}:
        return False
    if any(arg.startswith("--start-at-task") for arg in opts.connection):  # it starts past the validation task
        return False
    try:
        plays = yaml.load(playbook.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except (OSError, yaml.YAMLError):
        return False
    first = plays[0] if isinstance(plays, list) and plays and isinstance(plays[0], dict) else {}
    imported = first.get("ansible.builtin.import_playbook") or first.get("import_playbook")
    return imported == VALIDATION_PLAYBOOK


def _decide(gate: Any, verdict: Path, canceller: Canceller, thread: threading.Thread) -> None:
    """Run the caller's check while ansible-playbook starts; write its verdict for the validation play. A check that
    raises (a refused inventory: SystemExit, a bad -e) stops the run, which then raises it."""
    passed = False
    try:
        gate()
        passed = True
    finally:
        staged = verdict.with_suffix(".new")
        _write_private(staged, "pass" if passed else "refuse")
        os.replace(staged, verdict)
        if not passed:
            canceller.request()
            thread.join()


def run_playbook(
    playbook: str,
    opts: RunOptions,
    on_tick: Any = None,
    canceller: Canceller | None = None,
    install_signal_handlers: bool = True,
    gate: Any = None,
) -> RunResult:
    """Run a playbook (a name under content/playbooks or a path); block until it ends, calling on_tick(progress).

    `gate`, when given, is the caller's check of the inputs: called while ansible-playbook starts when the playbook
    opens with the validation play (which then waits for its verdict before any node task), else before the start.
    When it raises, the run is stopped and the exception propagates."""
    path = Path(playbook)
    if not path.is_absolute() and not path.exists():
        path = content.playbook(playbook)
    private = state_dir() / "runner"
    private.mkdir(parents=True, exist_ok=True, mode=0o700)
    private.chmod(0o700)
    ident = time.strftime("%Y%m%dT%H%M%S") + f"-{os.getpid()}-{path.stem}"
    environ = {**os.environ, **opts.envvars}
    # The operator's ansible.cfg, found from their working directory as ansible-playbook would (it runs in the
    # playbook's directory, so it is told the file by ANSIBLE_CONFIG); nodeforge's settings are defaults beneath it.
    config_path = ansible_settings.operator_config(environ)
    config = ansible_settings.read_config(config_path)
    # A listing touches no host: the inventory check does not hold it up (--list-hosts is how one debugs an inventory).
    gate = None if opts.listing else gate
    gated = gate is not None and _gated(path, opts, environ, config_path, config)
    if gate is not None and not gated:
        gate()  # before anything of the run is written: a refusal leaves nothing behind
    # ansible-runner asks cancel_callback between its waits for output: a stop (Ctrl-C, a refused check) takes effect
    # within pexpect_timeout seconds, not its default 5, while ansible-playbook prints nothing. Read from env/settings
    # only (a `settings` argument is dropped when that file is missing).
    _write_private(private / "env" / "settings", json.dumps({"pexpect_timeout": PEXPECT_TIMEOUT_S}))
    # -e values go to ansible-playbook as `-e @file` (a 0600 file removed after the run), never on its argv.
    extravars_file = _write_private(private / "extravars" / f"{ident}.json", json.dumps(opts.extravars or {}))
    extra_vars, extra_files = _extra_vars_args(opts.extra_vars_args, private / "extravars", ident)
    gate_file = private / "gates" / ident if gated else None
    if gate_file is not None:
        gate_file.parent.mkdir(mode=0o700, exist_ok=True)
    progress = Progress()
    canceller = canceller or Canceller()
    envvars = {
        # ansible-playbook comes with the Python that runs nodeforge (the venv's bin/), whatever PATH says.
        "PATH": os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", os.defpath)]),
        # The nodeforge.gpu collection this package ships comes first; the `ansible` package's collections follow.
        "ANSIBLE_COLLECTIONS_PATH": _collections_path(environ, config),
        **({"ANSIBLE_CONFIG": str(config_path)} if config_path else {}),
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_FORCE_COLOR": "False",
        "ANSIBLE_NOCOLOR": "True",
        # Pipelining, SSH multiplexing, the fact cache (ansible_settings.py), unless the caller's environment or
        # ansible.cfg set them.
        **ansible_settings.environment(state_dir(), environ, config),
        **opts.envvars,
        **({GATE_ENV: str(gate_file), GATE_PID_ENV: str(os.getpid())} if gate_file else {}),
    }
    kwargs: dict[str, Any] = {
        "private_data_dir": str(private),
        "playbook": str(path.resolve()),
        "project_dir": str(path.resolve().parent),
        "ident": ident,
        "quiet": True,
        "rotate_artifacts": opts.keep_runs,
        "envvars": envvars,
        "extravars": str(extravars_file),
        "limit": opts.limit,
        "tags": opts.tags,
        "skip_tags": opts.skip_tags,
        "verbosity": opts.verbosity or None,
        "forks": opts.forks,
        "cmdline": _cmdline(opts, extra_vars),
        "event_handler": progress.handle,
        "cancel_callback": canceller,
        # Answers to ansible-playbook's -K/-k prompts, in memory only (suppress_env_files: no env/passwords file).
        "passwords": opts.passwords or None,
        "suppress_env_files": True,
        # ansible-runner points the fact cache at each run's artifacts unless given a directory: the shared one.
        **ansible_settings.fact_cache(state_dir(), environ, config),
    }
    if opts.inventory:
        # Files and directories by absolute path; a host list ("node-01,node-02,") as it is.
        sources = [opts.inventory] if isinstance(opts.inventory, str) else opts.inventory
        kwargs["inventory"] = [str(Path(i).resolve()) if Path(i).exists() else i for i in sources]
    kwargs = {k: v for k, v in kwargs.items() if v is not None}

    previous: dict[int, Any] = {}
    if install_signal_handlers and threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, canceller.request)
    started = time.monotonic()
    # Everything the run writes (artifacts, fact cache, the events' stdout) is for the caller's eyes only.
    umask = os.umask(0o077)
    try:
        thread, runner = ansible_runner.run_async(**kwargs)
        if gate_file is not None:
            # The check starts once ansible-runner is about to spawn ansible-playbook: its thread's preparation
            # (the artifacts' rotation, the command file) would otherwise wait on the check for the GIL, which
            # delayed the playbook's first event by 0.3 s more than the check costs when run before it.
            while runner.status in ("unstarted", "starting") and thread.is_alive():
                time.sleep(0.005)
            _decide(gate, gate_file, canceller, thread)
        while thread.is_alive():
            thread.join(0.1)
            if on_tick:
                on_tick(progress)
    finally:
        os.umask(umask)
        for leftover in (extravars_file, *extra_files, *([gate_file] if gate_file else [])):
            leftover.unlink(missing_ok=True)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _seal_artifacts(private / "artifacts", ident)
    duration = time.monotonic() - started
    result = _result(str(path), runner, progress, duration)
    if opts.listing:
        result.output = _stdout(runner)
    return result


def _collections_path(environ: Mapping[str, str], config: Any) -> str:
    """The nodeforge.gpu collection this package ships first; then the caller's ANSIBLE_COLLECTIONS_PATH, else its
    ansible.cfg's collections_path (the `ansible` package's collections come after them, as Ansible finds them)."""
    theirs = environ.get("ANSIBLE_COLLECTIONS_PATH")
    if theirs is None and config is not None:
        theirs = config.get("defaults", "collections_path", fallback="") or config.get(
            "defaults", "collections_paths", fallback=""
        )
    found = [os.path.expanduser(p) for p in (theirs or "").split(os.pathsep) if p]
    return os.pathsep.join([str(content.collections_dir()), *found])


def _stdout(runner: Any) -> str:
    try:
        return runner.stdout.read().strip()
    except (OSError, AttributeError):
        return ""


def _write_private(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.parent.chmod(0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    return path


def _seal_artifacts(artifacts: Path, ident: str) -> None:
    """ansible-runner records the command with the caller's whole environment (tokens, proxies with passwords) in
    artifacts/<run>/command: keep the command, drop the environment; files 0600 and directories 0700."""
    run_dir = artifacts / ident
    command = run_dir / "command"
    if command.is_file():
        recorded = json.loads(command.read_text())
        recorded.pop("env", None)
        _write_private(command, json.dumps(recorded))
    for directory in (artifacts, run_dir):
        if directory.is_dir() and not directory.is_symlink():
            directory.chmod(0o700)
    # Each entry once, by its own mode; a link is left alone (chmod would follow it out of the run).
    for root, dirs, files in os.walk(run_dir):
        for names, mode in ((dirs, 0o700), (files, 0o600)):
            for name in names:
                path = os.path.join(root, name)
                if not os.path.islink(path):
                    os.chmod(path, mode)


def _result(playbook: str, runner: Any, progress: Progress, duration: float) -> RunResult:
    stats = runner.stats or {}
    hosts: dict[str, dict[str, int]] = {}
    names = set(progress.counts)
    for key in STATS_KEYS.values():
        names |= set((stats.get(key) or {}).keys())
    for host in sorted(names):
        if stats:
            hosts[host] = {c: int((stats.get(k) or {}).get(host, 0)) for c, k in STATS_KEYS.items()}
        else:  # canceled before the stats event: what the events showed
            hosts[host] = dict(progress.counts[host])
    error = ""
    if runner.status not in ("successful", "canceled") and not hosts:
        error = "\n".join(_stdout(runner).splitlines()[-15:]) or f"ansible-playbook exited with {runner.rc}"
    return RunResult(
        error=error,
        playbook=playbook,
        status=runner.status,
        rc=runner.rc if runner.rc is not None else -1,
        artifacts=str(runner.config.artifact_dir),
        hosts=hosts,
        failures=progress.failures,
        changes={h: t for h, t in progress.changes.items() if t},
        reboot_required=dict(progress.reboot_required),
        duration_s=duration,
        notices={h: list(n) for h, n in progress.notices.items() if n},
        acceptance=dict(progress.acceptance),
        upgrade_plans=dict(progress.upgrade_plans),
        upgrade_records=dict(progress.upgrade_records),
    )
