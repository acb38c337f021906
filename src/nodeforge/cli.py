"""The nodeforge command line: verbs map to playbooks through one table; Ansible options are defined once."""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import re
import sys
import tempfile
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.markup import escape

from nodeforge import __version__, ansible_settings, content, lab, lab_vm, report, validate_report
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
    """Under --json, input refused before anything ran, on stdout as well: {"status": "error", "error": ...}."""
    report.print_json(Console(), {"status": "error", "error": exc.format_message(), "problems": []})


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
    if json_mode:
        payload = {"status": "invalid", "problems": [p.as_dict() for p in problems]}
        report.print_json(Console(), {**payload, "warnings": [w.as_dict() for w in inputs.warnings]})
    report.print_problems(console, problems)
    sys.exit(EXIT_ERROR)


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
        kw["forks"] = ansible_settings.forks()
    opts = RunOptions(
        inventory=list(inputs.inventory),
        extravars=extravars or {},
        extra_vars_args=inputs.extra_vars,
        vault=inputs.vault_cmdline(),
        check=kw.pop("check", False) or spec.check,
        diff=kw.pop("diff", False) or spec.diff,
        envvars=kw.pop("envvars", {}),
        **{k: v for k, v in kw.items() if k != "canceller"},
    )
    with report.live_progress(console, enabled=not json_mode) as tick:
        extra = {"canceller": kw["canceller"]} if kw.get("canceller") is not None else {}
        on_tick = tick
        if watch is not None:

            def on_tick(progress: Any) -> None:
                watch(console, progress)
                tick(progress)

        gate = lambda: validate_or_exit(console, inputs, json_mode)  # noqa: E731
        result = run_playbook(spec.playbook, opts, on_tick=on_tick, gate=gate, **extra)
    if present is not None:
        return present(console, result)
    if json_mode:
        report.print_json(Console(), result.as_dict())
    else:
        report.print_result(console, result, plan=verb == "plan")
    return result.exit_code


class Unparsable(click.ClickException):
    """Input that is there but cannot be parsed (an -e file that is no YAML): ansible-playbook's exit 4."""

    exit_code = EXIT_PARSE


class _Main(click.Group):
    """The command group: k8s, upgrade and plan are registered when first asked for (their options' choices and
    defaults come from the collection, which loads ansible-core); every other verb at import.

    Exit codes are ansible-playbook's (runner.EXIT_*): a usage error is 5 (click's own is 2, a host failed to
    ansible-playbook), Ctrl-C before a run 99, and anything unexpected 250 with one line, never a traceback
    (NODEFORGE_TRACEBACK=1 prints it)."""

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except click.UsageError as exc:
            exc.show()
            code = EXIT_OPTIONS
        except click.ClickException as exc:
            exc.show()
            code = exc.exit_code
        except click.Abort:
            click.echo("Aborted!", err=True)
            code = EXIT_INTERRUPTED
        except Exception as exc:  # a bug of nodeforge's: said in one line, with how to see more
            wanted = bool(os.environ.get("NODEFORGE_TRACEBACK"))
            if wanted:
                traceback.print_exc()
            where = "" if wanted else "; NODEFORGE_TRACEBACK=1 prints where"
            click.echo(f"Error: unexpected {type(exc).__name__}: {exc} (a nodeforge bug{where})", err=True)
            code = EXIT_UNEXPECTED
        sys.exit(code if isinstance(code, int) else EXIT_OK)

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


def _validate_options(func: Any) -> Any:
    options = [
        click.option("--perf", is_flag=True, help="Also run ib_write_bw between node pairs, NCCL and DCGM tests."),
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
    ]
    for option in reversed(options):
        func = option(func)
    return ansible_options(func, json_option=False)


@main.command(name="validate", help=VERBS["validate"].help)
@_validate_options
def validate(perf: bool, json_file: str | None, junit_file: Path | None, html_file: Path | None, **kw: Any) -> None:
    """Exit code: 0 when every check passed or does not apply, non-zero when a check failed or a node was not
    validated (unreachable, or the run stopped before its report)."""
    to_stdout = json_file == "-"
    reports = {
        "--json": Path(json_file) if json_file and not to_stdout else None,
        "--junit": junit_file,
        "--html": html_file,
    }
    for option, path in reports.items():
        if path is not None:
            with output_errors(option) as safe_write:
                safe_write.check_file(path)  # refused before the run, not after it

    def present(console: Console, result: RunResult) -> int:
        found = validate_report.payload(result)
        validate_report.print_table(console, found)
        if result.error:
            console.print(f"[red]ansible-playbook failed before reaching any host[/red]:\n{escape(result.error)}")
        if to_stdout:
            report.print_json(Console(), found)
        texts = {
            "--json": validate_report.json_text,
            "--junit": validate_report.junit,
            "--html": validate_report.html_report,
        }
        for option, path in reports.items():
            if path is not None:
                with output_errors(option) as safe_write:
                    safe_write.write_file(path, texts[option](found))
        return found["exit_code"]

    extravars = {"validate_perf": True} if perf else {}
    sys.exit(run_verb("validate", _inputs(kw), to_stdout, extravars=extravars, present=present, **kw))


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
def check(json_mode: bool, **kw: Any) -> None:
    """Validate an inventory without touching any node; report every problem at once."""
    console = _console(json_mode)
    inputs = _inputs(kw)
    problems, _ = inputs.read_or_exit(json_mode)
    inventory = ", ".join(inputs.inventory)
    if json_mode:
        status = "invalid" if problems else "valid"
        warnings = [w.as_dict() for w in inputs.warnings]
        report.print_json(
            Console(), {"status": status, "problems": [p.as_dict() for p in problems], "warnings": warnings}
        )
    else:
        report.print_warnings(console, inputs.warnings)
        if problems:
            report.print_problems(console, problems)
        else:
            console.print(f"[green]ok[/green]: {escape(str(inventory))} is valid")
    sys.exit(EXIT_ERROR if problems else 0)


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
def init(directory: Path, profile: str, nodes: int, host_prefix: str, node_os: str) -> None:
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
    console = _console()
    for path in written:
        console.print(f"wrote {escape(str(path))}", soft_wrap=True)
    for item in scaffold.todo(directory, profile, node_os):
        console.print(f"[yellow]fill in[/yellow]: {escape(str(item))}", soft_wrap=True)
    console.print(escape(f"next: edit {directory}/hosts.yml, then run: nodeforge check -i {directory}"), soft_wrap=True)


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
@click.option("--nodes", "-n", default=2, show_default=True, type=int, help="Number of nodes.")
@click.option(
    "--vm",
    is_flag=True,
    help="QEMU guests with their own Debian kernel (modules, reboots, soft-RoCE) instead of containers.",
)
@click.option("--provision", "then_provision", is_flag=True, help="Provision the nodes right away.")
@click.option("--json", "json_mode", is_flag=True, help="Machine-readable provision summary.")
@click.option(
    "--toolkit-mirror",
    type=click.Path(path_type=Path),
    help="A local copy of NVIDIA's container toolkit repository (gpgkey, stable/deb/amd64/) to serve to the nodes.",
)
@_lab_name
def lab_up(nodes: int, vm: bool, then_provision: bool, json_mode: bool, toolkit_mirror: Path | None, name: str) -> None:
    """Start N container nodes, or with --vm N QEMU guests (sshd on loopback ports), and write their inventory."""
    console = _console(json_mode)
    if vm and toolkit_mirror is not None:
        raise click.UsageError("--toolkit-mirror is for container nodes (the VM nodes' inventory runs no toolkit role)")
    if vm and then_provision:
        raise click.UsageError(
            "--provision is for container nodes: on VM nodes run `nodeforge lab provision --tags ...` with the roles a "
            "VM shows something for (inventories/lab-vm/hosts.yml)"
        )
    path = _lab_call(lab_vm.up, name, nodes) if vm else _lab_call(lab.up, name, nodes, toolkit_mirror)
    console.print(f"lab {name}: {len(_lab_call(lab.nodes, name))} node(s) up; inventory: {path}")
    if vm:
        console.print("VM nodes (QEMU, software emulation); console logs under " + str(lab_vm.vm_dir(name)))
    elif toolkit_mirror is None:
        console.print("container toolkit: from NVIDIA's repository (no --toolkit-mirror given)")
    else:
        console.print(f"container toolkit: from {toolkit_mirror}, served on each node's loopback")
    if then_provision:
        sys.exit(_lab_provision(name, json_mode))


def _lab_provision(name: str, json_mode: bool, **kw: Any) -> int:
    path = lab.inventory_path(name)
    if not path.exists():
        raise click.ClickException(f"lab {name} is not up (no {path}); run: nodeforge lab up")
    return run_verb("provision", Inputs(inventory=(str(path),), extra_vars=kw.pop("extra_vars", ())), json_mode, **kw)


@lab_group.command(name="provision")
@click.option("--json", "json_mode", is_flag=True, help="Machine-readable summary.")
@click.option("-t", "--tags", help="Only run tasks with these tags.")
@click.option("-e", "--extra-vars", "extra_vars", multiple=True, help="k=v, @file.yml or JSON; repeatable.")
@_lab_name
def lab_provision(json_mode: bool, tags: str | None, extra_vars: tuple[str, ...], name: str) -> None:
    """Run `provision` against the lab's nodes."""
    sys.exit(_lab_provision(name, json_mode, tags=tags, extra_vars=extra_vars))


@lab_group.command(name="down")
@_lab_name
def lab_down(name: str) -> None:
    """Remove the lab's containers or VMs, inventory and keys."""
    removed = _lab_call(lab.down, name)
    _console().print(f"lab {name}: removed {', '.join(removed) if removed else 'nothing (no nodes)'}")


@lab_group.command(name="status")
@_lab_name
def lab_status(name: str) -> None:
    """List the lab's nodes, their state and SSH port."""
    console = _console()
    found = _lab_call(lab.nodes, name)
    if not found:
        console.print(f"lab {name}: no nodes")
        return
    for node in found:
        address = f"ssh {lab.LOOPBACK}:{node.port}" if node.port else "ssh: no port published"
        console.print(f"{node.name}  {node.state}  {address}")
    console.print(f"inventory: {lab.inventory_path(name)}", soft_wrap=True)
    console.print(f"known_hosts: {lab.known_hosts_path(name)}", soft_wrap=True)


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
