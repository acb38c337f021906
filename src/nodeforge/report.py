"""What the operator sees: live progress while a run goes, and the per-host summary after it."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from nodeforge.runner import COUNTERS, Progress, RunResult

if TYPE_CHECKING:  # the check's modules load ansible-core: a run verb loads them beside its run (cli.run_verb)
    from nodeforge.checks import Problem

STYLES = {"ok": "green", "changed": "yellow", "failed": "red", "unreachable": "magenta"}
# The validation play that opens every playbook runs the CLI's own check again and repeats its warnings as Ansible
# warnings (runner.Progress makes them notices "warning: nodeforge check: ..."): the CLI printed them before the run,
# so the live view, the summary and --json leave them out of the run's notices (each warning once per invocation).
CHECK_WARNING = "warning: nodeforge check: "


def _progress_view(progress: Progress) -> Group:
    with progress.lock:
        header = Text.assemble(("play: ", "bold"), progress.play or "-", ("   task: ", "bold"), progress.task or "-")
        table = Table(box=None, pad_edge=False)
        table.add_column("host")
        for name in ("ok", "changed", "failed", "unreachable"):
            table.add_column(name, justify="right", style=STYLES[name])
        for host in sorted(progress.counts):
            c = progress.counts[host]
            table.add_row(host, *(str(c[n]) for n in ("ok", "changed", "failed", "unreachable")))
        notices = [Text(f"{host}: {text}", style="yellow") for host, text in run_notices(progress.notices)]
    return Group(header, table, *notices[-8:])


@contextmanager
def live_progress(console: Console, enabled: bool = True) -> Iterator[Any]:
    """Yields an on_tick callback that redraws the live view on a terminal, else prints each task and notice as it
    comes (a no-op when disabled). Under --json the console is stderr: stdout holds the document alone."""
    if not enabled or not console.is_terminal:
        printed = {"tasks": 0}
        shown: set[tuple[str, str]] = set()

        def plain_tick(progress: Progress) -> None:
            # Non-terminal output (CI logs): one line per task that did something on a host (Progress.tasks: a task
            # every host skipped is not one), and each notice as it comes, instead of a redrawn view.
            if not enabled:
                return
            with progress.lock:
                progress.task  # noqa: B018  (shows a task that has been at work on a host for a while)
                tasks = progress.tasks[printed["tasks"] :]
                fresh = [(h, t) for h, t in run_notices(progress.notices) if (h, t) not in shown]
            printed["tasks"] += len(tasks)
            for play, task in tasks:
                console.print(f"[dim]{escape(play)} | {escape(task)}[/dim]", highlight=False, soft_wrap=True)
            for host, text in fresh:
                shown.add((host, text))
                console.print(f"[yellow]{escape(host)}[/yellow]: {escape(text)}", highlight=False, soft_wrap=True)

        yield plain_tick
        return
    with Live(console=console, refresh_per_second=4, transient=True) as live:
        yield lambda progress: live.update(_progress_view(progress))


def summary_table(result: RunResult) -> Table:
    table = Table(title=escape(f"{result.playbook.rsplit('/', 1)[-1]}: {result.status} in {result.duration_s:.1f}s"))
    table.add_column("host", no_wrap=True)
    # rescued/ignored only when some host has them: host names must stay readable in an 80-column CI log.
    shown = [n for n in COUNTERS if n not in ("rescued", "ignored") or any(h[n] for h in result.hosts.values())]
    for name in shown:
        table.add_column(name, justify="right", style=STYLES.get(name), no_wrap=True)
    show_reboot = bool(result.reboot_required)
    if show_reboot:
        table.add_column("reboot")
    for host, counts in result.hosts.items():
        row = [escape(host), *(str(counts[n]) for n in shown)]
        if show_reboot:
            row.append("required" if result.reboot_required.get(host) else "-")
        table.add_row(*row)
    return table


def print_result(console: Console, result: RunResult, plan: bool = False) -> None:
    console.print(summary_table(result))
    if plan:
        for host in result.hosts:
            tasks = result.changes.get(host, [])
            changes = escape(", ".join(tasks)) if tasks else "nothing"
            console.print(f"[bold]{escape(host)}[/bold] would change: {changes}")
    # Where the output is a log, the live progress printed each notice as it came (live_progress); on a terminal its
    # view went away with the run: the summary lists them there, so that each is said once.
    for host, text in run_notices(result.notices) if console.is_terminal else []:
        console.print(f"[yellow]notice[/yellow] {escape(host)}: {escape(text)}", highlight=False, soft_wrap=True)
    print_failures(console, result)
    for host, required in result.reboot_required.items():
        if required:
            console.print(f"[yellow]reboot required[/yellow] on {escape(host)} (nodeforge_reboot_policy decides)")
    if result.error:
        error = escape(result.error)
        console.print(f"[red]ansible-playbook failed before reaching any host[/red]:\n{error}", highlight=False)
    if result.status == "canceled":
        console.print("[red]canceled[/red]: the run was interrupted; hosts may be partly changed")
    console.print(f"artifacts: {escape(str(result.artifacts))}", highlight=False, soft_wrap=True)


def print_failures(console: Console, result: RunResult) -> None:
    for f in result.failures:
        kind = "UNREACHABLE" if f.unreachable else "FAILED"
        where = f"{escape(f.host)}: task [bold]{escape(f.task)}[/bold]"
        console.print(f"[red]{kind}[/red] {where}: {escape(f.message)}", highlight=False)


def print_warnings(console: Console, warnings: list[Problem]) -> None:
    for w in warnings:
        console.print(f"[yellow]warning[/yellow]: {escape(str(w))}", highlight=False, soft_wrap=True)


def print_problems(console: Console, problems: list[Problem]) -> None:
    console.print(f"[red]{len(problems)} problem(s)[/red] found; no node was touched:", highlight=False)
    for p in problems:
        console.print(f"  - {escape(str(p))}", highlight=False, soft_wrap=True)


def run_notices(notices: Mapping[str, list[str]]) -> list[tuple[str, str]]:
    """A run's notices as (host, text), without the check's warnings the validation play repeats (CHECK_WARNING)."""
    return [(host, text) for host, texts in notices.items() for text in texts if not text.startswith(CHECK_WARNING)]


# --json: every verb prints one document of this shape on stdout (docs/json-output.md; the schema below is
# docs/json-output.schema.json, written by tools/gen_docs.py). json_payload is the one place that builds it.
COMMON_KEYS = ("status", "exit_code", "problems", "warnings", "notices", "files", "hosts")
_PROBLEM_KEYS = ("where", "scope", "variable", "found", "expected")


def problem(where: str, scope: str = "", variable: str = "", found: str = "", expected: str = "") -> dict[str, str]:
    """A problem in the shape of the check's (inventory_check.Problem.as_dict), for what is not the inventory's: an
    option the command line got wrong, an object that is not valid."""
    return {"where": where, "scope": scope, "variable": variable, "found": found, "expected": expected}


def _problem_dict(item: Any) -> dict[str, str]:
    found = item.as_dict() if hasattr(item, "as_dict") else dict(item)
    return {key: str(found.get(key, "")) for key in _PROBLEM_KEYS}


def _notice_dict(item: Any) -> dict[str, Any]:
    if isinstance(item, str):
        return {"host": None, "text": item}
    if isinstance(item, Mapping):
        return {"host": item.get("host"), "text": str(item["text"])}
    host, text = item
    return {"host": host, "text": str(text)}


def json_payload(
    status: str,
    exit_code: int,
    *,
    problems: Iterable[Any] = (),
    warnings: Iterable[Any] = (),
    notices: Iterable[Any] = (),
    files: Iterable[Any] = (),
    hosts: Mapping[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """The --json document of any verb: the common keys (COMMON_KEYS), then the verb's own (`extra`: a run's
    `failures`, `changes`, `artifacts`; init's `next`; k8s job's `objects` ...). Problems and warnings are the check's
    Problems (or problem() dicts); a notice is a text, a (host, text) pair or {"host", "text"} (host None: the
    command's own notice, not a host's); files are the paths the command wrote."""
    return {
        "status": status,
        "exit_code": int(exit_code),
        "problems": [_problem_dict(p) for p in problems],
        "warnings": [_problem_dict(w) for w in warnings],
        "notices": [_notice_dict(n) for n in notices],
        "files": [str(f) for f in files],
        "hosts": dict(hosts or {}),
        **extra,
    }


def run_payload(
    result: RunResult,
    *,
    warnings: Iterable[Any] = (),
    files: Iterable[Any] = (),
    status: str | None = None,
    exit_code: int | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """json_payload of a playbook run: its status (ansible-runner's: successful, failed, canceled, timeout) and exit
    code unless given, hosts (each host's counters), notices, and the rest of the run summary as the verb's own keys
    (playbook, rc, duration_s, artifacts, failures, changes, reboot_required, acceptance, upgrade_plans,
    upgrade_records, error)."""
    summary = {k: v for k, v in result.as_dict().items() if k not in COMMON_KEYS}
    return json_payload(
        result.status if status is None else status,
        result.exit_code if exit_code is None else exit_code,
        warnings=warnings,
        notices=run_notices(result.notices),
        files=files,
        hosts=result.hosts,
        **{**summary, **extra},
    )


class _Printed:
    """Whether this invocation printed its JSON document yet (cli._Main resets it as each invocation starts)."""

    json = False


def json_printed() -> bool:
    return _Printed.json


def reset_json() -> None:
    _Printed.json = False


def print_json(payload: dict[str, Any]) -> None:
    """The invocation's one JSON document, on stdout (human output goes to stderr under --json)."""
    _Printed.json = True
    sys.stdout.write(json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n")
    sys.stdout.flush()


_STRING = {"type": "string"}
_PROBLEM = {
    "type": "object",
    "description": "The shape of `nodeforge check`'s problems. For an error (status error): where is 'command line' "
    "(an option refused), 'input' (a file or vault the command could not use) or 'nodeforge' (interrupted, a bug), "
    "scope the command, variable the option (when known), found the error.",
    "required": list(_PROBLEM_KEYS),
    "additionalProperties": False,
    "properties": {
        "where": {**_STRING, "description": "A file (with its line when known), the inventory, or the error's kind."},
        "scope": {**_STRING, "description": "'group X', 'host Y', 'hosts Y, Z', an object or the command."},
        "variable": {**_STRING, "description": "The variable, field or option; empty for the whole scope."},
        "found": {**_STRING, "description": "What was found (secrets masked)."},
        "expected": {**_STRING, "description": "What was expected; may be empty."},
    },
}
# Every status a verb prints, by verb (docs/json-output.md).
STATUSES = {
    "ok": "a command that runs no playbook did what it was asked (init, k8s job/scale-pv/convert-mpijob, lab, mirror)",
    "valid": "check: the inventory is valid; mirror verify: every artefact matches",
    "invalid": "the inventory check refused the input (check, or any verb before its run), or an object is not valid; "
    "mirror verify: an artefact does not match",
    "error": "the command line or its input was refused, or the command failed before doing anything (key `error`)",
    "successful": "a run: ansible-runner's status (also failed, canceled, timeout)",
    "failed": "a run in which a task failed or a host was unreachable; validate: a check failed; mirror pull, push: "
    "an artefact could not be fetched, verified or pushed",
    "serving": "mirror serve: the address it serves (then it serves until interrupted)",
    "canceled": "a run interrupted (Ctrl-C)",
    "timeout": "a run that ansible-runner stopped at its timeout",
    "passed": "validate: every check passed or does not apply",
    "planned": "upgrade without --yes, plan --upgrade: the schedule could be made; nothing changed",
    "current": "upgrade, plan --upgrade: every node is at the target",
    "refused": "upgrade, plan --upgrade: a node is refused; no node was touched",
    "done": "upgrade --yes: every node upgraded",
    "halted": "upgrade --yes: the run stopped at a node (resume with --resume)",
}
JSON_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "nodeforge --json output",
    "description": "What every nodeforge verb prints on stdout with --json: exactly one document of this shape "
    "(human output goes to stderr). Generated from nodeforge.report.JSON_SCHEMA by tools/gen_docs.py; do not edit. "
    "docs/json-output.md describes each key and each verb's own keys.",
    "type": "object",
    "required": list(COMMON_KEYS),
    "properties": {
        "status": {"type": "string", "enum": list(STATUSES), "description": "The outcome, in a word."},
        "exit_code": {
            "type": "integer",
            "enum": [0, 1, 2, 3, 4, 5, 99, 250],
            "description": "The process's exit code (docs/cli-reference.md, 'Exit codes').",
        },
        "problems": {
            "type": "array",
            "items": {"$ref": "#/$defs/problem"},
            "description": "Why the input was refused: the inventory check's problems, an invalid object, or the "
            "command line's error. Empty when nothing was refused.",
        },
        "warnings": {
            "type": "array",
            "items": {"$ref": "#/$defs/problem"},
            "description": "What the inventory check reports without refusing (a placeholder address, a key not "
            "pinned).",
        },
        "notices": {
            "type": "array",
            "items": {"$ref": "#/$defs/notice"},
            "description": "What the operator must see: a host's announcements and Ansible's warnings in a run, the "
            "command's own notes (host null).",
        },
        "files": {
            "type": "array",
            "items": {"type": "string", "minLength": 1},
            "description": "The paths the command wrote (render's objects, init's inventory, -o, validate's reports).",
        },
        "hosts": {
            "type": "object",
            "additionalProperties": {"type": "object"},
            "description": "Per host, where a run happened: its counters (ok, changed, failed, unreachable, skipped, "
            "rescued, ignored); validate: its checks. Else {}.",
        },
        "error": {"type": "string", "description": "With status error: the error, as the human output says it."},
        "failures": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["host", "task", "message", "unreachable"],
                "properties": {
                    "host": _STRING,
                    "task": _STRING,
                    "message": _STRING,
                    "unreachable": {"type": "boolean"},
                },
            },
            "description": "A run: each failed task or unreachable host.",
        },
        "changes": {
            "type": "object",
            "additionalProperties": {"type": "array", "items": _STRING},
            "description": "A run: per host, the tasks that changed (plan: would change).",
        },
        "artifacts": {**_STRING, "description": "A run: ansible-runner's artifact directory."},
        "objects": {
            "type": "array",
            "items": {"type": "object"},
            "description": "k8s job, scale-pv, convert-mpijob: the objects written (also when -o names a file).",
        },
    },
    "additionalProperties": True,
    "allOf": [
        {"if": {"properties": {"status": {"const": "error"}}}, "then": {"required": ["error"]}},
        {
            "if": {"properties": {"status": {"enum": ["ok", "valid", "passed", "planned", "current", "done"]}}},
            "then": {"properties": {"exit_code": {"const": 0}}},
        },
        {
            "if": {"properties": {"status": {"enum": ["error", "invalid", "refused", "halted", "canceled"]}}},
            "then": {"properties": {"exit_code": {"not": {"const": 0}}}},
        },
    ],
    "$defs": {
        "problem": _PROBLEM,
        "notice": {
            "type": "object",
            "required": ["host", "text"],
            "additionalProperties": False,
            "properties": {
                "host": {"type": ["string", "null"], "description": "The host it is about; null: the command's own."},
                "text": {"type": "string", "minLength": 1},
            },
        },
    },
}
