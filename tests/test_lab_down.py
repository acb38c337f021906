"""`lab down` removes every node of the lab even when podman's stop races a node's own halt.

Seen in CI (2026-12-01): `podman rm -f -t 2` of seven nodes failed for one of them with "sending SIGKILL to container
...: container state improper: stopped" (its systemd halted within the 2 s, between podman's stop signal and its
SIGKILL), and `lab down` raised with that node left behind. podman here is a stand-in that keeps the lab's containers
and answers `ps` and `rm` as podman does, so the race can be played on demand."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from nodeforge import lab
from nodeforge.cli import main

NODES = ["nodeforge-t-1", "nodeforge-t-2", "nodeforge-t-3"]
RACE = (
    'time="2026-12-01T17:10:57Z" level=error msg="container not running"\n'
    "Error: cannot remove container 0123abcd as it could not be stopped: sending SIGKILL to container 0123abcd: "
    "container state improper: stopped"
)


class Podman:
    """The lab's containers; `rm` removes the ones named, but those in `racing` survive a call each, failing it."""

    def __init__(self, racing: dict[str, int]):
        self.containers = list(NODES)
        self.racing = dict(racing)
        self.rm_calls: list[list[str]] = []

    def __call__(self, *args: str, check: bool = True):
        if args[0] == "ps":
            listed = [{"Names": [c], "State": "running", "Labels": {lab.LABEL: "t"}} for c in self.containers]
            return self._proc(0, json.dumps(listed), "", args, check)
        assert args[:4] == ("rm", "-f", "-t", "2"), args
        named = list(args[4:])
        self.rm_calls.append(named)
        failed = [c for c in named if self.racing.get(c, 0) > 0]
        for c in failed:
            self.racing[c] -= 1
        self.containers = [c for c in self.containers if c not in named or c in failed]
        return self._proc(1 if failed else 0, "", RACE if failed else "", args, check)

    @staticmethod
    def _proc(returncode: int, stdout: str, stderr: str, args, check: bool):
        if check and returncode:
            raise lab.LabError(f"podman {' '.join(args[:2])} failed: {stderr.strip()}")
        return type("Proc", (), {"returncode": returncode, "stdout": stdout, "stderr": stderr})()


@pytest.fixture
def podman(monkeypatch, state_dir):
    def install(racing: dict[str, int]) -> Podman:
        fake = Podman(racing)
        monkeypatch.setattr(lab, "_podman", fake)
        (state_dir / "lab" / "t").mkdir(parents=True)
        return fake

    return install


def test_a_node_that_halted_during_the_stop_is_removed_by_a_second_rm(podman, state_dir):
    fake = podman({"nodeforge-t-2": 1})
    result = CliRunner().invoke(main, ["lab", "down", "--name", "t"])
    assert result.exit_code == 0, result.output
    assert fake.containers == []
    # The second rm names only the node the first one left.
    assert fake.rm_calls == [NODES, ["nodeforge-t-2"]]
    assert not (state_dir / "lab" / "t").exists()


def test_a_clean_removal_runs_rm_once(podman):
    fake = podman({})
    assert lab.down("t") == NODES
    assert fake.rm_calls == [NODES] and fake.containers == []


def test_a_node_that_cannot_be_removed_twice_is_an_error_naming_podmans_answer(podman):
    fake = podman({"nodeforge-t-3": 2})
    with pytest.raises(lab.LabError, match=r"(?s)podman rm -f failed: .*container state improper: stopped"):
        lab.down("t")
    assert fake.containers == ["nodeforge-t-3"]
    assert fake.rm_calls == [NODES, ["nodeforge-t-3"]]
