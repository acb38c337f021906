"""nodeforge.report in process: the summary table, the lines after it, the live progress in a log, and the --json
document, rendered to a recording console (fixed width, no color) and asserted as whole texts.

The run results come from recorded ansible-runner events (tests/data/runner_events/, replayed by
tests/test_runner_events.py's helpers), so each summary is the one a real run of that kind prints."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from rich.console import Console

from nodeforge import report
from nodeforge.checks import Problem
from nodeforge.runner import COUNTERS, EXIT_ERROR, EXIT_HOST_FAILED, EXIT_OK, Failure, RunResult
from tests.test_runner_events import (
    ACCEPTANCE,
    ARTIFACTS,
    CHECK_WARNING,
    PLAN,
    RECORD,
    REFUSAL,
    REFUSED,
    Clock,
    recorded,
    replay,
    run_result,
)

WIDTH = 80


def console(terminal: bool = False, width: int = WIDTH) -> Console:
    return Console(
        file=io.StringIO(), width=width, color_system=None, force_terminal=terminal, record=True, legacy_windows=False
    )


def text(out: Console) -> str:
    """What the console printed, each line without its trailing spaces (a centred title's padding)."""
    return "\n".join(line.rstrip() for line in out.export_text().splitlines())


def styled_console(terminal: bool = False, width: int = WIDTH) -> Console:
    """A recording console with colours and rich's default highlighting on, as a caller's own Console() has it."""
    return Console(
        file=io.StringIO(),
        width=width,
        color_system="standard",
        force_terminal=terminal,
        record=True,
        legacy_windows=False,
    )


_SGR = re.compile(r"\x1b\[([0-9;]*)m")
_SGR_NAMES = {"1": "bold", "3": "italic", "31": "red", "32": "green", "33": "yellow", "35": "magenta"}


def styled(out: Console) -> str:
    """What the console printed with its styles: each styled run as [style]text[/], the style named from the SGR codes
    rich wrote (the report's own: bold, italic, red, green, yellow, magenta; any other code, a highlighter's, as its
    number), each line without its trailing spaces."""
    lines = []
    for line in out.export_text(styles=True).splitlines():
        runs: list[list[str]] = []
        style = ""
        for n, part in enumerate(_SGR.split(line)):
            if n % 2:
                style = "" if part in ("", "0") else " ".join(_SGR_NAMES.get(code, code) for code in part.split(";"))
            elif part and runs and runs[-1][0] == style:
                runs[-1][1] += part
            elif part:
                runs.append([style, part])
        lines.append("".join(f"[{style}]{part}[/]" if style else part for style, part in runs).rstrip())
    return "\n".join(lines)


def counters(**counts: int) -> dict[str, int]:
    return {**dict.fromkeys(COUNTERS, 0), **counts}


@pytest.fixture
def clock(monkeypatch) -> Clock:
    from nodeforge import runner

    found = Clock()
    monkeypatch.setattr(runner.time, "monotonic", found)
    return found


FAILING_TABLE = """\
                      failing.yml: failed in 2.3s
┏━━━━━━━━━━━┳━━━━┳━━━━━━━━━┳━━━━━━━━┳━━━━━━━━━━━━━┳━━━━━━━━━┳━━━━━━━━━┓
┃ host      ┃ ok ┃ changed ┃ failed ┃ unreachable ┃ skipped ┃ ignored ┃
┡━━━━━━━━━━━╇━━━━╇━━━━━━━━━╇━━━━━━━━╇━━━━━━━━━━━━━╇━━━━━━━━━╇━━━━━━━━━┩
│ localnode │  3 │       0 │      0 │           0 │       1 │       2 │
│ othernode │  1 │       0 │      1 │           0 │       0 │       1 │
└───────────┴────┴─────────┴────────┴─────────────┴─────────┴─────────┘"""
NOTICES_TABLE = """\
               notices.yml: successful in 2.3s
┏━━━━━━━━━━━┳━━━━┳━━━━━━━━━┳━━━━━━━━┳━━━━━━━━━━━━━┳━━━━━━━━━┓
┃ host      ┃ ok ┃ changed ┃ failed ┃ unreachable ┃ skipped ┃
┡━━━━━━━━━━━╇━━━━╇━━━━━━━━━╇━━━━━━━━╇━━━━━━━━━━━━━╇━━━━━━━━━┩
│ localnode │  6 │       0 │      0 │           0 │       2 │
│ othernode │  8 │       1 │      0 │           0 │       1 │
└───────────┴────┴─────────┴────────┴─────────────┴─────────┘"""
SUCCESS_TABLE = """\
                    success.yml: successful in 2.3s
┏━━━━━━━━━━━┳━━━━┳━━━━━━━━━┳━━━━━━━━┳━━━━━━━━━━━━━┳━━━━━━━━━┳━━━━━━━━━━┓
┃ host      ┃ ok ┃ changed ┃ failed ┃ unreachable ┃ skipped ┃ reboot   ┃
┡━━━━━━━━━━━╇━━━━╇━━━━━━━━━╇━━━━━━━━╇━━━━━━━━━━━━━╇━━━━━━━━━╇━━━━━━━━━━┩
│ localnode │  4 │       1 │      0 │           0 │       1 │ required │
│ othernode │  3 │       1 │      0 │           0 │       2 │ -        │
└───────────┴────┴─────────┴────────┴─────────────┴─────────┴──────────┘"""
CANCELED_TABLE = """\
               canceled.yml: canceled in 2.3s
┏━━━━━━━━━━━┳━━━━┳━━━━━━━━━┳━━━━━━━━┳━━━━━━━━━━━━━┳━━━━━━━━━┓
┃ host      ┃ ok ┃ changed ┃ failed ┃ unreachable ┃ skipped ┃
┡━━━━━━━━━━━╇━━━━╇━━━━━━━━━╇━━━━━━━━╇━━━━━━━━━━━━━╇━━━━━━━━━┩
│ localnode │  1 │       0 │      0 │           0 │       0 │
└───────────┴────┴─────────┴────────┴─────────────┴─────────┘"""
AFTER = f"artifacts: {ARTIFACTS}"


# ---- the summary after a run ------------------------------------------------------------------------------------


def test_a_failed_run_s_summary_shows_ignored_and_the_failure(clock):
    out = console()
    report.print_result(out, run_result("failing"))
    assert text(out) == "\n".join(
        [FAILING_TABLE, "FAILED othernode: task Refuse on purpose: the node said no: othernode", AFTER]
    )


def test_an_unreachable_host_s_summary(clock):
    out = console(width=200)
    report.print_result(out, run_result("unreachable"))
    assert text(out) == "\n".join(
        [
            "               unreachable.yml: failed in 2.3s",
            "┏━━━━━━━━━━━┳━━━━┳━━━━━━━━━┳━━━━━━━━┳━━━━━━━━━━━━━┳━━━━━━━━━┓",
            "┃ host      ┃ ok ┃ changed ┃ failed ┃ unreachable ┃ skipped ┃",
            "┡━━━━━━━━━━━╇━━━━╇━━━━━━━━━╇━━━━━━━━╇━━━━━━━━━━━━━╇━━━━━━━━━┩",
            "│ deadnode  │  1 │       0 │      0 │           1 │       0 │",
            "│ localnode │  2 │       0 │      0 │           0 │       0 │",
            "└───────────┴────┴─────────┴────────┴─────────────┴─────────┘",
            "UNREACHABLE deadnode: task Touch the node: Task failed: Failed to connect to the host via ssh: ssh: "
            "connect to host 127.0.0.1 port 1: Connection refused",
            AFTER,
        ]
    )


def test_on_a_terminal_the_summary_lists_the_notices_without_the_check_s_warnings(clock):
    out = console(terminal=True)
    report.print_result(out, run_result("notices"))
    assert text(out) == "\n".join(
        [
            NOTICES_TABLE,
            "notice localnode: localnode: docker is not restarted: 2 running container(s) would be stopped",
            "notice localnode: two specifications /etc/cdi/nvidia.yaml 2",
            "notice othernode: othernode: docker is not restarted: 2 running container(s) would be stopped",
            "notice othernode: two specifications /etc/cdi/nvidia.yaml 2",
            "notice othernode: role says: othernode restarts containerd",
            AFTER,
        ]
    )


def test_in_a_log_the_summary_leaves_the_notices_to_the_live_progress(clock):
    out = console()
    report.print_result(out, run_result("notices"))
    assert text(out) == "\n".join([NOTICES_TABLE, AFTER])


def test_a_plan_says_what_each_host_would_change_and_the_reboot_column(clock):
    out = console()
    report.print_result(out, run_result("success"), plan=True)
    assert text(out) == "\n".join(
        [
            SUCCESS_TABLE,
            "localnode would change: Write a marker file",
            "othernode would change: Write a marker file",
            "reboot required on localnode (nodeforge_reboot_policy decides)",
            AFTER,
        ]
    )


def test_a_plan_of_a_host_without_changes_says_nothing(clock):
    out = console()
    report.print_result(out, run_result("acceptance"), plan=True)
    assert text(out).splitlines()[-4:] == [
        "localnode would change: nothing",
        "othernode would change: nothing",
        "reboot required on othernode (nodeforge_reboot_policy decides)",
        AFTER,
    ]


def test_without_plan_the_changes_are_not_listed(clock):
    out = console()
    report.print_result(out, run_result("success"))
    assert text(out) == "\n".join(
        [SUCCESS_TABLE, "reboot required on localnode (nodeforge_reboot_policy decides)", AFTER]
    )


def test_a_canceled_run_says_so(clock):
    out = console()
    report.print_result(out, run_result("canceled"))
    assert text(out) == "\n".join(
        [CANCELED_TABLE, "canceled: the run was interrupted; hosts may be partly changed", AFTER]
    )


def test_a_run_that_failed_before_any_host_prints_ansible_playbook_s_error(clock):
    out = console(width=120)
    report.print_result(out, run_result("parse_error"))
    assert text(out) == "\n".join(
        [
            "            parse_error.yml: failed in 2.3s",
            "┏━━━━━━┳━━━━┳━━━━━━━━━┳━━━━━━━━┳━━━━━━━━━━━━━┳━━━━━━━━━┓",
            "┃ host ┃ ok ┃ changed ┃ failed ┃ unreachable ┃ skipped ┃",
            "┡━━━━━━╇━━━━╇━━━━━━━━━╇━━━━━━━━╇━━━━━━━━━━━━━╇━━━━━━━━━┩",
            "└──────┴────┴─────────┴────────┴─────────────┴─────────┘",
            "ansible-playbook failed before reaching any host:",
            "[ERROR]: YAML parsing failed: While parsing a flow node did not find expected node content.",
            "Origin: /tmp/nodeforge-record-events/parse_error/parse_error.yml:7:1",
            "",
            "(source not shown: file truncated)",
            AFTER,
        ]
    )


def test_a_rescued_failure_is_printed_failed_only_on_a_host_that_failed(clock):
    out = console()
    report.print_result(out, run_result("rescued"))
    failed = [line for line in text(out).splitlines() if line.startswith("FAILED")]
    assert failed == [
        "FAILED othernode: task Fail inside the block: rescued later",
        "FAILED othernode: task Refuse on othernode: the rescue refused: rescued later",
    ]


def test_the_summary_shows_rescued_only_when_a_host_has_some_and_escapes_what_it_prints():
    result = RunResult(
        "/p/site.yml",
        "successful",
        0,
        "/a/[red]x",
        {"n[1]": counters(ok=2, rescued=1), "n2": counters(ok=1)},
        [Failure("n[1]", "Task [x]", "said [red]no[/red]"), Failure("n2", "T", "gone", unreachable=True)],
        {"n[1]": ["A [b]", "B"]},
        {"n[1]": False, "n2": True},
        61.96,
        error="[ERROR] no [b]host[/b]",
        notices={"n[1]": ["[dim]look[/dim]", CHECK_WARNING + "x"]},
    )
    out = console(terminal=True, width=100)
    report.print_result(out, result, plan=True)
    assert text(out) == "\n".join(
        [
            "                        site.yml: successful in 62.0s",
            "┏━━━━━━┳━━━━┳━━━━━━━━━┳━━━━━━━━┳━━━━━━━━━━━━━┳━━━━━━━━━┳━━━━━━━━━┳━━━━━━━━━━┓",
            "┃ host ┃ ok ┃ changed ┃ failed ┃ unreachable ┃ skipped ┃ rescued ┃ reboot   ┃",
            "┡━━━━━━╇━━━━╇━━━━━━━━━╇━━━━━━━━╇━━━━━━━━━━━━━╇━━━━━━━━━╇━━━━━━━━━╇━━━━━━━━━━┩",
            "│ n[1] │  2 │       0 │      0 │           0 │       0 │       1 │ -        │",
            "│ n2   │  1 │       0 │      0 │           0 │       0 │       0 │ required │",
            "└──────┴────┴─────────┴────────┴─────────────┴─────────┴─────────┴──────────┘",
            "n[1] would change: A [b], B",
            "n2 would change: nothing",
            "notice n[1]: [dim]look[/dim]",
            "FAILED n[1]: task Task [x]: said [red]no[/red]",
            "UNREACHABLE n2: task T: gone",
            "reboot required on n2 (nodeforge_reboot_policy decides)",
            "ansible-playbook failed before reaching any host:",
            "[ERROR] no [b]host[/b]",
            "artifacts: /a/[red]x",
        ]
    )


def test_the_summary_title_prints_the_playbook_s_name_as_it_is():
    out = console()
    report.print_result(out, RunResult("/p/[bold]site.yml", "successful", 0, "/a", {}, [], {}, {}, 1.0))
    assert text(out).splitlines()[0].strip() == "[bold]site.yml: successful in 1.0s"


def test_the_summary_table_s_columns_and_title():
    result = RunResult("p.yml", "failed", 2, "/a", {"n1": counters(ok=1, ignored=3)}, [], {}, {}, 0.04)
    table = report.summary_table(result)
    assert table.title == "p.yml: failed in 0.0s"
    assert [c.header for c in table.columns] == ["host", "ok", "changed", "failed", "unreachable", "skipped", "ignored"]
    assert [(c.justify, c.style, c.no_wrap) for c in table.columns] == [
        ("left", "", True),
        ("right", "green", True),
        ("right", "yellow", True),
        ("right", "red", True),
        ("right", "magenta", True),
        ("right", "", True),
        ("right", "", True),
    ]
    assert [list(c.cells) for c in table.columns] == [["n1"], ["1"], ["0"], ["0"], ["0"], ["0"], ["3"]]


def test_a_reboot_not_required_anywhere_still_shows_the_column():
    result = RunResult("p.yml", "successful", 0, "/a", {"n1": counters(ok=1)}, [], {}, {"n1": False}, 0.0)
    table = report.summary_table(result)
    assert [c.header for c in table.columns][-1] == "reboot"
    assert list(table.columns[-1].cells) == ["-"]


def test_the_summary_keeps_its_own_styles_on_a_highlighting_console(clock):
    """Only the report's markup is styled: the notices, ansible-playbook's error and the artifacts path are printed
    without rich's highlighting (numbers, paths), whatever the console's default."""
    out = styled_console(terminal=True, width=120)
    report.print_result(out, run_result("notices"))
    report.print_result(out, run_result("parse_error"))
    header = "┃[bold] ok [/]┃[bold] changed [/]┃[bold] failed [/]┃[bold] unreachable [/]┃[bold] skipped [/]┃"
    assert styled(out) == "\n".join(
        [
            "[italic]               notices.yml: successful in 2.3s               [/]",
            "┏━━━━━━━━━━━┳━━━━┳━━━━━━━━━┳━━━━━━━━┳━━━━━━━━━━━━━┳━━━━━━━━━┓",
            "┃[bold] host      [/]" + header,
            "┡━━━━━━━━━━━╇━━━━╇━━━━━━━━━╇━━━━━━━━╇━━━━━━━━━━━━━╇━━━━━━━━━┩",
            "│ localnode │[green]  6 [/]│[yellow]       0 [/]│[red]      0 [/]│[magenta]           0 [/]│       2 │",
            "│ othernode │[green]  8 [/]│[yellow]       1 [/]│[red]      0 [/]│[magenta]           0 [/]│       1 │",
            "└───────────┴────┴─────────┴────────┴─────────────┴─────────┘",
            "[yellow]notice[/] localnode: localnode: docker is not restarted: 2 running container(s) would be stopped",
            "[yellow]notice[/] localnode: two specifications /etc/cdi/nvidia.yaml 2",
            "[yellow]notice[/] othernode: othernode: docker is not restarted: 2 running container(s) would be stopped",
            "[yellow]notice[/] othernode: two specifications /etc/cdi/nvidia.yaml 2",
            "[yellow]notice[/] othernode: role says: othernode restarts containerd",
            AFTER,
            "[italic]            parse_error.yml: failed in 2.3s             [/]",
            "┏━━━━━━┳━━━━┳━━━━━━━━━┳━━━━━━━━┳━━━━━━━━━━━━━┳━━━━━━━━━┓",
            "┃[bold] host [/]" + header,
            "┡━━━━━━╇━━━━╇━━━━━━━━━╇━━━━━━━━╇━━━━━━━━━━━━━╇━━━━━━━━━┩",
            "└──────┴────┴─────────┴────────┴─────────────┴─────────┘",
            "[red]ansible-playbook failed before reaching any host[/]:",
            "[ERROR]: YAML parsing failed: While parsing a flow node did not find expected node content.",
            "Origin: /tmp/nodeforge-record-events/parse_error/parse_error.yml:7:1",
            "",
            "(source not shown: file truncated)",
            AFTER,
        ]
    )


def test_a_long_artifacts_path_is_printed_whole_on_one_line(clock):
    """The artifacts line is the operator's path to copy: never wrapped, however narrow the console."""
    artifacts = "/home/operator/.local/state/nodeforge/runner/artifacts/20260102T030405-123456-success"
    out = console()
    report.print_result(out, run_result("success", artifact_dir=artifacts))
    assert text(out) == "\n".join(
        [SUCCESS_TABLE, "reboot required on localnode (nodeforge_reboot_policy decides)", f"artifacts: {artifacts}"]
    )


# ---- failures, warnings, problems ------------------------------------------------------------------------------


def test_print_failures_one_line_each(clock):
    out = console(width=200)
    report.print_failures(out, run_result("failing"))
    report.print_failures(out, run_result("unreachable"))
    assert text(out) == "\n".join(
        [
            "FAILED othernode: task Refuse on purpose: the node said no: othernode",
            "UNREACHABLE deadnode: task Touch the node: Task failed: Failed to connect to the host via ssh: ssh: "
            "connect to host 127.0.0.1 port 1: Connection refused",
        ]
    )


PROBLEMS = [
    Problem("hosts.yml:3", "group gpu_nodes", "nodeforge_profile", "nothing", "one of lab, c4140 [x]"),
    Problem("hosts.yml", "host n1", "", "'[b]x'", "a name"),
]


def test_print_warnings_and_problems():
    out = console(width=200)
    report.print_warnings(out, PROBLEMS)
    report.print_problems(out, PROBLEMS)
    report.print_problems(out, [])
    assert text(out) == "\n".join(
        [
            "warning: hosts.yml:3: group gpu_nodes: nodeforge_profile: found nothing; expected one of lab, c4140 [x]",
            "warning: hosts.yml: host n1: found '[b]x'; expected a name",
            "2 problem(s) found; no node was touched:",
            "  - hosts.yml:3: group gpu_nodes: nodeforge_profile: found nothing; expected one of lab, c4140 [x]",
            "  - hosts.yml: host n1: found '[b]x'; expected a name",
            "0 problem(s) found; no node was touched:",
        ]
    )


def test_failures_warnings_and_problems_keep_their_own_styles_on_a_highlighting_console(clock):
    """Only the report's markup is styled (the kind, the task, "warning"): the messages, with their addresses,
    numbers and paths, are printed without rich's highlighting, whatever the console's default."""
    out = styled_console(width=200)
    report.print_failures(out, run_result("comes_and_goes"))
    report.print_warnings(out, PROBLEMS)
    assert styled(out) == "\n".join(
        [
            f"[red]UNREACHABLE[/] deadnode: task [bold]Touch the node[/]: {REFUSED}",
            f"[red]UNREACHABLE[/] deadnode: task [bold]Touch the node again[/]: {REFUSED}",
            "[yellow]warning[/]: hosts.yml:3: group gpu_nodes: nodeforge_profile: found nothing; expected one of lab, "
            "c4140 [x]",
            "[yellow]warning[/]: hosts.yml: host n1: found '[b]x'; expected a name",
        ]
    )
    out = styled_console(width=200)
    report.print_problems(out, PROBLEMS)
    assert styled(out).splitlines() == [
        "[red]2 problem(s)[/] found; no node was touched:",
        "  - hosts.yml:3: group gpu_nodes: nodeforge_profile: found nothing; expected one of lab, c4140 [x]",
        "  - hosts.yml: host n1: found '[b]x'; expected a name",
    ]


def test_long_warnings_and_problems_are_not_wrapped():
    long = Problem("hosts.yml", "host n1", "v", "x" * 100, "y")
    out = console(width=40)
    report.print_warnings(out, [long])
    report.print_problems(out, [long])
    assert text(out).splitlines() == [
        f"warning: hosts.yml: host n1: v: found {'x' * 100}; expected y",
        "1 problem(s) found; no node was touched:",
        f"  - hosts.yml: host n1: v: found {'x' * 100}; expected y",
    ]


def test_run_notices_leave_out_the_check_s_warnings_only(clock):
    assert report.run_notices(run_result("notices").notices) == [
        ("localnode", "localnode: docker is not restarted: 2 running container(s) would be stopped"),
        ("localnode", "two specifications /etc/cdi/nvidia.yaml 2"),
        ("othernode", "othernode: docker is not restarted: 2 running container(s) would be stopped"),
        ("othernode", "two specifications /etc/cdi/nvidia.yaml 2"),
        ("othernode", "role says: othernode restarts containerd"),
    ]
    assert report.run_notices({"n1": [CHECK_WARNING, "warning: other", " " + CHECK_WARNING]}) == [
        ("n1", "warning: other"),
        ("n1", " " + CHECK_WARNING),
    ]
    assert report.run_notices({}) == []


# ---- the live progress ------------------------------------------------------------------------------------------


def test_in_a_log_the_live_progress_prints_each_task_and_notice_once_as_it_comes(clock):
    """The notices run replayed in three parts with a tick after each (and a second tick that adds nothing): each
    task that did something once, each notice once, without the check's warning."""
    out = console(width=200)
    events = recorded("notices")["events"]
    progress = report.Progress()
    with report.live_progress(out) as tick:
        for part in (events[:5], events[5:20], events[20:]):
            for event in part:
                progress.handle(event)
            tick(progress)
            tick(progress)
    play = "A run that announces"
    assert text(out) == "\n".join(
        [
            f"{play} | Validate the inventory (a disabled verification is a warning)",
            f"{play} | Announce the restart",
            f"{play} | Announce it again",
            f"{play} | Report something routine",
            "localnode: localnode: docker is not restarted: 2 running container(s) would be stopped",
            "othernode: othernode: docker is not restarted: 2 running container(s) would be stopped",
            f"{play} | Warn about a second NVIDIA CDI specification",
            f"{play} | Announce nothing",
            f"{play} | Run the role",
            f"{play} | Announce from a role",
            f"{play} | Change something in a role",
            "localnode: two specifications /etc/cdi/nvidia.yaml 2",
            "othernode: two specifications /etc/cdi/nvidia.yaml 2",
            "othernode: role says: othernode restarts containerd",
        ]
    )


def test_the_live_progress_in_a_log_shows_a_task_a_host_has_been_at_for_a_while(clock):
    out = console()
    progress = replay("canceled", clock=clock)
    with report.live_progress(out) as tick:
        tick(progress)
        clock.now += report.Progress.SHOW_AFTER_S
        tick(progress)
    assert text(out) == "A run that takes long | Report ok\nA run that takes long | Sleep for a long time"


def test_a_disabled_live_progress_prints_nothing(clock):
    out = console(terminal=True)
    with report.live_progress(out, enabled=False) as tick:
        tick(replay("notices"))
    assert out.export_text() == ""


def test_the_live_view_s_header_counters_and_last_notices(clock):
    progress = replay("notices")
    progress.notices["othernode"] += [f"extra {n}" for n in range(6)]
    out = console(width=120)
    out.print(report._progress_view(progress))
    assert text(out) == "\n".join(
        [
            "play: A run that announces   task: Change something in a role",
            "host       ok  changed  failed  unreachable",
            "localnode   6        0       0            0",
            "othernode   8        1       0            0",
            "othernode: two specifications /etc/cdi/nvidia.yaml 2",
            "othernode: role says: othernode restarts containerd",
        ]
        + [f"othernode: extra {n}" for n in range(6)]
    )


def test_the_live_view_s_styles(clock):
    """The header's labels bold, each counter in its colour (as the summary's), the notices yellow."""
    out = styled_console(width=120)
    out.print(report._progress_view(replay("notices")))
    assert styled(out) == "\n".join(
        [
            "[bold]play: [/]A run that announces[bold]   task: [/]Change something in a role",
            "[bold]host       ok  changed  failed  unreachable[/]",
            "localnode [green]  6 [/][yellow]       0 [/][red]      0 [/][magenta]           0[/]",
            "othernode [green]  8 [/][yellow]       1 [/][red]      0 [/][magenta]           0[/]",
            "[yellow]localnode: localnode: docker is not restarted: 2 running container(s) would be stopped[/]",
            "[yellow]localnode: two specifications /etc/cdi/nvidia.yaml 2[/]",
            "[yellow]othernode: othernode: docker is not restarted: 2 running container(s) would be stopped[/]",
            "[yellow]othernode: two specifications /etc/cdi/nvidia.yaml 2[/]",
            "[yellow]othernode: role says: othernode restarts containerd[/]",
        ]
    )


def test_the_live_view_before_anything_happened():
    out = console()
    out.print(report._progress_view(report.Progress()))
    assert text(out) == "play: -   task: -\nhost  ok  changed  failed  unreachable"


# ---- --json ---------------------------------------------------------------------------------------------------


def test_problem_is_the_check_s_shape():
    assert report.problem("command line") == {
        "where": "command line",
        "scope": "",
        "variable": "",
        "found": "",
        "expected": "",
    }
    assert report.problem("input", "nodeforge check", "-e", "bad", "k=v") == {
        "where": "input",
        "scope": "nodeforge check",
        "variable": "-e",
        "found": "bad",
        "expected": "k=v",
    }


def test_json_payload_builds_the_common_keys_then_the_verb_s():
    payload = report.json_payload(
        "invalid",
        True,
        problems=[PROBLEMS[0], {"where": "w", "found": 3, "other": "dropped"}],
        warnings=iter([PROBLEMS[1]]),
        notices=["own note", ("n1", 42), {"host": "n2", "text": 7}, {"text": "no host"}],
        files=[Path("/o/a.yaml"), "b"],
        hosts={"n1": {"ok": 1}},
        next=["nodeforge check"],
        hosts_extra=1,
    )
    assert payload == {
        "status": "invalid",
        "exit_code": 1,
        "problems": [
            {
                "where": "hosts.yml:3",
                "scope": "group gpu_nodes",
                "variable": "nodeforge_profile",
                "found": "nothing",
                "expected": "one of lab, c4140 [x]",
            },
            {"where": "w", "scope": "", "variable": "", "found": "3", "expected": ""},
        ],
        "warnings": [
            {"where": "hosts.yml", "scope": "host n1", "variable": "", "found": "'[b]x'", "expected": "a name"}
        ],
        "notices": [
            {"host": None, "text": "own note"},
            {"host": "n1", "text": "42"},
            {"host": "n2", "text": "7"},
            {"host": None, "text": "no host"},
        ],
        "files": ["/o/a.yaml", "b"],
        "hosts": {"n1": {"ok": 1}},
        "next": ["nodeforge check"],
        "hosts_extra": 1,
    }
    assert list(payload)[:7] == list(report.COMMON_KEYS)
    assert type(payload["exit_code"]) is int


def test_json_payload_defaults_are_empty():
    assert report.json_payload("ok", 0) == {
        "status": "ok",
        "exit_code": 0,
        "problems": [],
        "warnings": [],
        "notices": [],
        "files": [],
        "hosts": {},
    }


def test_json_payload_hosts_is_a_copy():
    hosts = {"n1": {"ok": 1}}
    payload = report.json_payload("ok", 0, hosts=hosts)
    hosts["n2"] = {}
    assert payload["hosts"] == {"n1": {"ok": 1}}


def test_run_payload_of_a_failed_run(clock):
    assert report.run_payload(run_result("failing"), warnings=[PROBLEMS[1]], files=["/o/r.json"]) == {
        "status": "failed",
        "exit_code": EXIT_HOST_FAILED,
        "problems": [],
        "warnings": [
            {"where": "hosts.yml", "scope": "host n1", "variable": "", "found": "'[b]x'", "expected": "a name"}
        ],
        "notices": [],
        "files": ["/o/r.json"],
        "hosts": {"localnode": counters(ok=3, skipped=1, ignored=2), "othernode": counters(ok=1, failed=1, ignored=1)},
        "playbook": "/playbooks/failing.yml",
        "rc": 2,
        "duration_s": 2.35,
        "artifacts": ARTIFACTS,
        "failures": [REFUSAL],
        "changes": {},
        "reboot_required": {},
        "acceptance": {},
        "upgrade_plans": {},
        "upgrade_records": {},
        "error": "",
    }


def test_run_payload_notices_and_the_verb_s_own_status_and_keys(clock):
    result = run_result("notices")
    result.output = "listed"
    payload = report.run_payload(result, status="passed", exit_code=EXIT_OK, checks=["c"], rc=7)
    assert payload == {
        "status": "passed",
        "exit_code": 0,
        "problems": [],
        "warnings": [],
        "notices": [
            {
                "host": "localnode",
                "text": "localnode: docker is not restarted: 2 running container(s) would be stopped",
            },
            {"host": "localnode", "text": "two specifications /etc/cdi/nvidia.yaml 2"},
            {
                "host": "othernode",
                "text": "othernode: docker is not restarted: 2 running container(s) would be stopped",
            },
            {"host": "othernode", "text": "two specifications /etc/cdi/nvidia.yaml 2"},
            {"host": "othernode", "text": "role says: othernode restarts containerd"},
        ],
        "files": [],
        "hosts": {"localnode": counters(ok=6, skipped=2), "othernode": counters(ok=8, changed=1, skipped=1)},
        "playbook": "/playbooks/notices.yml",
        "rc": 7,
        "duration_s": 2.35,
        "artifacts": ARTIFACTS,
        "failures": [],
        "changes": {"othernode": ["Change something in a role"]},
        "reboot_required": {},
        "acceptance": {},
        "upgrade_plans": {},
        "upgrade_records": {},
        "error": "",
        "output": "listed",
        "checks": ["c"],
    }


def test_run_payload_takes_the_verb_s_exit_code_over_the_run_s(clock):
    """upgrade refusing a node after a plan run that succeeded: its status and exit code, not the run's."""
    result = run_result("acceptance")
    assert result.exit_code == EXIT_OK
    assert report.run_payload(result, status="refused", exit_code=EXIT_ERROR) == {
        "status": "refused",
        "exit_code": EXIT_ERROR,
        "problems": [],
        "warnings": [],
        "notices": [],
        "files": [],
        "hosts": {"localnode": counters(ok=5), "othernode": counters(ok=5)},
        "playbook": "/playbooks/acceptance.yml",
        "rc": 0,
        "duration_s": 2.35,
        "artifacts": ARTIFACTS,
        "failures": [],
        "changes": {},
        "reboot_required": {"localnode": False, "othernode": True},
        "acceptance": {"localnode": ACCEPTANCE},
        "upgrade_plans": {"localnode": PLAN},
        "upgrade_records": {"othernode": RECORD},
        "error": "",
    }


def test_run_payload_status_and_exit_code_of_a_canceled_run(clock):
    payload = report.run_payload(run_result("canceled"), status=None, exit_code=None)
    assert (payload["status"], payload["exit_code"], payload["hosts"]) == (
        "canceled",
        99,
        {"localnode": counters(ok=1)},
    )


def test_print_json_writes_one_sorted_document_and_remembers_it(capsys):
    report.reset_json()
    assert report.json_printed() is False
    report.print_json({"b": 1, "a": {"d": Path("/x"), "c": [1]}})
    assert capsys.readouterr().out == ('{\n  "a": {\n    "c": [\n      1\n    ],\n    "d": "/x"\n  },\n  "b": 1\n}\n')
    assert report.json_printed() is True
    report.reset_json()
    assert report.json_printed() is False


def test_the_run_payload_of_each_recorded_run_is_valid_json_for_the_schema(clock):
    import jsonschema

    validator = jsonschema.Draft202012Validator(report.JSON_SCHEMA)
    for name in ("success", "failing", "unreachable", "notices", "acceptance", "canceled"):
        document = json.loads(json.dumps(report.run_payload(run_result(name)), default=str))
        assert list(validator.iter_errors(document)) == [], name
