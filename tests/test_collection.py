"""The nodeforge.gpu collection: its artifact builds, installs on its own and runs its playbooks by FQCN."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import yaml

from nodeforge import __version__
from nodeforge.collection import model
from tests.conftest import REPO

COLLECTION = REPO / "collections" / "ansible_collections" / "nodeforge" / "gpu"
BIN = Path(sys.executable).parent


def test_collection_metadata_matches_the_package():
    galaxy = yaml.safe_load((COLLECTION / "galaxy.yml").read_text())
    assert (galaxy["namespace"], galaxy["name"], galaxy["version"]) == ("nodeforge", "gpu", __version__)
    runtime = yaml.safe_load((COLLECTION / "meta" / "runtime.yml").read_text())
    assert runtime["requires_ansible"].startswith(">=2.18")
    pinned = {
        c["name"]: c["version"]
        for c in yaml.safe_load((REPO / "collections" / "requirements.yml").read_text())["collections"]
    }
    assert set(pinned) == set(galaxy["dependencies"])


def test_pinned_collections_are_the_ones_installed():
    """collections/requirements.yml pins what the roles are tested with: the `ansible` package's copies here."""
    pinned = yaml.safe_load((REPO / "collections" / "requirements.yml").read_text())["collections"]
    listed = subprocess.run(
        [str(BIN / "ansible-galaxy"), "collection", "list", "--format", "yaml"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    installed = {name: info["version"] for path in yaml.safe_load(listed).values() for name, info in path.items()}
    for collection in pinned:
        assert installed.get(collection["name"]) == collection["version"], collection


def test_model_reads_the_collection_s_roles():
    # The collection's roles/ is the repository's roles/: one copy of the data.
    assert Path(model.roles_dir()).resolve() == (REPO / "roles").resolve()
    assert "dgx-1" in model.profiles() and model.manifest()["nvidia_driver"]["branch"]


@pytest.mark.slow
def test_artifact_builds_installs_and_runs_by_fqcn(tmp_path):
    build = subprocess.run(
        [sys.executable, str(REPO / "tools" / "build_collection.py"), "--output-path", str(tmp_path / "dist")],
        capture_output=True,
        text=True,
        check=True,
    )
    artifact = Path(build.stdout.strip().splitlines()[-1])
    assert artifact.name == f"nodeforge-gpu-{__version__}.tar.gz"
    with tarfile.open(artifact) as tar:
        names = set(tar.getnames())
    for role in ("nodeforge", "preflight", "nvidia_driver", "ofed", "gpudirect_rdma", "selinux_modules"):
        assert f"roles/{role}/tasks/main.yml" in names, role
        assert f"roles/{role}/meta/argument_specs.yml" in names, role
    assert {"playbooks/site.yml", "playbooks/validate_inventory.yml", "plugins/action/validate_inventory.py"} <= names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]

    installed = tmp_path / "collections"
    subprocess.run(
        [str(BIN / "ansible-galaxy"), "collection", "install", "--offline", "-p", str(installed), str(artifact)],
        capture_output=True,
        text=True,
        check=True,
    )
    root = installed / "ansible_collections" / "nodeforge" / "gpu"
    assert (root / "roles" / "nvidia_driver" / "tasks" / "main.yml").is_file()
    assert not (root / "roles").is_symlink()
    # Only the installed copy and the `ansible` package's collections: not the repository's.
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(installed)}
    for playbook in ("site", "preflight", "validate_inventory"):
        run = subprocess.run(
            [str(BIN / "ansible-playbook"), "--syntax-check", "-i", "localhost,", f"nodeforge.gpu.{playbook}"],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
        )
        assert run.returncode == 0, run.stdout + run.stderr
        assert str(root / "playbooks" / f"{playbook}.yml") in run.stdout
    # The installed validation play refuses a bad inventory on its own.
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n  children:\n    gpu_nodes:\n      hosts:\n        n1:\n          nodeforge_profile: dgx1\n"
    )
    run = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(inventory), "nodeforge.gpu.site"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert run.returncode == 2, run.stdout + run.stderr
    assert "nodeforge_profile: found unknown profile 'dgx1'" in run.stdout
    assert "Provision GPU nodes" not in run.stdout


@pytest.mark.slow
def test_wheel_ships_the_collection(tmp_path):
    """The CLI's wheel carries nodeforge.gpu (links followed): roles, playbooks and plugins, as real files."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(REPO)],
        check=True,
        capture_output=True,
    )
    [wheel] = tmp_path.glob("nodeforge-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    root = "nodeforge/content/collections/ansible_collections/nodeforge/gpu/"
    for path in (
        "galaxy.yml",
        "playbooks/site.yml",
        "roles/nvidia_driver/tasks/main.yml",
        "roles/nodeforge/files/manifest.yml",
        "plugins/module_utils/rules.py",
        "plugins/action/validate_inventory.py",
    ):
        assert root + path in names, path
    assert not [n for n in names if n.startswith(("nodeforge/content/roles/", "nodeforge/content/playbooks/"))]
    # The strategy every run names (ANSIBLE_STRATEGY=nodeforge_linear): without it an installed nodeforge runs nothing.
    assert "nodeforge/strategy/nodeforge_linear.py" in names
    # The lab's own content ships (its node image, the playbook that serves a toolkit mirror); no test fixture does:
    # nothing from molecule/ (the fixture repository builder, its specs, stand-ins), no tests.
    for path in ("lab/base-image/build.sh", "lab/serve_toolkit_mirror.yml", "inventories/lab/hosts.yml"):
        assert "nodeforge/content/" + path in names, path
    assert not [n for n in names if "fixture" in n or "molecule" in n or "/tests/" in n or "standin" in n]
