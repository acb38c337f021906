"""nodeforge's exit codes are ansible-playbook's, which operators script against (docs/cli-reference.md, "Exit
codes"): one case per code, through the CLI. The interrupted run (99) is tests/test_runner.py's real SIGINT,
`test_ctrl_c_on_the_cli_cancels_and_exits_non_zero`."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from nodeforge import cli
from nodeforge.cli import VERBS, Verb, main
from nodeforge.runner import (
    EXIT_ERROR,
    EXIT_HOST_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_OPTIONS,
    EXIT_PARSE,
    EXIT_UNEXPECTED,
    EXIT_UNREACHABLE,
)
from tests.conftest import PLAYBOOKS, REPO

SAMPLE = str(REPO / "inventories" / "c4140-k8s")


def test_the_codes_are_ansible_playbook_s():
    assert (EXIT_OK, EXIT_ERROR, EXIT_HOST_FAILED, EXIT_UNREACHABLE) == (0, 1, 2, 3)
    assert (EXIT_PARSE, EXIT_OPTIONS, EXIT_INTERRUPTED, EXIT_UNEXPECTED) == (4, 5, 99, 250)


def _run(*argv: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(argv))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    return result.exit_code, result.output


def _verb(monkeypatch, playbook: str) -> None:
    spec = VERBS["provision"]
    monkeypatch.setitem(VERBS, "provision", Verb(str(playbook), spec.help, spec.check, spec.diff))


def test_0_a_valid_inventory_and_1_one_check_refuses(tmp_path):
    assert _run("check", "-i", SAMPLE)[0] == EXIT_OK
    (tmp_path / "hosts.yml").write_text("all:\n  children:\n    gpu_nodes:\n      hosts:\n        n1:\n")
    code, output = _run("check", "-i", str(tmp_path))
    assert code == EXIT_ERROR and "nodeforge_profile: found nothing" in output


@pytest.mark.slow
def test_2_a_host_failed(monkeypatch, local_inventory):
    _verb(monkeypatch, PLAYBOOKS / "failing.yml")
    code, output = _run("provision", "-i", str(local_inventory))
    assert code == EXIT_HOST_FAILED and "the node said no: localnode" in output


@pytest.mark.slow
def test_3_a_host_unreachable(monkeypatch, tmp_path):
    _verb(monkeypatch, PLAYBOOKS / "success.yml")
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(  # nothing listens on port 1 of the loopback
        "all:\n  children:\n    gpu_nodes:\n      hosts:\n        deadnode:\n          ansible_host: 127.0.0.1\n"
        "          ansible_port: 1\n          ansible_connection: ssh\n      vars:\n        nodeforge_profile: lab\n"
    )
    code, output = _run("provision", "-i", str(inventory), "-e", f"marker_path={tmp_path / 'm'}")
    assert code == EXIT_UNREACHABLE, output


def test_4_an_extra_vars_file_that_is_no_yaml(tmp_path):
    (tmp_path / "bad.yml").write_text("a: [1\n")
    code, output = _run("check", "-i", SAMPLE, "-e", f"@{tmp_path / 'bad.yml'}")
    assert code == EXIT_PARSE and "bad.yml" in output


@pytest.mark.slow
def test_4_a_playbook_ansible_playbook_cannot_parse(monkeypatch, local_inventory, tmp_path):
    """ansible-playbook's own parse error (exit 4, before any host) is passed on as it is."""
    broken = tmp_path / "broken.yml"
    broken.write_text("- name: A play\n  hosts: all\n  tasks:\n    - name: x\n      ansible.builtin.debug: [\n")
    _verb(monkeypatch, broken)
    code, output = _run("provision", "-i", str(local_inventory))
    assert code == EXIT_PARSE, output


@pytest.mark.parametrize(
    "argv",
    [["check"], ["check", "-i", SAMPLE, "-e", "@/nonexistent/vars.yml"],
     ["check", "-i", SAMPLE, "--vault-password-file", "/nonexistent/pass"],
     ["provision", "-i", SAMPLE, "--forks", "0"], ["no-such-verb"]],
)  # fmt: skip
def test_5_bad_or_missing_options(argv):
    code, output = _run(*argv)
    assert code == EXIT_OPTIONS and "Error:" in output, output


def test_250_anything_unexpected_is_one_line_never_a_traceback(monkeypatch):
    def broken(*_args, **_kw):
        raise RuntimeError("a bug")

    monkeypatch.setattr(cli, "validate_or_exit", broken)
    monkeypatch.setattr(cli, "run_playbook", broken)
    code, output = _run("provision", "-i", SAMPLE)
    assert code == EXIT_UNEXPECTED
    assert output.strip().splitlines()[-1].startswith("Error: unexpected RuntimeError: a bug (a nodeforge bug")
