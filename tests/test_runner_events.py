"""nodeforge.runner in process: real ansible-runner events replayed through Progress and _result, and the runner's pure
helpers (exit codes, the command line, -e files, skip tags, the collections path, private files, sealed artifacts).

The events are recorded (tests/data/runner_events/, written by tools/record_runner_events.py from real runs of small
playbooks through run_playbook); a test only reads them. The clock Progress reads (time.monotonic) is the test's."""

from __future__ import annotations

import configparser
import io
import json
import os
import stat
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from nodeforge import content, runner
from nodeforge.runner import (
    COUNTERS,
    EXIT_CANCELED,
    EXIT_ERROR,
    EXIT_HOST_FAILED,
    EXIT_OK,
    EXIT_OPTIONS,
    EXIT_PARSE,
    EXIT_UNEXPECTED,
    EXIT_UNREACHABLE,
    Canceller,
    Failure,
    Progress,
    RunOptions,
    RunResult,
    _cmdline,
    _collections_path,
    _extra_vars_args,
    _message,
    _result,
    _seal_artifacts,
    _skipped_tags,
    _stdout,
    _vault_arg,
    _words,
    _write_private,
)

EVENTS = Path(__file__).resolve().parent / "data" / "runner_events"
ARTIFACTS = "/state/runner/artifacts/20260102T030405-1-success"
SCENARIOS = (
    "success",
    "failing",
    "rescued",
    "unreachable",
    "comes_and_goes",
    "loop_handler",
    "notices",
    "acceptance",
    "canceled",
)
REFUSED = (
    "Task failed: Failed to connect to the host via ssh: ssh: connect to host 127.0.0.1 port 1: Connection refused"
)
CHECK_WARNING = (
    "warning: nodeforge check: command line (-e): all hosts, for hosts localnode, othernode: ofed_validate_certs: "
    "found false: TLS certificates are not validated for these downloads; expected true (the default); mirror with a "
    "certificate the node trusts instead"
)
ACCEPTANCE = [
    {"check": "nouveau", "status": "pass", "measured": "no", "expected": "no", "reason": "", "unit": None},
    {"check": "gpu_count", "status": "fail", "measured": 1, "expected": 8, "reason": "1 GPUs visible", "unit": None},
]
PLAN = {
    "action": "todo",
    "resume": False,
    "components": [{"component": "toolkit", "from": "1.20.0", "to": "1.21.0", "action": "upgrade"}],
}
RECORD = {"step": "done", "at": "2026-01-02T03:04:05Z"}
# What the acceptance run leaves: (acceptance, upgrade_plans, upgrade_records, reboot_required).
FACTS = ({"localnode": ACCEPTANCE}, {"localnode": PLAN}, {"othernode": RECORD}, {"localnode": False, "othernode": True})
# The failing run's one failure, as RunResult.as_dict() and the Progress state give it.
REFUSAL = {
    "host": "othernode",
    "task": "Refuse on purpose",
    "message": "the node said no: othernode",
    "unreachable": False,
}


def recorded(name: str) -> dict[str, Any]:
    return json.loads((EVENTS / f"{name}.json").read_text())


def counters(**counts: int) -> dict[str, int]:
    return {**dict.fromkeys(COUNTERS, 0), **counts}


class Clock:
    """time.monotonic as the test sets it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    found = Clock()
    monkeypatch.setattr(runner.time, "monotonic", found)
    return found


def replay(name: str, through: int | None = None, start: int = 0, clock: Clock | None = None, step: float = 0.0):
    """A Progress fed the recorded events of `name` from counter `start` through counter `through`; with a clock,
    each event `step` seconds after the one before."""
    progress = Progress()
    for event in recorded(name)["events"]:
        if event["counter"] < start or (through is not None and event["counter"] > through):
            continue
        if clock is not None:
            clock.now += step
        assert progress.handle(event) is True  # every event stays in the artifacts
    return progress


def state(progress: Progress) -> dict[str, Any]:
    """Everything Progress holds that the CLI reads."""
    return {
        "play": progress.play,
        "task": progress.task,
        "tasks": progress.tasks,
        "counts": {host: dict(c) for host, c in progress.counts.items()},
        "failures": [f.__dict__ for f in progress.failures],
        "changes": dict(progress.changes),
        "reboot_required": progress.reboot_required,
        "notices": dict(progress.notices),
        "acceptance": progress.acceptance,
        "upgrade_plans": progress.upgrade_plans,
        "upgrade_records": progress.upgrade_records,
    }


class RecordedRunner:
    """What _result reads of ansible-runner's Runner (status, rc, stats, config.artifact_dir, stdout), as the real one
    said it at the end of the recorded run."""

    def __init__(self, name: str, artifact_dir: str = ARTIFACTS, **override: Any) -> None:
        document = {**recorded(name), **override}
        self.status, self.rc, self.stats = document["status"], document["rc"], document["stats"]
        self.config = SimpleNamespace(artifact_dir=artifact_dir)
        self.stdout = io.StringIO(document["stdout"])


def run_result(name: str, duration: float = 2.345, **override: Any) -> RunResult:
    return _result(f"/playbooks/{name}.yml", RecordedRunner(name, **override), replay(name), duration)


def no_extras(**summary: Any) -> dict[str, Any]:
    """A RunResult.as_dict with nothing of the kind a run may add (notices, acceptance, upgrades, error)."""
    return {
        "failures": [],
        "changes": {},
        "reboot_required": {},
        "notices": {},
        "acceptance": {},
        "upgrade_plans": {},
        "upgrade_records": {},
        "error": "",
        **summary,
    }


# ---- Progress: the recorded runs, replayed -------------------------------------------------------------------------


def test_a_successful_run_counts_per_host_and_lists_the_changed_tasks(clock):
    play = "A run that succeeds"
    assert state(replay("success")) == {
        "play": play,
        "task": "Set the reboot-required fact",
        # "Skipped everywhere" did nothing on any host: never shown.
        "tasks": [
            (play, "Report ok"),
            (play, "Write a marker file"),
            (play, "Only on localnode"),
            (play, "Set the reboot-required fact"),
        ],
        "counts": {
            "localnode": counters(ok=4, changed=1, skipped=1),
            "othernode": counters(ok=3, changed=1, skipped=2),
        },
        "failures": [],
        "changes": {"localnode": ["Write a marker file"], "othernode": ["Write a marker file"]},
        "reboot_required": {"localnode": True, "othernode": False},
        "notices": {},
        "acceptance": {},
        "upgrade_plans": {},
        "upgrade_records": {},
    }


def test_failures_ignored_failures_and_the_message_of_each(clock):
    play = "A run with a failing task"
    assert state(replay("failing")) == {
        "play": play,
        "task": "Never reached on othernode",
        "tasks": [
            (play, "Tolerated failure"),
            (play, "Refuse on purpose"),
            (play, "Fail through stderr"),
            (play, "Never reached on othernode"),
        ],
        # An ignored failure counts ok and ignored, as Ansible's stats count it.
        "counts": {"localnode": counters(ok=3, skipped=1, ignored=2), "othernode": counters(ok=1, failed=1, ignored=1)},
        "failures": [REFUSAL],
        "changes": {},
        "reboot_required": {},
        "notices": {},
        "acceptance": {},
        "upgrade_plans": {},
        "upgrade_records": {},
    }


def test_an_unreachable_host_is_a_failure_marked_unreachable(clock):
    play = "A run with an unreachable host"
    message = (
        "Task failed: Failed to connect to the host via ssh: ssh: connect to host 127.0.0.1 port 1: Connection refused"
    )
    assert state(replay("unreachable")) == {
        "play": play,
        "task": "Touch the node",
        "tasks": [(play, "Report ok"), (play, "Touch the node")],
        "counts": {"localnode": counters(ok=2), "deadnode": counters(ok=1, unreachable=1)},
        "failures": [{"host": "deadnode", "task": "Touch the node", "message": message, "unreachable": True}],
        "changes": {},
        "reboot_required": {},
        "notices": {},
        "acceptance": {},
        "upgrade_plans": {},
        "upgrade_records": {},
    }


def test_loops_a_role_and_a_handler_count_once_per_task_and_show_as_changes(clock):
    """A loop's items are not results of their own (runner_item_on_*): the task counts once, changed when an item
    changed; a handler's start comes as a task start; a role's announcement reaches the notices."""
    play = "A run with loops and a handler"
    assert state(replay("loop_handler")) == {
        "play": play,
        "task": "Restart the service",
        "tasks": [
            (play, "Change each item"),
            (play, "Skip one item"),
            (play, "Run the role"),
            (play, "Announce from a role"),
            (play, "Change something in a role"),
            (play, "Restart the service"),
        ],
        "counts": {"localnode": counters(ok=6, changed=3)},
        "failures": [],
        "changes": {"localnode": ["Change each item", "Change something in a role", "Restart the service"]},
        "reboot_required": {},
        "notices": {"localnode": ["role says: localnode restarts containerd"]},
        "acceptance": {},
        "upgrade_plans": {},
        "upgrade_records": {},
    }


def test_announcements_and_warnings_become_notices_once_each_with_their_spaces_folded(clock):
    """Ansible's warnings (prefixed), Announce/Warn tasks' msg (a list joined), whitespace folded, the same text once
    per host; a routine task's msg, an empty msg and a skipped announcement are no notices."""
    play = "A run that announces"
    progress = replay("notices")
    assert state(progress) == {
        "play": play,
        "task": "Change something in a role",
        "tasks": [
            (play, "Validate the inventory (a disabled verification is a warning)"),
            (play, "Announce the restart"),
            (play, "Announce it again"),
            (play, "Report something routine"),
            (play, "Warn about a second NVIDIA CDI specification"),
            (play, "Announce nothing"),
            (play, "Run the role"),
            (play, "Announce from a role"),
            (play, "Change something in a role"),
        ],
        "counts": {"localnode": counters(ok=6, skipped=2), "othernode": counters(ok=8, changed=1, skipped=1)},
        "failures": [],
        "changes": {"othernode": ["Change something in a role"]},
        "reboot_required": {},
        "notices": {
            "localnode": [
                CHECK_WARNING,
                "localnode: docker is not restarted: 2 running container(s) would be stopped",
                "two specifications /etc/cdi/nvidia.yaml 2",
            ],
            "othernode": [
                "othernode: docker is not restarted: 2 running container(s) would be stopped",
                "two specifications /etc/cdi/nvidia.yaml 2",
                "role says: othernode restarts containerd",
            ],
        },
        "acceptance": {},
        "upgrade_plans": {},
        "upgrade_records": {},
    }


def test_a_role_prefixed_task_name_is_an_announcement_by_its_own_name(clock):
    """A role's task as ansible-runner names it when the role is in the name ("demo : Announce ..."): the part after
    the last " : " decides, the change is recorded under the whole name."""
    progress = Progress()
    for event in recorded("loop_handler")["events"]:
        if event["event_data"].get("task") in ("Announce from a role", "Change something in a role"):
            event["event_data"]["task"] = "demo : " + event["event_data"]["task"]
        progress.handle(event)
    assert progress.notices == {"localnode": ["role says: localnode restarts containerd"]}
    assert progress.changes == {
        "localnode": ["Change each item", "demo : Change something in a role", "Restart the service"]
    }


def test_acceptance_results_upgrade_plans_records_and_the_reboot_fact(clock):
    """validate_results only from "Report the acceptance checks" and only a list; upgrade_plan and upgrade_record only
    dicts; nodeforge_reboot_required false is recorded as false."""
    play = "A validate and upgrade run"
    assert state(replay("acceptance")) == {
        "play": play,
        "task": "Set the reboot-required fact",
        "tasks": [
            (play, "Report the acceptance checks"),
            (play, "Report other checks"),
            (play, "Probe the upgrade"),
            (play, "Read the upgrade record"),
            (play, "Set the reboot-required fact"),
        ],
        "counts": {"localnode": counters(ok=5), "othernode": counters(ok=5)},
        "failures": [],
        "changes": {},
        "reboot_required": {"localnode": False, "othernode": True},
        "notices": {},
        "acceptance": {"localnode": ACCEPTANCE},
        "upgrade_plans": {"localnode": PLAN},
        "upgrade_records": {"othernode": RECORD},
    }


def test_the_progress_keeps_copies_of_the_facts_it_was_given(clock):
    events = recorded("acceptance")["events"]
    progress = Progress()
    for event in events:
        progress.handle(event)
    facts = {e["counter"]: e["event_data"]["res"]["ansible_facts"] for e in events if e["counter"] in (6, 17, 21)}
    facts[6]["validate_results"].clear()
    facts[17]["upgrade_plan"].clear()
    facts[21]["upgrade_record"].clear()
    assert (progress.acceptance, progress.upgrade_plans, progress.upgrade_records) == (
        {"localnode": ACCEPTANCE},
        {"localnode": PLAN},
        {"othernode": RECORD},
    )


def test_a_rescued_failure_is_no_failure_where_the_host_did_not_fail_in_the_end(clock):
    """localnode's rescue recovered: its failure is gone and counted rescued. othernode's rescue refused in turn: it
    failed, and the block's failure stays listed before the refusal, as its cause. The counts are Ansible's stats."""
    progress = replay("rescued")
    assert state(progress)["failures"] == [
        {"host": "othernode", "task": "Fail inside the block", "message": "rescued later", "unreachable": False},
        {
            "host": "othernode",
            "task": "Refuse on othernode",
            "message": "the rescue refused: rescued later",
            "unreachable": False,
        },
    ]
    assert {host: dict(c) for host, c in progress.counts.items()} == {
        "localnode": counters(ok=1, skipped=1, rescued=1),
        "othernode": counters(ok=1, failed=1, rescued=1),
    }


def test_a_host_rescued_then_unreachable_twice_keeps_each_unreachable_result(clock):
    """deadnode's failure was rescued, then it went unreachable, its errors were cleared (meta: clear_host_errors) and
    it went unreachable again: the rescued failure is gone, both unreachable results stay and count twice, as
    Ansible's stats count them. The meta task, which runs on no host, is never shown; the last task, which Ansible
    starts again for the host that rejoined, is shown again."""
    play = "A run whose host comes and goes"
    unreachable = {"host": "deadnode", "message": REFUSED, "unreachable": True}
    assert state(replay("comes_and_goes")) == {
        "play": play,
        "task": "Touch the node again",
        "tasks": [
            (play, "Fail inside the block"),
            (play, "Rescue the failure"),
            (play, "Touch the node"),
            (play, "Touch the node again"),
            (play, "Touch the node again"),
        ],
        "counts": {
            "localnode": counters(ok=3, rescued=1),
            "deadnode": counters(ok=1, unreachable=2, rescued=1),
        },
        "failures": [
            {**unreachable, "task": "Touch the node"},
            {**unreachable, "task": "Touch the node again"},
        ],
        "changes": {},
        "reboot_required": {},
        "notices": {},
        "acceptance": {},
        "upgrade_plans": {},
        "upgrade_records": {},
    }


@pytest.mark.parametrize(
    "name", ["success", "failing", "rescued", "unreachable", "comes_and_goes", "loop_handler", "notices", "acceptance"]
)
def test_the_progress_counts_agree_with_ansible_s_stats(name, clock):
    stats = recorded(name)["stats"]
    hosts = set(stats["processed"])
    expected = {h: {c: (stats.get(k) or {}).get(h, 0) for c, k in runner.STATS_KEYS.items()} for h in hosts}
    assert {host: dict(c) for host, c in replay(name).counts.items()} == expected


# ---- Progress: which task is shown, and when -------------------------------------------------------------------


def test_a_task_at_work_without_a_result_is_shown_after_show_after_s(clock):
    """The canceled run ends with "Sleep for a long time" started on localnode and no result: it is the task once the
    host has been at it SHOW_AFTER_S, and it is listed once however often the view asks."""
    play = "A run that takes long"
    progress = replay("canceled", clock=clock)
    assert (progress.task, progress.tasks) == ("Report ok", [(play, "Report ok")])
    clock.now += Progress.SHOW_AFTER_S - 0.01
    assert (progress.task, progress.tasks) == ("Report ok", [(play, "Report ok")])
    clock.now += 0.01
    assert (progress.task, progress.tasks) == (
        "Sleep for a long time",
        [(play, "Report ok"), (play, "Sleep for a long time")],
    )
    clock.now += 5
    assert (progress.task, progress.tasks) == (
        "Sleep for a long time",
        [(play, "Report ok"), (play, "Sleep for a long time")],
    )


def test_a_task_started_before_any_host_started_it_is_shown_after_show_after_s(clock):
    play = "A run that takes long"
    progress = replay("canceled", through=6, clock=clock)  # the task start, no host's start yet
    clock.now += 0.99
    assert (progress.task, progress.tasks) == ("Report ok", [(play, "Report ok")])
    clock.now += 0.01
    assert (progress.task, progress.tasks) == (
        "Sleep for a long time",
        [(play, "Report ok"), (play, "Sleep for a long time")],
    )


def test_a_task_every_host_skipped_is_never_shown(clock):
    play = "A run that succeeds"
    progress = replay("success", through=22, clock=clock, step=0.5)  # through "Skipped everywhere"'s last skip
    clock.now += 3600
    assert (progress.task, progress.tasks) == (
        "Only on localnode",
        [(play, "Report ok"), (play, "Write a marker file"), (play, "Only on localnode")],
    )


def test_a_skip_restarts_the_wait_of_a_task_other_hosts_are_still_at(clock):
    """ "Only on localnode": both hosts start it, othernode skips it (counter 16), localnode is still at it: it is
    shown SHOW_AFTER_S after the skip, not after the start."""
    play = "A run that succeeds"
    before = [(play, "Report ok"), (play, "Write a marker file")]
    progress = replay("success", through=15, clock=clock)
    clock.now += 0.9
    progress.handle(recorded("success")["events"][15])  # othernode's skip
    assert progress.counts["othernode"]["skipped"] == 1
    clock.now += 0.9
    assert (progress.task, progress.tasks) == ("Write a marker file", before)
    clock.now += 0.1
    assert (progress.task, progress.tasks) == ("Only on localnode", [*before, (play, "Only on localnode")])


def test_a_skipped_loop_item_restarts_the_wait_too(clock):
    """ "Skip one item": its first item ran (shown at once); the wait of a task is what a skipped item restarts."""
    events = {e["counter"]: e for e in recorded("loop_handler")["events"]}
    progress = replay("loop_handler", through=9, clock=clock)
    entry = progress._started[events[9]["event_data"]["task_uuid"]]
    assert entry["since"] == 1000.0
    clock.now = 1003.0
    progress.handle(events[11])  # runner_item_on_skipped
    assert (entry["since"], entry["hosts"], entry["done"]) == (1003.0, {"localnode"}, set())


def test_a_result_shows_its_task_at_once(clock):
    play = "A run that succeeds"
    progress = replay("success", through=6, clock=clock)  # localnode's ok of "Report ok"; othernode still at it
    assert (progress.task, progress.tasks) == ("Report ok", [(play, "Report ok")])


def test_a_handler_s_start_is_a_task_start(clock):
    """ansible-runner's playbook_on_handler_task_start (this recording's ansible-runner sends the handler's start as
    playbook_on_task_start: the recorded one renamed) starts a task like any other."""
    events = [e for e in recorded("loop_handler")["events"] if e["counter"] < 27]
    events[23]["event"] = "playbook_on_handler_task_start"
    assert events[23]["event_data"]["task"] == "Restart the service"
    progress = Progress()
    for event in events[:25]:  # the handler's start and its host's start: no result yet
        progress.handle(event)
    clock.now += 1
    assert progress.task == "Restart the service"


def test_a_result_whose_task_start_was_not_seen_still_shows_its_task(clock):
    """Events from the middle of a run (the role's change on, counter 21): the task is taken from the result."""
    progress = replay("loop_handler", start=21)
    assert (progress.play, progress.task, progress.tasks) == (
        "",
        "Restart the service",
        [
            ("A run with loops and a handler", "Change something in a role"),
            ("A run with loops and a handler", "Restart the service"),
        ],
    )


def test_an_event_without_a_task_uuid_is_not_remembered(clock):
    progress = Progress()
    progress.handle({"event": "runner_on_ok", "event_data": {"host": "n1", "task": "T", "play": "P", "res": {}}})
    assert (progress._started, progress.tasks, dict(progress.counts)) == ({}, [("P", "T")], {"n1": counters(ok=1)})


def unnamed(name: str) -> Progress:
    """A Progress fed the recorded events of `name` with the task and play names taken out of each."""
    progress = Progress()
    for event in recorded(name)["events"]:
        event["event_data"].pop("task", None)
        event["event_data"].pop("play", None)
        progress.handle(event)
    return progress


@pytest.mark.parametrize(
    ("name", "found"),
    [
        (
            "success",
            {
                "tasks": [("", "")] * 4,
                "counts": {
                    "localnode": counters(ok=4, changed=1, skipped=1),
                    "othernode": counters(ok=3, changed=1, skipped=2),
                },
                "failures": [],
                "changes": {"othernode": [""], "localnode": [""]},
                "reboot_required": {"localnode": True, "othernode": False},
            },
        ),
        (
            "failing",
            {
                "tasks": [("", "")] * 4,
                "counts": {
                    "localnode": counters(ok=3, skipped=1, ignored=2),
                    "othernode": counters(ok=1, failed=1, ignored=1),
                },
                "failures": [
                    {"host": "othernode", "task": "", "message": "the node said no: othernode", "unreachable": False}
                ],
                "changes": {},
                "reboot_required": {},
            },
        ),
        (
            "comes_and_goes",
            {
                "tasks": [("", "")] * 5,
                "counts": {
                    "localnode": counters(ok=3, rescued=1),
                    "deadnode": counters(ok=1, unreachable=2, rescued=1),
                },
                "failures": [{"host": "deadnode", "task": "", "message": REFUSED, "unreachable": True}] * 2,
                "changes": {},
                "reboot_required": {},
            },
        ),
    ],
)
def test_events_that_name_no_task_or_play_leave_the_names_empty(name, found, clock):
    """A task and a play are names (strings) wherever they are kept: the tasks shown, the changes, the failures (the
    --json document's failure task is a string); an event without one leaves it empty, never None."""
    assert state(unnamed(name)) == {
        "play": "",
        "task": "",
        **found,
        "notices": {},
        "acceptance": {},
        "upgrade_plans": {},
        "upgrade_records": {},
    }


def test_a_result_that_names_no_host_counts_under_an_empty_name(clock):
    [ok] = [e for e in recorded("success")["events"] if e["event"] == "runner_on_ok" and e["counter"] == 6]
    del ok["event_data"]["host"]
    progress = Progress()
    progress.handle(ok)
    assert (dict(progress.counts), progress.tasks) == ({"": counters(ok=1)}, [("A run that succeeds", "Report ok")])


def test_an_event_without_data_is_ignored():
    progress = Progress()
    assert progress.handle({"event": "playbook_on_start"}) is True
    assert progress.handle({}) is True
    assert state(progress) == {
        "play": "",
        "task": "",
        "tasks": [],
        "counts": {},
        "failures": [],
        "changes": {},
        "reboot_required": {},
        "notices": {},
        "acceptance": {},
        "upgrade_plans": {},
        "upgrade_records": {},
    }


# ---- _result: the run's summary from the Runner and the progress ---------------------------------------------------


@pytest.mark.parametrize("name", [*SCENARIOS, "parse_error"])
def test_the_replayed_summary_is_the_recorded_run_s(name, clock):
    """_result over the replayed events and the Runner's recorded status, rc and stats gives what the real run gave."""
    result = run_result(name)
    assert (result.artifacts, result.duration_s) == (ARTIFACTS, 2.345)
    summary = {k: v for k, v in result.as_dict().items() if k not in ("duration_s", "artifacts")}
    assert summary == {**recorded(name)["result"], "playbook": f"/playbooks/{name}.yml"}


def test_a_failed_run_s_summary(clock):
    result = run_result("failing", duration=1.005)
    assert result.as_dict() == no_extras(
        playbook="/playbooks/failing.yml",
        status="failed",
        rc=2,
        exit_code=EXIT_HOST_FAILED,
        duration_s=1.0,
        artifacts=ARTIFACTS,
        # From the stats: an ignored failure counts ok as well.
        hosts={"localnode": counters(ok=3, skipped=1, ignored=2), "othernode": counters(ok=1, failed=1, ignored=1)},
        failures=[
            {
                "host": "othernode",
                "task": "Refuse on purpose",
                "message": "the node said no: othernode",
                "unreachable": False,
            }
        ],
    )


def test_a_successful_run_s_summary_keeps_only_hosts_with_changes_and_notices(clock):
    result = run_result("notices", duration=0.126)
    assert result.as_dict() == no_extras(
        playbook="/playbooks/notices.yml",
        status="successful",
        rc=0,
        exit_code=EXIT_OK,
        duration_s=0.13,
        artifacts=ARTIFACTS,
        hosts={"localnode": counters(ok=6, skipped=2), "othernode": counters(ok=8, changed=1, skipped=1)},
        changes={"othernode": ["Change something in a role"]},
        notices={
            "localnode": [
                CHECK_WARNING,
                "localnode: docker is not restarted: 2 running container(s) would be stopped",
                "two specifications /etc/cdi/nvidia.yaml 2",
            ],
            "othernode": [
                "othernode: docker is not restarted: 2 running container(s) would be stopped",
                "two specifications /etc/cdi/nvidia.yaml 2",
                "role says: othernode restarts containerd",
            ],
        },
    )


def test_an_empty_change_or_notice_list_is_left_out_of_the_summary(clock):
    progress = replay("acceptance")
    # A defaultdict's lookup leaves an empty list behind.
    assert (progress.changes["localnode"], progress.notices["othernode"]) == ([], [])
    result = _result("/p.yml", RecordedRunner("acceptance"), progress, 0.0)
    assert (result.changes, result.notices) == ({}, {})
    assert (result.acceptance, result.upgrade_plans, result.upgrade_records, result.reboot_required) == FACTS


def test_the_summary_s_collections_are_copies_of_the_progress(clock):
    progress = replay("acceptance")
    result = _result("/p.yml", RecordedRunner("acceptance"), progress, 0.0)
    for kept in (progress.acceptance, progress.upgrade_plans, progress.upgrade_records, progress.reboot_required):
        kept.clear()
    assert (result.acceptance, result.upgrade_plans, result.upgrade_records, result.reboot_required) == FACTS


def test_a_canceled_run_without_stats_is_summed_up_from_the_events(clock):
    result = run_result("canceled")
    assert result.as_dict() == no_extras(
        playbook="/playbooks/canceled.yml",
        status="canceled",
        rc=254,
        exit_code=EXIT_CANCELED,
        duration_s=2.35,
        artifacts=ARTIFACTS,
        hosts={"localnode": counters(ok=1)},
    )


def test_a_host_only_the_stats_name_is_in_the_summary(clock):
    """A host the events missed (the stats are the truth) is listed; hosts are sorted by name."""
    stats = json.loads(json.dumps(recorded("success")["stats"]))
    stats["dark"]["anode"] = 1
    result = _result("/p.yml", RecordedRunner("success", stats=stats), replay("success"), 0.0)
    assert result.hosts == {
        "anode": counters(unreachable=1),
        "localnode": counters(ok=4, changed=1, skipped=1),
        "othernode": counters(ok=3, changed=1, skipped=2),
    }
    assert list(result.hosts) == ["anode", "localnode", "othernode"]
    assert result.exit_code == EXIT_UNREACHABLE


def test_stats_with_a_missing_counter_count_it_zero(clock):
    stats = {k: v for k, v in recorded("success")["stats"].items() if k != "skipped"}
    stats["ignored"] = None
    result = _result("/p.yml", RecordedRunner("success", stats=stats), replay("success"), 0.0)
    assert result.hosts == {"localnode": counters(ok=4, changed=1), "othernode": counters(ok=3, changed=1)}


def test_a_run_that_failed_before_any_host_says_ansible_playbook_s_last_lines(clock):
    result = run_result("parse_error")
    assert result.as_dict() == no_extras(
        playbook="/playbooks/parse_error.yml",
        status="failed",
        rc=4,
        exit_code=EXIT_PARSE,
        duration_s=2.35,
        artifacts=ARTIFACTS,
        hosts={},
        error="[ERROR]: YAML parsing failed: While parsing a flow node did not find expected node content.\n"
        "Origin: /tmp/nodeforge-record-events/parse_error/parse_error.yml:7:1\n\n(source not shown: file truncated)",
    )


def test_the_error_keeps_the_last_15_lines_only(clock):
    lines = [f"line {n}" for n in range(20)]
    result = _result("/p.yml", RecordedRunner("parse_error", stdout="\n".join(lines)), Progress(), 0.0)
    assert result.error == "\n".join(lines[5:])


def test_a_run_that_failed_silently_says_its_exit_code(clock):
    result = _result("/p.yml", RecordedRunner("parse_error", stdout="  \n"), Progress(), 0.0)
    assert result.error == "ansible-playbook exited with 4"


@pytest.mark.parametrize(("status", "name"), [("successful", "parse_error"), ("canceled", "parse_error")])
def test_only_a_failed_run_without_hosts_has_an_error(status, name, clock):
    result = _result("/p.yml", RecordedRunner(name, status=status), Progress(), 0.0)
    assert result.error == ""


def test_a_failed_run_with_hosts_has_no_error(clock):
    result = _result("/p.yml", RecordedRunner("failing", stdout="fatal: something"), replay("failing"), 0.0)
    assert result.error == ""


def test_an_rc_not_yet_known_is_minus_one(clock):
    result = _result("/p.yml", RecordedRunner("canceled", rc=None), replay("canceled"), 0.0)
    assert (result.rc, result.exit_code) == (-1, EXIT_CANCELED)


# ---- RunResult ---------------------------------------------------------------------------------------------------


def _run(status: str = "successful", rc: int = 0, **hosts: dict[str, int]) -> RunResult:
    return RunResult("/p.yml", status, rc, "/a", hosts, [], {}, {}, 0.0)


@pytest.mark.parametrize(
    ("result", "code"),
    [
        (_run(), EXIT_OK),
        (_run(n1=counters(ok=3)), EXIT_OK),
        (_run("canceled", 254, n1=counters(failed=1)), EXIT_CANCELED),
        (_run("failed", 2, n1=counters(unreachable=1), n2=counters(failed=1)), EXIT_HOST_FAILED),
        (_run("failed", 4, n1=counters(unreachable=1)), EXIT_UNREACHABLE),
        (_run("successful", 0, n1=counters(unreachable=2)), EXIT_UNREACHABLE),
        (_run("successful", 0, n1=counters(failed=1)), EXIT_HOST_FAILED),
        (_run("failed", 4), EXIT_PARSE),
        (_run("failed", 5), EXIT_OPTIONS),
        (_run("failed", 250), EXIT_UNEXPECTED),
        (_run("failed", 2), EXIT_ERROR),
        (_run("failed", 4, n1=counters(ok=1)), EXIT_ERROR),
        (_run("successful", 4), EXIT_PARSE),
        (_run("successful", 1), EXIT_ERROR),
        (_run("timeout", 0), EXIT_ERROR),
        (_run("failed", 0, n1=counters(ok=1)), EXIT_ERROR),
    ],
)
def test_exit_code(result, code):
    assert result.exit_code == code


def test_as_dict_has_the_output_only_when_there_is_one():
    result = RunResult(
        "/p.yml",
        "successful",
        0,
        "/a",
        {"n1": counters(ok=1)},
        [Failure("n1", "T", "m", unreachable=True)],
        {"n1": ["T"]},
        {"n1": True},
        1.234,
        notices={"n1": ["x"]},
        acceptance={"n1": [{"check": "c"}]},
        upgrade_plans={"n1": {"p": 1}},
        upgrade_records={"n1": {"r": 2}},
    )
    summary = {
        "playbook": "/p.yml",
        "status": "successful",
        "rc": 0,
        "exit_code": 0,
        "duration_s": 1.23,
        "artifacts": "/a",
        "hosts": {"n1": counters(ok=1)},
        "failures": [{"host": "n1", "task": "T", "message": "m", "unreachable": True}],
        "changes": {"n1": ["T"]},
        "reboot_required": {"n1": True},
        "notices": {"n1": ["x"]},
        "acceptance": {"n1": [{"check": "c"}]},
        "upgrade_plans": {"n1": {"p": 1}},
        "upgrade_records": {"n1": {"r": 2}},
        "error": "",
    }
    assert result.as_dict() == summary
    assert list(result.as_dict()) == list(summary)
    result.output = "playbook: p.yml\n  play #1"
    assert result.as_dict() == {**summary, "output": "playbook: p.yml\n  play #1"}


# ---- _message ----------------------------------------------------------------------------------------------------


def test_a_failure_s_message_is_msg_first_from_a_real_result():
    [res] = [e["event_data"]["res"] for e in recorded("failing")["events"] if e["counter"] == 15]
    assert (res["msg"], res["stderr"]) == ("non-zero return code", "broken pipe")
    assert _message(res) == "non-zero return code"
    assert _message({**res, "msg": ""}) == "broken pipe"


@pytest.mark.parametrize(
    ("res", "message"),
    [
        ({"msg": " m ", "stderr": "e", "reason": "r", "module_stderr": "ms", "stdout": "o"}, "m"),
        ({"msg": "", "stderr": " e\n", "reason": "r", "module_stderr": "ms", "stdout": "o"}, "e"),
        ({"msg": None, "stderr": "", "reason": "r", "module_stderr": "ms", "stdout": "o"}, "r"),
        ({"reason": "", "module_stderr": "Traceback\n", "stdout": "o"}, "Traceback"),
        ({"stdout": "\tout\n"}, "out"),
        ({"msg": ["a", "b"]}, "['a', 'b']"),
        ({"msg": 0, "rc": 1}, "no message"),
        ({}, "no message"),
    ],
)
def test_a_failure_s_message(res, message):
    assert _message(res) == message


# ---- the command line and its files -----------------------------------------------------------------------------


def test_a_vault_password_file_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", "/home/op")
    assert _vault_arg("--vault-password-file=secrets/pass") == f"--vault-password-file={tmp_path}/secrets/pass"
    assert _vault_arg("--vault-password-file=~/pass") == "--vault-password-file=/home/op/pass"
    assert _vault_arg("--vault-password-file=/etc/pass") == "--vault-password-file=/etc/pass"
    assert _vault_arg("--vault-id=dev@secrets/pass") == "--vault-id=dev@secrets/pass"
    assert _vault_arg("secrets/--vault-password-file=x") == "secrets/--vault-password-file=x"


def test_the_command_line_in_order_and_none_when_empty(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert _cmdline(RunOptions(), []) is None
    opts = RunOptions(
        vault=["--vault-password-file=pass", "--vault-id=dev@prompt"],
        connection=("-u", "ops admin", "-b"),
        listing=("--list-tasks",),
        check=True,
        diff=True,
    )
    assert _cmdline(opts, ["-e", "@/x/1.yml"]) == (
        f"--vault-password-file={tmp_path}/pass --vault-id=dev@prompt -e @/x/1.yml -u 'ops admin' -b --list-tasks "
        "--check --diff"
    )
    assert _cmdline(RunOptions(check=True), []) == "--check"
    assert _cmdline(RunOptions(diff=True), []) == "--diff"


def test_extra_vars_become_private_files_named_by_their_absolute_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", "/home/op")
    directory = tmp_path / "private" / "extravars"
    values = ("a=1 b='two words'", "@vars.yml", '{"c": [1]}', "[1, 2]", "@~/more.yml", "x='unclosed")
    args, files = _extra_vars_args(values, directory, "run1")
    assert files == [
        directory / "run1.0.yml",
        directory / "run1.2.yml",
        directory / "run1.3.yml",
        directory / "run1.5.yml",
    ]
    assert args == [
        "-e",
        f"@{directory}/run1.0.yml",
        "-e",
        f"@{tmp_path}/vars.yml",
        "-e",
        f"@{directory}/run1.2.yml",
        "-e",
        f"@{directory}/run1.3.yml",
        "-e",
        "@/home/op/more.yml",
        "-e",
        f"@{directory}/run1.5.yml",
    ]
    assert [f.read_text() for f in files] == ['{"a": "1", "b": "two words"}', '{"c": [1]}', "[1, 2]", "x='unclosed"]
    assert {stat.S_IMODE(f.stat().st_mode) for f in files} == {0o600}
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert _extra_vars_args((), directory, "run2") == ([], [])


class Config(configparser.ConfigParser):
    def __init__(self, text: str) -> None:
        super().__init__(interpolation=None)
        self.read_string(text)


@pytest.mark.parametrize(
    ("skip_tags", "environ", "config_path", "config", "skipped"),
    [
        (None, {}, None, None, set()),
        ("a, b,,", {}, None, None, {"a", "b"}),
        ("a", {"ANSIBLE_SKIP_TAGS": "always , c"}, Path("/x.cfg"), None, {"a", "always", "c"}),
        ("a", {"ANSIBLE_SKIP_TAGS": ""}, Path("/x.cfg"), None, {"a"}),
        ("a", {}, Path("/x.cfg"), None, None),
        ("a", {}, Path("/x.cfg"), Config("[tags]\nskip = tagged, d\n"), {"a", "tagged", "d"}),
        ("a", {}, Path("/x.cfg"), Config("[defaults]\nforks = 5\n"), {"a"}),
        (None, {}, None, Config("[tags]\nskip = always\n"), set()),
    ],
)
def test_the_skipped_tags_from_wherever_ansible_takes_them(skip_tags, environ, config_path, config, skipped):
    assert _skipped_tags(RunOptions(skip_tags=skip_tags), environ, config_path, config) == skipped


@pytest.mark.parametrize(
    ("value", "words"),
    [(None, []), ("", []), ("a", ["a"]), (" a , b ,", ["a", "b"]), (",,", []), ("a b,c", ["a b", "c"])],
)
def test_words(value, words):
    assert _words(value) == words


@pytest.mark.parametrize(
    ("environ", "config", "theirs"),
    [
        ({}, None, []),
        ({"ANSIBLE_COLLECTIONS_PATH": f"/a{os.pathsep}~/b{os.pathsep}"}, None, ["/a", "/home/op/b"]),
        ({"ANSIBLE_COLLECTIONS_PATH": ""}, Config("[defaults]\ncollections_path = /c\n"), []),
        ({}, Config("[defaults]\ncollections_path = /c:~/d\n"), ["/c", "/home/op/d"]),
        ({}, Config("[defaults]\ncollections_paths = /e\n"), ["/e"]),
        ({}, Config("[defaults]\ncollections_path = /c\ncollections_paths = /e\n"), ["/c"]),
        ({}, Config("[defaults]\nforks = 5\n"), []),
    ],
)
def test_the_collections_path_puts_the_shipped_collection_first(environ, config, theirs, monkeypatch):
    monkeypatch.setenv("HOME", "/home/op")
    assert _collections_path(environ, config) == os.pathsep.join([str(content.collections_dir()), *theirs])


# ---- private files, sealed artifacts, stdout ---------------------------------------------------------------------


def test_a_private_file_is_0600_in_a_0700_directory_and_replaces_what_was_there(tmp_path):
    (tmp_path / "d").mkdir(mode=0o755)
    path = tmp_path / "d" / "e" / "f.json"
    assert _write_private(path, "a long first text") == path
    assert _write_private(path, "short") == path
    assert path.read_text() == "short"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "d").stat().st_mode) == 0o755
    (tmp_path / "d" / "e").chmod(0o755)
    _write_private(path, "again")
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_sealed_artifacts_keep_the_command_without_the_environment_and_are_private(tmp_path):
    artifacts = tmp_path / "artifacts"
    run = artifacts / "run1"
    (run / "job_events").mkdir(parents=True)
    command = {"command": ["ansible-playbook", "-e", "@/x.json"], "cwd": "/p", "env": {"TOKEN": "s3cret"}}
    (run / "command").write_text(json.dumps(command))
    (run / "job_events" / "1-a.json").write_text("{}")
    (artifacts / "other").mkdir()
    for path in (artifacts, run, run / "job_events", artifacts / "other"):
        path.chmod(0o755)
    (run / "job_events" / "1-a.json").chmod(0o644)
    _seal_artifacts(artifacts, "run1")
    assert json.loads((run / "command").read_text()) == {"command": ["ansible-playbook", "-e", "@/x.json"], "cwd": "/p"}
    modes = {str(p.relative_to(tmp_path)): stat.S_IMODE(p.stat().st_mode) for p in [artifacts, *artifacts.rglob("*")]}
    assert modes == {
        "artifacts": 0o700,
        "artifacts/run1": 0o700,
        "artifacts/run1/command": 0o600,
        "artifacts/run1/job_events": 0o700,
        "artifacts/run1/job_events/1-a.json": 0o600,
        "artifacts/other": 0o755,  # another run's: not this one's to seal
    }


def test_sealing_leaves_links_in_the_run_and_what_they_point_at_alone(tmp_path):
    """A link in the run's artifacts (to a file or a directory outside them) is not followed: what it points at keeps
    its mode; everything else of the run is sealed."""
    outside_file, outside_dir = tmp_path / "outside.txt", tmp_path / "outside"
    outside_file.write_text("x")
    outside_dir.mkdir()
    outside_file.chmod(0o644)
    outside_dir.chmod(0o755)
    run = tmp_path / "artifacts" / "run1"
    (run / "fact_cache").mkdir(parents=True)
    (run / "fact_cache" / "node-01").write_text("{}")
    (run / "fact_cache" / "node-01").chmod(0o644)
    (run / "link-to-file").symlink_to(outside_file)
    (run / "link-to-dir").symlink_to(outside_dir)
    _seal_artifacts(tmp_path / "artifacts", "run1")
    assert (stat.S_IMODE(outside_file.stat().st_mode), stat.S_IMODE(outside_dir.stat().st_mode)) == (0o644, 0o755)
    assert stat.S_IMODE((run / "fact_cache").stat().st_mode) == 0o700
    assert stat.S_IMODE((run / "fact_cache" / "node-01").stat().st_mode) == 0o600
    assert stat.S_IMODE(run.stat().st_mode) == 0o700


def test_a_role_s_notice_keeps_a_colon_in_its_own_name():
    """A role task's name is its own (event_data names the role apart); a " : " in the name is part of it."""
    [announce] = [
        e
        for e in recorded("notices")["events"]
        if e["event"] == "runner_on_ok"
        and e["event_data"].get("role")
        and e["event_data"]["task"].startswith("Announce")
    ]
    for task in ("Announce the mode : lab", "demo : Announce the mode : lab"):
        event = json.loads(json.dumps(announce))
        event["event_data"]["task"] = task
        progress = Progress()
        progress.handle(event)
        host = event["event_data"]["host"]
        assert dict(progress.notices) == {host: ["role says: othernode restarts containerd"]}, task


def test_sealing_a_run_twice_keeps_the_command_without_the_environment(tmp_path):
    """A command already sealed (no environment left in it) is sealed again as it is."""
    run = tmp_path / "artifacts" / "run1"
    run.mkdir(parents=True)
    (run / "command").write_text(json.dumps({"command": ["ansible-playbook"], "cwd": "/p", "env": {"TOKEN": "s"}}))
    _seal_artifacts(tmp_path / "artifacts", "run1")
    (run / "command").chmod(0o644)
    _seal_artifacts(tmp_path / "artifacts", "run1")
    assert json.loads((run / "command").read_text()) == {"command": ["ansible-playbook"], "cwd": "/p"}
    assert stat.S_IMODE((run / "command").stat().st_mode) == 0o600


def test_sealing_a_run_without_a_command_file_or_artifacts_leaves_nothing_behind(tmp_path):
    _seal_artifacts(tmp_path / "artifacts", "run1")
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "artifacts" / "run1").mkdir(parents=True, mode=0o755)
    (tmp_path / "artifacts").chmod(0o755)
    _seal_artifacts(tmp_path / "artifacts", "run1")
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == ["artifacts", "artifacts/run1"]
    assert stat.S_IMODE((tmp_path / "artifacts").stat().st_mode) == 0o700


def test_stdout_is_what_the_runner_printed_stripped():
    assert _stdout(SimpleNamespace(stdout=io.StringIO("\n  playbook: p.yml\n\n"))) == "playbook: p.yml"

    class Closed:
        def read(self) -> str:
            raise OSError("closed")

    assert _stdout(SimpleNamespace(stdout=Closed())) == ""
    assert _stdout(SimpleNamespace()) == ""


def test_the_canceller_answers_whether_a_stop_was_asked():
    canceller = Canceller()
    assert canceller() is False
    canceller.request(2, None)  # as a signal handler
    assert canceller() is True
    assert isinstance(canceller.requested, threading.Event)


def test_the_state_dir(monkeypatch):
    monkeypatch.setenv("NODEFORGE_STATE_DIR", "/s/nf")
    assert runner.state_dir() == Path("/s/nf")
    monkeypatch.delenv("NODEFORGE_STATE_DIR")
    monkeypatch.setenv("XDG_STATE_HOME", "/xdg")
    assert runner.state_dir() == Path("/xdg/nodeforge")
    monkeypatch.setenv("XDG_STATE_HOME", "")
    monkeypatch.setenv("HOME", "/home/op")
    assert runner.state_dir() == Path("/home/op/.local/state/nodeforge")
