"""The nodeforge command line: verbs map to playbooks through one table; Ansible options are defined once."""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import re
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.markup import escape

from nodeforge import (
    __version__,
    ansible_settings,
    connection,
    content,
    lab,
    lab_vm,
    mirror_cli,
    report,
    validate_report,
)
from nodeforge.runner import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_OPTIONS,
    EXIT_PARSE,
    EXIT_UNEXPECTED,
    RunOptions,
    RunResult,
    run_playbook,
)

if TYPE_CHECKING:
    from nodeforge import checks

# What loads ansible-core (the check: nodeforge.checks, nodeforge.collection; the verbs whose options come from the
# collection: k8s, upgrade, plan) is imported where it is used, not here: a run verb starts ansible-playbook first and
# reads the inventory beside it (run_verb), so the CLI's start costs a run little more than ansible-runner's own.


@dataclass(frozen=True)
class Verb:
    playbook: str
    help: str
    check: bool = False
    diff: bool = False
    # Registered with options of its own below (the shared ones and more), not by the loop over this table.
    own_command: bool = False


# The one table of verbs that run Ansible.
VERBS: dict[str, Verb] = {
    "preflight": Verb(
        "preflight.yml", "Read-only node checks: OS, kernel headers, Secure Boot, SELinux, PCI vs profile."
    ),
    "provision": Verb("site.yml", "Provision the node stack (preflight, then each component role)."),
    "plan": Verb(
        "site.yml",
        "Show what provision would change, per host (check + diff mode); with --upgrade, an upgrade's schedule.",
        check=True,
        diff=True,
        own_command=True,
    ),
    "validate": Verb(
        "validate.yml",
        "Acceptance checks with thresholds, per node: pass, fail or not applicable (with the reason); reports.",
        own_command=True,
    ),
}


def _console(json_mode: bool = False) -> Console:
    # With --json, human output goes to stderr so stdout stays machine-readable.
    return Console(stderr=json_mode, highlight=False)


def _absolute_vault_password_files(
    _ctx: click.Context, _param: click.Parameter, paths: tuple[str, ...]
) -> tuple[str, ...]:
    """Each file by its absolute path, as -e @file is (ansible-playbook runs in the playbook's directory); a file that
    is not there stops the command before anything runs. Not resolved through links: a vault client script is known by
    its own name (*-client)."""
    absolute = []
    for path in paths:
        full = os.path.abspath(os.path.expanduser(path))
        if not os.path.isfile(full):
            found = "is a directory" if os.path.isdir(full) else "does not exist"
            raise click.BadParameter(f"{path} {found} (looked for {full}): expected the vault password file")
        absolute.append(full)
    return tuple(absolute)


def inventory_options() -> list[Any]:
    """How Ansible is told where the inventory is and how to open its vault: the same flags as ansible-playbook."""
    return [
        click.option(
            "-i",
            "--inventory",
            "inventory",
            required=True,
            multiple=True,
            help="Inventory file, directory or host list, as ansible-playbook takes it; repeatable.",
        ),
        click.option("--vault-id", "vault_ids", multiple=True, help="Vault identity (label@source); repeatable."),
        click.option(
            "--vault-password-file",
            "--vault-pass-file",
            "vault_password_files",
            multiple=True,
            callback=_absolute_vault_password_files,
            help="File holding the vault password; repeatable.",
        ),
        click.option("-J", "--ask-vault-pass", "ask_vault_pass", is_flag=True, help="Ask for the vault password."),
    ]


@dataclass
class Inputs:
    """The inventory, -e values and vault settings of one invocation, read once and used by check and run."""

    inventory: tuple[str, ...]
    extra_vars: tuple[str, ...] = ()
    vault_ids: tuple[str, ...] = ()
    vault_password_files: tuple[str, ...] = ()
    ask_vault_pass: bool = False
    # What the check reports without refusing (a verification turned off), and the inventory as Ansible read it:
    # read() fills them.
    warnings: list[checks.Problem] = field(default_factory=list)
    view: Any = None

    def __post_init__(self) -> None:
        if self.ask_vault_pass:
            # Asked once, then handed to check and to ansible-playbook as a 0600 file that is removed at exit.
            password = click.prompt("Vault password", hide_input=True, err=True)
            handle = tempfile.NamedTemporaryFile("w", prefix="nodeforge-vault-", delete=False)  # noqa: SIM115
            os.chmod(handle.name, 0o600)
            handle.write(password)
            handle.close()
            atexit.register(os.unlink, handle.name)
            self.vault_password_files = (*self.vault_password_files, handle.name)
            self.ask_vault_pass = False

    def read(self) -> tuple[list[checks.Problem], dict[str, Any]]:
        """The inventory's problems, and the -e values as Ansible reads them with the vault secrets (a run's
        ansible-playbook reads the same -e values itself, with the same vault options: runner.RunOptions)."""
        from nodeforge import checks
        from nodeforge.collection import inventory_check

        try:
            view = checks.load(list(self.inventory), self.extra_vars, self.vault_ids, self.vault_password_files)
        except checks.CheckInputError as exc:
            raise (Unparsable(str(exc)) if exc.parse else click.BadParameter(str(exc))) from exc
        problems, self.warnings = inventory_check.check_with_warnings(view)
        self.view = view
        return problems, checks.plain(view.extra_vars)

    def read_or_exit(self, json_mode: bool) -> tuple[list[checks.Problem], dict[str, Any]]:
        """read(), with bad input (an -e that cannot be read, a vault that does not open) as a named error: with
        --json, {"status": "error", "error": ...} on stdout too. Exit 5 for an option that names nothing usable, 4 for
        text that cannot be parsed, as ansible-playbook exits."""
        try:
            return self.read()
        except (click.BadParameter, Unparsable) as exc:
            if json_mode:
                print_json_error(exc)
            raise

    def vault_cmdline(self) -> list[str]:
        args = [f"--vault-id={v}" for v in self.vault_ids]
        return args + [f"--vault-password-file={f}" for f in self.vault_password_files]


def print_json_error(exc: click.ClickException) -> None:
    """Under --json, input refused before anything ran, on stdout as well: status error, the error, the exit code
    the process exits with (_Main.main prints the same for whatever a verb did not)."""
    report.print_json(error_payload(exc, exit_code_of(exc)))


def exit_code_of(exc: click.ClickException) -> int:
    """The exit code _Main.main exits with for a ClickException: a usage error is 5 (click's own is 2)."""
    return EXIT_OPTIONS if isinstance(exc, click.UsageError) else exc.exit_code


def error_payload(exc: BaseException | None, code: int, message: str = "") -> dict[str, Any]:
    """The --json document of a command that ended in an error before any result of its own: status error, the
    error (a ClickException's message, else `message`), and the error as a problem in the check's shape (naming the
    option when click knows it)."""
    if isinstance(exc, click.ClickException):
        message = exc.format_message()
    ctx = getattr(exc, "ctx", None) or click.get_current_context(silent=True)
    param = getattr(exc, "param", None)
    option = max(param.opts, key=len) if param is not None and param.opts else ""
    hint = getattr(exc, "param_hint", None)
    option = option or (hint if isinstance(hint, str) else "").strip("'")
    # An option refused; else input the command read or wrote (a file, a vault); else nodeforge itself (exit 250, 99).
    kinds = ((click.UsageError, "command line"), (click.ClickException, "input"))
    where = next((name for kind, name in kinds if isinstance(exc, kind)), "nodeforge")
    found = report.problem(where, ctx.command_path if ctx else "", option, message)
    return report.json_payload("error", code, problems=[found], error=message)


def ansible_options(func: Any, json_option: bool = True, modes: bool = True) -> Any:
    """The options every verb that runs Ansible shares (--json: a summary on stdout; validate has its own; --check
    and --diff where the verb does not always run in those modes: plan does)."""
    options = [
        *inventory_options(),
        click.option("-l", "--limit", help="Limit to hosts or groups (Ansible pattern)."),
        click.option("-t", "--tags", help="Only run tasks with these tags (comma-separated)."),
        click.option("--skip-tags", help="Skip tasks with these tags (comma-separated)."),
        click.option("-e", "--extra-vars", "extra_vars", multiple=True, help="k=v, @file.yml or JSON; repeatable."),
        *(
            [
                click.option("--check", is_flag=True, help="Ansible check mode: change nothing."),
                click.option("--diff", is_flag=True, help="Show file differences."),
            ]
            if modes
            else []
        ),
        click.option("-v", "--verbose", "verbosity", count=True, help="Ansible verbosity (-v .. -vvvv)."),
        click.option("--forks", type=click.IntRange(1, 500), help="Parallel hosts."),
        *connection.options(),
        click.option("--json", "json_mode", is_flag=True, help="Print a machine-readable summary on stdout."),
    ]
    for option in reversed(options if json_option else options[:-1]):
        func = option(func)
    return func


def validate_or_exit(console: Console, inputs: Inputs, json_mode: bool) -> None:
    """The static check, run before any node is touched; prints its warnings, exits non-zero on any problem."""
    problems, _ = inputs.read_or_exit(json_mode)
    report.print_warnings(console, inputs.warnings)
    if not problems:
        return
    report.print_problems(console, problems)
    if json_mode:
        report.print_json(report.json_payload("invalid", EXIT_ERROR, problems=problems, warnings=inputs.warnings))
    sys.exit(EXIT_ERROR)


def show_run(
    console: Console, result: RunResult, json_mode: bool, inputs: Inputs, plan: bool = False, files: Any = ()
) -> int:
    """A run's summary for the operator (on stderr under --json) and, with --json, the run as the invocation's JSON
    document (report.run_payload: the check's warnings, the files the verb wrote); returns the exit code."""
    report.print_result(console, result, plan=plan)
    if json_mode:
        report.print_json(report.run_payload(result, warnings=inputs.warnings, files=files))
    return result.exit_code


def run_verb(
    verb: str,
    inputs: Inputs,
    json_mode: bool,
    spec: Verb | None = None,
    extravars: dict[str, Any] | None = None,
    present: Any = None,
    watch: Any = None,
    **kw: Any,
) -> int:
    """Run the verb's playbook with the inventory checked first: the check runs while ansible-playbook starts, and the
    playbook's validation play waits for its verdict before any node task (runner.run_playbook's gate); a refused
    inventory stops the run and exits here. `extravars` are the CLI's own (e.g. where render writes), set over the
    operator's -e values. `present(console, result)`, when given, shows the result and returns the exit code in place
    of the run summary; `watch(console, progress)`, when given, sees the run's progress at each tick."""
    spec = spec or VERBS[verb]
    console = _console(json_mode)
    if kw.get("forks") is None:  # Ansible starts no more workers than a play has hosts: the shipped cap sizes them
        kw["forks"] = ansible_settings.forks(config=ansible_settings.read_config(ansible_settings.operator_config()))
    opts = RunOptions(
        **connection.take(kw),
        inventory=list(inputs.inventory),
        extravars=extravars or {},
        extra_vars_args=inputs.extra_vars,
        vault=inputs.vault_cmdline(),
        check=kw.pop("check", False) or spec.check,
        diff=kw.pop("diff", False) or spec.diff,
        envvars=kw.pop("envvars", {}),
        **{k: v for k, v in kw.items() if k != "canceller"},
    )
    with report.live_progress(console) as tick:  # on stderr under --json, as every human line
        extra = {"canceller": kw["canceller"]} if kw.get("canceller") is not None else {}
        on_tick = tick
        if watch is not None:

            def on_tick(progress: Any) -> None:
                watch(console, progress)
                tick(progress)

        gate = lambda: validate_or_exit(console, inputs, json_mode)  # noqa: E731
        result = run_playbook(spec.playbook, opts, on_tick=on_tick, gate=gate, **extra)
    if opts.listing and result.output:  # what ansible-playbook listed, as it printed it: no host was touched
        if json_mode:
            report.print_json(report.run_payload(result, warnings=inputs.warnings))
        else:
            click.echo(result.output)
        return result.exit_code
    if present is not None:
        return present(console, result)
    return show_run(console, result, json_mode, inputs, plan=verb == "plan")


def json_requested(argv: list[str]) -> bool:
    """Whether a command line asks for its JSON document on stdout: --json, which validate takes with a FILE to
    write instead (its --json without FILE, or with -, is stdout)."""
    words = argv[: argv.index("--")] if "--" in argv else argv
    command = next((word for word in words if not word.startswith("-")), "")
    for index, word in enumerate(words):
        if word == "--json":
            value = words[index + 1] if index + 1 < len(words) else "-"
            return command != "validate" or value == "-" or value.startswith("-")
        if word.startswith("--json="):
            return command != "validate" or word == "--json=-"
    return False


class Unparsable(click.ClickException):
    """Input that is there but cannot be parsed (an -e file that is no YAML): ansible-playbook's exit 4."""

    exit_code = EXIT_PARSE


class _Main(click.Group):
    """The command group: k8s, upgrade and plan are registered when first asked for (their options' choices and
    defaults come from the collection, which loads ansible-core); every other verb at import.

    Exit codes are ansible-playbook's (runner.EXIT_*): a usage error is 5 (click's own is 2, a host failed to
    ansible-playbook), Ctrl-C before a run 99, and anything unexpected 250 with one line, never a traceback
    (NODEFORGE_TRACEBACK=1 prints it).

    With --json, stdout holds exactly one JSON document whatever happens: a verb prints its own; an error it did not
    print one for (click's usage errors come before the verb runs: a missing -i) gets report.json_payload's with
    status error and the exit code, here."""

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        argv = kwargs.get("args", args[0] if args else None)
        json_mode = json_requested(sys.argv[1:] if argv is None else list(argv))
        report.reset_json()
        failure: BaseException | None = None
        message = ""
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except click.ClickException as exc:
            exc.show()
            failure, code = exc, exit_code_of(exc)
        except click.Abort as exc:
            click.echo("Aborted!", err=True)
            failure, code, message = exc, EXIT_INTERRUPTED, "Aborted!"
        except SystemExit as exc:  # a verb's exit: it printed its document (json_printed), or the one below is its
            if exc.code is not None and not isinstance(exc.code, int):
                click.echo(exc.code, err=True)
            failure, code, message = exc, 0 if exc.code is None else exc.code, str(exc.code or "")
            if not isinstance(code, int):
                code = EXIT_ERROR
        except Exception as exc:  # a bug of nodeforge's: said in one line, with how to see more
            wanted = bool(os.environ.get("NODEFORGE_TRACEBACK"))
            if wanted:
                traceback.print_exc()
            where = "" if wanted else "; NODEFORGE_TRACEBACK=1 prints where"
            message = f"unexpected {type(exc).__name__}: {exc} (a nodeforge bug{where})"
            click.echo(f"Error: {message}", err=True)
            failure, code = exc, EXIT_UNEXPECTED
        code = code if isinstance(code, int) else EXIT_OK
        if json_mode and code != EXIT_OK and not report.json_printed():
            report.print_json(error_payload(failure, code, message or f"nodeforge exited with {code}"))
        sys.exit(code)

    LAZY = ("k8s", "plan", "upgrade")
    _lazy_registered = False

    def _register_lazy(self) -> None:
        if not self._lazy_registered:
            self._lazy_registered = True
            from nodeforge import k8s, upgrade_cli

            k8s.register(self)
            upgrade_cli.register(self)
            _register_plan(self, upgrade_cli)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.LAZY})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.LAZY:
            self._register_lazy()
        return super().get_command(ctx, cmd_name)


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="nodeforge")
def main() -> None:
    """nodeforge: provision bare-metal GPU/RDMA servers into validated Kubernetes workers."""


def _make_verb(name: str, verb: Verb) -> None:
    @ansible_options
    def command(**kw: Any) -> None:
        sys.exit(run_verb(name, _inputs(kw), kw.pop("json_mode"), **kw))

    main.command(name=name, help=verb.help)(command)


for _name, _verb in VERBS.items():
    if not _verb.own_command:
        _make_verb(_name, _verb)


def report_options(textfile: bool = True) -> list[Any]:
    """The reports of a verb whose result is checks per node (validate, k8s verify)."""
    options = [
        click.option(
            "--json",
            "json_file",
            is_flag=False,
            flag_value="-",
            default=None,
            metavar="[FILE]",
            help="Write every result as JSON to FILE; without FILE, on stdout (the tables then go to stderr).",
        ),
        click.option("--junit", "junit_file", type=click.Path(dir_okay=False, path_type=Path), help="JUnit XML."),
        click.option("--html", "html_file", type=click.Path(dir_okay=False, path_type=Path), help="HTML summary."),
        click.option(
            "--textfile",
            "textfile_dir",
            type=click.Path(file_okay=False, path_type=Path),
            metavar="DIR",
            help="Write every node's results in Prometheus text format to DIR/nodeforge-validate.prom, for "
            "node_exporter's textfile collector.",
        ),
    ]
    return options if textfile else options[:-1]


def _validate_options(func: Any) -> Any:
    perf = click.option("--perf", is_flag=True, help="Also run ib_write_bw between node pairs, NCCL and DCGM tests.")
    for option in reversed([perf, *report_options()]):
        func = option(func)
    return ansible_options(func, json_option=False)


@main.command(name="validate", help=VERBS["validate"].help)
@_validate_options
def validate(
    perf: bool,
    json_file: str | None,
    junit_file: Path | None,
    html_file: Path | None,
    textfile_dir: Path | None,
    **kw: Any,
) -> None:
    """Exit code: 0 when every check passed or does not apply, non-zero when a check failed or a node was not
    validated (unreachable, or the run stopped before its report)."""
    extravars = {"validate_perf": True} if perf else {}
    sys.exit(run_with_reports("validate", json_file, junit_file, html_file, textfile_dir, extravars, kw))


def run_with_reports(
    verb: str,
    json_file: str | None,
    junit_file: Path | None,
    html_file: Path | None,
    textfile_dir: Path | None,
    extravars: dict[str, Any],
    kw: dict[str, Any],
    spec: Verb | None = None,
) -> int:
    """Run a verb whose result is checks per node (validate, k8s verify): the table, and the reports asked for (JSON,
    JUnit, HTML, the Prometheus textfile), each refused before the run where it could not be written."""
    to_stdout = json_file == "-"
    reports = {
        "--json": Path(json_file) if json_file and not to_stdout else None,
        "--junit": junit_file,
        "--html": html_file,
        "--textfile": textfile_dir / validate_report.TEXTFILE_NAME if textfile_dir is not None else None,
    }
    for option, path in reports.items():
        if path is not None:
            with output_errors(option) as safe_write:
                safe_write.check_file(path)  # refused before the run, not after it

    inputs = _inputs(kw)

    def present(console: Console, result: RunResult) -> int:
        files = [path for path in reports.values() if path is not None]
        found = validate_report.payload(result, warnings=inputs.warnings, files=files)
        validate_report.print_table(console, found, verb)
        if result.error:
            console.print(f"[red]ansible-playbook failed before reaching any host[/red]:\n{escape(result.error)}")
        texts = {
            "--json": validate_report.json_text,
            "--junit": lambda found: validate_report.junit(found, verb),
            "--html": lambda found: validate_report.html_report(found, verb),
            "--textfile": lambda found: validate_report.textfile(found, time.time()),
        }
        for option, path in reports.items():
            if path is not None:
                with output_errors(option) as safe_write:
                    safe_write.write_file(path, texts[option](found))
        if to_stdout:  # last: a report that cannot be written is the invocation's error, in its one document
            report.print_json(found)
        return found["exit_code"]

    return run_verb(verb, inputs, to_stdout, spec=spec, extravars=extravars, present=present, **kw)


@contextlib.contextmanager
def output_errors(option: str) -> Iterator[Any]:
    """plugin_utils/safe_write.py, the one writer of the files a command writes where option says (loaded here: it
    goes through ansible-core's collection loader); a refusal exits 5 naming the option, a failure to write exits 1."""
    import nodeforge.collection  # noqa: F401  (installs the collection loader)
    from ansible_collections.nodeforge.gpu.plugins.plugin_utils import safe_write  # isort: skip

    try:
        yield safe_write
    except safe_write.UnsafeOutputError as exc:
        raise click.BadParameter(str(exc), param_hint=f"'{option}'") from exc
    except safe_write.OutputError as exc:
        raise click.ClickException(str(exc)) from exc


def _inputs(kw: dict[str, Any]) -> Inputs:
    """Take the inventory, -e and vault options out of a command's keyword arguments."""
    return Inputs(
        inventory=kw.pop("inventory"),
        extra_vars=kw.pop("extra_vars", ()),
        vault_ids=kw.pop("vault_ids", ()),
        vault_password_files=kw.pop("vault_password_files", ()),
        ask_vault_pass=kw.pop("ask_vault_pass", False),
    )


def _check_options(func: Any) -> Any:
    options = [
        *inventory_options(),
        click.option("-e", "--extra-vars", "extra_vars", multiple=True, help="k=v, @file.yml or JSON; checked too."),
        click.option("--json", "json_mode", is_flag=True, help="Print the problems as JSON."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


@main.command()
@_check_options
@click.option(
    "--mirror",
    "mirror_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Also name every pinned artefact the inventory needs that this `nodeforge mirror pull` directory lacks.",
)
def check(json_mode: bool, mirror_dir: Path | None, **kw: Any) -> None:
    """Validate an inventory without touching any node; report every problem at once."""
    console = _console(json_mode)
    inputs = _inputs(kw)
    problems, _ = inputs.read_or_exit(json_mode)
    if mirror_dir is not None and not problems:
        problems = mirror_cli.missing_problems(inputs.view, mirror_dir)
    inventory = ", ".join(inputs.inventory)
    report.print_warnings(console, inputs.warnings)
    if problems:
        report.print_problems(console, problems)
    else:
        pulled = f", and the mirror {escape(str(mirror_dir))} holds all it needs" if mirror_dir is not None else ""
        console.print(f"[green]ok[/green]: {escape(str(inventory))} is valid{pulled}")
    code = EXIT_ERROR if problems else EXIT_OK
    if json_mode:
        status = "invalid" if problems else "valid"
        report.print_json(report.json_payload(status, code, problems=problems, warnings=inputs.warnings))
    sys.exit(code)


def _profile_names() -> list[str]:
    """The shipped hardware profiles, by their files (the collection itself is loaded only when a verb needs it)."""
    return sorted(path.stem for path in (content.role_files("nodeforge") / "profiles").glob("*.yml"))


# A host name is also its Kubernetes Node's name (k8s_node_labels): DNS labels of lowercase letters, digits and "-",
# separated by dots; PREFIX-01 ends in a digit.
_HOST_PREFIX = re.compile(r"[a-z0-9]([-a-z0-9]{0,60}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,59}[a-z0-9])?)*")


def _host_prefix(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    if not _HOST_PREFIX.fullmatch(value) or len(value) > 240:
        raise click.BadParameter(
            f"{value!r} cannot begin a host name that is also a Kubernetes Node's: lowercase letters, digits and '-', "
            "dots between labels, each label starting and ending with a letter or digit (e.g. gpu-node, dgx.site-a)"
        )
    return value


@main.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--profile",
    "-p",
    required=True,
    help=f"Hardware profile: {', '.join(_profile_names())}.",
)
# No -n: in `nodeforge k8s` (as in kubectl) -n is --namespace.
@click.option("--nodes", default=2, show_default=True, type=click.IntRange(1, 999), help="Number of GPU nodes.")
@click.option(
    "--host-prefix",
    default="gpu-node",
    show_default=True,
    callback=_host_prefix,
    help="Host names: PREFIX-01, PREFIX-02, ... (also their Kubernetes Node names).",
)
@click.option("--os", "node_os", default="", help="Declare nodeforge_os (e.g. rocky9, ubuntu24.04, debian12).")
@click.option("--json", "json_mode", is_flag=True, help="Print the files written and what to fill in as JSON.")
def init(directory: Path, profile: str, nodes: int, host_prefix: str, node_os: str, json_mode: bool) -> None:
    """Scaffold an inventory in DIRECTORY from a hardware profile."""
    from nodeforge import scaffold  # the profiles' specs come from the collection

    try:
        with output_errors("DIRECTORY"):
            written = scaffold.write(directory, profile, nodes, host_prefix, node_os)
    except scaffold.ScaffoldError as exc:
        raise click.ClickException(str(exc)) from exc
    except OSError as exc:
        where = exc.filename or directory
        raise click.ClickException(f"cannot write the inventory into {where}: {exc.strerror or exc}") from exc
    console = _console(json_mode)
    todo = [str(item) for item in scaffold.todo(directory, profile, node_os)]
    following = f"edit {directory}/hosts.yml, then run: nodeforge check -i {directory}"
    for path in written:
        console.print(f"wrote {escape(str(path))}", soft_wrap=True)
    for item in todo:
        console.print(f"[yellow]fill in[/yellow]: {escape(item)}", soft_wrap=True)
    console.print(escape(f"next: {following}"), soft_wrap=True)
    if json_mode:
        notices = [f"fill in: {item}" for item in todo]
        report.print_json(report.json_payload("ok", EXIT_OK, notices=notices, files=written, next=following))


@main.group(name="lab")
def lab_group() -> None:
    """The lab: podman container nodes reached over SSH, provisioned through the CLI."""


def _checked_lab_name(_ctx: click.Context, _param: click.Parameter, name: str) -> str:
    """A lab's name becomes a directory that `lab down` removes: refused before any verb uses it as a path."""
    problem = lab.name_problem(name)
    if problem:
        raise click.BadParameter(problem)
    return name


_lab_name = click.option(
    "--name",
    default="lab",
    show_default=True,
    callback=_checked_lab_name,
    help="Lab name (containers nodeforge-NAME-N).",
)


def _lab_call(func: Any, *args: Any) -> Any:
    try:
        return func(*args)
    except lab.LabError as exc:
        raise click.ClickException(str(exc)) from exc


@lab_group.command(name="up")
@click.option(
    "--nodes",
    "-n",
    default=2,
    show_default=True,
    type=int,
    help="Number of nodes (Debian 12; with --vm, of the OS --os names).",
)
@click.option(
    "--os",
    "os_list",
    metavar="OS[,OS...]",
    help=f"One container node per OS listed, in node order ({', '.join(lab.LAB_OSES)}), instead of --nodes; with --vm "
    f"the one OS of the VM nodes ({', '.join(lab_vm.VM_OSES)}).",
)
@click.option(
    "--vm",
    is_flag=True,
    help="QEMU guests with their own Debian kernel (modules, reboots, soft-RoCE) instead of containers.",
)
@click.option("--provision", "then_provision", is_flag=True, help="Provision the nodes right away.")
@click.option("--json", "json_mode", is_flag=True, help="Print the nodes (with --provision: the run) as JSON.")
@click.option(
    "--mirror",
    "--toolkit-mirror",
    "mirror",
    type=click.Path(path_type=Path),
    help="A local copy of the vendors' repositories in their layouts (tools/lab_mirror.py builds the lab's) to serve "
    "to the nodes, or a `nodeforge mirror pull` directory with the distributions' stand-ins beside it (the lab's "
    "inventory then points at the pulled mirror).",
)
@_lab_name
def lab_up(
    nodes: int, os_list: str | None, vm: bool, then_provision: bool, json_mode: bool, mirror: Path | None, name: str
) -> None:
    """Start N container nodes, one per OS with --os, or with --vm N QEMU guests (sshd on loopback ports), and write
    their inventory."""
    console = _console(json_mode)
    if vm and mirror is not None:
        raise click.UsageError("--mirror is for container nodes (the VM nodes' inventory runs no toolkit role)")
    if vm and os_list is not None and os_list not in lab_vm.VM_OSES:
        raise click.UsageError(
            f"--os with --vm names the one OS of the VM nodes, {' or '.join(lab_vm.VM_OSES)}, not {os_list!r} (--nodes "
            "says how many)"
        )
    if vm and then_provision:
        raise click.UsageError(
            "--provision is for container nodes: on VM nodes run `nodeforge lab provision --tags ...` with the roles a "
            "VM shows something for (inventories/lab-vm/hosts.yml)"
        )
    oses = _lab_call(lab.parse_oses, os_list) if os_list is not None and not vm else None
    if oses is not None and click.get_current_context().get_parameter_source("nodes").name != "DEFAULT":
        raise click.UsageError("--os starts one node per OS listed: give --os or --nodes, not both")
    if vm:
        path = _lab_call(lab_vm.up, name, nodes, os_list or lab_vm.VM_OSES[0])
    else:
        path = _lab_call(lab.up, name, nodes, mirror, oses)
    started = _lab_call(lab.nodes, name)
    console.print(f"lab {name}: {len(started)} node(s) up; inventory: {path}")
    if vm:
        console.print("VM nodes (QEMU, software emulation); console logs under " + str(lab_vm.vm_dir(name)))
    elif mirror is None:
        console.print("repositories: the vendors' own (no --mirror given)")
    else:
        console.print(f"repositories: from {mirror}, served on each node's loopback")
    if then_provision:
        sys.exit(_lab_provision(name, json_mode, files=[path]))
    if json_mode:
        report.print_json(report.json_payload("ok", EXIT_OK, files=[path], nodes=[vars(n) for n in started]))


def _lab_provision(name: str, json_mode: bool, files: Any = (), **kw: Any) -> int:
    path = lab.inventory_path(name)
    if not path.exists():
        raise click.ClickException(f"lab {name} is not up (no {path}); run: nodeforge lab up")
    inputs = Inputs(inventory=(str(path),), extra_vars=kw.pop("extra_vars", ()))
    present = functools.partial(show_run, json_mode=json_mode, inputs=inputs, files=files)  # lab up's inventory
    return run_verb("provision", inputs, json_mode, present=present, **kw)


@lab_group.command(name="provision")
@click.option("--json", "json_mode", is_flag=True, help="Machine-readable summary.")
@click.option("-l", "--limit", help="Limit to these lab nodes (Ansible pattern, e.g. nodeforge-lab-1).")
@click.option("-t", "--tags", help="Only run tasks with these tags.")
@click.option("-e", "--extra-vars", "extra_vars", multiple=True, help="k=v, @file.yml or JSON; repeatable.")
@_lab_name
def lab_provision(json_mode: bool, limit: str | None, tags: str | None, extra_vars: tuple[str, ...], name: str) -> None:
    """Run `provision` against the lab's nodes."""
    sys.exit(_lab_provision(name, json_mode, limit=limit, tags=tags, extra_vars=extra_vars))


_lab_json = click.option("--json", "json_mode", is_flag=True, help="Print the result as JSON.")


@lab_group.command(name="down")
@_lab_json
@_lab_name
def lab_down(json_mode: bool, name: str) -> None:
    """Remove the lab's containers or VMs, inventory and keys."""
    removed = _lab_call(lab.down, name)
    _console(json_mode).print(f"lab {name}: removed {', '.join(removed) if removed else 'nothing (no nodes)'}")
    if json_mode:
        report.print_json(report.json_payload("ok", EXIT_OK, removed=removed))


@lab_group.command(name="status")
@_lab_json
@_lab_name
def lab_status(json_mode: bool, name: str) -> None:
    """List the lab's nodes, their state and SSH port."""
    console = _console(json_mode)
    found = _lab_call(lab.nodes, name)
    paths = {"inventory": str(lab.inventory_path(name)), "known_hosts": str(lab.known_hosts_path(name))}
    if not found:
        console.print(f"lab {name}: no nodes")
    for node in found:
        address = f"ssh {lab.LOOPBACK}:{node.port}" if node.port else "ssh: no port published"
        console.print(f"{node.name}  {node.state}  {address}  {node.os}")
    for label, where in paths.items() if found else ():
        console.print(f"{label}: {where}", soft_wrap=True)
    if json_mode:
        report.print_json(report.json_payload("ok", EXIT_OK, nodes=[vars(n) for n in found], **paths))


mirror_cli.register(main, _check_options, _inputs)


UPGRADE_ONLY = ("component", "to_version", "batch", "max_unavailable", "resume", "allow_downgrade")


def _register_plan(group: click.Group, upgrade_cli: Any) -> None:
    """`plan`, with `nodeforge upgrade`'s options for `plan --upgrade` (registered by _Main when first asked for)."""

    @group.command(name="plan", help=VERBS["plan"].help)
    @functools.partial(ansible_options, modes=False)  # plan always runs in check and diff mode
    @upgrade_cli.upgrade_options
    @click.option("--upgrade", "upgrade_mode", is_flag=True, help="Show the schedule of `nodeforge upgrade` instead.")
    def plan(upgrade_mode: bool, **kw: Any) -> None:
        options = {k: kw.pop(k) for k in (*UPGRADE_ONLY, "drain")}
        if upgrade_mode:
            upgrade_cli.plan_upgrade(kw, options)
        if any(options[k] for k in UPGRADE_ONLY) or options["drain"] != "none":
            flags = ", --".join(k.replace("_", "-") for k in UPGRADE_ONLY)
            raise click.UsageError(f"--{flags} and --drain need --upgrade")
        sys.exit(run_verb("plan", _inputs(kw), kw.pop("json_mode"), **kw))


if __name__ == "__main__":  # pragma: no cover
    main()
