"""The nodeforge command line: verbs map to playbooks through one table; Ansible options are defined once."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import yaml
from rich.console import Console

from nodeforge import __version__, checks, lab, report, scaffold
from nodeforge.runner import EXIT_ERROR, RunOptions, run_playbook


@dataclass(frozen=True)
class Verb:
    playbook: str
    help: str
    check: bool = False
    diff: bool = False


# The one table of verbs that run Ansible.
VERBS: dict[str, Verb] = {
    "preflight": Verb(
        "preflight.yml", "Read-only node checks: OS, kernel headers, Secure Boot, SELinux, PCI vs profile."
    ),
    "provision": Verb("site.yml", "Provision the node stack (preflight, then each component role)."),
    "plan": Verb("site.yml", "Show what provision would change, per host (check + diff mode).", check=True, diff=True),
}


def _console(json_mode: bool = False) -> Console:
    # With --json, human output goes to stderr so stdout stays machine-readable.
    return Console(stderr=json_mode, highlight=False)


def parse_extravars(values: tuple[str, ...]) -> dict[str, Any]:
    """-e k=v, -e @file.yml (YAML or JSON), -e '{"json": "object"}'; later ones win, as with ansible-playbook."""
    result: dict[str, Any] = {}
    for raw in values:
        if raw.startswith("@"):
            path = Path(raw[1:])
            try:
                data = yaml.safe_load(path.read_text())
            except OSError as exc:
                raise click.BadParameter(f"cannot read {path}: {exc.strerror}", param_hint="-e") from exc
            except yaml.YAMLError as exc:
                raise click.BadParameter(f"{path} is not valid YAML: {exc}", param_hint="-e") from exc
            if not isinstance(data, dict):
                raise click.BadParameter(f"{path} must hold a mapping of variables", param_hint="-e")
            result.update(data)
        elif raw.lstrip().startswith("{"):
            try:
                data = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise click.BadParameter(f"{raw!r} is not a JSON object: {exc}", param_hint="-e") from exc
            result.update(data)
        else:
            for pair in raw.split():
                if "=" not in pair:
                    raise click.BadParameter(f"{pair!r}: expected key=value, @file or a JSON object", param_hint="-e")
                key, value = pair.split("=", 1)
                result[key] = value
    return result


def ansible_options(func: Any) -> Any:
    """The options every verb that runs Ansible shares."""
    options = [
        click.option(
            "-i",
            "--inventory",
            required=True,
            type=click.Path(exists=True),
            help="Inventory file or directory.",
        ),
        click.option("-l", "--limit", help="Limit to hosts or groups (Ansible pattern)."),
        click.option("-t", "--tags", help="Only run tasks with these tags (comma-separated)."),
        click.option("--skip-tags", help="Skip tasks with these tags (comma-separated)."),
        click.option("-e", "--extra-vars", "extra_vars", multiple=True, help="k=v, @file.yml or JSON; repeatable."),
        click.option("--check", is_flag=True, help="Ansible check mode: change nothing."),
        click.option("--diff", is_flag=True, help="Show file differences."),
        click.option("-v", "--verbose", "verbosity", count=True, help="Ansible verbosity (-v .. -vvvv)."),
        click.option("--forks", type=click.IntRange(1, 500), help="Parallel hosts."),
        click.option("--json", "json_mode", is_flag=True, help="Print a machine-readable summary on stdout."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def validate_or_exit(console: Console, inventory: str, extravars: dict[str, Any], json_mode: bool) -> None:
    """The static check, run before any node is touched; exits non-zero on any problem."""
    problems = checks.check_inventory(inventory, extravars)
    if not problems:
        return
    if json_mode:
        report.print_json(Console(), {"status": "invalid", "problems": [p.as_dict() for p in problems]})
    report.print_problems(console, problems)
    sys.exit(EXIT_ERROR)


def run_verb(verb: str, inventory: str, json_mode: bool, **kw: Any) -> int:
    spec = VERBS[verb]
    console = _console(json_mode)
    extravars = parse_extravars(kw.pop("extra_vars", ()))
    validate_or_exit(console, inventory, extravars, json_mode)
    opts = RunOptions(
        inventory=inventory,
        extravars=extravars,
        check=kw.pop("check", False) or spec.check,
        diff=kw.pop("diff", False) or spec.diff,
        envvars=kw.pop("envvars", {}),
        **kw,
    )
    with report.live_progress(console, enabled=not json_mode) as tick:
        result = run_playbook(spec.playbook, opts, on_tick=tick)
    if json_mode:
        report.print_json(Console(), result.as_dict())
    else:
        report.print_result(console, result, plan=verb == "plan")
    return result.exit_code


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="nodeforge")
def main() -> None:
    """nodeforge: provision bare-metal GPU/RDMA servers into validated Kubernetes workers."""


def _make_verb(name: str, verb: Verb) -> None:
    @ansible_options
    def command(**kw: Any) -> None:
        sys.exit(run_verb(name, kw.pop("inventory"), kw.pop("json_mode"), **kw))

    main.command(name=name, help=verb.help)(command)


for _name, _verb in VERBS.items():
    _make_verb(_name, _verb)


@main.command()
@click.option("-i", "--inventory", required=True, type=click.Path(exists=True), help="Inventory file or directory.")
@click.option("-e", "--extra-vars", "extra_vars", multiple=True, help="k=v, @file.yml or JSON; checked too.")
@click.option("--json", "json_mode", is_flag=True, help="Print the problems as JSON.")
def check(inventory: str, extra_vars: tuple[str, ...], json_mode: bool) -> None:
    """Validate an inventory without touching any node; report every problem at once."""
    console = _console(json_mode)
    problems = checks.check_inventory(inventory, parse_extravars(extra_vars))
    if json_mode:
        status = "invalid" if problems else "valid"
        report.print_json(Console(), {"status": status, "problems": [p.as_dict() for p in problems]})
    elif problems:
        report.print_problems(console, problems)
    else:
        console.print(f"[green]ok[/green]: {inventory} is valid")
    sys.exit(EXIT_ERROR if problems else 0)


@main.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--profile", "-p", required=True, help="Hardware profile (e.g. dgx-1, dell-c4140, lab).")
@click.option("--nodes", "-n", default=2, show_default=True, type=int, help="Number of GPU nodes.")
@click.option("--host-prefix", default="gpu-node", show_default=True, help="Host names: PREFIX-01, PREFIX-02, ...")
@click.option("--os", "node_os", default="", help="Declare nodeforge_os (e.g. rocky9, ubuntu24.04, debian12).")
def init(directory: Path, profile: str, nodes: int, host_prefix: str, node_os: str) -> None:
    """Scaffold an inventory in DIRECTORY from a hardware profile."""
    try:
        written = scaffold.write(directory, profile, nodes, host_prefix, node_os)
    except scaffold.ScaffoldError as exc:
        raise click.ClickException(str(exc)) from exc
    console = _console()
    for path in written:
        console.print(f"wrote {path}")
    console.print(f"next: edit {directory}/hosts.yml, then run: nodeforge check -i {directory}")


@main.group(name="lab")
def lab_group() -> None:
    """The lab: podman containers as nodes, provisioned end to end through the CLI."""


_lab_name = click.option("--name", default="lab", show_default=True, help="Lab name (containers nodeforge-NAME-N).")


def _lab_call(func: Any, *args: Any) -> Any:
    try:
        return func(*args)
    except lab.LabError as exc:
        raise click.ClickException(str(exc)) from exc


@lab_group.command(name="up")
@click.option("--nodes", "-n", default=2, show_default=True, type=int, help="Number of container nodes.")
@click.option("--provision", "then_provision", is_flag=True, help="Provision the nodes right away.")
@click.option("--json", "json_mode", is_flag=True, help="Machine-readable provision summary.")
@_lab_name
def lab_up(nodes: int, then_provision: bool, json_mode: bool, name: str) -> None:
    """Start N container nodes and write their inventory."""
    console = _console(json_mode)
    path = _lab_call(lab.up, name, nodes)
    console.print(f"lab {name}: {len(_lab_call(lab.nodes, name))} node(s) up; inventory: {path}")
    if then_provision:
        sys.exit(_lab_provision(name, json_mode))


def _lab_provision(name: str, json_mode: bool, **kw: Any) -> int:
    path = lab.inventory_path(name)
    if not path.exists():
        raise click.ClickException(f"lab {name} is not up (no {path}); run: nodeforge lab up")
    return run_verb(
        "provision",
        str(path),
        json_mode,
        envvars={"CONTAINERS_CONF": lab.podman_env()["CONTAINERS_CONF"]},
        **kw,
    )


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
    """Remove the lab's containers and inventory."""
    removed = _lab_call(lab.down, name)
    _console().print(f"lab {name}: removed {', '.join(removed) if removed else 'nothing (no nodes)'}")


@lab_group.command(name="status")
@_lab_name
def lab_status(name: str) -> None:
    """List the lab's nodes and their state."""
    console = _console()
    found = _lab_call(lab.nodes, name)
    if not found:
        console.print(f"lab {name}: no nodes")
        return
    for node in found:
        console.print(f"{node.name}  {node.state}")
    console.print(f"inventory: {lab.inventory_path(name)}", soft_wrap=True)


if __name__ == "__main__":  # pragma: no cover
    main()
