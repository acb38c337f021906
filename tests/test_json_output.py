"""One JSON shape for every verb (issue 43): each verb's --json output, in success and in error, is exactly one JSON
document on stdout that the published schema (docs/json-output.schema.json) accepts, its exit_code the process's;
the human output went to stderr. The runs are stood in for (cli.run_playbook) except in the tests marked slow, which
run real playbooks: render's warnings said once, its progress without the tasks it skipped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click
import jsonschema
import pytest
import yaml
from click.testing import CliRunner

from nodeforge import cli, lab, report
from nodeforge.cli import main
from nodeforge.runner import COUNTERS, Progress, RunResult
from tests.conftest import PLAYBOOKS, REPO
from tests.test_k8s_render import control_overrides, upstream_url  # noqa: F401  (upstream_url: a fixture)
from tests.test_k8s_scale import FS_UID, LOCAL

SCHEMA_FILE = REPO / "docs" / "json-output.schema.json"
VALIDATOR = jsonschema.Draft202012Validator(json.loads(SCHEMA_FILE.read_text()))
NODEFORGE = str(Path(sys.executable).parent / "nodeforge")
SAMPLE = str(REPO / "inventories" / "c4140-k8s")
SEED = sorted((REPO / "tests" / "data" / "seed_mpijobs").glob("*.yaml"))[0]
REDBOOK = ["--fs", FS_UID, "--path", "/gpfs/ess3000_4M/adas", "--size", "100Gi", "--cluster-id", LOCAL]
LAB = "jsontest"


def one_document(stdout: str) -> dict:
    """stdout as exactly one JSON document (an object), nothing before or after it."""
    document, end = json.JSONDecoder().raw_decode(stdout)
    assert stdout[end:].strip() == "", f"more than one document on stdout: {stdout[end:][:300]!r}"
    assert isinstance(document, dict)
    return document


def checked(stdout: str, code: int) -> dict:
    """The document, valid against the published schema, with the process's exit code."""
    document = one_document(stdout)
    VALIDATOR.validate(document)
    assert document["exit_code"] == code, (document, code)
    return document


def invoke(*argv: str, stdin: str | None = None) -> tuple[int, dict, str]:
    """nodeforge ARGV in process: the exit code, the checked document, the human output (stderr)."""
    result = CliRunner().invoke(main, [str(a) for a in argv], input=stdin)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    return result.exit_code, checked(result.stdout, result.exit_code), result.stderr


def counters(**counts: int) -> dict[str, int]:
    return {**dict.fromkeys(COUNTERS, 0), **counts}


# The stand-in for a run: the CLI's check (the gate), a tick of the live progress, then this result.
ACCEPTANCE = [{"check": "nouveau", "status": "pass", "measured": "no", "expected": "no", "reason": "", "unit": None}]
TODO = {"action": "todo", "resume": False, "state": {}, "components": [
    {"component": "toolkit", "from": "1.20.0", "to": "1.21.0", "action": "upgrade"}]}  # fmt: skip


def stand_in_result(playbook: str, opts) -> RunResult:
    if opts.extravars.get("k8s_cluster_action") == "render":  # what the action writes: render's marker first
        out = Path(opts.extravars["k8s_cluster_render_dir"])
        out.mkdir(parents=True, exist_ok=True)
        from ansible_collections.nodeforge.gpu.plugins.action.k8s_render import MARKER

        for name in ("node-n1.yaml", "kustomization.yaml"):
            (out / name).write_text(MARKER + "kind: x\n")
        (out / "notes.yaml").write_text("not one of render's\n")
    return RunResult(
        playbook=playbook,
        status="successful",
        rc=0,
        artifacts="/nowhere/artifacts",
        hosts={"localnode": counters(ok=3, changed=1)},
        failures=[],
        changes={"localnode": ["Write a marker file"]},
        reboot_required={},
        duration_s=0.5,
        notices={"localnode": ["warning: nodeforge check: repeated by the validation play", "an announcement"]},
        acceptance={"localnode": ACCEPTANCE},
        upgrade_plans={"localnode": TODO} if "upgrade" in playbook else {},
    )


@pytest.fixture
def stand_in_runs(monkeypatch):
    def run(playbook, opts, on_tick=None, gate=None, **_kw):
        gate()
        if on_tick:
            on_tick(Progress())
        return stand_in_result(str(playbook), opts)

    monkeypatch.setattr(cli, "run_playbook", run)


@pytest.fixture
def stand_in_lab(monkeypatch, local_inventory):
    def up(name, _count, _mirror=None, _oses=None):
        path = lab.inventory_path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(local_inventory.read_text())
        return path

    monkeypatch.setattr(lab, "up", up)
    monkeypatch.setattr(lab, "nodes", lambda name: [lab.Node(f"nodeforge-{name}-1", "running", 40022)])
    monkeypatch.setattr(lab, "down", lambda name: [f"nodeforge-{name}-1"])
    monkeypatch.setattr(lab, "become_args", lambda _name: [], raising=False)


@pytest.fixture
def refused_inventory(tmp_path) -> str:
    (tmp_path / "refused").mkdir()
    (tmp_path / "refused" / "hosts.yml").write_text("all:\n  children:\n    gpu_nodes:\n      hosts:\n        n1:\n")
    return str(tmp_path / "refused")


def test_the_published_schema_is_the_one_the_cli_builds_to():
    """docs/json-output.schema.json is nodeforge.report.JSON_SCHEMA (tools/gen_docs.py --check keeps it so), a valid
    draft 2020-12 schema whose required keys are the envelope's."""
    schema = json.loads(SCHEMA_FILE.read_text())
    assert schema == report.JSON_SCHEMA
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["required"] == list(report.COMMON_KEYS)
    assert set(report.json_payload("ok", 0)) == set(report.COMMON_KEYS)


# ---- every verb, in success --------------------------------------------------------------------------------------
SUCCESS = {
    "check": (lambda t, inv: ["check", "-i", SAMPLE], "valid"),
    "init": (lambda t, inv: ["init", t / "site", "-p", "vsphere-t4-vgpu"], "ok"),
    "preflight": (lambda t, inv: ["preflight", "-i", inv], "successful"),
    "provision": (lambda t, inv: ["provision", "-i", inv], "successful"),
    "plan": (lambda t, inv: ["plan", "-i", inv], "successful"),
    "plan --upgrade": (lambda t, inv: ["plan", "--upgrade", "-i", inv, "--component", "toolkit"], "planned"),
    "upgrade": (lambda t, inv: ["upgrade", "-i", inv, "--component", "toolkit"], "planned"),
    "validate": (lambda t, inv: ["validate", "-i", inv, "--json"], "passed"),
    "k8s render": (lambda t, inv: ["k8s", "render", "-i", SAMPLE, "-o", t / "out"], "successful"),
    "k8s apply": (lambda t, inv: ["k8s", "apply", "-i", SAMPLE], "successful"),
    "k8s diff": (lambda t, inv: ["k8s", "diff", "-i", SAMPLE], "successful"),
    "k8s job": (lambda t, inv: ["k8s", "job", "nccl", "-i", SAMPLE], "ok"),
    "k8s job -o": (lambda t, inv: ["k8s", "job", "cuda-vector-add", "-i", SAMPLE, "-o", t / "job.yaml"], "ok"),
    "k8s scale-pv": (lambda t, inv: ["k8s", "scale-pv", *REDBOOK, "-o", t / "pv.yaml"], "ok"),
    "k8s convert-mpijob": (lambda t, inv: ["k8s", "convert-mpijob", SEED], "ok"),
    "lab up": (lambda t, inv: ["lab", "up", "--name", LAB], "ok"),
    "lab up --provision": (lambda t, inv: ["lab", "up", "--provision", "--name", LAB], "successful"),
    "lab provision": (lambda t, inv: ["lab", "provision", "--name", LAB], "successful"),
    "lab status": (lambda t, inv: ["lab", "status", "--name", LAB], "ok"),
    "lab down": (lambda t, inv: ["lab", "down", "--name", LAB], "ok"),
}


@pytest.mark.parametrize("case", SUCCESS)
def test_every_verb_prints_one_document_in_success(case, tmp_path, local_inventory, stand_in_runs, stand_in_lab):
    argv, status = SUCCESS[case]
    if case == "lab provision":
        lab.up(LAB, 1)
    args = [str(a) for a in argv(tmp_path, str(local_inventory))]
    code, document, stderr = invoke(*args, *([] if "--json" in args else ["--json"]))
    assert (code, document["status"]) == (0, status), (document, stderr)
    assert document["problems"] == []
    assert stderr.strip(), "the human output went nowhere"
    for path in document["files"]:
        assert Path(path).is_file(), path
    ran = status in ("successful", "planned", "passed")
    assert bool(document["hosts"]) is ran
    if ran:  # the validation play's copy of the check's warnings is the check's: in warnings, never a notice
        assert {"host": "localnode", "text": "an announcement"} in document["notices"]
        assert not [n for n in document["notices"] if "nodeforge check" in n["text"]]
    if case == "check":
        assert document["warnings"] and all(w["found"] in stderr for w in document["warnings"])
    if case == "init":
        assert len(document["files"]) == 3 and document["notices"][0]["text"].startswith("fill in: ")
        assert document["notices"][0]["host"] is None
    if case == "k8s render":  # render's own files, by their marker; not the other file in the directory
        assert document["files"] == [str(tmp_path / "out" / n) for n in ("kustomization.yaml", "node-n1.yaml")]
    if case.startswith("k8s job") or case.startswith("k8s scale") or case.startswith("k8s convert"):
        assert document["objects"] and all(isinstance(o, dict) and o.get("kind") for o in document["objects"])
        written = [Path(f).read_text() for f in document["files"]]
        assert all(yaml.safe_load_all(text) for text in written)
    if case == "k8s convert-mpijob":
        assert any("kubeflow.org/v1alpha2 -> kubeflow.org/v2beta1" in n["text"] for n in document["notices"])
    if case == "lab up --provision":
        assert document["files"] == [str(lab.inventory_path(LAB))]
    if case == "validate":
        assert document["hosts"]["localnode"]["checks"] == ACCEPTANCE


def test_validate_writes_the_same_document_into_its_json_file(tmp_path, local_inventory, stand_in_runs):
    """--json FILE: the file holds the document (with the reports written), stdout the human output."""
    out, junit = tmp_path / "report.json", tmp_path / "report.xml"
    result = CliRunner().invoke(main, ["validate", "-i", str(local_inventory), "--json", str(out), "--junit", junit])
    assert result.exit_code == 0, result.output
    document = checked(out.read_text(), 0)
    assert document["files"] == [str(out), str(junit)] and document["status"] == "passed"
    assert "validate passed" in result.stdout


# ---- every verb, in error ----------------------------------------------------------------------------------------
NEEDS_INVENTORY = {
    "check": [],
    "preflight": [],
    "provision": [],
    "plan": [],
    "validate": [],
    "upgrade": ["--component", "toolkit"],
    "k8s render": ["-o", "OUT"],
    "k8s apply": [],
    "k8s diff": [],
    "k8s job": ["nccl"],
}


def _argv(verb: str, extra: list[str], tmp_path: Path) -> list[str]:
    return [*verb.split(), *[str(tmp_path / "out") if a == "OUT" else a for a in extra]]


@pytest.mark.parametrize("verb", NEEDS_INVENTORY)
def test_a_missing_inventory_is_a_document_too(verb, tmp_path):
    """click refuses a missing -i before the verb runs: the document comes from cli._Main, status error, exit 5."""
    code, document, stderr = invoke(*_argv(verb, NEEDS_INVENTORY[verb], tmp_path), "--json")
    assert (code, document["status"]) == (5, "error")
    assert document["error"] == "Missing option '-i' / '--inventory'."
    [problem] = document["problems"]
    assert (problem["where"], problem["variable"]) == ("command line", "--inventory")
    assert problem["scope"].endswith(f" {verb}")  # the command's path: nodeforge check (CliRunner: main check)
    assert "Error: Missing option '-i' / '--inventory'." in stderr


@pytest.mark.parametrize("verb", [*NEEDS_INVENTORY, "k8s scale-pv"])
@pytest.mark.parametrize("bad", ["missing", "not-yaml"])
def test_an_extra_vars_file_that_cannot_be_used(verb, bad, tmp_path, stand_in_runs):
    """-e @FILE: no such file is 5, a file that is no YAML 4, before any node is touched."""
    (tmp_path / "not-yaml.yml").write_text("a: [1\n")
    path = tmp_path / f"{bad}.yml"
    extra = REDBOOK if verb == "k8s scale-pv" else NEEDS_INVENTORY[verb]
    argv = [*_argv(verb, extra, tmp_path), "-i", SAMPLE, "-e", f"@{path}", "--json"]
    code, document, stderr = invoke(*argv)
    assert (code, document["status"]) == ((5, "error") if bad == "missing" else (4, "error")), document
    assert str(path) in document["error"] and str(path) in stderr


@pytest.mark.parametrize("verb", [*NEEDS_INVENTORY, "k8s scale-pv"])
def test_a_refused_inventory(verb, tmp_path, refused_inventory, stand_in_runs):
    extra = REDBOOK if verb == "k8s scale-pv" else NEEDS_INVENTORY[verb]
    code, document, stderr = invoke(*_argv(verb, extra, tmp_path), "-i", refused_inventory, "--json")
    assert (code, document["status"]) == (1, "invalid")
    assert [p["variable"] for p in document["problems"]] == ["nodeforge_profile"]
    assert "no node was touched" in stderr


def test_a_vault_password_file_that_is_not_there(tmp_path):
    code, document, _ = invoke("check", "-i", SAMPLE, "--vault-password-file", tmp_path / "nope", "--json")
    assert (code, document["status"]) == (5, "error") and document["problems"][0]["variable"] == "--vault-password-file"


def test_output_paths_that_cannot_be_written(tmp_path, local_inventory, stand_in_runs):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # another user could plant files: refused (plugin_utils/safe_write.py)
    blocker = tmp_path / "file"
    blocker.write_text("")
    cases = [
        (["k8s", "render", "-i", SAMPLE, "-o", shared / "out"], 5),
        (["init", blocker / "site", "-p", "dgx-1"], 1),
        (["validate", "-i", local_inventory, "--junit", shared / "r.xml", "--json"], 5),
        (["k8s", "job", "nccl", "-i", SAMPLE, "-o", shared / "job.yaml"], 5),
        (["k8s", "scale-pv", *REDBOOK, "-o", blocker / "pv.yaml"], 1),
        (["k8s", "convert-mpijob", SEED, "-o", shared / "job.yaml"], 5),
    ]
    for argv, expected in cases:
        code, document, stderr = invoke(*argv, *([] if "--json" in argv else ["--json"]))
        assert (code, document["status"]) == (expected, "error"), (argv, document)
        assert document["files"] == [] and document["error"] in stderr
    assert list(shared.iterdir()) == []


@pytest.mark.parametrize(
    "argv",
    [["no-such-verb", "--json"], ["lab", "status", "--json", "--bogus"], ["upgrade", "-i", SAMPLE, "--json"],
     ["k8s", "convert-mpijob", "-", "--json"], ["k8s", "job", "ib-write-bw", "-i", SAMPLE, "--json", "-e",
     '{"k8s_rdma_shared_device_plugin_enabled": false}'], ["k8s", "scale-pv", *REDBOOK, "--json", "--size", "100"]],
    ids=["unknown-verb", "unknown-option", "upgrade-without-component", "convert-nothing", "job-refused",
         "scale-pv-size"],
)  # fmt: skip
def test_other_refusals(argv):
    code, document, stderr = invoke(*argv, stdin="---\n")
    assert code in (1, 5) and document["status"] == "error"
    assert f"Error: {document['error']}" in stderr


def test_invalid_objects_are_problems(tmp_path):
    code, document, stderr = invoke("k8s", "scale-pv", *REDBOOK, "--k8s-version", "1.12", "--json")
    assert (code, document["status"]) == (1, "invalid")
    assert "no schemas of Kubernetes 1.12" in document["problems"][0]["found"] and "invalid" in stderr


def test_an_unexpected_error_is_a_document_too(monkeypatch):
    def broken(*_args, **_kw):
        raise RuntimeError("a bug")

    monkeypatch.setattr(cli, "run_playbook", broken)
    code, document, _ = invoke("provision", "-i", SAMPLE, "--json")
    assert (code, document["status"]) == (250, "error") and "unexpected RuntimeError: a bug" in document["error"]


def test_the_command_line_s_json_in_a_process_of_its_own(tmp_path):
    """cli._Main reads --json from sys.argv: a missing -i of the real command."""
    proc = subprocess.run([NODEFORGE, "k8s", "render", "-o", str(tmp_path), "--json"], capture_output=True, text=True)
    assert proc.returncode == 5
    assert checked(proc.stdout, 5)["status"] == "error" and "Missing option" in proc.stderr


@pytest.mark.parametrize(
    ("argv", "wanted"),
    [(["check", "--json"], True), (["check"], False), (["validate", "--json"], True),
     (["validate", "--json", "-"], True), (["validate", "--json", "r.json"], False), (["validate", "--json=-"], True),
     (["validate", "--json=r.json"], False), (["validate", "--json", "-i", "x"], True), (["init", "--json", "d"], True),
     (["k8s", "convert-mpijob", "--", "--json"], False)],
)  # fmt: skip
def test_which_command_lines_ask_for_json(argv, wanted):
    assert cli.json_requested(argv) is wanted


# ---- the live progress shows what a run does -------------------------------------------------------------------
def _events(*spec: tuple[str, str, str]) -> list[dict]:
    return [{"event": kind, "event_data": {"task": task, "task_uuid": task, "host": host, "play": "p"}}
            for kind, task, host in spec]  # fmt: skip


def test_progress_never_shows_a_task_every_host_skipped(monkeypatch):
    progress = Progress()
    for event in _events(
        ("playbook_on_task_start", "Compute", ""),
        ("runner_on_start", "Compute", "a"),
        ("runner_on_start", "Compute", "b"),
        ("runner_on_skipped", "Compute", "a"),
        ("runner_on_ok", "Compute", "b"),
        ("playbook_on_task_start", "Apply each object", ""),
        ("runner_on_start", "Apply each object", "a"),
        ("runner_on_start", "Apply each object", "b"),
        ("runner_item_on_skipped", "Apply each object", "a"),
        ("runner_on_skipped", "Apply each object", "a"),
        ("runner_on_skipped", "Apply each object", "b"),
    ):
        progress.handle(event)
    monkeypatch.setattr(Progress, "SHOW_AFTER_S", 0.0)  # however long ago: every host skipped it
    assert (progress.task, progress.tasks) == ("Compute", [("p", "Compute")])
    # A host at a task without a result yet: shown once it has been at it SHOW_AFTER_S.
    for event in _events(("playbook_on_task_start", "Install", ""), ("runner_on_start", "Install", "a")):
        progress.handle(event)
    assert progress.task == "Install" and progress.tasks[-1] == ("p", "Install")


# ---- real runs ---------------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize(
    ("playbook", "code", "status"), [("success.yml", 0, "successful"), ("failing.yml", 2, "failed")]
)
def test_a_real_run_s_document(monkeypatch, local_inventory, tmp_path, playbook, code, status):
    spec = cli.VERBS["provision"]
    monkeypatch.setitem(cli.VERBS, "provision", cli.Verb(str(PLAYBOOKS / playbook), spec.help))
    exit_code, document, stderr = invoke(
        "provision", "-i", local_inventory, "-e", f"marker_path={tmp_path / 'm'}", "--json"
    )
    assert (exit_code, document["status"]) == (code, status)
    assert document["hosts"]["localnode"]["ok"] > 0
    assert f"{playbook}: {status} in" in stderr  # the summary table, on stderr


@pytest.mark.slow
def test_render_says_each_warning_once_and_shows_only_the_tasks_it_runs(tmp_path, upstream_url, state_dir):  # noqa: F811
    """c4140-k8s warns four times: each warning once on stderr (the check's; not again from the validation play's
    copy, not again in the summary), in `warnings` and never among the notices. The progress lists each task that
    did something on a host, and none that every host skipped (apply's, with render)."""
    out = tmp_path / "out"
    overrides = control_overrides(tmp_path, upstream_url)
    proc = subprocess.run(
        [NODEFORGE, "k8s", "render", "-i", SAMPLE, "-i", str(overrides), "-o", str(out), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "400"},
    )
    document = checked(proc.stdout, proc.returncode)
    assert (proc.returncode, document["status"]) == (0, "successful"), proc.stderr[-3000:]
    assert len(document["warnings"]) == 4
    for warning in document["warnings"]:
        assert proc.stderr.count(warning["found"]) == 1, warning
    assert not [n for n in document["notices"] if "nodeforge check" in n["text"]]
    assert document["files"] and str(out / "kustomization.yaml") in document["files"]
    # What the run did, from its events: the tasks with a result other than skipped, and those every host skipped.
    results: dict[str, set[str]] = {}
    for path in Path(document["artifacts"], "job_events").glob("*.json"):
        event = json.loads(path.read_text())
        if event["event"] in ("runner_on_ok", "runner_on_failed", "runner_on_skipped"):
            results.setdefault(event["event_data"]["task"], set()).add(event["event"])
    ran = {task for task, kinds in results.items() if kinds != {"runner_on_skipped"}}
    skipped = set(results) - ran
    assert {"Apply each object (server-side apply, field manager nodeforge)", "Read the kubeconfig"} <= skipped
    shown = [line.split(" | ", 1)[1] for line in proc.stderr.splitlines() if " | " in line]
    assert not set(shown) & skipped, set(shown) & skipped
    assert set(shown) == ran
    assert len(shown) == len(set(shown))
    [written] = document["notices"]
    assert proc.stderr.count(written["text"]) == 1  # as it came; the summary does not repeat it in a log


def test_every_verb_takes_json():
    """Each command of `nodeforge --help`, recursively: a --json option (validate's takes a FILE)."""

    def leaves(group, path):
        ctx = click.Context(group, info_name=path[-1])
        for name in group.list_commands(ctx):
            command = group.get_command(ctx, name)
            yield from (
                leaves(command, [*path, name]) if isinstance(command, click.Group) else [([*path, name], command)]
            )

    found = dict((" ".join(path), command) for path, command in leaves(main, ["nodeforge"]))
    assert len(found) >= 17, sorted(
        found
    )  # check, init, k8s (6), lab (4), plan, preflight, provision, upgrade, validate
    lacking = [path for path, command in found.items() if not any("--json" in p.opts for p in command.params)]
    assert lacking == []
