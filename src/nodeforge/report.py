"""What the operator sees: live progress while a run goes, and the per-host summary after it."""

from __future__ import annotations

import json
from collections.abc import Iterator
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
        notices = [
            Text(f"{host}: {text}", style="yellow") for host, texts in progress.notices.items() for text in texts
        ]
    return Group(header, table, *notices[-8:])


@contextmanager
def live_progress(console: Console, enabled: bool = True) -> Iterator[Any]:
    """Yields an on_tick callback that redraws the live view (a no-op when disabled, e.g. --json)."""
    if not enabled or not console.is_terminal:
        last = {"task": None}
        shown: set[tuple[str, str]] = set()

        def plain_tick(progress: Progress) -> None:
            # Non-terminal output (CI logs): one line per new task instead of a redrawn view.
            if enabled and progress.task and progress.task != last["task"]:
                last["task"] = progress.task
                console.print(f"[dim]{escape(progress.play)} | {escape(progress.task)}[/dim]", highlight=False)
            if enabled:
                with progress.lock:
                    fresh = [(h, t) for h, texts in progress.notices.items() for t in texts if (h, t) not in shown]
                for host, text in fresh:
                    shown.add((host, text))
                    console.print(f"[yellow]{escape(host)}[/yellow]: {escape(text)}", highlight=False, soft_wrap=True)

        yield plain_tick
        return
    with Live(console=console, refresh_per_second=4, transient=True) as live:
        yield lambda progress: live.update(_progress_view(progress))


def summary_table(result: RunResult) -> Table:
    table = Table(title=f"{result.playbook.rsplit('/', 1)[-1]}: {result.status} in {result.duration_s:.1f}s")
    table.add_column("host", no_wrap=True)
    # rescued/ignored only when some host has them: host names must stay readable in an 80-column CI log.
    shown = [n for n in COUNTERS if n not in ("rescued", "ignored") or any(h[n] for h in result.hosts.values())]
    for name in shown:
        table.add_column(name, justify="right", style=STYLES.get(name), no_wrap=True)
    show_reboot = bool(result.reboot_required)
    if show_reboot:
        table.add_column("reboot")
    for host, counts in result.hosts.items():
        row = [host, *(str(counts[n]) for n in shown)]
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
    for host, texts in result.notices.items():
        for text in texts:
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


def print_json(console: Console, payload: dict[str, Any]) -> None:
    console.file.write(json.dumps(payload, indent=2, sort_keys=True) + "\n")


def print_warnings(console: Console, warnings: list[Problem]) -> None:
    for w in warnings:
        console.print(f"[yellow]warning[/yellow]: {escape(str(w))}", highlight=False, soft_wrap=True)


def print_problems(console: Console, problems: list[Problem]) -> None:
    console.print(f"[red]{len(problems)} problem(s)[/red] found; no node was touched:")
    for p in problems:
        console.print(f"  - {escape(str(p))}", highlight=False, soft_wrap=True)
