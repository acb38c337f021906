"""The Ansible settings every run gets (ansible_settings.py): what ansible-playbook really ran with, read back
through Ansible's own config lookup, its fact cache on disk and the command ansible-runner recorded."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from nodeforge import ansible_settings, content
from nodeforge.cli import main
from nodeforge.runner import EXIT_OK, RunOptions, run_playbook
from tests.conftest import PLAYBOOKS


def test_control_path_dir_short_enough_for_a_socket(tmp_path):
    assert ansible_settings.control_path_dir(Path("/root/.local/state/nodeforge")) == Path(
        "/root/.local/state/nodeforge/cp"
    )
    deep = Path("/tmp/pytest-of-root/pytest-123/popen-gw1/test_something_long0/nodeforge-state")
    chosen = ansible_settings.control_path_dir(deep)
    # ssh adds "/" + 40 hex digits (%C) + a 17-character temporary suffix; a UNIX socket path has 108 bytes.
    assert len(str(chosen)) + 1 + 40 + 17 < 108
    assert chosen != ansible_settings.control_path_dir(deep / "other"), "two state directories share sockets"


@pytest.mark.skipif(shutil.which("ssh") is None, reason="no OpenSSH client")
def test_ssh_reads_the_shipped_args_as_a_dropped_master_after_15_seconds_of_silence(tmp_path):
    """OpenSSH's own view of ANSIBLE_SSH_ARGS (ssh -G prints the configuration it would connect with): masters
    persist, and a node that stops answering (a reboot under a master) is given up after 5 s x 3 unanswered probes."""
    args = ansible_settings.environment(tmp_path, {})["ANSIBLE_SSH_ARGS"]
    effective = subprocess.run(
        ["ssh", "-G", "-F", "/dev/null", *shlex.split(args), "node.example"], capture_output=True, text=True, check=True
    ).stdout
    config = dict(line.split(" ", 1) for line in effective.splitlines() if " " in line)
    assert (config["controlmaster"], config["controlpersist"]) == ("auto", "120")
    assert int(config["serveraliveinterval"]) * int(config["serveralivecountmax"]) == 15
    assert config["compression"] == "yes"


def test_callers_environment_wins(tmp_path):
    chosen = ansible_settings.environment(tmp_path, {"ANSIBLE_PIPELINING": "False"})
    assert "ANSIBLE_PIPELINING" not in chosen
    assert chosen["ANSIBLE_CACHE_PLUGIN_CONNECTION"] == str(tmp_path / "facts")
    sockets = Path(chosen["ANSIBLE_SSH_CONTROL_PATH_DIR"])
    assert sockets == ansible_settings.control_path_dir(tmp_path)
    assert sockets.is_dir() and sockets.stat().st_mode & 0o777 == 0o700


def test_callers_strategy_plugins_are_kept_beside_mitogens(tmp_path):
    chosen = ansible_settings.environment(tmp_path, {"ANSIBLE_STRATEGY_PLUGINS": "/site/strategies"})
    ours, mitogen, theirs = chosen["ANSIBLE_STRATEGY_PLUGINS"].split(":")
    assert theirs == "/site/strategies"
    assert (Path(ours) / "nodeforge_linear.py").is_file(), ours
    assert (Path(mitogen) / "mitogen_linear.py").is_file(), mitogen
    assert ansible_settings.environment(tmp_path, {"ANSIBLE_STRATEGY": "linear"}).get("ANSIBLE_STRATEGY") is None


@pytest.mark.parametrize(("env", "forks"), [({}, 64), ({"ANSIBLE_FORKS": "3"}, None)])
def test_forks_cap_unless_the_caller_sets_them(env, forks):
    assert ansible_settings.forks(env) == forks


def _cpu_list(text: str) -> set[int]:
    """/proc's Cpus_allowed_list ("0-3,6") as a set of CPU numbers."""
    cpus = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def _reported(artifacts: str, task: str) -> dict:
    for event in sorted(Path(artifacts, "job_events").glob("*.json")):
        data = json.loads(event.read_text())
        if data.get("event") == "runner_on_ok" and data["event_data"].get("task") == task:
            return data["event_data"]["res"]["msg"]
    raise AssertionError(f"no result of {task!r} in {artifacts}")


@pytest.mark.slow
def test_runs_get_the_settings_and_reuse_cached_facts(local_inventory, state_dir):
    first = run_playbook(str(PLAYBOOKS / "settings.yml"), RunOptions(inventory=str(local_inventory)))
    assert first.exit_code == EXIT_OK
    reported = _reported(first.artifacts, "Report the effective settings")
    cpus = reported.pop("cpus")
    assert reported == {
        "pipelining": True,
        "gathering": "smart",
        "cache_plugin": "jsonfile",
        "cache_connection": str(state_dir / "facts"),
        # Ansible loaded nodeforge's strategy (an unknown strategy name fails the run before any task).
        "strategy": "nodeforge_linear",
    }
    # Mitogen's pinning is off: a task's command may run on every CPU this test may (the kernel's own list, "0-1").
    assert _cpu_list(cpus) == os.sched_getaffinity(0), cpus
    # Ansible's jsonfile cache wrote this host's facts under the state directory...
    cached = json.loads((state_dir / "facts" / "localnode").read_text())
    assert cached["ansible_distribution"] and cached["ansible_kernel"]
    # ...and the next run reads them instead of gathering: one result fewer (no setup task on the host).
    second = run_playbook(str(PLAYBOOKS / "settings.yml"), RunOptions(inventory=str(local_inventory)))
    assert first.hosts["localnode"]["ok"] == 3
    assert second.hosts["localnode"]["ok"] == 2


@pytest.mark.slow
def test_operator_environment_overrides_a_setting(local_inventory, monkeypatch):
    monkeypatch.setenv("ANSIBLE_PIPELINING", "False")
    monkeypatch.setenv("ANSIBLE_GATHERING", "explicit")
    result = run_playbook(str(PLAYBOOKS / "settings.yml"), RunOptions(inventory=str(local_inventory)))
    reported = _reported(result.artifacts, "Report the effective settings")
    assert reported["pipelining"] is False and reported["gathering"] == "explicit"
    assert reported["cache_plugin"] == "jsonfile"


def _most_at_once(artifacts: str, task: str) -> tuple[int, int]:
    """How many hosts ran `task`, and the most whose command ran at the same moment (the command module's start and
    end times)."""
    spans = []
    for event in Path(artifacts, "job_events").glob("*.json"):
        data = json.loads(event.read_text())
        if data.get("event") == "runner_on_ok" and data["event_data"].get("task") == task:
            res = data["event_data"]["res"]
            spans.append((res["start"], res["end"]))
    return len(spans), max(sum(1 for s, e in spans if s <= moment < e) for moment, _ in spans)


@pytest.mark.slow
def test_cli_runs_every_targeted_host_at_once(tmp_path, state_dir, monkeypatch):
    """8 hosts: the CLI's forks let ansible-core work on all 8 at once (it starts no more workers than the play has
    hosts); --forks 2 holds it to 2. Each host's command waits until as many hosts as the forks allow have started
    theirs, so a busy machine cannot make the hosts miss each other; a run held to fewer workers times out instead."""
    from nodeforge import cli

    monkeypatch.setitem(cli.VERBS, "preflight", cli.Verb(str(PLAYBOOKS / "parallel.yml"), "test"))
    # Ansible's own strategy: Mitogen serves local-connection hosts of the same user through one interpreter, which
    # would measure that interpreter, not the workers.
    monkeypatch.setenv("ANSIBLE_STRATEGY", "linear")
    hosts = "".join(f"        n{i:02d}:\n" for i in range(1, 9))
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n  children:\n    gpu_nodes:\n      hosts:\n" + hosts + "      vars:\n        nodeforge_profile: lab\n"
        "        ansible_connection: local\n        ansible_python_interpreter: '{{ ansible_playbook_python }}'\n"
    )
    for argv, at_once in ((["-i", str(inventory)], 8), (["-i", str(inventory), "--forks", "2"], 2)):
        marks = tmp_path / f"marks-{at_once}"
        marks.mkdir()
        monkeypatch.setenv("NODEFORGE_TEST_MARKS", str(marks))
        monkeypatch.setenv("NODEFORGE_TEST_BESIDE", str(at_once))
        result = CliRunner().invoke(main, ["preflight", *argv, "--json"])
        assert result.exit_code == 0, result.output
        artifacts = json.loads(result.stdout)["artifacts"]
        assert _most_at_once(artifacts, "Wait beside the other hosts") == (8, at_once), argv


# What a forked worker does in a task: look up the collection's filters (every filter the collection defines), one of
# its action plugins and a builtin filter. It prints the modules those lookups imported.
WORKER_LOOKUPS = """
import json, pathlib, re, sys
from ansible.plugins.loader import action_loader, filter_loader, init_plugin_loader
init_plugin_loader([sys.argv[1]])
from nodeforge.ansible_settings import preload_plugins
if sys.argv[2] == "preload":
    preload_plugins()
before = set(sys.modules)
names = ["bool", "ansible.builtin.regex_replace"]
for file in sorted(pathlib.Path(sys.argv[1], "ansible_collections/nodeforge/gpu/plugins/filter").glob("*.py")):
    filters = file.read_text().split("def filters")[-1]
    names += ["nodeforge.gpu." + n for n in re.findall(r'^ +"([a-z0-9_]+)": ', filters, re.M)]
found = {name: filter_loader.get(name) is not None for name in names}
found["action"] = action_loader.get("nodeforge.gpu.resolve_settings", class_only=True) is not None
print(json.dumps({"found": found, "imported": sorted(set(sys.modules) - before)}))
"""


def _worker_lookups(mode: str) -> dict:
    run = subprocess.run(
        [sys.executable, "-c", WORKER_LOOKUPS, str(content.collections_dir()), mode],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(run.stdout)


def test_preloaded_plugins_leave_a_worker_nothing_to_import():
    cold, preloaded = _worker_lookups("cold"), _worker_lookups("preload")
    assert len(cold["found"]) > 20 and all(cold["found"].values())
    assert preloaded["found"] == cold["found"]
    # Without the preload the lookups import the collection's plugin files, jsonschema among them (k8s.py) ...
    assert "ansible_collections.nodeforge.gpu.plugins.filter.k8s" in cold["imported"]
    assert "jsonschema" in cold["imported"]
    # ... with it, nothing: the worker's fork already has them.
    assert preloaded["imported"] == []


def _ssh_connection(env: dict[str, str], host_vars: dict):
    """ansible-core's own ssh connection plugin, its options read with these settings and host vars."""
    from ansible.playbook.play_context import PlayContext
    from ansible.plugins.loader import connection_loader

    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        connection = connection_loader.get("ssh", PlayContext(), None)
        connection.set_options(var_options=host_vars)
    connection.host = host_vars["ansible_host"]
    return connection


@pytest.mark.parametrize("own", [{}, {"ansible_control_path": "%(directory)s/own-%%h"}])
def test_mitogen_gets_the_socket_ansibles_ssh_connection_uses(tmp_path, own):
    """Mitogen's ssh command gets the ControlPath ansible-core's ssh connection puts on its command line for the same
    host, port, user and settings (an inventory's ansible_control_path included), so that a run's masters carry the
    next run."""
    env = ansible_settings.environment(tmp_path, {})
    connection = _ssh_connection(env, {"ansible_host": "10.0.0.5", "ansible_port": 2222, "ansible_user": "root", **own})
    [ansibles] = [arg.decode() for arg in connection._build_command("ssh", "ssh", "10.0.0.5") if b"ControlPath" in arg]
    args = shlex.split(env["ANSIBLE_SSH_ARGS"])
    ours = ansible_settings.mitogen_control_path(args, connection.get_option, "10.0.0.5", 2222, "root")
    assert ours == ["-o", ansibles.replace('"', "")]
    assert Path(ours[1].split("=", 1)[1]).parent == ansible_settings.control_path_dir(tmp_path)
    # Nothing to add where the args want no master, or name their own socket.
    assert ansible_settings.mitogen_control_path(["-C"], connection.get_option, "10.0.0.5", 2222, "root") == []
    named = ["-o", "ControlPersist=60s", "-o", "ControlPath=/run/own/%C"]
    assert ansible_settings.mitogen_control_path(named, connection.get_option, "10.0.0.5", 2222, "root") == []
