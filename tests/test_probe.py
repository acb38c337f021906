"""nodeforge.gpu.probe: several read-only commands and paths read on a node in one module call.

The module runs as Ansible runs it (tests/conftest.py's module_runner) on this machine; each answer is compared with
what the same command or os.stat gives when run here directly."""

from __future__ import annotations

import os
import shutil
import subprocess

from tests.conftest import collection_module, documented_spec

MODULE = collection_module("probe")


def test_commands_give_their_status_and_output_whatever_the_status(module_runner, tmp_path):
    run = module_runner(MODULE)
    (tmp_path / "a").write_text("x\n")
    result = run(
        commands={
            "listed": ["ls", "-1", str(tmp_path)],
            "missing_file": ["ls", str(tmp_path / "nope")],
            "not_installed": ["nodeforge-no-such-tool", "-s"],
            "not_here": [],
            "locale": ["sh", "-c", "echo $LC_ALL"],
        },
        environment={"LC_ALL": "C"},
    )

    # The program runs by its full path (found on PATH or in the sbin directories, as Ansible's get_bin_path finds it).
    direct = subprocess.run([shutil.which("ls"), str(tmp_path / "nope")], capture_output=True, text=True, check=False)
    assert result["changed"] is False
    assert result["commands"]["listed"] == {
        "rc": 0,
        "stdout": "a",
        "stdout_lines": ["a"],
        "stderr": "",
        "stderr_lines": [],
        "skipped": False,
    }
    assert result["commands"]["missing_file"]["rc"] == direct.returncode != 0
    assert result["commands"]["missing_file"]["stderr_lines"] == direct.stderr.splitlines()
    assert result["commands"]["not_installed"] == {
        "rc": 127,
        "stdout": "",
        "stdout_lines": [],
        "stderr": "nodeforge-no-such-tool: command not found",
        "stderr_lines": ["nodeforge-no-such-tool: command not found"],
        "skipped": False,
    }
    assert result["commands"]["not_here"] == {
        "rc": None,
        "stdout": "",
        "stdout_lines": [],
        "stderr": "",
        "stderr_lines": [],
        "skipped": True,
    }
    assert result["commands"]["locale"]["stdout"] == "C"  # without the last line break, as the command module


def test_paths_as_os_stat_sees_them(module_runner, tmp_path):
    run = module_runner(MODULE)
    script = tmp_path / "ofed_uninstall.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o750)
    (tmp_path / "link").symlink_to(script)
    paths = [str(script), str(tmp_path), str(tmp_path / "link"), str(tmp_path / "gone")]

    followed = run(paths=paths)["paths"]
    not_followed = run(paths=paths, follow=False)["paths"]

    assert followed[str(script)] == {"exists": True, "isreg": True, "isdir": False, "islnk": False, "mode": "0750"}
    assert followed[str(tmp_path)]["isdir"] is True
    assert followed[str(tmp_path / "link")]["isreg"] is True
    assert not_followed[str(tmp_path / "link")]["islnk"] is True
    assert followed[str(tmp_path / "gone")] == {"exists": False} == not_followed[str(tmp_path / "gone")]
    assert oct(os.stat(script).st_mode & 0o7777) == "0o750"


def test_paths_are_keyed_as_given(module_runner, monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "here").write_text("x\n")
    (tmp_path / "here").chmod(0o644)

    result = module_runner(MODULE)(paths=["~/here", "~/not-here"])

    assert result["paths"] == {
        "~/here": {"exists": True, "isreg": True, "isdir": False, "islnk": False, "mode": "0644"},
        "~/not-here": {"exists": False},
    }


def test_a_failing_command_listed_in_fail_on_error_fails_the_module(module_runner, tmp_path):
    run = module_runner(MODULE)
    commands = {"tool": ["ls", str(tmp_path / "nope")], "absent_tool": ["nodeforge-no-such-tool"], "ok": ["true"]}

    failed = run(commands=commands, fail_on_error=["tool"])
    tolerated = run(commands=commands, fail_on_error=["absent_tool", "ok"])
    unknown = run(commands=commands, fail_on_error=["typo"])

    assert failed["failed"] is True and failed["msg"].startswith(f"ls {tmp_path}/nope exited 2: ")
    assert tolerated.get("failed") is None and tolerated["commands"]["absent_tool"]["rc"] == 127
    assert unknown["failed"] is True and "fail_on_error: typo is not one of the commands" in unknown["msg"]


def test_an_argv_must_be_a_list(module_runner):
    result = module_runner(MODULE)(commands={"shell_string": "ofed_info -s"})

    assert result["failed"] is True and "commands.shell_string: expected an argv" in result["msg"]


def test_documented_options_are_the_accepted_ones():
    assert documented_spec(MODULE) == MODULE.ARGUMENT_SPEC


def test_read_gives_each_file_byte_for_byte(module_runner, tmp_path):
    config = tmp_path / "config.toml"
    config.write_bytes(b'version = 2\n\n[plugins."io.containerd.grpc.v1.cri"]\n  x = "\xc3\xa9"\n\n')
    binary = tmp_path / "efivar"
    binary.write_bytes(b"\x06\x00\x00\x00\xff")
    run = module_runner(MODULE)

    result = run(read=[str(config), str(tmp_path / "missing.toml")])
    undecodable = run(read=[str(binary)])

    assert result["read"] == {
        str(config): {"exists": True, "content": config.read_bytes().decode()},
        str(tmp_path / "missing.toml"): {"exists": False, "content": None},
    }
    assert undecodable["failed"] is True and f"{binary}: not UTF-8 text" in undecodable["msg"]
