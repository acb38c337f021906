"""Output directories another user can write into (issue 42, item 4): every file nodeforge writes where the operator
says (k8s render -o DIR, the -o FILE of the k8s verbs, validate's report files, init DIR) goes through
plugin_utils/safe_write.py: a new file renamed into place, never through a planted symlink; a directory others can
write (unless sticky), or a file there of another user, refused before anything is written.

The tests run as root: another user is uid 65534 (nobody), made the owner of a planted file or link with
os.chown/os.lchown. `k8s render` itself runs Ansible (slow): its refusal happens before Ansible starts and is tested
through the CLI; what its action writes is tested through the action, as a task runs it (tests/test_k8s_scale.py).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from nodeforge import cli
from nodeforge.cli import main
from tests.test_k8s_scale import FS_UID, LOCAL, PASSWORDS, build, render_action

from ansible_collections.nodeforge.gpu.plugins.plugin_utils import safe_write  # isort: skip

REPO = Path(__file__).resolve().parent.parent
NOBODY = 65534
SECRET_FILE = "secret-ibm-spectrum-scale-csi-driver-csisecret-local.yaml"
SEED_JOB = sorted((REPO / "tests" / "data" / "seed_mpijobs").glob("*.yaml"))[0]
SCALE_PV = [
    "k8s",
    "scale-pv",
    "--fs",
    FS_UID,
    "--path",
    "/gpfs/ess3000_4M/adas",
    "--size",
    "1Gi",
    "--cluster-id",
    LOCAL,
]

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="simulates another user with chown: needs root")


def everything() -> list[dict]:
    objects, secrets = build()
    return objects + secrets


def render_into(dest: Path, **extra) -> dict:
    return render_action(
        {"objects": everything(), "dest": str(dest), "k8s_version": "1.33", "include_secrets": True, **extra}
    )


def directory(path: Path, mode: int) -> Path:
    path.mkdir()
    path.chmod(mode)  # chmod, not mkdir(mode): the umask would take the bits back
    return path


def planted(path: Path, target: Path, uid: int | None = None) -> None:
    path.symlink_to(target)
    if uid is not None:
        os.lchown(path, uid, uid)


def elsewhere(tmp_path: Path, uid: int | None = None) -> tuple[Path, str, int]:
    """A file outside the output directory a link points at: (path, content, mode), to show it untouched."""
    target = directory(tmp_path / "elsewhere", 0o755) / "attackers-file"
    target.write_text("the attacker's file\n")
    target.chmod(0o644)
    if uid is not None:
        os.chown(target, uid, uid)
    return target, target.read_text(), stat.S_IMODE(target.stat().st_mode)


def assert_untouched(target: Path, content: str, mode: int) -> None:
    assert target.read_text() == content, f"{target} was written through the link"
    assert stat.S_IMODE(target.stat().st_mode) == mode, f"{target}'s mode changed to {target.stat().st_mode:o}"


# ---- k8s render: what the action writes ------------------------------------------------------------------------------
def test_a_symlink_named_like_the_secret_file_is_replaced_and_its_target_untouched(tmp_path):
    out = directory(tmp_path / "out", 0o755)
    target, content, mode = elsewhere(tmp_path)
    planted(out / SECRET_FILE, target)
    result = render_into(out)
    secret = out / SECRET_FILE
    assert not secret.is_symlink(), "the link is still there: the Secret was written through it"
    assert stat.S_ISREG(secret.lstat().st_mode)
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    data = yaml.safe_load(secret.read_text())
    assert data["kind"] == "Secret" and data["metadata"]["name"] == "csisecret-local"
    assert_untouched(target, content, mode)
    assert PASSWORDS["csisecret-local"] not in target.read_text()
    assert SECRET_FILE in result["written"]


def test_a_world_writable_directory_is_refused_by_the_action_and_nothing_written(tmp_path):
    out = directory(tmp_path / "shared", 0o777)
    with pytest.raises(Exception, match=r"refusing to write into .*shared: others can write it \(mode 0777\)") as e:
        render_into(out)
    assert str(out) in str(e.value) and "nothing was written" in str(e.value)
    assert list(out.iterdir()) == []


def test_in_a_sticky_directory_render_writes_when_the_files_are_ours(tmp_path):
    out = directory(tmp_path / "sticky", 0o1777)
    first = render_into(out)
    assert SECRET_FILE in first["written"] and "kustomization.yaml" in first["written"]
    assert stat.S_IMODE((out / SECRET_FILE).stat().st_mode) == 0o600
    assert stat.S_IMODE((out / "kustomization.yaml").stat().st_mode) & 0o077 != 0o077  # as open("w") made it
    again = render_into(out)
    assert again["written"] == [] and again["removed"] == [] and again["changed"] is False


def test_in_a_sticky_directory_a_file_of_another_user_is_refused_naming_it(tmp_path):
    """The issue's reproduction: in a shared (sticky) directory, nobody plants a link named like the Secret's file
    to a file of theirs; render refuses it and writes nothing, and nobody's file never holds the Secret."""
    out = directory(tmp_path / "sticky", 0o1777)
    target, content, mode = elsewhere(tmp_path, uid=NOBODY)
    planted(out / SECRET_FILE, target, uid=NOBODY)
    with pytest.raises(Exception) as raised:
        render_into(out)
    message = str(raised.value)
    assert f"refusing to write {out / SECRET_FILE}: a symlink belongs to nobody (uid {NOBODY})" in message
    assert "nothing was written" in message
    assert_untouched(target, content, mode)
    assert [p.name for p in out.iterdir()] == [SECRET_FILE]  # nothing else written either
    # A regular file of theirs under a rendered name: refused the same way, left as it was.
    (out / SECRET_FILE).unlink()
    theirs = out / "kustomization.yaml"
    theirs.write_text("theirs\n")
    os.chown(theirs, NOBODY, NOBODY)
    with pytest.raises(Exception, match=r"kustomization.yaml: it exists and belongs to nobody"):
        render_into(out)
    assert theirs.read_text() == "theirs\n" and [p.name for p in out.iterdir()] == ["kustomization.yaml"]


def test_a_symlink_another_user_placed_is_refused_in_any_directory(tmp_path):
    out = directory(tmp_path / "out", 0o755)
    target, content, mode = elsewhere(tmp_path)
    planted(out / SECRET_FILE, target, uid=NOBODY)
    with pytest.raises(Exception, match=r"a symlink belongs to nobody \(uid 65534\)"):
        render_into(out)
    assert_untouched(target, content, mode)
    assert [p.name for p in out.iterdir()] == [SECRET_FILE]


def test_render_twice_reports_every_file_unchanged_and_rewrites_a_loosened_secret(tmp_path):
    out = tmp_path / "out"  # created by the first render
    first = render_into(out)
    assert sorted(first["written"]) == first["files"]
    inodes = {p.name: p.stat().st_ino for p in out.iterdir()}
    again = render_into(out)
    assert again["written"] == [] and again["changed"] is False
    assert {p.name: p.stat().st_ino for p in out.iterdir()} == inodes  # not even rewritten in place
    (out / SECRET_FILE).chmod(0o644)
    third = render_into(out)
    assert third["written"] == [SECRET_FILE] and stat.S_IMODE((out / SECRET_FILE).stat().st_mode) == 0o600
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]  # no temporary file left behind


@pytest.mark.timeout(60)  # reading a FIFO blocks until a writer comes: before the fix, forever
def test_a_fifo_is_neither_read_into_a_hang_nor_removed_as_stale(tmp_path):
    out = directory(tmp_path / "out", 0o755)
    os.mkfifo(out / "stale-looking.yaml")
    os.mkfifo(out / "kustomization.yaml")
    result = render_into(out)
    assert stat.S_ISFIFO((out / "stale-looking.yaml").lstat().st_mode)  # not nodeforge's: kept
    assert stat.S_ISREG((out / "kustomization.yaml").lstat().st_mode)  # a rendered name: replaced by the file
    assert "stale-looking.yaml" not in result["removed"]


def test_check_mode_refuses_too_and_writes_nothing(tmp_path):
    out = directory(tmp_path / "shared", 0o777)
    with pytest.raises(Exception, match=r"others can write it"):
        render_action({"objects": everything(), "dest": str(out), "k8s_version": "1.33"}, check_mode=True)
    assert list(out.iterdir()) == []


# ---- k8s render through the CLI: refused before Ansible starts -------------------------------------------------------
def render_cli(out: Path, *extra: str):
    return CliRunner().invoke(
        main, ["k8s", "render", "-i", str(REPO / "inventories" / "c4140-k8s"), "-o", str(out), *extra]
    )


def test_render_refuses_a_world_writable_output_directory(tmp_path, monkeypatch):
    started = []
    monkeypatch.setattr(cli, "run_playbook", lambda *a, **k: started.append(a))
    out = directory(tmp_path / "gitops", 0o777)
    result = render_cli(out, "--include-secrets")
    assert result.exit_code == 5, result.output
    assert f"refusing to write into {out}: others can write it (mode 0777) and it is not sticky" in result.output
    assert "chmod go-w" in result.output and "Traceback" not in result.output
    assert started == [] and list(out.iterdir()) == []
    json_run = render_cli(out, "--json")
    assert json_run.exit_code == 5
    assert "refusing to write into" in json.loads(json_run.stdout)["error"]


def test_render_refuses_a_directory_under_one_others_can_write_or_of_another_user(tmp_path, monkeypatch):
    started = []
    monkeypatch.setattr(cli, "run_playbook", lambda *a, **k: started.append(a))
    shared = directory(tmp_path / "shared", 0o777)
    out = directory(shared / "rendered", 0o755)  # ours, but nobody can rename it away and put theirs in its place
    result = render_cli(out)
    assert result.exit_code == 5, result.output
    assert f"refusing to write into {out}: {shared}, above it: others can write it (mode 0777)" in result.output
    new = shared / "new"  # would be created there
    result = render_cli(new)
    assert result.exit_code == 5 and f"{shared}, above it" in result.output and not new.exists()
    theirs = directory(tmp_path / "theirs", 0o755)
    os.chown(theirs, NOBODY, NOBODY)
    result = render_cli(theirs)
    assert result.exit_code == 5
    assert f"refusing to write into {theirs}: it belongs to nobody (uid {NOBODY}), not to you" in result.output
    linked = tmp_path / "linked"
    planted(linked, directory(tmp_path / "real", 0o755), uid=NOBODY)
    result = render_cli(linked)
    assert result.exit_code == 5
    assert f"refusing to write into {linked}: it is a symlink that nobody (uid {NOBODY}) placed" in result.output
    assert started == []


# ---- the -o FILE of scale-pv and convert-mpijob, validate's reports, init DIR: the same helper ----------------------
OUTPUT_COMMANDS = {
    "scale-pv": SCALE_PV,
    "convert-mpijob": ["k8s", "convert-mpijob", str(SEED_JOB)],
}


@pytest.mark.parametrize("command", OUTPUT_COMMANDS)
def test_output_file_replaces_a_symlink_of_ours_and_refuses_one_of_another_user(tmp_path, command):
    out = directory(tmp_path / "out", 0o755)
    target, content, mode = elsewhere(tmp_path)
    planted(out / "result.yaml", target)
    result = CliRunner().invoke(main, [*OUTPUT_COMMANDS[command], "-o", str(out / "result.yaml")])
    assert result.exit_code == 0, result.output
    written = out / "result.yaml"
    assert not written.is_symlink() and [d for d in yaml.safe_load_all(written.read_text()) if d]
    assert_untouched(target, content, mode)
    written.unlink()
    planted(written, target, uid=NOBODY)
    result = CliRunner().invoke(main, [*OUTPUT_COMMANDS[command], "-o", str(written)])
    assert result.exit_code == 5, result.output
    assert f"refusing to write {written}: a symlink belongs to nobody (uid {NOBODY})" in result.output
    assert written.is_symlink() and "Traceback" not in result.output
    assert_untouched(target, content, mode)


@pytest.mark.parametrize("command", OUTPUT_COMMANDS)
def test_output_file_in_a_world_writable_directory_is_refused(tmp_path, command):
    shared = directory(tmp_path / "shared", 0o777)
    result = CliRunner().invoke(main, [*OUTPUT_COMMANDS[command], "-o", str(shared / "result.yaml")])
    assert result.exit_code == 5, result.output
    assert f"refusing to write into {shared}: others can write it (mode 0777)" in result.output
    assert list(shared.iterdir()) == []
    sticky = directory(tmp_path / "sticky", 0o1777)
    result = CliRunner().invoke(main, [*OUTPUT_COMMANDS[command], "-o", str(sticky / "result.yaml")])
    assert result.exit_code == 0, result.output
    assert (sticky / "result.yaml").is_file()


def test_validate_refuses_its_report_files_before_the_run(tmp_path, monkeypatch):
    started = []
    monkeypatch.setattr(cli, "run_playbook", lambda *a, **k: started.append(a))
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {"n1": None}}}}}))
    shared = directory(tmp_path / "shared", 0o777)
    for option in ("--json", "--junit", "--html"):
        result = CliRunner().invoke(main, ["validate", "-i", str(inventory), option, str(shared / "report")])
        assert result.exit_code == 5, result.output
        assert f"Invalid value for '{option}': refusing to write into {shared}" in result.output
    assert started == [] and list(shared.iterdir()) == []


def test_init_refuses_a_world_writable_directory(tmp_path):
    shared = directory(tmp_path / "shared", 0o777)
    result = CliRunner().invoke(main, ["init", str(shared / "site"), "-p", "lab"])
    assert result.exit_code == 5, result.output
    assert f"refusing to write into {shared / 'site'}: {shared}, above it: others can write it" in result.output
    assert list(shared.iterdir()) == []


# ---- the helper's rules ----------------------------------------------------------------------------------------------
def test_group_writable_is_refused_only_when_the_group_has_other_members(tmp_path, monkeypatch):
    out = directory(tmp_path / "out", 0o775)
    monkeypatch.setattr(safe_write, "_group_has_others", lambda gid: True)
    with pytest.raises(safe_write.UnsafeOutputError, match=r"group root can write it \(mode 0775\), which has other"):
        safe_write.check_directory(out)
    monkeypatch.setattr(safe_write, "_group_has_others", lambda gid: False)  # a user private group
    safe_write.check_directory(out)


def test_write_file_creates_with_the_final_mode_and_leaves_no_temporary_file(tmp_path):
    out = directory(tmp_path / "out", 0o755)
    safe_write.write_file(out / "secret.yaml", "s3cret\n", mode=0o600)
    assert stat.S_IMODE((out / "secret.yaml").stat().st_mode) == 0o600
    safe_write.write_file(out / "secret.yaml", "again\n", mode=0o600)
    assert (out / "secret.yaml").read_text() == "again\n"
    assert [p.name for p in out.iterdir()] == ["secret.yaml"]
    with pytest.raises(safe_write.OutputError, match=r"cannot write .*/missing/x.yaml: .*/missing does not exist"):
        safe_write.check_file(out / "missing" / "x.yaml")
