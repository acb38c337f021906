"""A lab's name is one word, never a path: it is checked where it enters (every `nodeforge lab` verb's --name) and
again where the lab modules build paths from it. `lab down --name /some/dir` removed that directory and
`--name ../..` emptied two levels above the lab directory, both exiting 0 with "removed nothing"."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from nodeforge import lab, lab_vm
from nodeforge.cli import lab_group, main

NOT_A_NAME = "is not a lab name: expected 1 to 31 lowercase letters, digits or '-', starting with a letter or digit"


@pytest.fixture
def podman_calls(monkeypatch):
    """podman and the image build replaced by a record: no container exists, nothing is built."""
    calls: list[tuple[str, ...]] = []

    def fake_podman(*args, check=True):
        calls.append(args)
        return type("Proc", (), {"stdout": "[]", "stderr": "", "returncode": 0})()

    monkeypatch.setattr(lab, "_podman", fake_podman)
    monkeypatch.setattr(lab, "ensure_image", lambda: calls.append(("build image",)))
    return calls


@pytest.fixture
def nested_state(tmp_path, monkeypatch):
    """The state directory two levels below a directory holding a file: what `--name ../..` reached."""
    above = tmp_path / "above"
    state = above / "state"
    (state / "lab").mkdir(parents=True)
    (above / "keep.txt").write_text("not the lab's\n")
    monkeypatch.setenv("NODEFORGE_STATE_DIR", str(state))
    return above


def _refused(result, given: str) -> None:
    assert result.exit_code == 5, result.output
    assert isinstance(result.exception, SystemExit)  # a usage error, not a traceback
    assert "Invalid value for '--name'" in result.output
    assert f"{given!r} {NOT_A_NAME}" in result.output


def test_lab_down_refuses_a_name_that_climbs_out_of_the_lab_directory(nested_state, podman_calls):
    result = CliRunner().invoke(main, ["lab", "down", "--name", "../.."])
    assert (nested_state / "keep.txt").is_file(), f"removed two levels above the lab directory: {result.output}"
    assert (nested_state / "state" / "lab").is_dir()
    _refused(result, "../..")
    assert podman_calls == []


def test_lab_down_refuses_an_absolute_path_as_name(tmp_path, podman_calls):
    target = tmp_path / "precious"
    target.mkdir()
    (target / "data.txt").write_text("keep me\n")
    result = CliRunner().invoke(main, ["lab", "down", "--name", str(target)])
    assert (target / "data.txt").read_text() == "keep me\n", f"removed {target}: {result.output}"
    _refused(result, str(target))
    assert podman_calls == []


def test_lab_up_refuses_a_name_with_a_separator_before_anything_starts(state_dir, podman_calls):
    result = CliRunner().invoke(main, ["lab", "up", "--name", "a/b"])
    _refused(result, "a/b")
    assert podman_calls == []  # no image built, no container created
    assert not (state_dir / "lab").exists()


@pytest.mark.parametrize("verb", sorted(lab_group.commands))
def test_every_lab_verb_checks_its_name(verb, nested_state, podman_calls):
    assert any(p.name == "name" for p in lab_group.commands[verb].params), f"lab {verb} has no --name"
    result = CliRunner().invoke(main, ["lab", verb, "--name", "../.."])
    _refused(result, "../..")
    assert podman_calls == []
    assert sorted(p.name for p in nested_state.iterdir()) == ["keep.txt", "state"]


@pytest.mark.parametrize("name", ["lab", "vm", "t", "never-started", "bench16", "benchoh", "pytestvm4194304", "a" * 31])
def test_the_names_the_docs_tests_and_bench_use_are_accepted(name):
    assert lab.name_problem(name) is None
    assert lab.lab_dir(name) == lab.state_dir() / "lab" / name


@pytest.mark.parametrize(
    "name", ["", ".", "..", "../..", "a/b", "/tmp/x", "Lab", "lab_1", "-x", "a" * 32, "lab\n", "l b"]
)
def test_names_that_are_not_one_word_are_refused(name):
    assert lab.name_problem(name) == f"{name!r} {NOT_A_NAME} (it names the lab's directory and its nodes)"


def test_lab_down_of_a_valid_name_removes_that_lab_only(state_dir, podman_calls):
    mine, other = state_dir / "lab" / "lab-2", state_dir / "lab" / "lab-3"
    for directory in (mine, other):
        directory.mkdir(parents=True)
        (directory / "known_hosts").write_text("")
    result = CliRunner().invoke(main, ["lab", "down", "--name", "lab-2"])
    assert result.exit_code == 0, result.output
    assert "lab lab-2: removed nothing (no nodes)" in result.output
    assert not mine.exists() and (other / "known_hosts").exists()
    assert podman_calls == [("ps", "-a", "--filter", f"label={lab.LABEL}=lab-2", "--format", "json")]


def test_the_lab_modules_refuse_a_path_as_name_or_node(nested_state, podman_calls, tmp_path):
    """Defence in depth: a caller that skips the CLI (bench, tests, a plugin) gets a LabError, never a path outside
    <state>/lab."""
    outside = tmp_path / "outside"
    outside.mkdir()
    for bad in ("../..", str(outside), "a/b"):
        for build in (lab.lab_dir, lab.inventory_path, lab.known_hosts_path, lab.client_key, lab_vm.vm_dir):
            with pytest.raises(lab.LabError, match=re.escape(NOT_A_NAME)):
                build(bad)
        with pytest.raises(lab.LabError, match=re.escape(NOT_A_NAME)):
            lab.down(bad)
        with pytest.raises(lab.LabError, match=re.escape(NOT_A_NAME)):
            lab.up(bad, 1)
        with pytest.raises(lab.LabError, match=re.escape(NOT_A_NAME)):
            lab_vm.up(bad, 1)
    for node in ("../../x", str(outside), "nodeforge-t-1/..", "nodeforge-u-1"):
        with pytest.raises(lab.LabError, match=r"is not a node of lab t: expected nodeforge-t-N"):
            lab.host_key("t", node)
        with pytest.raises(lab.LabError, match=r"is not a node of lab t: expected nodeforge-t-N"):
            lab_vm.node_dir("t", node)
    assert lab.host_key("t", "nodeforge-t-12").parent.name == "nodeforge-t-12"
    assert sorted(p.name for p in nested_state.iterdir()) == ["keep.txt", "state"] and outside.is_dir()
    assert podman_calls == []
