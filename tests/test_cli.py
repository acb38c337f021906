"""The CLI: verbs, shared options, refusal on bad inventories, summaries, --json."""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner

from nodeforge import __version__, cli
from nodeforge.cli import VERBS, Inputs, Verb, main
from tests.conftest import PLAYBOOKS, REPO, new_vault_process


@pytest.fixture
def runner():
    return CliRunner()


@pytest.fixture
def verb_playbook(monkeypatch):
    """Point a verb at a test playbook (the table is the only place verbs meet playbooks)."""

    def use(verb: str, playbook: str) -> None:
        spec = VERBS[verb]
        monkeypatch.setitem(VERBS, verb, Verb(str(PLAYBOOKS / playbook), spec.help, spec.check, spec.diff))

    return use


def test_version(runner):
    result = runner.invoke(main, ["--version"])
    assert result.exit_code == 0
    assert __version__ in result.output


def test_every_verb_has_the_shared_options(runner):
    for verb, spec in VERBS.items():
        out = runner.invoke(main, [verb, "--help"]).output
        modes = () if spec.check else ("--check", "--diff")  # a verb that always runs in check mode offers neither
        for flag in ("--inventory", "--limit", "--tags", "--skip-tags", "--extra-vars", *modes, "--verbose",
                     "--forks", "--json"):  # fmt: skip
            assert flag in out, f"{verb} lacks {flag}"


def test_verb_playbooks_exist():
    from nodeforge import content

    for verb in VERBS.values():
        assert content.playbook(verb.playbook).is_file(), verb.playbook


SAMPLE = str(REPO / "inventories" / "c4140-k8s")


def test_extravars_forms(tmp_path):
    f = tmp_path / "vars.yml"
    f.write_text("a: 1\nb: [x]\n")
    _, extravars = Inputs(inventory=(SAMPLE,), extra_vars=("k=v x=1", f"@{f}", '{"c": true}')).read()
    assert extravars == {"k": "v", "x": "1", "a": 1, "b": ["x"], "c": True}


@pytest.mark.parametrize(
    ("bad", "code"), [("novalue", 4), ("@/nonexistent/file.yml", 5), ("{not json", 4), ("@BINARY", 4)]
)
def test_bad_extravars_are_named_errors_in_json_too(runner, tmp_path, bad, code):
    """The -e named, never a traceback (a binary @file raised UnicodeDecodeError), exit codes as ansible-playbook's:
    4 for text that cannot be parsed, 5 for an option naming nothing usable; --json says so on stdout."""
    binary = tmp_path / "blob.bin"
    binary.write_bytes(b"\x7fELF\x02\x01\x01\x00\xd0\xff\n")
    value = bad.replace("BINARY", str(binary))
    result = runner.invoke(main, ["check", "--json", "-i", SAMPLE, "-e", value])
    assert result.exit_code == code, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    payload = json.loads(result.stdout)
    assert payload["status"] == "error" and f"-e {value!r}" in payload["error"]
    if bad == "@BINARY":
        assert "bytes that are not UTF-8 text (line 1: byte 0xd0)" in payload["error"]


def test_init_into_a_path_that_cannot_be_written(runner, tmp_path):
    """An OSError from scaffolding (here: a regular file where a directory must go) is a named error, exit 1."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = runner.invoke(main, ["init", str(blocker / "site"), "-p", "dgx-1"])
    assert result.exit_code == 1, result.output
    assert f"cannot write the inventory into {blocker / 'site'}: Not a directory" in result.output
    assert not isinstance(result.exception, OSError)


def test_check_accepts_sample(runner):
    result = runner.invoke(main, ["check", "-i", str(REPO / "inventories" / "dgx1-openshift")])
    assert result.exit_code == 0, result.output
    assert "is valid" in result.output


def test_check_rejects_and_names_the_culprit(runner, tmp_path):
    (tmp_path / "hosts.yml").write_text(
        "all:\n  children:\n    gpu_nodes:\n      hosts:\n        n1:\n          nodeforge_profile: dgx-1\n"
        "          nvidia_driver_flavor: open\n"
    )
    result = runner.invoke(main, ["check", "-i", str(tmp_path), "--json"])
    assert result.exit_code == 1
    payload = json.loads(result.stdout)
    assert payload["status"] == "invalid"
    [problem] = payload["problems"]
    assert problem["variable"] == "nvidia_driver_flavor"
    assert problem["scope"] == "host n1"


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_run_verbs_refuse_a_bad_inventory(runner, tmp_path, monkeypatch, verb):
    """The run's gate (the CLI's check, which the validation play waits for) refuses: the run never goes on."""

    def refused_first(_playbook, _opts, on_tick=None, gate=None, **_kw):
        gate()
        raise AssertionError("the check let a bad inventory through to the run")

    monkeypatch.setattr(cli, "run_playbook", refused_first)
    (tmp_path / "hosts.yml").write_text("all:\n  children:\n    gpu_nodes:\n      hosts:\n        n1:\n")
    result = runner.invoke(main, [verb, "-i", str(tmp_path)])
    assert result.exit_code == 1
    assert "no node was touched" in result.output
    assert "n1: nodeforge_profile: found nothing" in result.output


def test_a_run_that_skips_the_validation_play_is_refused_before_ansible_starts(runner, tmp_path, state_dir):
    """ANSIBLE_SKIP_TAGS=always skips the validation play the run would otherwise wait in: the CLI checks first, and
    "no node was touched" is true (ansible-playbook never started: no run's events in the state directory)."""
    (tmp_path / "hosts.yml").write_text(
        "all:\n  children:\n    gpu_nodes:\n      hosts:\n        node1:\n        node2:\n"
        "      vars:\n        nodeforge_profile: dgx-1\n        ofed_mode: bogus\n"
    )
    result = runner.invoke(main, ["preflight", "-i", str(tmp_path), "-l", "node1"], env={"ANSIBLE_SKIP_TAGS": "always"})
    assert result.exit_code == 1, result.output
    assert "no node was touched" in result.output and "ofed_mode: found 'bogus'" in result.output
    assert not list(state_dir.glob("runner/artifacts/*/job_events")), "ansible-playbook ran"


@pytest.mark.slow
def test_provision_json_summary(runner, local_inventory, tmp_path, verb_playbook):
    verb_playbook("provision", "success.yml")
    marker = tmp_path / "marker"
    result = runner.invoke(main, ["provision", "-i", str(local_inventory), "-e", f"marker_path={marker}", "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["hosts"]["localnode"]["changed"] == 1
    assert payload["hosts"]["localnode"]["failed"] == 0
    assert payload["reboot_required"] == {"localnode": True}
    assert marker.exists()


@pytest.mark.slow
@pytest.mark.parametrize("how", ["--vault-password-file", "--ask-vault-pass"])
def test_provision_opens_the_inventory_vault_for_check_and_run(runner, local_inventory, tmp_path, verb_playbook, how):
    """A vault-encrypted inventory value: check decrypts it, and ansible-playbook gets the same secret."""
    from ansible.parsing.vault import VaultLib, VaultSecret

    verb_playbook("provision", "success.yml")
    secret = "the-vaulted-content"
    blob = VaultLib([("default", VaultSecret(b"pw-for-the-lab"))]).encrypt(secret).decode()
    group_vars = local_inventory.parent / "group_vars"
    group_vars.mkdir()
    (group_vars / "gpu_nodes.yml").write_text(
        "marker_content: !vault |\n" + "".join(f"  {line}\n" for line in blob.splitlines())
    )
    marker = tmp_path / "marker"
    args = ["provision", "-i", str(local_inventory), "-e", f"marker_path={marker}"]
    if how == "--ask-vault-pass":
        result = runner.invoke(main, [*args, how], input="pw-for-the-lab\n")
    else:
        password = tmp_path / "vault-pass"
        password.write_text("pw-for-the-lab\n")
        result = runner.invoke(main, [*args, how, str(password)])
    assert result.exit_code == 0, result.output
    assert marker.read_text() == secret + "\n"
    # Without the secret: refused before any node is touched, naming the file and the missing vault secret.
    marker.unlink()
    new_vault_process()
    refused = runner.invoke(main, args)
    assert refused.exit_code == 1
    assert "group_vars/gpu_nodes.yml: group gpu_nodes: marker_content: found a vault-encrypted value" in refused.output
    assert not marker.exists()


@pytest.mark.slow
def test_provision_opens_a_vault_encrypted_extra_vars_file(runner, local_inventory, tmp_path, verb_playbook):
    """-e @file encrypted with ansible-vault: the run gets its values, as the check does (one loader, one secret)."""
    from ansible.parsing.vault import VaultLib, VaultSecret

    verb_playbook("provision", "success.yml")
    marker = tmp_path / "marker"
    extra = tmp_path / "extra.yml"
    plain_text = f"marker_path: {marker}\nmarker_content: from-the-vault\n"
    extra.write_bytes(VaultLib([("default", VaultSecret(b"pw-for-the-lab"))]).encrypt(plain_text))
    password = tmp_path / "vault-pass"
    password.write_text("pw-for-the-lab\n")
    args = ["provision", "-i", str(local_inventory), "-e", f"@{extra}", "--vault-password-file", str(password)]
    result = runner.invoke(main, args)
    assert result.exit_code == 0, result.output
    assert marker.read_text() == "from-the-vault\n"


@pytest.mark.slow
def test_provision_failure_summary_and_exit(runner, local_inventory, verb_playbook):
    verb_playbook("provision", "failing.yml")
    result = runner.invoke(main, ["provision", "-i", str(local_inventory)])
    assert result.exit_code == 2
    assert "FAILED localnode: task Refuse on purpose: the node said no: localnode" in result.output
    assert "artifacts:" in result.output


@pytest.mark.slow
def test_plan_lists_would_change_and_changes_nothing(runner, local_inventory, tmp_path, verb_playbook):
    verb_playbook("plan", "success.yml")
    marker = tmp_path / "marker"
    result = runner.invoke(main, ["plan", "-i", str(local_inventory), "-e", f"marker_path={marker}"])
    assert result.exit_code == 0, result.output
    assert "localnode would change: Write a marker file" in result.output
    assert not marker.exists()


def test_init_scaffolds_a_valid_inventory(runner, tmp_path):
    target = tmp_path / "site"
    result = runner.invoke(main, ["init", str(target), "--profile", "dell-c4140", "--nodes", "3"])
    assert result.exit_code == 0, result.output
    hosts = yaml.safe_load((target / "hosts.yml").read_text())
    assert len(hosts["all"]["children"]["gpu_nodes"]["hosts"]) == 3
    all_vars = (target / "group_vars" / "all.yml").read_text()
    assert "nodeforge_profile: dell-c4140" in all_vars
    assert "# nodeforge_reboot_policy: never" in all_vars
    assert "roles/nodeforge/README.md" in all_vars
    assert runner.invoke(main, ["check", "-i", str(target)]).exit_code == 0


def test_init_lists_every_tunable(runner, tmp_path):
    from nodeforge import specs

    runner.invoke(main, ["init", str(tmp_path / "s"), "--profile", "lab"])
    text = "".join(p.read_text() for p in (tmp_path / "s" / "group_vars").iterdir())
    for name in specs.all_vars():
        assert f"{name}:" in text, name


def test_init_refuses_to_overwrite(runner, tmp_path):
    runner.invoke(main, ["init", str(tmp_path), "--profile", "lab"])
    result = runner.invoke(main, ["init", str(tmp_path), "--profile", "lab"])
    assert result.exit_code != 0
    assert "refusing to overwrite" in result.output


def test_init_unknown_profile(runner, tmp_path):
    result = runner.invoke(main, ["init", str(tmp_path), "--profile", "dgx-2"])
    assert result.exit_code != 0
    assert "unknown profile 'dgx-2'" in result.output and "dgx-1" in result.output


def test_init_host_prefix_and_os(runner, tmp_path):
    result = runner.invoke(
        main, ["init", str(tmp_path / "s"), "-p", "dgx-h100", "--host-prefix", "h100", "--os", "ubuntu24.04"]
    )
    assert result.exit_code == 0, result.output
    assert "h100-01:" in (tmp_path / "s" / "hosts.yml").read_text()
    assert "\nnodeforge_os: ubuntu24.04\n" in (tmp_path / "s" / "group_vars" / "all.yml").read_text()


@pytest.mark.parametrize(("node_os", "formats"), [("ubuntu22.04", ["deb"]), ("rocky9", ["rpm"]), ("", ["deb", "rpm"])])
def test_init_of_a_vgpu_guest_says_what_to_fill_in_and_check_names_the_same(runner, tmp_path, node_os, formats):
    """The GRID guest driver has no public URL: init scaffolds an empty, marked placeholder and says so on stdout;
    check refuses the placeholder, naming the same variable."""
    target = tmp_path / "site"
    result = runner.invoke(main, ["init", str(target), "-p", "vsphere-t4-vgpu", "--os", node_os])
    assert result.exit_code == 0, result.output
    [todo] = [line for line in result.output.splitlines() if line.startswith("fill in: ")]
    assert f"edit the GRID driver location in {target / 'group_vars' / 'all.yml'}" in todo
    assert "nodeforge_manifest_overrides: nvidia_driver.grid version, package" in todo
    assert "NVIDIA distributes the GRID guest driver through its Licensing Portal only" in todo
    for fmt in formats:
        assert f"{fmt}.url, {fmt}.checksum" in todo
    assert ("rpm.url" in todo) == ("rpm" in formats) and ("deb.url" in todo) == ("deb" in formats)
    overrides = yaml.safe_load((target / "group_vars" / "all.yml").read_text())["nodeforge_manifest_overrides"]
    assert overrides["nvidia_driver"]["grid"] == {
        "version": "",
        "package": "",
        **{fmt: {"url": "", "checksum": ""} for fmt in formats},
    }
    check = runner.invoke(main, ["check", "-i", str(target), "--json"])
    assert check.exit_code == 1
    [problem] = json.loads(check.stdout)["problems"]
    assert problem["variable"] == "nodeforge_manifest_overrides"
    assert "nvidia_driver.grid lacks version, package" in problem["found"]


def test_init_says_nothing_to_fill_in_for_bare_metal(runner, tmp_path):
    result = runner.invoke(main, ["init", str(tmp_path / "s"), "-p", "dgx-1"])
    assert result.exit_code == 0, result.output
    assert "fill in" not in result.output and "nodeforge_manifest_overrides:" not in result.output


def test_init_rejects_unknown_os(runner, tmp_path):
    result = runner.invoke(main, ["init", str(tmp_path / "s"), "-p", "lab", "--os", "windows"])
    assert result.exit_code != 0
    assert "unknown OS 'windows'" in result.output


@pytest.mark.parametrize("prefix", ["bad name", "GPU", "-node", "node-", "a..b", "node_1", "x" * 241])
def test_init_refuses_a_host_prefix_no_kubernetes_node_can_be_named_by(runner, tmp_path, prefix):
    """Refused where it is given (exit 5, nothing written), not later by render with a raw pattern."""
    result = runner.invoke(main, ["init", str(tmp_path / "site"), "-p", "dgx-1", "--host-prefix", prefix])
    assert result.exit_code == 5, result.output
    assert "cannot begin a host name that is also a Kubernetes Node's" in " ".join(result.output.split())
    assert not (tmp_path / "site").exists()


def test_init_takes_a_dotted_host_prefix(runner, tmp_path):
    result = runner.invoke(main, ["init", str(tmp_path / "site"), "-p", "dgx-1", "--host-prefix", "dgx.site-a"])
    assert result.exit_code == 0, result.output
    hosts = yaml.safe_load((tmp_path / "site" / "hosts.yml").read_text())["all"]["children"]["gpu_nodes"]["hosts"]
    assert sorted(hosts) == ["dgx.site-a-01", "dgx.site-a-02"]


def test_plan_has_no_check_or_diff_flag_it_always_runs_in_both(runner):
    for flag in ("--check", "--diff"):
        result = runner.invoke(main, ["plan", "-i", SAMPLE, flag])
        assert result.exit_code == 5 and "No such option" in result.output and flag in result.output


def test_init_counts_nodes_with_nodes_only(runner, tmp_path):
    """-n is --namespace in `nodeforge k8s`, as in kubectl: init has --nodes alone, at least 1."""
    assert runner.invoke(main, ["init", str(tmp_path / "a"), "-p", "dgx-1", "-n", "3"]).exit_code == 5
    assert runner.invoke(main, ["init", str(tmp_path / "b"), "-p", "dgx-1", "--nodes", "0"]).exit_code == 5
    assert runner.invoke(main, ["init", str(tmp_path / "c"), "-p", "dgx-1", "--nodes", "3"]).exit_code == 0
    hosts = yaml.safe_load((tmp_path / "c" / "hosts.yml").read_text())["all"]["children"]["gpu_nodes"]["hosts"]
    assert len(hosts) == 3


def test_init_help_lists_every_profile(runner):
    from nodeforge.collection import model

    text = " ".join(runner.invoke(main, ["init", "--help"]).output.split())
    listed = text.split("Hardware profile: ", 1)[1].split(".", 1)[0]
    assert listed.split(", ") == sorted(model.profiles())
