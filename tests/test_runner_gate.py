# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The inventory check's gate of nodeforge.runner, in process: whether a run's check waits inside the run (the
playbook opens with the validation play and the run keeps it) or runs before ansible-playbook starts (_gated), and the
verdict the validation play waits for (_decide). tests/test_runner.py (slow) runs both through real ansible-runner."""

from __future__ import annotations

import configparser
import threading
from pathlib import Path

import pytest

from nodeforge import content
from nodeforge.runner import VALIDATION_PLAYBOOK, Canceller, RunOptions, _decide, _gated

OPENS_WITH_CHECK = f"- ansible.builtin.import_playbook: {VALIDATION_PLAYBOOK}\n- hosts: all\n  tasks: []\n"


def playbook(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "site.yml"
    path.write_text(text)
    return path


def cfg(tmp_path: Path, text: str) -> tuple[Path, configparser.ConfigParser]:
    path = tmp_path / "ansible.cfg"
    path.write_text(text)
    parser = configparser.ConfigParser()
    parser.read(path)
    return path, parser


@pytest.mark.parametrize(
    "text",
    [
        OPENS_WITH_CHECK,
        f"- import_playbook: {VALIDATION_PLAYBOOK}\n- hosts: all\n",
    ],
    ids=["fqcn", "short-name"],
)
def test_a_playbook_opening_with_the_validation_play_is_gated(tmp_path, text):
    assert _gated(playbook(tmp_path, text), RunOptions(), {}, None, None) is True


def test_the_shipped_site_playbook_is_gated_and_a_bare_one_is_not(tmp_path):
    assert _gated(content.playbook("site.yml"), RunOptions(), {}, None, None) is True
    assert _gated(playbook(tmp_path, "- hosts: all\n  tasks: []\n"), RunOptions(), {}, None, None) is False


@pytest.mark.parametrize(
    "text",
    [
        f"- hosts: all\n- ansible.builtin.import_playbook: {VALIDATION_PLAYBOOK}\n",  # not first
        "- ansible.builtin.import_playbook: nodeforge.gpu.site\n",
        f"ansible.builtin.import_playbook: {VALIDATION_PLAYBOOK}\n",  # a mapping, not a list of plays
        f"- [ansible.builtin.import_playbook, {VALIDATION_PLAYBOOK}]\n",
        "[]\n",
        "",
        "- hosts: [unclosed\n",
    ],
    ids=["second", "another-playbook", "mapping", "list-play", "empty-list", "empty-file", "not-yaml"],
)
def test_a_playbook_that_does_not_open_with_the_validation_play_is_checked_before(tmp_path, text):
    assert _gated(playbook(tmp_path, text), RunOptions(), {}, None, None) is False


def test_a_playbook_that_cannot_be_read_is_checked_before(tmp_path):
    assert _gated(tmp_path / "missing.yml", RunOptions(), {}, None, None) is False


@pytest.mark.parametrize(
    ("skip_tags", "environ", "config", "gated"),
    [
        ("always", {}, None, False),
        ("x, tagged", {}, None, False),
        ("never", {}, None, True),
        (None, {"ANSIBLE_SKIP_TAGS": "always"}, None, False),
        (None, {"ANSIBLE_SKIP_TAGS": "x,tagged"}, None, False),
        (None, {"ANSIBLE_SKIP_TAGS": "x"}, "[tags]\nskip = always\n", True),  # the environment wins over the file
        (None, {}, "[tags]\nskip = tagged\n", False),
        (None, {}, "[tags]\nskip = slow\n", True),
        (None, {}, "[defaults]\nforks = 5\n", True),
    ],
    ids=[
        "cli-always",
        "cli-tagged",
        "cli-other",
        "env-always",
        "env-tagged",
        "env-over-cfg",
        "cfg-tagged",
        "cfg-other",
        "cfg-no-tags",
    ],
)
def test_a_run_that_skips_the_validation_play_is_checked_before(tmp_path, skip_tags, environ, config, gated):
    path, parser = cfg(tmp_path, config) if config else (None, None)
    opts = RunOptions(skip_tags=skip_tags)
    assert _gated(playbook(tmp_path, OPENS_WITH_CHECK), opts, environ, path, parser) is gated


def test_an_ansible_cfg_that_could_not_be_read_means_the_check_runs_before(tmp_path):
    assert _gated(playbook(tmp_path, OPENS_WITH_CHECK), RunOptions(), {}, tmp_path / "ansible.cfg", None) is False


@pytest.mark.parametrize(
    ("connection", "gated"),
    [
        (("--start-at-task", "Install the driver"), False),
        (("--start-at-task=Install the driver",), False),
        (("-u", "root", "-b"), True),
    ],
    ids=["start-at-task", "start-at-task=", "other-arguments"],
)
def test_a_run_that_starts_past_the_validation_task_is_checked_before(tmp_path, connection, gated):
    opts = RunOptions(connection=connection)
    assert _gated(playbook(tmp_path, OPENS_WITH_CHECK), opts, {}, None, None) is gated


class Thread(threading.Thread):
    """A real thread whose join the test can see."""

    def __init__(self) -> None:
        super().__init__(target=lambda: None)
        self.joined = 0

    def join(self, timeout: float | None = None) -> None:
        self.joined += 1
        super().join(timeout)


def test_a_check_that_passes_writes_pass_privately_and_lets_the_run_go_on(tmp_path):
    verdict = tmp_path / "gates" / "run-1"
    verdict.parent.mkdir()
    canceller, thread = Canceller(), Thread()
    thread.start()
    calls = []
    _decide(lambda: calls.append("checked"), verdict, canceller, thread)
    assert calls == ["checked"]
    assert verdict.read_text() == "pass"
    assert verdict.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in verdict.parent.iterdir()) == ["run-1"]  # the staged .new file was moved
    assert (canceller(), thread.joined) == (False, 0)


@pytest.mark.parametrize("error", [SystemExit(2), ValueError("bad -e")], ids=["refused-inventory", "bad-extra-vars"])
def test_a_check_that_raises_writes_refuse_stops_the_run_and_raises(tmp_path, error):
    verdict = tmp_path / "run-2"
    canceller, thread = Canceller(), Thread()
    thread.start()

    def gate() -> None:
        raise error

    with pytest.raises(type(error)) as raised:
        _decide(gate, verdict, canceller, thread)
    assert raised.value is error
    assert verdict.read_text() == "refuse"
    assert verdict.stat().st_mode & 0o777 == 0o600
    assert not verdict.with_suffix(".new").exists()
    assert (canceller(), thread.joined) == (True, 1)
