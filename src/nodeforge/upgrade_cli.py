"""`nodeforge upgrade` and `nodeforge plan --upgrade`: rolling day-2 driver-stack upgrades (playbooks/upgrade.yml).

The playbook's first play plans (read-only): every node's installed and target versions, its record from an earlier
upgrade, and the plan module_utils/upgrade.py makes of them, and the batch size. `plan --upgrade` and `upgrade`
without --yes run that play alone (upgrade_plan_only) and print the schedule (batches in host name order, the nodes
already at the target, the refused ones). `upgrade --yes` runs the playbook once: the schedule is printed when its
batches start, and a refused node stops the run in the plan play, before any node is touched.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from nodeforge import cli, connection, report
from nodeforge.collection import upgrade
from nodeforge.runner import EXIT_ERROR, EXIT_OK, Canceller, RunResult, state_dir

PLAYBOOK = "upgrade.yml"
VERB = cli.Verb(PLAYBOOK, "Rolling upgrade of the driver stack in batches: drain, install, reboot, validate, uncordon.")
PLAN_VERB = cli.Verb(PLAYBOOK, "The upgrade's schedule (read-only).")


def upgrade_options(func: Any) -> Any:
    options = [
        click.option(
            "--component",
            type=click.Choice(upgrade.CHOICES),
            help="What to move: driver, ofed, toolkit, or stack (every component the node has).",
        ),
        click.option(
            "--to",
            "to_version",
            help="Target version (sets nvidia_driver_version, ofed_version or nvidia_container_toolkit_version); "
            "unset, the inventory's or the version manifest's.",
        ),
        click.option("--batch", type=click.IntRange(1), help="Nodes per batch (default 1)."),
        click.option(
            "--max-unavailable", help="Nodes per batch as a share of the targeted nodes (e.g. 25%) or a count."
        ),
        click.option(
            "--drain",
            type=click.Choice(["kubernetes", "slurm", "none"]),
            default="none",
            show_default=True,
            help="How each node is taken out of service before its upgrade.",
        ),
        click.option("--resume", is_flag=True, help="Continue an upgrade an earlier run left unfinished."),
        click.option("--allow-downgrade", is_flag=True, help="Allow a target older than the installed version."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _settings(component: str, to_version: str | None, drain: str, resume: bool, allow_downgrade: bool) -> dict:
    """The playbook's variables for these flags; --to as the component's own version variable."""
    if to_version and component == "stack":
        raise click.UsageError("--to names one component's version: use it with --component driver, ofed or toolkit")
    settings: dict[str, Any] = {
        "upgrade_component": component,
        "upgrade_drain": drain,
        "upgrade_resume": resume,
        "upgrade_allow_downgrade": allow_downgrade,
    }
    if to_version:
        settings[upgrade.VERSION_VARS[component]] = to_version
    return settings


def _inputs(kw: dict[str, Any], settings: dict[str, Any]) -> cli.Inputs:
    """The operator's -e values with the upgrade's own after them: `check` validates the target version with the
    same rules as provision (branch vs GPU architecture, peermem vs branch, ...)."""
    inputs = cli._inputs(kw)
    inputs.extra_vars = (*inputs.extra_vars, json.dumps(settings))
    return inputs


# The playbook's play that upgrades the nodes: once it starts, every node has its plan.
BATCH_PLAY = "Upgrade the nodes in batches"


def _batch_vars(batch: int | None, max_unavailable: str | None) -> dict[str, Any]:
    """The playbook's variables for --batch / --max-unavailable (its plan play sizes the batches from them), both
    always set, so that the batches are the ones the CLI's schedule shows whatever the inventory or -e say; a bad
    value or both flags are refused here, before any node is read."""
    try:
        upgrade.batch_size(1, batch, max_unavailable)
    except upgrade.UpgradeError as exc:
        raise click.UsageError(str(exc)) from exc
    return {"upgrade_batch": batch or 1, "upgrade_max_unavailable": max_unavailable or ""}


def plans_and_schedule(
    plans: dict[str, Any], batch: int | None, max_unavailable: str | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    plans = dict(plans)
    try:
        size = upgrade.batch_size(len(plans), batch, max_unavailable)
    except upgrade.UpgradeError as exc:
        raise click.UsageError(str(exc)) from exc
    return plans, upgrade.schedule(plans, size)


def print_schedule(console: Console, plans: dict[str, Any], sched: dict[str, Any], reboot_policy: str = "") -> None:
    table = Table(title=f"upgrade schedule: {len(sched['batches'])} batch(es) of at most {sched['batch_size']} node(s)")
    for column in ("batch", "host", "component", "from", "to", "action"):
        table.add_column(column, no_wrap=column != "action")
    rows = [(str(i), h) for i, hosts in enumerate(sched["batches"], 1) for h in hosts]
    rows += [("-", h) for h in sched["current"]] + [("refused", h) for h in sched["refused"]]
    for batch, host in rows:
        plan = plans[host]
        for entry in plan["components"] or [{"component": "-", "from": "", "to": "", "action": plan["action"]}]:
            action = entry["action"] if plan["action"] != "refused" else "refused"
            if plan["resume"]:
                action += f" (resume: {plan['state'].get('state')} at {plan['state'].get('step')})"
            table.add_row(batch, host, entry["component"], entry["from"] or "-", entry["to"] or "-", action)
    console.print(table)
    for host, reasons in sched["refused"].items():
        for reason in reasons:
            console.print(f"[red]refused[/red] {escape(host)}: {escape(reason)}", highlight=False, soft_wrap=True)
    if sched["current"]:
        console.print(f"skipped (already at the target): {', '.join(sched['current'])}", soft_wrap=True)
    if reboot_policy:
        console.print(reboot_policy, soft_wrap=True)


def _reboot_note(component: str) -> str:
    if component == "toolkit":
        return "reboots: none (the toolkit changes no kernel module)"
    return (
        "reboots: where the driver's modules cannot be unloaded, or a role records one, nodeforge_reboot_policy "
        "decides (if_needed reboots, never leaves it to you); containers are never rebooted"
    )


class StopAfterStep(Canceller):
    """The first Ctrl-C asks every node to stop before its next step (the playbook's upgrade_stop_file), so that no
    node is left between releasing its holds and installing; a second one cancels at once."""

    def __init__(self, stop_file: Path, console: Console) -> None:
        super().__init__()
        self.stop_file = stop_file
        self.console = console

    def request(self, *_: Any) -> None:
        if self.stop_file.exists():
            self.requested.set()
            return
        self.stop_file.touch(mode=0o600)
        self.console.print(
            "[yellow]stopping[/yellow]: each node finishes its current step, then stops (state upgrade-stopped); "
            "Ctrl-C again cancels at once"
        )


def print_outcome(console: Console, result: RunResult, sched: dict[str, Any], argv_hint: str) -> None:
    records = result.upgrade_records
    table = Table(title=f"upgrade: {result.status} in {result.duration_s:.1f}s")
    for column in ("batch", "host", "state", "step"):
        table.add_column(column, no_wrap=True)
    for i, hosts in enumerate(sched["batches"], 1):
        for host in hosts:
            record = records.get(host)
            state = record["state"] if record else "not started"
            table.add_row(str(i), host, state, record.get("step", "-") if record else "-")
    console.print(table)
    report.print_failures(console, result)
    unfinished = [h for h, r in records.items() if r.get("state") in upgrade.UNFINISHED]
    not_started = [h for hosts in sched["batches"] for h in hosts if h not in records]
    if unfinished or result.exit_code != EXIT_OK:
        console.print(
            f"[red]halted[/red]: {', '.join(unfinished) or 'the run'} did not finish; "
            f"{'not started: ' + ', '.join(not_started) if not_started else 'no node was left unstarted'}. "
            f"Fix what is reported, then: {argv_hint} --resume --yes",
            highlight=False,
            soft_wrap=True,
        )
    console.print(f"artifacts: {escape(str(result.artifacts))}", highlight=False, soft_wrap=True)


def _hint(kw: dict[str, Any], component: str, to_version: str | None, drain: str, allow_downgrade: bool) -> str:
    parts = ["nodeforge upgrade", *(f"-i {i}" for i in kw.get("inventory", ())), f"--component {component}"]
    if to_version:
        parts.append(f"--to {to_version}")
    if drain != "none":
        parts.append(f"--drain {drain}")
    if allow_downgrade:
        parts.append("--allow-downgrade")
    return " ".join(parts)


INPUT_KEYS = ("inventory", "extra_vars", "vault_ids", "vault_password_files", "ask_vault_pass")


def _run(
    kw: dict[str, Any],
    settings: dict[str, Any],
    json_mode: bool,
    spec: cli.Verb,
    extravars: dict[str, Any],
    canceller: Canceller | None = None,
    watch: Any = None,
) -> tuple[RunResult, list[Any]]:
    """The static check (the target included), then upgrade.yml; the result, whatever its outcome, and the check's
    warnings."""
    holder: dict[str, RunResult] = {}

    def keep(_: Console, result: RunResult) -> int:
        holder["result"] = result
        return result.exit_code

    run_kw = {k: v for k, v in kw.items() if k not in INPUT_KEYS}
    if canceller is not None:
        run_kw["canceller"] = canceller
    inputs = _inputs(dict(kw), settings)
    cli.run_verb("upgrade", inputs, json_mode, spec=spec, extravars=extravars, present=keep, watch=watch, **run_kw)
    return holder["result"], inputs.warnings


UNPLANNED = "the upgrade's plan could not read every node; no node was touched"


def _unplanned(console: Console, run: tuple[RunResult, list[Any]], json_mode: bool) -> None:
    """The plan play could not read every node: report the run and exit; no node was touched."""
    result = run[0]
    report.print_result(console, result)
    console.print("[red]the upgrade's plan could not read every node[/red]; no node was touched")
    _finish(json_mode, run, "error", result.exit_code or EXIT_ERROR, error=UNPLANNED)


def _plan(
    console: Console, kw: dict[str, Any], settings: dict[str, Any], json_mode: bool, batch: int | None, mu: str | None
) -> tuple[tuple[RunResult, list[Any]], dict[str, Any], dict[str, Any]]:
    """Run the plan play alone; exit when it could not read every node."""
    run = _run(kw, settings, json_mode, PLAN_VERB, {"upgrade_plan_only": True, **_batch_vars(batch, mu)})
    if run[0].exit_code != EXIT_OK or not run[0].upgrade_plans:
        _unplanned(console, run, json_mode)
    plans, sched = plans_and_schedule(run[0].upgrade_plans, batch, mu)
    return run, plans, sched


def _end_before_batches(
    console: Console, json_mode: bool, run: tuple[RunResult, list[Any]], payload: dict[str, Any], yes: bool
) -> None:
    """Exit when the schedule leaves nothing to run: a refused node, every node at the target, or no --yes."""
    sched = payload["schedule"]
    if sched["refused"]:
        console.print("[red]refused[/red]: no node was touched")
        _finish(json_mode, run, "refused", EXIT_ERROR, **payload)
    if not sched["batches"]:
        console.print("[green]nothing to do[/green]: every node is at the target")
        _finish(json_mode, run, "current", EXIT_OK, **payload)
    if not yes:
        console.print("nothing was changed: run again with --yes to upgrade in this order")
        _finish(json_mode, run, "planned", EXIT_OK, **payload)


def register(main: click.Group) -> None:
    @main.command(name="upgrade", help=VERB.help)
    @cli.ansible_options
    @upgrade_options
    @click.option(
        "--yes", is_flag=True, help="Run the upgrade; without it the schedule is printed and nothing changes."
    )
    def upgrade_command(
        component: str | None,
        to_version: str | None,
        batch: int | None,
        max_unavailable: str | None,
        drain: str,
        resume: bool,
        allow_downgrade: bool,
        yes: bool,
        **kw: Any,
    ) -> None:
        """Exit code: 0 when every node is at the target (or, without --yes, the schedule could be made), 1 when a
        node is refused or the plan could not read a node, 2 when a node failed (the run halted), 99 on Ctrl-C."""
        if component is None:
            raise click.UsageError("--component is required: driver, ofed, toolkit or stack")
        if kw.get("check"):
            raise click.UsageError("upgrade has no check mode: nodeforge plan --upgrade shows the schedule")
        listed = [f"--{key.replace('_', '-')}" for key in (*connection.LISTING, "start_at_task") if kw.get(key)]
        if listed:
            raise click.UsageError(
                f"upgrade takes no {listed[0]}: it runs its own plays in its own order; nodeforge plan --upgrade "
                "shows the schedule, and provision takes the listing options"
            )
        json_mode = kw.pop("json_mode")
        console = cli._console(json_mode)
        settings = _settings(component, to_version, drain, resume, allow_downgrade)
        if not yes:
            planned, plans, sched = _plan(console, kw, settings, json_mode, batch, max_unavailable)
            print_schedule(console, plans, sched, _reboot_note(component))
            _end_before_batches(console, json_mode, planned, {"schedule": sched, "plans": plans}, yes)
        # With --yes the playbook runs once, its own plan play first. The operator's own stop file (-e
        # upgrade_stop_file: `touch` it from anywhere to stop the run), else one of this run's, which the first
        # Ctrl-C creates.
        own = cli._inputs(dict(kw)).read()[1].get("upgrade_stop_file")
        stop_file = Path(own) if own else state_dir() / "runner" / f"upgrade-stop-{time.strftime('%Y%m%dT%H%M%S')}"
        if not own:
            stop_file.unlink(missing_ok=True)
        canceller = StopAfterStep(stop_file, console)
        run_settings = {**_batch_vars(batch, max_unavailable), "upgrade_stop_file": str(stop_file)}
        shown: dict[str, Any] = {}

        def show_schedule(out: Console, plans: dict[str, Any]) -> None:
            shown["plans"], shown["schedule"] = plans_and_schedule(plans, batch, max_unavailable)
            print_schedule(out, shown["plans"], shown["schedule"], _reboot_note(component))

        def watch(out: Console, progress: Any) -> None:
            # The schedule as soon as the batches start (the plan play is over: every node has its plan).
            if not shown and progress.play == BATCH_PLAY:
                with progress.lock:
                    plans = dict(progress.upgrade_plans)
                show_schedule(out, plans)

        try:
            run = _run(kw, settings, json_mode, VERB, run_settings, canceller, watch)
            result = run[0]
        finally:
            if not own:
                stop_file.unlink(missing_ok=True)
        started = shown or result.upgrade_records
        refused = any(p.get("action") == "refused" for p in result.upgrade_plans.values())
        if not result.upgrade_plans or (not started and not refused and result.exit_code != EXIT_OK):
            _unplanned(console, run, json_mode)
        if not shown:
            show_schedule(console, dict(result.upgrade_plans))
        plans, sched = shown["plans"], shown["schedule"]
        payload: dict[str, Any] = {"schedule": sched, "plans": plans}
        if not result.upgrade_records:
            _end_before_batches(console, json_mode, run, payload, yes)
        code = result.exit_code
        print_outcome(console, result, sched, _hint(kw, component, to_version, drain, allow_downgrade))
        status = "done" if code == EXIT_OK else "halted"
        _finish(json_mode, run, status, code, records=result.upgrade_records, **payload)


def _finish(json_mode: bool, run: tuple[RunResult, list[Any]], status: str, code: int, **extra: Any) -> None:
    """Exit with code; with --json, the run (the plan play's, or the whole upgrade's) as report.run_payload with this
    status and the upgrade's own keys (schedule, plans, records)."""
    if json_mode:
        result, warnings = run
        report.print_json(report.run_payload(result, warnings=warnings, status=status, exit_code=code, **extra))
    sys.exit(code)


def plan_upgrade(kw: dict[str, Any], options: dict[str, Any]) -> None:
    """`nodeforge plan --upgrade`: the schedule only (exit 1 when a node is refused)."""
    component = options["component"]
    if component is None:
        raise click.UsageError("plan --upgrade needs --component: driver, ofed, toolkit or stack")
    json_mode = kw.pop("json_mode")
    for flag in ("check", "diff"):
        kw.pop(flag, None)
    console = cli._console(json_mode)
    settings = _settings(
        component, options["to_version"], options["drain"], options["resume"], options["allow_downgrade"]
    )
    planned, plans, sched = _plan(console, kw, settings, json_mode, options["batch"], options["max_unavailable"])
    print_schedule(console, plans, sched, _reboot_note(component))
    status = "refused" if sched["refused"] else "current" if not sched["batches"] else "planned"
    code = EXIT_ERROR if sched["refused"] else EXIT_OK
    _finish(json_mode, planned, status, code, schedule=sched, plans=plans)
