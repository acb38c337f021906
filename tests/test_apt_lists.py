"""The nodeforge role's apt lists age check (tasks/apt_lists.yml) after the start-of-run read of reboot_state.yml,
on a local host in check mode (the refresh task then changes nothing here), with the stamps pointed at files of the
test: which reads and refreshes run follows the files' real modification times."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nodeforge import content

pytestmark = pytest.mark.slow

READ = "Read when the apt lists were last refreshed"
REFRESH = "Refresh the apt lists when they are older than the limit"


def run_play(tmp_path: Path, touch_between: bool = False) -> dict[str, list[bool]]:
    """reboot_state.yml, then apt_lists.yml twice (as two roles include it); with touch_between, the stamp becomes
    new between the start-of-run read and the first include, as a refresh by another task would make it. Returns, per
    task name, whether each of its runs was skipped."""
    stamp, lists = tmp_path / "update-success-stamp", tmp_path / "lists"
    touch = (
        [
            {
                "name": "Refresh the stamp",
                "ansible.builtin.file": {"path": str(stamp), "state": "touch"},
                "check_mode": False,
            }
        ]
        if touch_between
        else []
    )
    include = {
        "name": "Check the lists' age",
        "ansible.builtin.include_role": {"name": "nodeforge.gpu.nodeforge", "tasks_from": "apt_lists"},
        "vars": {"__nodeforge_apt_lists_valid_time": 3600},
    }
    play = [
        {
            "hosts": "n1",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "Read the start-of-run state",
                    "ansible.builtin.include_role": {"name": "nodeforge.gpu.nodeforge", "tasks_from": "reboot_state"},
                },
                *touch,
                include,
                include,
            ],
        }
    ]
    (tmp_path / "play.yml").write_text(json.dumps(play))
    (tmp_path / "hosts.yml").write_text(
        json.dumps(
            {
                "all": {
                    "hosts": {"n1": None},
                    "vars": {
                        "ansible_connection": "local",
                        "ansible_python_interpreter": sys.executable,
                        "nodeforge_state_dir": str(tmp_path / "state"),
                    },
                }
            }
        )
    )
    env = {
        **os.environ,
        "ANSIBLE_COLLECTIONS_PATH": str(content.collections_dir()),
        "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
    }
    # Extra vars: the role's own vars/main.yml would win over play vars.
    stamps = json.dumps({"__nodeforge_apt_lists_stamps": [str(stamp), str(lists)]})
    cmd = [
        str(Path(sys.executable).parent / "ansible-playbook"),
        "--check",
        "-e",
        stamps,
        "-i",
        "hosts.yml",
        "play.yml",
    ]
    run = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr
    skipped: dict[str, list[bool]] = {}
    for task in json.loads(run.stdout)["plays"][0]["tasks"]:
        name = task["task"]["name"].split(" : ")[-1]
        skipped.setdefault(name, []).append(bool(task["hosts"]["n1"].get("skipped")))
    return skipped


def age(path: Path, seconds: int) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_recent_lists_at_the_start_need_no_read_later(tmp_path):
    (tmp_path / "lists").mkdir()
    (tmp_path / "update-success-stamp").touch()
    age(tmp_path / "lists", 7200)  # the stamp wins over the directory, as for apt's cache_valid_time

    skipped = run_play(tmp_path)

    assert skipped[READ] == [True, True]
    assert skipped[REFRESH] == [True, True]


def test_stale_lists_are_read_again_and_refreshed_while_still_stale(tmp_path):
    (tmp_path / "lists").mkdir()
    age(tmp_path / "lists", 7200)  # no stamp: the directory's time counts

    skipped = run_play(tmp_path)

    assert skipped[READ] == [False, False]
    assert skipped[REFRESH] == [False, False]


def test_a_refresh_since_the_start_is_seen_by_the_read(tmp_path):
    (tmp_path / "lists").mkdir()
    (tmp_path / "update-success-stamp").touch()
    age(tmp_path / "update-success-stamp", 7200)

    skipped = run_play(tmp_path, touch_between=True)

    # Stale at the start: each include reads the time again, finds the new stamp, and refreshes nothing.
    assert skipped[READ] == [False, False]
    assert skipped[REFRESH] == [True, True]
