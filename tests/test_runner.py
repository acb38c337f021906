"""The runner, against real small playbooks through ansible-runner (localhost and an unreachable host)."""

from __future__ import annotations

import json
import os
import shlex
import stat
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from nodeforge.runner import (
    EXIT_CANCELED,
    EXIT_HOST_FAILED,
    EXIT_OK,
    EXIT_UNREACHABLE,
    Canceller,
    RunOptions,
    RunResult,
    _cmdline,
    run_playbook,
    state_dir,
)
from tests.conftest import PLAYBOOKS

pytestmark = pytest.mark.slow


def test_success_counts_changes_and_facts(local_inventory, tmp_path):
    marker = tmp_path / "marker"
    opts = RunOptions(inventory=str(local_inventory), extravars={"marker_path": str(marker)})
    ticks = []
    result = run_playbook(str(PLAYBOOKS / "success.yml"), opts, on_tick=ticks.append)
    assert result.exit_code == EXIT_OK
    assert result.status == "successful"
    assert result.hosts["localnode"]["ok"] == 3
    assert result.hosts["localnode"]["changed"] == 1
    assert result.hosts["localnode"]["failed"] == 0
    assert result.changes == {"localnode": ["Write a marker file"]}
    assert result.reboot_required == {"localnode": True}
    assert marker.read_text() == "x\n"
    assert ticks, "the live view was never updated"
    assert (state_dir() / "runner" / "artifacts").is_dir()
    assert result.artifacts.startswith(str(state_dir()))


def test_check_mode_changes_nothing(local_inventory, tmp_path):
    marker = tmp_path / "marker"
    opts = RunOptions(inventory=str(local_inventory), extravars={"marker_path": str(marker)}, check=True, diff=True)
    result = run_playbook(str(PLAYBOOKS / "success.yml"), opts)
    assert result.exit_code == EXIT_OK
    assert result.changes == {"localnode": ["Write a marker file"]}
    assert not marker.exists()


def test_failing_task_is_reported(local_inventory):
    result = run_playbook(str(PLAYBOOKS / "failing.yml"), RunOptions(inventory=str(local_inventory)))
    assert result.exit_code == EXIT_HOST_FAILED
    assert result.hosts["localnode"]["failed"] == 1
    assert result.hosts["localnode"]["ignored"] == 1
    [failure] = result.failures
    assert failure.host == "localnode"
    assert failure.task == "Refuse on purpose"
    assert failure.message == "the node said no: localnode"
    assert not failure.unreachable


def test_unreachable_host(tmp_path):
    inventory = tmp_path / "hosts.yml"
    # Nothing listens on port 1 of the loopback: ssh is refused at once.
    inventory.write_text(
        "all:\n  hosts:\n    deadnode:\n      ansible_host: 127.0.0.1\n      ansible_port: 1\n"
        "      ansible_connection: ssh\n"
    )
    opts = RunOptions(inventory=str(inventory), extravars={"marker_path": str(tmp_path / "m")})
    result = run_playbook(str(PLAYBOOKS / "success.yml"), opts)
    assert result.exit_code == EXIT_UNREACHABLE
    assert result.hosts["deadnode"]["unreachable"] == 1
    [failure] = result.failures
    assert failure.unreachable
    assert failure.task == "Write a marker file"  # debug runs on the controller; copy is the first to connect
    assert "port 1" in failure.message or "refused" in failure.message.lower()


def test_cancel_stops_the_run(local_inventory):
    canceller = Canceller()
    timer = threading.Timer(3.0, canceller.request)
    timer.start()
    started = time.monotonic()
    try:
        result = run_playbook(
            str(PLAYBOOKS / "slow.yml"), RunOptions(inventory=str(local_inventory)), canceller=canceller
        )
    finally:
        timer.cancel()
    assert result.status == "canceled"
    assert result.exit_code == EXIT_CANCELED
    assert time.monotonic() - started < 60  # the playbook alone would take 120 s


def test_artifacts_rotate(local_inventory, tmp_path):
    opts = RunOptions(inventory=str(local_inventory), extravars={"marker_path": str(tmp_path / "m")}, keep_runs=2)
    for _ in range(3):
        run_playbook(str(PLAYBOOKS / "success.yml"), opts)
        time.sleep(1.1)  # idents carry the second
    runs = [p for p in (state_dir() / "runner" / "artifacts").iterdir() if p.is_dir()]
    assert len(runs) == 2


def test_ctrl_c_on_the_cli_cancels_and_exits_non_zero(local_inventory):
    """A real SIGINT to a real CLI process: the run is canceled through the cancel_callback, exit code 99 (as
    ansible-playbook's)."""
    import signal
    import subprocess
    import sys

    script = (
        "import sys; from nodeforge import cli; "
        f"cli.VERBS['provision'] = cli.Verb({str(PLAYBOOKS / 'slow.yml')!r}, 'slow'); "
        "sys.argv = ['nodeforge', 'provision', '-i', sys.argv[1]]; cli.main()"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(local_inventory)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    time.sleep(6)
    assert proc.poll() is None, proc.communicate()[0]
    started = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_CANCELED, out
    assert "canceled" in out
    assert time.monotonic() - started < 30


def test_secrets_stay_off_argv_and_artifacts_are_private(local_inventory, tmp_path, monkeypatch):
    """-e values went onto ansible-playbook's argv (visible in `ps`) and, with the caller's whole environment, into
    artifacts/<run>/command; artifact files were 0644 and directories 0755."""
    monkeypatch.setenv("SOME_CLOUD_TOKEN", "env-secret-6d3f")
    secret = "extravar-secret-91c2"
    marker = tmp_path / "marker"
    opts = RunOptions(inventory=str(local_inventory), extravars={"marker_path": str(marker), "site_token": secret})
    result = run_playbook(str(PLAYBOOKS / "success.yml"), opts)
    assert result.exit_code == EXIT_OK
    artifacts = Path(result.artifacts)
    recorded = json.loads((artifacts / "command").read_text())
    # What ps would have shown: the -e argument is a file reference, never the values.
    argv = " ".join(recorded["command"])
    assert secret not in argv and str(marker) not in argv, argv
    assert "env" not in recorded
    for path in [artifacts, *artifacts.rglob("*"), state_dir() / "runner"]:
        text = path.read_bytes() if path.is_file() else b""
        assert b"env-secret-6d3f" not in text, path
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), f"{path}: {oct(mode)}"
    # The extra-vars file is gone once the run ended; the values reached the play.
    assert not [
        p for p in (state_dir() / "runner").rglob("*") if secret.encode() in (p.read_bytes() if p.is_file() else b"")
    ]
    assert marker.read_text() == "x\n"


def test_announcements_and_warnings_reach_the_operator(local_inventory):
    """The CLI dropped debug and warning output: a role announcing a runtime restart or a stack replacement, and
    Ansible's warnings, never reached the operator. Now they are in the result, the live view and the summary."""
    from rich.console import Console

    from nodeforge import report

    opts = RunOptions(inventory=str(local_inventory), extravars={"ofed_validate_certs": False})
    console = Console(record=True, width=200, force_terminal=False)
    with report.live_progress(console) as tick:
        result = run_playbook(str(PLAYBOOKS / "announce.yml"), opts, on_tick=tick)
    assert result.exit_code == EXIT_OK
    notices = result.notices["localnode"]
    warnings = [n for n in notices if n.startswith("warning: nodeforge check:")]
    assert [w for w in warnings if "ofed_validate_certs: found false" in w]
    assert notices[len(warnings) :] == [
        "localnode: docker is not restarted: 2 running container(s) would be stopped",
        "two specifications /etc/cdi/nvidia.yaml",
    ]
    live = console.export_text(clear=False)
    assert "localnode: localnode: docker is not restarted" in live and "routine detail" not in live
    # The check's warnings the validation play repeats are the CLI's to print (once, before the run): not here.
    assert "nodeforge check" not in live
    # In a log the live progress printed each notice as it came: the summary does not repeat it.
    report.print_result(console, result)
    assert console.export_text().count("docker is not restarted") == 1
    # On a terminal the live view goes away with the run: the summary lists the notices.
    terminal = Console(record=True, width=200, force_terminal=True)
    report.print_result(terminal, result)
    summary = terminal.export_text()
    assert "notice localnode: localnode: docker is not restarted: 2 running container(s) would be stopped" in summary
    assert "nodeforge check" not in summary
    assert result.as_dict()["notices"] == {"localnode": notices}


def _events(task: str, kind: str) -> list[dict]:
    """The events of `kind` for `task` in every run's artifacts under this test's state directory."""
    found = []
    for path in (state_dir() / "runner" / "artifacts").glob("*/job_events/*.json"):
        data = json.loads(path.read_text())
        if data.get("event") == kind and data.get("event_data", {}).get("task") == task:
            found.append(data)
    return found


CHECK_TASK, NODE_TASK = "Check the inventory as nodeforge check does", "Stand for a node task"


def _once_the_validation_task_waits() -> None:
    """A gate that returns once ansible-playbook has reached the validation task (so the run started before the
    check ended), half a second later."""
    deadline = time.monotonic() + 120
    while not _events(CHECK_TASK, "runner_on_start"):
        assert time.monotonic() < deadline, "ansible-playbook never reached the validation task"
        time.sleep(0.05)
    time.sleep(0.5)


def test_gate_holds_the_node_tasks_until_the_check_passes(local_inventory):
    """The caller's check runs while ansible-playbook starts; the validation play waits for its verdict: the first
    node task starts only after the check returned."""
    passed_at = {}

    def gate() -> None:
        _once_the_validation_task_waits()
        passed_at["t"] = time.time()

    result = run_playbook(str(PLAYBOOKS / "validated.yml"), RunOptions(inventory=str(local_inventory)), gate=gate)
    assert result.exit_code == EXIT_OK, result.failures
    [started] = _events(NODE_TASK, "runner_on_start")
    node_task_at = datetime.fromisoformat(started["created"]).replace(tzinfo=UTC).timestamp()
    assert node_task_at >= passed_at["t"], (node_task_at, passed_at)
    assert not list((state_dir() / "runner" / "gates").iterdir()), "the verdict file outlived its run"


def test_a_refusing_gate_stops_the_run_before_any_node_task(local_inventory):
    def gate() -> None:
        _once_the_validation_task_waits()
        raise SystemExit(1)

    started = time.monotonic()
    with pytest.raises(SystemExit):
        run_playbook(str(PLAYBOOKS / "validated.yml"), RunOptions(inventory=str(local_inventory)), gate=gate)
    assert time.monotonic() - started < 60
    assert _events(CHECK_TASK, "runner_on_start")
    assert not _events(NODE_TASK, "runner_on_start")


def _skip_tags_from(source: str, value: str, tmp_path: Path, monkeypatch) -> RunOptions:
    """A run whose skip tags come from `source`, as an operator sets them."""
    if source == "cli":
        return RunOptions(skip_tags=value)
    if source == "--start-at-task":  # the run starts past the validation play's task
        return RunOptions(connection=(f"--start-at-task={value}",))
    if source == "environment":
        monkeypatch.setenv("ANSIBLE_SKIP_TAGS", value)
    elif source == "ANSIBLE_CONFIG":
        (tmp_path / "site.cfg").write_text(f"[defaults]\nforks = 5\n\n[tags]\nskip = {value}\n")
        monkeypatch.setenv("ANSIBLE_CONFIG", str(tmp_path / "site.cfg"))
    elif source == "~/.ansible.cfg":
        monkeypatch.setenv("HOME", str(tmp_path))
        (tmp_path / ".ansible.cfg").write_text(f"[tags]\nskip = {value}\n")
    return RunOptions()


@pytest.mark.parametrize(
    ("source", "value"),
    [("cli", "tagged"), ("environment", "always"), ("environment", "foo, tagged"), ("ANSIBLE_CONFIG", "always"),
     ("~/.ansible.cfg", "tagged"), ("--start-at-task", NODE_TASK)],
)  # fmt: skip
def test_a_run_that_skips_the_validation_play_is_checked_before_it_starts(
    source, value, local_inventory, tmp_path, monkeypatch
):
    """The validation play is tagged always: skipping `always` or `tagged` skips it, wherever Ansible reads the skip
    tags from. Such a run cannot wait for the verdict in that play, so the check runs first: a check that takes a
    while and refuses leaves ansible-playbook unstarted, no node task run."""
    opts = _skip_tags_from(source, value, tmp_path, monkeypatch)
    opts.inventory = str(local_inventory)

    def slow_refusal() -> None:
        time.sleep(2)
        raise SystemExit(1)

    with pytest.raises(SystemExit):
        run_playbook(str(PLAYBOOKS / "validated.yml"), opts, gate=slow_refusal)
    assert not _events(NODE_TASK, "runner_on_start")
    assert not list((state_dir() / "runner" / "artifacts").glob("*/job_events")), "ansible-playbook was started"


def test_an_unreadable_ansible_cfg_means_the_check_runs_first(local_inventory, tmp_path, monkeypatch):
    (tmp_path / "broken.cfg").write_text("[tags\nskip = always\n")
    monkeypatch.setenv("ANSIBLE_CONFIG", str(tmp_path / "broken.cfg"))
    with pytest.raises(SystemExit):
        run_playbook(str(PLAYBOOKS / "validated.yml"), RunOptions(inventory=str(local_inventory)), gate=lambda: exit(1))
    assert not list((state_dir() / "runner" / "artifacts").glob("*/job_events"))


def test_skip_tags_that_keep_the_validation_play_still_overlap_the_check(local_inventory, tmp_path, monkeypatch):
    """Other skip tags (here from ansible.cfg and --skip-tags) leave the play, and the check overlapping
    ansible-playbook's start (the gate waits for the validation task). `all` skips every task but those tagged
    always."""
    opts = _skip_tags_from("ANSIBLE_CONFIG", "always_not, all", tmp_path, monkeypatch)
    opts.inventory, opts.skip_tags = str(local_inventory), "gpu"
    result = run_playbook(str(PLAYBOOKS / "validated.yml"), opts, gate=_once_the_validation_task_waits)
    assert result.exit_code == EXIT_OK, result.failures
    assert _events(CHECK_TASK, "runner_on_start") and not _events(NODE_TASK, "runner_on_start")


def test_a_playbook_without_the_validation_play_is_checked_before_it_starts(local_inventory, tmp_path):
    """success.yml does not wait for a verdict: the gate runs first, and a refusal means ansible-playbook never
    starts."""
    with pytest.raises(SystemExit):
        run_playbook(str(PLAYBOOKS / "success.yml"), RunOptions(inventory=str(local_inventory)), gate=lambda: exit(1))
    assert not list((state_dir() / "runner" / "artifacts").glob("*/job_events"))
    assert not list((state_dir() / "runner").glob("extravars/*")), "a refused run left an -e file"


def test_operator_extra_vars_reach_the_run_through_private_files(local_inventory, tmp_path):
    """-e as given (k=v, JSON, @file relative to the caller's directory) is read by ansible-playbook in order, the
    caller's own extravars win; inline values never appear on the recorded command line."""
    marker = tmp_path / "marker"
    (tmp_path / "more.yml").write_text("marker_content: from-the-file\n")
    opts = RunOptions(
        inventory=str(local_inventory),
        extra_vars_args=("marker_path=/nowhere marker_content=s3cret", '{"marker_content": "json"}', "@more.yml"),
        extravars={"marker_path": str(marker)},
    )
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        result = run_playbook(str(PLAYBOOKS / "success.yml"), opts)
    finally:
        os.chdir(cwd)
    assert result.exit_code == EXIT_OK, result.failures
    assert marker.read_text() == "from-the-file\n"
    command = json.loads(Path(result.artifacts, "command").read_text())["command"]
    assert f"@{tmp_path / 'more.yml'}" in command
    assert not any("s3cret" in part or "marker_content" in part for part in command), command
    assert not list((state_dir() / "runner" / "extravars").iterdir())


# ---------------------------------------------------------------------------------------------------------------
# --vault-password-file: ansible-playbook runs in the playbook's directory, so a path relative to the operator's
# passed the check and then failed the run ("playbooks/<path> was not found").


def _vault_inventory(directory: Path) -> Path:
    inventory = directory / "hosts.yml"
    inventory.write_text(
        "all:\n  children:\n    gpu_nodes:\n      hosts:\n        n1:\n      vars:\n        nodeforge_profile: lab\n"
    )
    return inventory


def _no_run() -> RunResult:
    return RunResult("site.yml", "successful", 0, "", {}, [], {}, {}, 0.0)


def test_a_relative_vault_password_file_reaches_ansible_playbook_by_its_absolute_path(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from nodeforge import cli

    (tmp_path / "secrets").mkdir()
    password_file = tmp_path / "secrets" / "vault-pass"
    password_file.write_text("correct horse\n")
    monkeypatch.chdir(tmp_path)
    # The runner, whoever calls it: the command line ansible-playbook gets names the file by its absolute path.
    opts = RunOptions(vault=["--vault-id=dev@prompt", "--vault-password-file=secrets/vault-pass"])
    assert shlex.split(_cmdline(opts, [])) == ["--vault-id=dev@prompt", f"--vault-password-file={password_file}"]
    # Through the CLI: the check and the run both get the absolute path.
    seen = {}

    def fake_run(playbook, opts, on_tick=None, gate=None, **_kw):
        gate()  # the CLI's check, which reads the same file
        seen["cmdline"] = shlex.split(_cmdline(opts, []))
        return _no_run()

    monkeypatch.setattr(cli, "run_playbook", fake_run)
    inventory = _vault_inventory(tmp_path)
    result = CliRunner().invoke(
        cli.main, ["provision", "-i", str(inventory), "--vault-password-file", "secrets/vault-pass"]
    )
    assert result.exit_code == 0, result.output
    assert seen["cmdline"] == [f"--vault-password-file={password_file}"]


@pytest.mark.parametrize("verb", ["provision", "check"])
def test_a_missing_vault_password_file_is_refused_by_name_before_anything_runs(tmp_path, monkeypatch, verb):
    from click.testing import CliRunner

    from nodeforge import cli

    def never(*_args, **_kw):
        raise AssertionError("ran with a vault password file that does not exist")

    monkeypatch.setattr(cli, "run_playbook", never)
    monkeypatch.chdir(tmp_path)
    inventory = _vault_inventory(tmp_path)
    result = CliRunner().invoke(cli.main, [verb, "-i", str(inventory), "--vault-password-file", "secrets/vault-pass"])
    assert result.exit_code == 5, result.output
    assert isinstance(result.exception, SystemExit)  # a usage error, not a traceback
    assert "Invalid value for '--vault-password-file' / '--vault-pass-file': " in result.output
    assert f"secrets/vault-pass does not exist (looked for {tmp_path / 'secrets' / 'vault-pass'})" in result.output
    assert not list((state_dir() / "runner").glob("artifacts/*"))
