"""nodeforge.gpu.managed_files: several small files written, kept or removed in one module call.

The module runs as Ansible runs it (its arguments through AnsibleModule, its JSON result on stdout) against a
temporary directory; what it did is read back from the directory itself (contents, modes, what exists), and once
through `ansible localhost -m nodeforge.gpu.managed_files` (the collection loader, check and diff mode)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO, collection_module, documented_spec

MODULE = collection_module("managed_files")
DROPIN = "[Service]\nLimitMEMLOCK=infinity\n"


@pytest.fixture
def run(module_runner):
    return module_runner(MODULE)


def tree(root: Path) -> dict[str, tuple[str, bytes | None]]:
    """Every path under root: its mode and, for a file, its content."""
    found = {}
    for path in sorted(root.rglob("*")):
        mode = oct(stat.S_IMODE(path.stat().st_mode))
        found[str(path.relative_to(root))] = (mode, path.read_bytes() if path.is_file() else None)
    return found


def dropins(root: Path, *services: str) -> list[dict]:
    return [{"path": f"{root}/{name}.service.d/20-memlock.conf", "content": DROPIN} for name in services]


def dropin_paths(root: Path, *services: str) -> list[str]:
    return [f"{root}/{name}.service.d/20-memlock.conf" for name in services]


def test_writes_files_and_their_directories_then_changes_nothing(run, tmp_path):
    (tmp_path / "docker.service.d").mkdir()

    first = run(files=dropins(tmp_path, "containerd", "docker"))
    again = run(files=dropins(tmp_path, "containerd", "docker"))

    assert tree(tmp_path) == {
        "containerd.service.d": ("0o755", None),
        "containerd.service.d/20-memlock.conf": ("0o644", DROPIN.encode()),
        "docker.service.d": ("0o755", None),
        "docker.service.d/20-memlock.conf": ("0o644", DROPIN.encode()),
    }
    assert first["changed"] is True
    assert first["actions"] == {
        f"{tmp_path}/containerd.service.d": "created directory",
        f"{tmp_path}/containerd.service.d/20-memlock.conf": "created",
        f"{tmp_path}/docker.service.d/20-memlock.conf": "created",
    }
    assert again["changed"] is False and again["changed_paths"] == []


def test_rewrites_a_changed_file_and_restores_its_mode(run, tmp_path):
    run(files=dropins(tmp_path, "containerd", "docker"))
    edited = tmp_path / "containerd.service.d/20-memlock.conf"
    edited.write_text("[Service]\nLimitMEMLOCK=64\n")
    chmodded = tmp_path / "docker.service.d/20-memlock.conf"
    chmodded.chmod(0o600)
    (tmp_path / "docker.service.d").chmod(0o700)

    result = run(files=dropins(tmp_path, "containerd", "docker"))

    assert edited.read_text() == DROPIN and stat.S_IMODE(edited.stat().st_mode) == 0o644
    assert stat.S_IMODE(chmodded.stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "docker.service.d").stat().st_mode) == 0o755
    assert result["actions"] == {
        str(edited): "written",
        f"{tmp_path}/docker.service.d": "directory mode set",
        str(chmodded): "attributes set",
    }
    assert not [p for p in tmp_path.rglob(".nodeforge.*")], "a temporary file was left behind"


def test_removes_absent_entries_and_what_prune_matches_beyond_the_list(run, tmp_path):
    run(files=dropins(tmp_path, "containerd", "docker", "crio"))
    other = tmp_path / "crio.service.d/10-other.conf"
    other.write_text("kept: not matched by prune\n")

    result = run(
        paths=dropin_paths(tmp_path, "containerd"),
        content=DROPIN,
        absent=[f"{tmp_path}/never-there.conf"],
        prune=[f"{tmp_path}/*.service.d/20-memlock.conf"],
    )

    assert sorted(tree(tmp_path)) == [
        "containerd.service.d",
        "containerd.service.d/20-memlock.conf",
        "crio.service.d",
        "crio.service.d/10-other.conf",
        "docker.service.d",
    ]
    assert result["actions"] == {
        f"{tmp_path}/crio.service.d/20-memlock.conf": "removed",
        f"{tmp_path}/docker.service.d/20-memlock.conf": "removed",
    }


def test_check_mode_reports_the_same_actions_and_touches_nothing(run, tmp_path):
    run(files=dropins(tmp_path, "docker", "crio"))
    (tmp_path / "docker.service.d/20-memlock.conf").write_text("old\n")
    (tmp_path / "crio.service.d/20-memlock.conf").chmod(0o600)
    wanted = {
        "files": [*dropins(tmp_path, "containerd", "docker", "crio"), {"path": f"{tmp_path}/gone", "state": "absent"}],
        "prune": [f"{tmp_path}/*.service.d/*.conf"],
    }
    (tmp_path / "gone").write_text("x\n")
    (tmp_path / "docker.service.d/stale.conf").write_text("x\n")
    before = tree(tmp_path)

    checked = run(check=True, **wanted)
    assert tree(tmp_path) == before
    applied = run(**wanted)

    assert checked["actions"] == applied["actions"]
    assert checked["actions"] == {
        f"{tmp_path}/containerd.service.d": "created directory",
        f"{tmp_path}/containerd.service.d/20-memlock.conf": "created",
        f"{tmp_path}/docker.service.d/20-memlock.conf": "written",
        f"{tmp_path}/crio.service.d/20-memlock.conf": "attributes set",
        f"{tmp_path}/gone": "removed",
        f"{tmp_path}/docker.service.d/stale.conf": "removed",
    }


def test_diff_mode_shows_each_file_before_and_after(run, tmp_path):
    (tmp_path / "a.conf").write_text("old\n")
    (tmp_path / "b.conf").write_text("going\n")

    result = run(
        diff=True,
        files=[{"path": f"{tmp_path}/a.conf", "content": "new\n"}, {"path": f"{tmp_path}/b.conf", "state": "absent"}],
    )

    assert result["diff"] == [
        {
            "before_header": f"{tmp_path}/a.conf",
            "after_header": f"{tmp_path}/a.conf",
            "before": "old\n",
            "after": "new\n",
        },
        {"before_header": f"{tmp_path}/b.conf", "after_header": f"{tmp_path}/b.conf", "before": "going\n", "after": ""},
    ]


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"path": "relative.conf", "content": "x"}, "relative.conf: expected an absolute path"),
        ({"path": "{tmp}/a.conf", "content": "x", "mode": "rw-r--r--"}, "is not an octal mode like 0644"),
        ({"path": "{tmp}/a.conf"}, "{tmp}/a.conf: state=present needs a content"),
    ],
)
def test_bad_entries_fail_before_anything_is_written(run, tmp_path, entry, message):
    entry = {key: value.replace("{tmp}", str(tmp_path)) for key, value in entry.items()}
    first = {"path": f"{tmp_path}/first.conf", "content": "would be written first\n"}

    result = run(files=[first, entry])

    assert result["failed"] is True and message.replace("{tmp}", str(tmp_path)) in result["msg"]
    assert list(tmp_path.iterdir()) == []


def test_paths_need_the_shared_content(run, tmp_path):
    result = run(files=[{"path": f"{tmp_path}/first.conf", "content": "x\n"}], paths=dropin_paths(tmp_path, "docker"))

    assert (
        result["failed"] is True and "docker.service.d/20-memlock.conf: state=present needs a content" in result["msg"]
    )
    assert list(tmp_path.iterdir()) == []


def test_refuses_to_write_over_a_directory_or_into_a_missing_tree(run, tmp_path):
    (tmp_path / "taken.conf").mkdir()
    over = run(files=[{"path": f"{tmp_path}/taken.conf", "content": "x"}])
    deep = run(files=[{"path": f"{tmp_path}/no/such/dir/a.conf", "content": "x"}])

    assert over["failed"] is True and "is a link or a directory" in over["msg"]
    assert deep["failed"] is True and f"the directory above {tmp_path}/no/such/dir does not exist" in deep["msg"]
    assert sorted(os.listdir(tmp_path)) == ["taken.conf"]


def test_parents_creates_every_missing_level_in_order_and_check_mode_only_reports_them(run, tmp_path):
    entry = {"path": f"{tmp_path}/etc/containerd/conf.d/99-nvidia.toml", "content": "version = 2\n"}

    checked = run(files=[entry], parents=True, directory_mode="0750", check=True)
    assert list(tmp_path.iterdir()) == []
    first = run(files=[entry], parents=True, directory_mode="0750")
    again = run(files=[entry], parents=True, directory_mode="0750")

    assert tree(tmp_path) == {
        "etc": ("0o750", None),
        "etc/containerd": ("0o750", None),
        "etc/containerd/conf.d": ("0o750", None),
        "etc/containerd/conf.d/99-nvidia.toml": ("0o644", b"version = 2\n"),
    }
    assert list(first["actions"].items()) == [
        (f"{tmp_path}/etc", "created directory"),
        (f"{tmp_path}/etc/containerd", "created directory"),
        (f"{tmp_path}/etc/containerd/conf.d", "created directory"),
        (entry["path"], "created"),
    ]
    assert checked["changed"] is True and checked["actions"] == first["actions"]
    assert again["changed"] is False


def test_documented_options_are_the_accepted_ones():
    # ansible-doc and the argument checks read the same options, with the same types, defaults and choices.
    assert documented_spec(MODULE) == MODULE.ARGUMENT_SPEC


def test_through_ansible_with_check_and_diff(tmp_path):
    # The collection's module as a play finds it: FQCN through the collection loader, check mode and diff mode.
    path = tmp_path / "containerd.service.d/20-memlock.conf"
    args = json.dumps({"files": [{"path": str(path), "content": DROPIN}]})
    env = {
        **os.environ,
        "ANSIBLE_COLLECTIONS_PATH": str(REPO / "collections"),
        "ANSIBLE_STDOUT_CALLBACK": "json",
        "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
    }
    env.pop("ANSIBLE_STRATEGY", None)
    command = [str(REPO / ".venv/bin/ansible"), "localhost", "-c", "local", "-m", "nodeforge.gpu.managed_files"]

    checked = subprocess.run([*command, "-a", args, "--check", "--diff"], capture_output=True, text=True, env=env)
    assert not path.parent.exists(), checked.stdout + checked.stderr
    applied = subprocess.run([*command, "-a", args], capture_output=True, text=True, env=env)

    assert path.read_text() == DROPIN, applied.stdout + applied.stderr
    result = json.loads(checked.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    assert result["changed"] is True and result["diff"][0]["after"] == DROPIN
    assert json.loads(applied.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]["changed_paths"] == [
        str(path.parent),
        str(path),
    ]
