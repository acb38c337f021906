"""ansible-playbook's connection, become and listing options through the CLI (src/nodeforge/connection.py): what
ansible-runner recorded it ran, what ansible-playbook printed, and the password prompts answered without the password
reaching any file. The lab's admin user (sudo with and without a password, root refused) is tests/test_lab_upgrade.py's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from nodeforge import connection
from nodeforge.cli import VERBS, Verb, main
from tests.conftest import PLAYBOOKS


@pytest.fixture
def runner():
    return CliRunner()


def _recorded(state_dir: Path) -> list[str]:
    """The command line ansible-runner recorded for the one run in the state directory."""
    [command] = state_dir.glob("runner/artifacts/*/command")
    return json.loads(command.read_text())["command"]


def _broken(tmp_path: Path) -> Path:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n  children:\n    gpu_nodes:\n      hosts:\n        node1:\n        node2:\n"
        "      vars:\n        nodeforge_profile: dgx-1\n        ofed_mode: bogus\n"
    )
    return inventory


def test_every_option_is_passed_on_under_ansible_playbook_s_name(tmp_path):
    key = tmp_path / "id_ed25519"
    key.write_text("key\n")
    kw = {
        "remote_user": "admin",
        "become": True,
        "become_user": "ops",
        "become_method": "su",
        "become_password_file": str(key),
        "connection_password_file": str(key),
        "private_key": str(key),
        "timeout": 7,
        "start_at_task": "Install the driver",
        "ask_become_pass": "b-secret",
        "ask_pass": "s-secret",
        "list_hosts": False,
        "list_tasks": True,
        "list_tags": False,
        "syntax_check": True,
        "limit": "node1",
    }
    taken = connection.take(kw)
    assert kw == {"limit": "node1"}  # every option of its own taken, the others left
    assert taken["connection"] == (
        "--become",
        "--user=admin",
        "--become-user=ops",
        "--become-method=su",
        f"--become-password-file={key}",
        f"--connection-password-file={key}",
        f"--private-key={key}",
        "--timeout=7",
        "--start-at-task=Install the driver",
        "--ask-pass",
        "--ask-become-pass",
    )
    assert taken["listing"] == ("--list-tasks", "--syntax-check")
    assert list(taken["passwords"].values()) == ["s-secret", "b-secret"]
    assert connection.take({}) == {"connection": (), "listing": (), "passwords": {}}


@pytest.mark.parametrize(
    ("prompt", "answer"),
    [
        ("BECOME password: ", "become"),
        ("BECOME password[defaults to SSH password]: ", "become"),
        ("SSH password: ", "ssh"),
        ("BECOME password for admin: ", None),
        ("password: ", None),
    ],
)
def test_ansible_playbook_s_prompts_get_their_password(prompt, answer):
    import re

    taken = connection.take({"ask_become_pass": "become", "ask_pass": "ssh"})
    matched = [password for pattern, password in taken["passwords"].items() if re.search(pattern, prompt)]
    assert matched == ([answer] if answer else [])


@pytest.mark.slow
def test_the_listing_options_print_what_ansible_playbook_lists_and_touch_no_host(runner, tmp_path, state_dir):
    """--list-hosts, --list-tasks, --list-tags, --syntax-check: ansible-playbook's own listing on stdout, no task run,
    and an inventory the check would refuse still listed (a listing is how one looks at an inventory)."""
    inventory = str(_broken(tmp_path))
    expected = {
        "--list-hosts": ["play #2 (gpu_nodes): Preflight checks (read-only)", "hosts (2):", "node1", "node2"],
        "--list-tasks": ["nodeforge.gpu.preflight : Assert that every preflight expectation is met"],
        "--list-tags": ["TASK TAGS: [always, preflight]"],
        "--syntax-check": ["playbook: "],
    }
    for option, lines in expected.items():
        result = runner.invoke(main, ["preflight", "-i", inventory, option])
        assert result.exit_code == 0, (option, result.output)
        for line in lines:
            assert line in result.stdout, (option, result.stdout)
        assert "no node was touched" not in result.output
    assert "TASK TAGS" not in runner.invoke(main, ["preflight", "-i", inventory, "--list-hosts"]).stdout
    for events in state_dir.glob("runner/artifacts/*/job_events"):
        assert not [e for e in events.glob("*.json") if "runner_on_start" in e.read_text()], events


@pytest.mark.slow
def test_connection_options_reach_ansible_playbook_as_given(runner, local_inventory, tmp_path, state_dir, monkeypatch):
    """What ansible-runner recorded it ran: the options under ansible-playbook's names, a key by its absolute path
    (ansible-playbook runs in the playbook's directory, where the operator's relative path names nothing)."""
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "id_ed25519").write_text("key\n")
    monkeypatch.chdir(tmp_path)
    argv = ["preflight", "-i", str(local_inventory), "--list-hosts", "-u", "admin", "-b", "--become-user", "ops"]
    argv += ["--become-method", "su", "--private-key", "keys/id_ed25519", "-T", "7", "--start-at-task", "Set it"]
    result = runner.invoke(main, argv)
    assert result.exit_code == 0, result.output
    recorded = _recorded(state_dir)
    key = tmp_path / "keys" / "id_ed25519"
    for arg in ("--user=admin", "--become", "--become-user=ops", "--become-method=su", "--timeout=7",
                "--start-at-task=Set it", "--list-hosts", f"--private-key={key}"):  # fmt: skip
        assert arg in recorded, (arg, recorded)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_become_password_is_asked_once_and_answers_ansible_playbook_s_prompt(
    runner, local_inventory, tmp_path, state_dir, monkeypatch
):
    """-K: nodeforge asks once; ansible-playbook, started with --ask-become-pass, asks its own prompt, which the
    answer meets (else the run would wait forever); the password is in no file of the run."""
    monkeypatch.setitem(VERBS, "provision", Verb(str(PLAYBOOKS / "success.yml"), "test"))
    marker = tmp_path / "marker"
    secret = "n0t-in-any-file"
    result = runner.invoke(
        main, ["provision", "-i", str(local_inventory), "-K", "-e", f"marker_path={marker}"], input=f"{secret}\n"
    )
    assert result.exit_code == 0, result.output
    assert result.output.count("BECOME password") == 1 and marker.exists()
    assert "--ask-become-pass" in _recorded(state_dir)
    for path in state_dir.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path


def test_ask_pass_without_sshpass_is_refused_before_anything_runs(runner, local_inventory, state_dir, tmp_path):
    """A machine without sshpass (a PATH that has none): refused before any prompt, naming the program."""
    result = runner.invoke(
        main, ["preflight", "-i", str(local_inventory), "-k"], input="x\n", env={"PATH": str(tmp_path)}
    )
    assert result.exit_code == 5, result.output
    assert "-k needs the sshpass program" in result.output
    assert not (state_dir / "runner").exists()


def test_a_private_key_that_is_not_there_is_refused(runner, local_inventory, tmp_path, state_dir):
    result = runner.invoke(main, ["preflight", "-i", str(local_inventory), "--private-key", str(tmp_path / "nokey")])
    assert result.exit_code == 5, result.output
    assert f"looked for {tmp_path / 'nokey'}" in result.output and "expected the SSH private key" in result.output
    assert not (state_dir / "runner").exists()


def test_upgrade_refuses_the_listing_options(runner, local_inventory, state_dir):
    result = runner.invoke(main, ["upgrade", "-i", str(local_inventory), "--component", "toolkit", "--list-tasks"])
    assert result.exit_code == 5, result.output
    assert "upgrade takes no --list-tasks" in result.output
    assert not (state_dir / "runner").exists()
