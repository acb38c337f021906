"""The Ansible settings every run gets (ansible_settings.py): what ansible-playbook really ran with, read back
through Ansible's own config lookup, its fact cache on disk and the command ansible-runner recorded."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from nodeforge import ansible_settings
from nodeforge.cli import main
from nodeforge.runner import EXIT_OK, RunOptions, run_playbook
from tests.conftest import PLAYBOOKS


def test_control_path_dir_short_enough_for_a_socket(tmp_path, monkeypatch):
    assert ansible_settings.control_path_dir(Path("/root/.local/state/nodeforge")) == Path(
        "/root/.local/state/nodeforge/cp"
    )
    # A state directory too long for a socket: Ansible's own default in the user's home, never a shared /tmp name.
    monkeypatch.setenv("HOME", "/home/operator")
    deep = Path("/tmp/pytest-of-root/pytest-123/popen-gw1/test_something_long0/a-longer-name/nodeforge-state")
    assert ansible_settings.control_path_dir(deep) == Path("/home/operator/.ansible/cp")
    # Ansible names a socket <dir>/<10 hex digits>; ssh adds a 17-character temporary suffix; at most 107 bytes.
    assert len(str(ansible_settings.control_path_dir(deep))) + 1 + 10 + 17 <= 107
    monkeypatch.setenv("HOME", "/home/" + "x" * 80)
    with pytest.raises(ansible_settings.UnsafeControlPathDir, match="NODEFORGE_STATE_DIR"):
        ansible_settings.control_path_dir(deep)


def test_control_path_dir_is_created_private(tmp_path):
    sockets = ansible_settings.private_dir(tmp_path / "state" / "cp")
    info = sockets.lstat()
    assert info.st_uid == os.getuid() and info.st_mode & 0o777 == 0o700


@pytest.mark.parametrize("planted", ["symlink", "other owner", "open mode", "file"])
def test_a_planted_control_path_dir_is_refused(tmp_path, planted):
    """Another local user who made the socket directory first (a link to theirs, theirs, or one they may enter) could
    answer for the nodes through a master socket of their own: the directory is refused, with what is wrong."""
    sockets = tmp_path / "cp"
    if planted == "symlink":
        (tmp_path / "theirs").mkdir(mode=0o700)
        sockets.symlink_to(tmp_path / "theirs")
    elif planted == "file":
        sockets.write_text("")
    else:
        sockets.mkdir(mode=0o700)
        if planted == "other owner":
            os.chown(sockets, 65534, 65534)
        else:
            sockets.chmod(0o777)
    expected = {"symlink": "not a directory", "file": "not a directory", "other owner": "owned by uid 65534",
                "open mode": "mode 0777"}[planted]  # fmt: skip
    with pytest.raises(ansible_settings.UnsafeControlPathDir, match=expected):
        ansible_settings.environment(tmp_path, {})
    # The caller's own directory is held to the same rule.
    with pytest.raises(ansible_settings.UnsafeControlPathDir, match=expected):
        ansible_settings.environment(tmp_path / "elsewhere", {"ANSIBLE_SSH_CONTROL_PATH_DIR": str(sockets)})


@pytest.mark.slow
def test_cli_refuses_a_planted_control_path_dir_before_ansible_starts(tmp_path, local_inventory, state_dir):
    (state_dir / "cp").mkdir(parents=True, mode=0o700)
    os.chown(state_dir / "cp", 65534, 65534)
    result = CliRunner().invoke(main, ["preflight", "-i", str(local_inventory)])
    assert result.exit_code == 1, result.output
    assert f"SSH control-socket directory {state_dir / 'cp'}: owned by uid 65534" in result.output
    assert "Traceback" not in result.output
    # No run started: ansible-runner writes a run's artifacts before it starts ansible-playbook.
    assert not list((state_dir / "runner").glob("artifacts/*"))


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


def test_no_strategy_is_shipped(tmp_path):
    """Every run uses Ansible's own strategy (linear), or the one the operator chose: nodeforge sets none."""
    chosen = ansible_settings.environment(tmp_path, {})
    assert not {name for name in chosen if "STRATEGY" in name}


@pytest.mark.parametrize(("env", "forks"), [({}, 64), ({"ANSIBLE_FORKS": "3"}, None)])
def test_forks_cap_unless_the_caller_sets_them(env, forks):
    assert ansible_settings.forks(env) == forks


def _reported(artifacts: str, task: str) -> dict:
    for event in sorted(Path(artifacts, "job_events").glob("*.json")):
        data = json.loads(event.read_text())
        if data.get("event") == "runner_on_ok" and data["event_data"].get("task") == task:
            return data["event_data"]["res"]["msg"]
    raise AssertionError(f"no result of {task!r} in {artifacts}")


def _effective(inventory: Path):
    """A run of settings.yml: its result, and the settings Ansible's config lookup saw in it."""
    result = run_playbook(str(PLAYBOOKS / "settings.yml"), RunOptions(inventory=str(inventory)))
    assert result.exit_code == EXIT_OK, result.error
    return result, _reported(result.artifacts, "Report the effective settings")


@pytest.mark.slow
def test_runs_get_the_settings_and_reuse_cached_facts(local_inventory, state_dir):
    first, reported = _effective(local_inventory)
    assert reported == {
        "pipelining": True,
        "gathering": "smart",
        "cache_plugin": "jsonfile",
        "cache_connection": str(state_dir / "facts"),
        "strategy": "linear",
        "control_path_dir": str(state_dir / "cp"),
    }
    # Ansible's jsonfile cache wrote this host's facts under the state directory...
    # (2.19 and newer name the file s<schema>_<host> and keep the facts as a JSON string under one key).
    [cache_file] = [p for p in (state_dir / "facts").iterdir() if re.fullmatch(r"(s\d+_)?localnode", p.name)]
    cached = json.loads(cache_file.read_text())
    if len(cached) == 1 and isinstance(next(iter(cached.values())), str):
        cached = json.loads(next(iter(cached.values())))
    assert cached["ansible_distribution"] and cached["ansible_kernel"]
    # ...and the next run reads them instead of gathering: one result fewer (no setup task on the host).
    second = run_playbook(str(PLAYBOOKS / "settings.yml"), RunOptions(inventory=str(local_inventory)))
    assert first.hosts["localnode"]["ok"] == 2
    assert second.hosts["localnode"]["ok"] == 1
    # What two runs leave in the state directory: Ansible's fact cache, the control sockets' directory and
    # ansible-runner's files; no store of nodeforge's own (the compiled-template store and the fact memo of the speed
    # machinery, keyed across hosts, are gone with it: issue 42's item 2).
    assert sorted(p.name for p in state_dir.iterdir()) == ["cp", "facts", "runner"]
    assert sorted(p.name for p in (state_dir / "runner").iterdir()) == ["artifacts", "env", "extravars"]


@pytest.mark.slow
def test_operator_environment_overrides_a_setting(local_inventory, monkeypatch):
    monkeypatch.setenv("ANSIBLE_PIPELINING", "False")
    monkeypatch.setenv("ANSIBLE_GATHERING", "explicit")
    _, reported = _effective(local_inventory)
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


def _ansible_config_list(*args: str) -> dict:
    tool = Path(shutil.which("ansible-config", path=os.path.dirname(os.sys.executable)) or "ansible-config")
    proc = subprocess.run([str(tool), "list", "--format", "json", *args], capture_output=True, text=True, check=True)
    return json.loads(proc.stdout)


def test_each_setting_names_every_place_ansible_reads_it(tmp_path):
    """A shipped setting steps back when the operator set it anywhere Ansible reads it: its ansible.cfg keys and
    environment variables are Ansible's own, as `ansible-config list` (the base settings and the ssh connection's
    options) gives them."""
    base = _ansible_config_list()
    ssh = _ansible_config_list("-t", "connection")["PLUGINS"]["connection"]["ssh"]
    # A setting Ansible defines twice (pipelining: a base setting and the ssh connection's option) is read from both.
    found: dict[str, tuple[set, set]] = {}
    for entry in [*base.values(), *ssh.values()]:
        names = {e["name"] for e in entry.get("env") or []}
        keys = {(i["section"], i["key"]) for i in entry.get("ini") or []}
        for name in names:
            known = found.setdefault(name, (set(), set()))
            known[0].update(names)
            known[1].update(keys)
    for setting in ansible_settings.settings(tmp_path):
        names, keys = found[setting.name]
        assert set(setting.ini) == keys, setting.name
        assert {setting.name, *setting.aliases} == names, setting.name
    assert ("defaults", "forks") in {(i["section"], i["key"]) for i in base["DEFAULT_FORKS"]["ini"]}
    assert ansible_settings.FORKS_INI == ("defaults", "forks")


def _cfg(path: Path, text: str) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "ansible.cfg").write_text(text)
    return path / "ansible.cfg"


def test_the_operator_s_ansible_cfg_is_found_in_ansible_s_order(tmp_path, monkeypatch):
    """ANSIBLE_CONFIG (a file or a directory), the working directory's (not a world-writable one's, which Ansible
    ignores), ~/.ansible.cfg, /etc/ansible/ansible.cfg."""
    home, work, named = tmp_path / "home", tmp_path / "work", tmp_path / "named"
    monkeypatch.setenv("HOME", str(home))
    home.mkdir()
    (home / ".ansible.cfg").write_text("[defaults]\n")
    in_work = _cfg(work, "[defaults]\n")
    in_named = _cfg(named, "[defaults]\n")
    find = ansible_settings.operator_config
    assert find({"ANSIBLE_CONFIG": str(in_named)}, work) == in_named
    assert find({"ANSIBLE_CONFIG": str(named)}, work) == in_named
    assert find({}, work) == in_work
    assert find({}, tmp_path / "elsewhere") == home / ".ansible.cfg"
    work.chmod(0o777)
    assert find({}, work) == home / ".ansible.cfg"
    (home / ".ansible.cfg").unlink()
    etc = Path("/etc/ansible/ansible.cfg")
    assert find({}, tmp_path / "elsewhere") == (etc if etc.is_file() else None)


def test_what_the_operator_s_ansible_cfg_sets_is_theirs(tmp_path):
    config = ansible_settings.read_config(
        _cfg(tmp_path, "[defaults]\ngathering = explicit ; ours\nforks = 7\n[ssh_connection]\npipelining = False\n")
    )
    chosen = ansible_settings.environment(tmp_path, {}, config)
    assert "ANSIBLE_GATHERING" not in chosen and "ANSIBLE_PIPELINING" not in chosen
    assert chosen["ANSIBLE_SSH_ARGS"].startswith("-C -o ControlMaster=auto")
    assert ansible_settings.forks({}, config) is None
    assert ansible_settings.forks({}, ansible_settings.read_config(_cfg(tmp_path / "b", "[defaults]\n"))) == 64
    # The ansible.cfg's fact cache is the one the run uses: ansible-runner is told it, not its own per-run directory.
    cached = ansible_settings.read_config(_cfg(tmp_path / "c", "[defaults]\nfact_caching_connection = ~/facts\n"))
    assert ansible_settings.fact_cache(tmp_path, {}, cached) == {
        "fact_cache_type": "jsonfile",
        "fact_cache": os.path.expanduser("~/facts"),
    }
    redis = ansible_settings.read_config(_cfg(tmp_path / "d", "[defaults]\nfact_caching = redis\n"))
    assert ansible_settings.fact_cache(tmp_path, {}, redis) == {"fact_cache_type": "redis"}


@pytest.mark.slow
def test_an_ansible_cfg_where_the_operator_works_wins_over_the_shipped_settings(local_inventory, tmp_path, monkeypatch):
    """ansible-playbook runs in the playbook's directory, yet reads the ansible.cfg of the directory nodeforge was run
    from: what it sets wins over nodeforge's settings, the operator's environment wins over it, and the rest stay."""
    sockets = tmp_path / "sockets"
    sockets.mkdir(mode=0o700)
    work = tmp_path / "site"
    _cfg(
        work,
        f"[defaults]\ngathering = explicit\nfact_caching_connection = {tmp_path / 'site-facts'}\n"
        f"[ssh_connection]\npipelining = False\ncontrol_path_dir = {sockets}\n",
    )
    monkeypatch.chdir(work)
    _, reported = _effective(local_inventory)
    assert reported == {
        "pipelining": False,
        "gathering": "explicit",
        "cache_plugin": "jsonfile",
        "cache_connection": str(tmp_path / "site-facts"),
        "strategy": "linear",
        "control_path_dir": str(sockets),
    }
    monkeypatch.setenv("ANSIBLE_GATHERING", "implicit")
    _, reported = _effective(local_inventory)
    assert reported["gathering"] == "implicit" and reported["pipelining"] is False
