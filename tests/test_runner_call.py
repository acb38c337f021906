# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""What nodeforge.runner.run_playbook hands ansible-runner, in process: ansible_runner.run_async is stood in for by a
recorder (the seam is nodeforge's own module attribute; nothing of Ansible is replaced), which keeps the call's
arguments and what the process looked like during the call (umask, signal handlers, the private -e file). The run
itself, with ansible-runner and ansible-playbook for real, is tests/test_runner.py's (slow)."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import stat
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from nodeforge import ansible_settings, content, runner
from nodeforge.runner import GATE_ENV, GATE_PID_ENV, VALIDATION_PLAYBOOK, Canceller, RunOptions, run_playbook

STATS = {"ok": {"node-01": 2}, "changed": {"node-01": 1}, "processed": {"node-01": 1}}


class Recorder:
    """Stands in for ansible_runner.run_async: records the call, then returns a finished thread and a runner."""

    def __init__(self, status: str = "successful", stdout: str = "") -> None:
        self.status, self.stdout = status, stdout
        self.kwargs: dict = {}
        self.seen: dict = {}
        self.done = threading.Event()
        self.runs_for = 0.15
        self.phases: list[
            str
        ] = []  # statuses the runner shows before "successful", 0.03 s each (ansible-runner's start)
        self.ran = None

    def _play(self, gate: Path | None) -> None:
        """ansible-playbook's part: a run that takes a moment; a gated one reads the verdict the check wrote."""
        if gate is None:
            self.done.wait(self.runs_for)
            return
        for phase in self.phases:
            self.ran.status = phase
            self.done.wait(0.03)
        self.ran.status = "running"
        for _ in range(500):
            if gate.exists():
                self.seen["verdict"] = gate.read_text()
                break
            self.done.wait(0.01)
        self.ran.status = self.status

    def __call__(self, **kwargs):
        self.kwargs = kwargs
        umask = os.umask(0o022)
        os.umask(umask)
        extravars = Path(kwargs["extravars"])
        self.seen = {
            "umask": umask,
            "sigint": signal.getsignal(signal.SIGINT),
            "sigterm": signal.getsignal(signal.SIGTERM),
            "extravars": json.loads(extravars.read_text()),
            "extravars_mode": stat.S_IMODE(extravars.stat().st_mode),
        }
        artifacts = Path(kwargs["private_data_dir"]) / "artifacts" / kwargs["ident"]
        artifacts.mkdir(parents=True, exist_ok=True)  # two runs of a test within a second share the ident
        (artifacts / "command").write_text(json.dumps({"command": ["ansible-playbook"], "env": {"TOKEN": "s"}}))
        gate = kwargs["envvars"].get(runner.GATE_ENV)
        thread = threading.Thread(target=self._play, args=(Path(gate) if gate else None,))
        ran = self.ran = SimpleNamespace(
            status=self.status,
            rc=0 if self.status == "successful" else 2,
            stats=STATS,
            config=SimpleNamespace(artifact_dir=str(artifacts)),
            stdout=io.StringIO(self.stdout),
        )
        if self.phases:
            ran.status = self.phases[0]
        thread.start()
        return thread, ran


@pytest.fixture
def recorder(monkeypatch, tmp_path):
    """The recorder in place of run_async; the state directory and the operator's ansible.cfg are the test's."""
    config = tmp_path / "ansible.cfg"
    config.write_text("[defaults]\nforks = 7\n")
    monkeypatch.setenv("NODEFORGE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("ANSIBLE_CONFIG", str(config))
    for name in ("ANSIBLE_SKIP_TAGS", "ANSIBLE_COLLECTIONS_PATH", "ANSIBLE_PIPELINING"):
        monkeypatch.delenv(name, raising=False)
    record = Recorder()
    monkeypatch.setattr(runner.ansible_runner, "run_async", record)
    return record


def bare_playbook(tmp_path: Path) -> Path:
    path = tmp_path / "project" / "bare.yml"
    path.parent.mkdir(exist_ok=True)
    path.write_text("- hosts: all\n  tasks: []\n")
    return path


def test_the_call_to_ansible_runner_whole(recorder, tmp_path, monkeypatch):
    """Every argument: the run's private directory and ident, the playbook by absolute path, the options, the
    operator's ansible.cfg named, nodeforge's environment beneath the caller's envvars, no argument left None."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "hosts.yml").write_text("all: {}\n")
    playbook = bare_playbook(tmp_path)
    canceller = Canceller()
    opts = RunOptions(
        inventory=["hosts.yml", "node-01,node-02,"],
        limit="node-01",
        tags="driver",
        skip_tags="reboot",
        extravars={"marker": "x"},
        verbosity=2,
        forks=3,
        keep_runs=4,
        envvars={"ANSIBLE_PIPELINING": "False", "NODEFORGE_TEST": "1"},
        passwords={"BECOME password": "s3cret"},
    )
    result = run_playbook(str(playbook), opts, canceller=canceller, install_signal_handlers=False)
    kwargs = dict(recorder.kwargs)
    state = tmp_path / "state"
    ident = kwargs.pop("ident")
    assert re.fullmatch(rf"\d{{8}}T\d{{6}}-{os.getpid()}-bare", ident), ident
    envvars = kwargs.pop("envvars")
    assert kwargs.pop("event_handler").__self__.__class__ is runner.Progress
    assert kwargs.pop("cancel_callback") is canceller
    fact_cache = ansible_settings.fact_cache(
        state, {**os.environ}, ansible_settings.read_config(tmp_path / "ansible.cfg")
    )
    assert fact_cache and {k: kwargs.pop(k) for k in fact_cache} == fact_cache
    assert kwargs == {
        "private_data_dir": str(state / "runner"),
        "playbook": str(playbook),
        "project_dir": str(playbook.parent),
        "quiet": True,
        "rotate_artifacts": 4,
        "extravars": str(state / "runner" / "extravars" / f"{ident}.json"),
        "limit": "node-01",
        "tags": "driver",
        "skip_tags": "reboot",
        "verbosity": 2,
        "forks": 3,
        "passwords": {"BECOME password": "s3cret"},
        "suppress_env_files": True,
        "inventory": [str(tmp_path / "hosts.yml"), "node-01,node-02,"],
    }
    assert envvars["PATH"].split(os.pathsep)[0] == os.path.dirname(sys.executable)
    assert envvars["ANSIBLE_COLLECTIONS_PATH"].split(os.pathsep)[0] == str(content.collections_dir())
    assert {k: envvars[k] for k in ("ANSIBLE_CONFIG", "ANSIBLE_HOST_KEY_CHECKING", "ANSIBLE_RETRY_FILES_ENABLED")} == {
        "ANSIBLE_CONFIG": str(tmp_path / "ansible.cfg"),
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
    }
    assert (envvars["ANSIBLE_FORCE_COLOR"], envvars["ANSIBLE_NOCOLOR"]) == ("False", "True")
    # The caller's envvars win over nodeforge's settings; no gate without the validation play.
    assert (envvars["ANSIBLE_PIPELINING"], envvars["NODEFORGE_TEST"]) == ("False", "1")
    assert GATE_ENV not in envvars and GATE_PID_ENV not in envvars
    assert recorder.seen["extravars"] == {"marker": "x"} and recorder.seen["extravars_mode"] == 0o600
    assert not Path(kwargs["extravars"]).exists()  # removed after the run
    assert (result.status, result.hosts["node-01"]["changed"], result.output) == ("successful", 1, "")


def test_options_left_unset_are_not_passed(recorder, tmp_path):
    run_playbook(str(bare_playbook(tmp_path)), RunOptions(), install_signal_handlers=False)
    assert not {"limit", "tags", "skip_tags", "verbosity", "forks", "passwords", "inventory"} & set(recorder.kwargs)


def test_the_run_writes_privately_and_gives_back_the_umask(recorder, tmp_path):
    before = os.umask(0o022)
    try:
        run_playbook(str(bare_playbook(tmp_path)), RunOptions(), install_signal_handlers=False)
        after = os.umask(0o022)
    finally:
        os.umask(before)
    assert (recorder.seen["umask"], after) == (0o077, 0o022)
    assert stat.S_IMODE((tmp_path / "state" / "runner").stat().st_mode) == 0o700


def test_ctrl_c_cancels_during_the_run_and_the_handlers_come_back(recorder, tmp_path):
    canceller = Canceller()
    previous = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    run_playbook(str(bare_playbook(tmp_path)), RunOptions(), canceller=canceller)
    assert (recorder.seen["sigint"], recorder.seen["sigterm"]) == (canceller.request, canceller.request)
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == previous


def test_without_signal_handlers_the_process_s_stay(recorder, tmp_path):
    previous = signal.getsignal(signal.SIGINT)
    run_playbook(str(bare_playbook(tmp_path)), RunOptions(), install_signal_handlers=False)
    assert recorder.seen["sigint"] is previous


def test_a_listing_prints_what_ansible_playbook_listed_without_the_check(recorder, tmp_path):
    recorder.stdout = "\nplaybook: bare.yml\n  hosts (1):\n    node-01\n"
    calls = []
    result = run_playbook(
        str(bare_playbook(tmp_path)),
        RunOptions(listing=("--list-hosts",)),
        install_signal_handlers=False,
        gate=lambda: calls.append("checked"),
    )
    assert (calls, result.output) == ([], "playbook: bare.yml\n  hosts (1):\n    node-01")
    assert "--list-hosts" in recorder.kwargs["cmdline"]


def test_a_run_without_the_validation_play_is_checked_before_anything_is_written(recorder, tmp_path):
    def refuse() -> None:
        raise SystemExit(2)

    with pytest.raises(SystemExit):
        run_playbook(str(bare_playbook(tmp_path)), RunOptions(), install_signal_handlers=False, gate=refuse)
    assert recorder.kwargs == {}
    assert not (tmp_path / "state" / "runner" / "extravars").exists()


def test_a_gated_run_tells_the_validation_play_where_its_verdict_comes(recorder, tmp_path):
    playbook = tmp_path / "site.yml"
    playbook.write_text(f"- ansible.builtin.import_playbook: {VALIDATION_PLAYBOOK}\n- hosts: all\n  tasks: []\n")
    calls = []
    run_playbook(str(playbook), RunOptions(), install_signal_handlers=False, gate=lambda: calls.append("checked"))
    envvars = recorder.kwargs["envvars"]
    gate_file = Path(envvars[GATE_ENV])
    assert (calls, envvars[GATE_PID_ENV], gate_file.parent) == (
        ["checked"],
        str(os.getpid()),
        tmp_path / "state" / "runner" / "gates",
    )
    assert gate_file.name == recorder.kwargs["ident"] and not gate_file.exists()  # the verdict is removed after
    assert recorder.seen["verdict"] == "pass"  # written while ansible-playbook ran, for the validation play


def test_the_caller_sees_the_progress_while_the_run_goes_on(recorder, tmp_path):
    ticks = []
    run_playbook(str(bare_playbook(tmp_path)), RunOptions(), install_signal_handlers=False, on_tick=ticks.append)
    assert ticks and all(isinstance(tick, runner.Progress) for tick in ticks) and len({id(t) for t in ticks}) == 1


def test_the_run_s_artifacts_are_sealed_after_it(recorder, tmp_path):
    result = run_playbook(str(bare_playbook(tmp_path)), RunOptions(), install_signal_handlers=False)
    command = Path(result.artifacts) / "command"
    assert json.loads(command.read_text()) == {"command": ["ansible-playbook"]}
    assert stat.S_IMODE(command.stat().st_mode) == 0o600


def test_the_operator_s_environment_and_ansible_cfg_keep_their_settings(recorder, tmp_path, monkeypatch):
    """What the operator's environment (or opts.envvars) or ansible.cfg sets is theirs: nodeforge does not pass its
    own value; their ansible.cfg's collections and fact cache are used; ANSIBLE_CONFIG given in envvars is the file."""
    theirs = tmp_path / "theirs.cfg"
    theirs.write_text(
        "[defaults]\ncollections_path = /site/collections\nfact_caching = memory\n[tags]\nskip = always\n"
        "[ssh_connection]\nssh_args = -o ControlMaster=no\n"
    )
    monkeypatch.setenv("ANSIBLE_PIPELINING", "False")
    opts = RunOptions(envvars={"ANSIBLE_CONFIG": str(theirs)})
    calls = []
    run_playbook(str(bare_playbook(tmp_path)), opts, install_signal_handlers=False, gate=lambda: calls.append(1))
    envvars = recorder.kwargs["envvars"]
    assert envvars["ANSIBLE_CONFIG"] == str(theirs)
    assert envvars["ANSIBLE_COLLECTIONS_PATH"] == os.pathsep.join([str(content.collections_dir()), "/site/collections"])
    assert "ANSIBLE_PIPELINING" not in envvars and "ANSIBLE_SSH_ARGS" not in envvars
    assert (recorder.kwargs["fact_cache_type"], "fact_cache" in recorder.kwargs) == ("memory", False)
    assert calls == [1]  # checked before the run


def test_their_ansible_cfg_skipping_always_means_the_check_runs_before(recorder, tmp_path, monkeypatch):
    (tmp_path / "ansible.cfg").write_text("[tags]\nskip = always\n")
    playbook = tmp_path / "site.yml"
    playbook.write_text(f"- ansible.builtin.import_playbook: {VALIDATION_PLAYBOOK}\n- hosts: all\n  tasks: []\n")
    run_playbook(str(playbook), RunOptions(), install_signal_handlers=False, gate=lambda: None)
    assert GATE_ENV not in recorder.kwargs["envvars"]


def test_without_an_ansible_cfg_none_is_named_and_path_is_extended(recorder, tmp_path, monkeypatch):
    monkeypatch.delenv("ANSIBLE_CONFIG")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ansible.cfg").unlink()
    monkeypatch.setattr(runner.ansible_settings, "operator_config", lambda environ: None)
    monkeypatch.setenv("PATH", "/opt/site/bin:/usr/bin")
    run_playbook(str(bare_playbook(tmp_path)), RunOptions(), install_signal_handlers=False)
    envvars = recorder.kwargs["envvars"]
    assert "ANSIBLE_CONFIG" not in envvars
    assert envvars["PATH"] == os.pathsep.join([os.path.dirname(sys.executable), "/opt/site/bin:/usr/bin"])
    monkeypatch.delenv("PATH")
    run_playbook(str(bare_playbook(tmp_path)), RunOptions(), install_signal_handlers=False)
    assert recorder.kwargs["envvars"]["PATH"] == os.pathsep.join([os.path.dirname(sys.executable), os.defpath])


def test_a_playbook_by_name_path_or_relative_path(recorder, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run_playbook("site.yml", RunOptions(), install_signal_handlers=False)  # not here: the shipped one
    assert recorder.kwargs["playbook"] == str(content.playbook("site.yml").resolve())
    (tmp_path / "site.yml").write_text("- hosts: all\n  tasks: []\n")
    result = run_playbook("site.yml", RunOptions(), install_signal_handlers=False)  # here: this one
    assert (recorder.kwargs["playbook"], result.playbook) == (str(tmp_path / "site.yml"), "site.yml")
    absolute = bare_playbook(tmp_path)
    result = run_playbook(str(absolute), RunOptions(), install_signal_handlers=False)
    assert (recorder.kwargs["playbook"], result.playbook) == (str(absolute), str(absolute))
    assert 0 <= result.duration_s < 60


def test_runs_one_after_another_share_the_private_directories(recorder, tmp_path):
    """A second run finds the state directory, its settings file and the gates directory there: no error, each
    private (0700), the settings ansible-runner reads rewritten."""
    playbook = tmp_path / "site.yml"
    playbook.write_text(f"- ansible.builtin.import_playbook: {VALIDATION_PLAYBOOK}\n- hosts: all\n  tasks: []\n")
    for _ in range(2):
        run_playbook(str(playbook), RunOptions(), install_signal_handlers=False, gate=lambda: None)
    private = tmp_path / "state" / "runner"
    assert json.loads((private / "env" / "settings").read_text()) == {"pexpect_timeout": runner.PEXPECT_TIMEOUT_S}
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (private, private / "gates", private / "env")}
    assert modes == {"runner": 0o700, "gates": 0o700, "env": 0o700}


def test_an_operator_s_inline_extra_vars_reach_the_run_through_private_files_removed_after(
    recorder, tmp_path, monkeypatch
):
    seen = {}
    original = recorder.__call__

    def keep(**kwargs):
        words = kwargs["cmdline"].split()
        files = [Path(w[1:]) for w in words if w.startswith("@")]
        seen.update(
            files=files, texts=[f.read_text() for f in files], modes=[stat.S_IMODE(f.stat().st_mode) for f in files]
        )
        return original(**kwargs)

    monkeypatch.setattr(runner.ansible_runner, "run_async", keep)
    monkeypatch.chdir(tmp_path)
    opts = RunOptions(inventory="hosts.yml", extra_vars_args=("a=1 b=two", '{"c": 3}'))
    (tmp_path / "hosts.yml").write_text("all: {}\n")
    run_playbook(str(bare_playbook(tmp_path)), opts, install_signal_handlers=False)
    ident = recorder.kwargs["ident"]
    private = tmp_path / "state" / "runner" / "extravars"
    assert seen["files"] == [private / f"{ident}.0.yml", private / f"{ident}.1.yml"]
    assert (seen["texts"], seen["modes"]) == (['{"a": "1", "b": "two"}', '{"c": 3}'], [0o600, 0o600])
    assert not any(f.exists() for f in seen["files"])
    assert recorder.kwargs["inventory"] == [str(tmp_path / "hosts.yml")]


def test_a_refused_check_in_a_gated_run_stops_it_and_raises(recorder, tmp_path):
    playbook = tmp_path / "site.yml"
    playbook.write_text(f"- ansible.builtin.import_playbook: {VALIDATION_PLAYBOOK}\n- hosts: all\n  tasks: []\n")
    canceller = Canceller()

    def refuse() -> None:
        raise SystemExit(2)

    with pytest.raises(SystemExit):
        run_playbook(str(playbook), RunOptions(), canceller=canceller, install_signal_handlers=False, gate=refuse)
    assert canceller() is True
    assert recorder.seen["verdict"] == "refuse"


def test_files_the_run_already_removed_are_no_error(recorder, tmp_path, monkeypatch):
    original = recorder.__call__

    def removes(**kwargs):
        answer = original(**kwargs)
        Path(kwargs["extravars"]).unlink()  # as a cleanup of the run's own would
        return answer

    monkeypatch.setattr(runner.ansible_runner, "run_async", removes)
    result = run_playbook(str(bare_playbook(tmp_path)), RunOptions(), install_signal_handlers=False)
    assert result.status == "successful"


def test_the_caller_sees_the_progress_about_every_tenth_of_a_second(recorder, tmp_path):
    recorder.runs_for = 0.35
    ticks = []
    run_playbook(str(bare_playbook(tmp_path)), RunOptions(), install_signal_handlers=False, on_tick=ticks.append)
    assert len(ticks) >= 2


def test_settings_given_in_envvars_count_as_the_caller_s(recorder, tmp_path):
    """The caller's envvars (the lab's, say) are part of the environment nodeforge reads its settings against: a
    fact cache plugin named there is the run's, and a control-socket directory named there is the one verified."""
    opts = RunOptions(envvars={"ANSIBLE_CACHE_PLUGIN": "memory"})
    run_playbook(str(bare_playbook(tmp_path)), opts, install_signal_handlers=False)
    assert (recorder.kwargs["fact_cache_type"], "fact_cache" in recorder.kwargs) == ("memory", False)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    opts = RunOptions(envvars={"ANSIBLE_SSH_CONTROL_PATH_DIR": str(shared)})
    with pytest.raises(ansible_settings.UnsafeControlPathDir):
        run_playbook(str(bare_playbook(tmp_path)), opts, install_signal_handlers=False)


def test_the_check_starts_once_ansible_runner_has_started_ansible_playbook(recorder, tmp_path):
    """While ansible-runner prepares (unstarted, starting) the check waits, polling every few milliseconds: it runs
    once the runner is running, promptly."""
    recorder.phases = ["unstarted", "starting"]
    playbook = tmp_path / "site.yml"
    playbook.write_text(f"- ansible.builtin.import_playbook: {VALIDATION_PLAYBOOK}\n- hosts: all\n  tasks: []\n")
    seen = []
    run_playbook(
        str(playbook), RunOptions(), install_signal_handlers=False, gate=lambda: seen.append(recorder.ran.status)
    )
    assert seen == ["running"]
    assert recorder.seen["verdict"] == "pass"
