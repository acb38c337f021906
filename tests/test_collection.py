"""The nodeforge.gpu collection: `ansible-galaxy collection build` on its directory gives the whole artifact, which
installs on its own and runs its playbooks by FQCN; its metadata declares what it is proven with."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import yaml
from ansible.galaxy.dependency_resolution.versioning import meets_requirements
from packaging.specifiers import SpecifierSet

from nodeforge import __version__
from nodeforge.collection import model
from tests.conftest import REPO

COLLECTION = REPO / "collections" / "ansible_collections" / "nodeforge" / "gpu"
BIN = Path(sys.executable).parent
# The `ansible` package major of the main test leg (what pip installs on Python 3.11): collections/requirements.yml
# pins the collections it carries, and execution-environment.yml its ansible-core. The matrix's other legs
# (tools/matrix.sh) carry other versions, within galaxy.yml's ranges.
MAIN_LEG_ANSIBLE = 12

# What the `ansible` packages at both ends of the supported range carry of the collections nodeforge.gpu depends on
# (ansible-community/ansible-build-data: 9/ansible-9.0.0.deps, 14/ansible-14.5.0.deps). galaxy.yml's ranges must
# admit both, so that an AWX or a controller on any of them can install the collection next to what it has.
SHIPPED = {
    "ansible 9.0.0 (ansible-core 2.16)": {
        "ansible.posix": "1.5.4",
        "community.general": "8.0.2",
        "containers.podman": "1.11.0",
        "kubernetes.core": "2.4.0",
    },
    "ansible 14.5.0 (ansible-core 2.21)": {
        "ansible.posix": "2.2.2",
        "community.general": "13.5.0",
        "containers.podman": "1.21.0",
        "kubernetes.core": "6.6.0",
    },
}


def galaxy_yml() -> dict:
    return yaml.safe_load((COLLECTION / "galaxy.yml").read_text())


def pins() -> dict[str, str]:
    requirements = yaml.safe_load((REPO / "collections" / "requirements.yml").read_text())
    return {c["name"]: c["version"] for c in requirements["collections"]}


def build(collection: Path, output: Path) -> tuple[Path, str]:
    """`ansible-galaxy collection build` on `collection`: the artifact and the command's output."""
    run = subprocess.run(
        [str(BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(output), str(collection)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    [artifact] = [line.rsplit(" ", 1)[-1] for line in run.stdout.splitlines() if "Created collection" in line]
    return Path(artifact), run.stdout + run.stderr


# What never belongs in the artifact (galaxy.yml's build_ignore, and what ansible-galaxy always skips).
CACHE_DIRS = {"__pycache__", ".pytest_cache", ".ruff_cache", ".mypy_cache", ".ansible", ".cache", "molecule", ".git"}


def is_junk(path: str) -> bool:
    parts = path.split("/")
    return bool(CACHE_DIRS & set(parts)) or parts[-1] == ".DS_Store" or path.endswith((".pyc", ".swp", "~", ".tar.gz"))


def members(artifact: Path) -> set[str]:
    with tarfile.open(artifact) as tar:
        return {m.name for m in tar.getmembers() if m.isfile()}


def test_collection_metadata_matches_the_package():
    galaxy = galaxy_yml()
    assert (galaxy["namespace"], galaxy["name"], galaxy["version"]) == ("nodeforge", "gpu", __version__)
    # ansible-core 2.16 (`ansible` 9) and newer, with no upper bound: the CLI bounds the core it installs itself.
    runtime = yaml.safe_load((COLLECTION / "meta" / "runtime.yml").read_text())
    requires = SpecifierSet(runtime["requires_ansible"])
    assert runtime["requires_ansible"] == ">=2.16.0"
    for supported in ("2.16.0", "2.19.14", "2.21.0", importlib.metadata.version("ansible-core")):
        assert requires.contains(supported), supported
    assert not requires.contains("2.15.13")
    # The roles say the same (galaxy_info, shown by ansible-galaxy and Galaxy).
    for meta in sorted((COLLECTION / "roles").glob("*/meta/main.yml")):
        assert yaml.safe_load(meta.read_text())["galaxy_info"]["min_ansible_version"] == "2.16", meta
    assert set(pins()) == set(galaxy["dependencies"])


@pytest.mark.parametrize("release", sorted(SHIPPED))
def test_dependency_ranges_admit_the_ansible_packages_collections(release):
    ranges = galaxy_yml()["dependencies"]
    for name, version in SHIPPED[release].items():
        assert meets_requirements(version, ranges[name]), (release, name, version, ranges[name])


def installed_collections() -> dict[str, str]:
    """The collections this virtualenv's `ansible` package carries, by name: their versions."""
    listed = subprocess.run(
        [str(BIN / "ansible-galaxy"), "collection", "list", "--format", "yaml"],
        capture_output=True,
        text=True,
        check=True,
        # Only what is installed: not the repository's collections/ a caller's environment may add.
        env={k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_COLLECTIONS_PATH")},
        cwd=REPO.parent,
    ).stdout
    venv = Path(sys.prefix).resolve()
    return {
        name: info["version"]
        for path, collections in yaml.safe_load(listed).items()
        if Path(path).resolve().is_relative_to(venv)
        for name, info in collections.items()
    }


def test_installed_collections_are_within_the_ranges():
    """On every leg of the matrix (`ansible` 9, 12, 14), what its `ansible` package carries is what galaxy.yml admits
    (ansible-galaxy's own range check), and so are the pins."""
    installed = installed_collections()
    for name, wanted in galaxy_yml()["dependencies"].items():
        assert name in installed, name
        assert meets_requirements(installed[name], wanted), (name, installed[name], wanted)
        assert meets_requirements(pins()[name], wanted), (name, pins()[name], wanted)


def test_pinned_collections_are_the_ones_installed():
    """collections/requirements.yml pins what the main test leg runs: the copies of its `ansible` package."""
    ansible = importlib.metadata.version("ansible")
    if int(ansible.split(".")[0]) != MAIN_LEG_ANSIBLE:
        pytest.skip(f"ansible {ansible}: the pins are those of the main leg's ansible {MAIN_LEG_ANSIBLE}")
    installed = installed_collections()
    for name, pinned in pins().items():
        assert installed.get(name) == pinned, (name, installed.get(name), pinned)


def test_model_reads_the_collection_s_roles():
    # The roles and playbooks live in the collection; the top-level roles/ and playbooks/ link to them.
    assert not (COLLECTION / "roles").is_symlink() and not (COLLECTION / "playbooks").is_symlink()
    assert (REPO / "roles").resolve() == COLLECTION / "roles"
    assert (REPO / "playbooks").resolve() == COLLECTION / "playbooks"
    assert Path(model.roles_dir()).resolve() == COLLECTION / "roles"
    assert "dgx-1" in model.profiles() and model.manifest()["nvidia_driver"]["branch"]


@pytest.mark.slow
def test_build_ignore_keeps_caches_out(tmp_path):
    """What pytest, ruff, ansible-lint, molecule and editors leave in a checkout stays out of the artifact."""
    copy = tmp_path / "ansible_collections" / "nodeforge" / "gpu"
    shutil.copytree(COLLECTION, copy)
    junk = [
        ".pytest_cache/v/cache/nodeids",
        "roles/ofed/.pytest_cache/README.md",
        "plugins/module_utils/__pycache__/model.cpython-311.pyc",
        "plugins/filter/parsers.pyc",
        ".ruff_cache/0.6.0/123",
        "plugins/.mypy_cache/3.11/model.json",
        ".ansible/collections/ansible_collections/nodeforge/gpu/galaxy.yml",
        "roles/nvidia_driver/.ansible/roles/x.yml",
        ".cache/molecule/nodeforge/default/inventory/ansible_inventory.yml",
        "roles/ofed/molecule/default/molecule.yml",
        "roles/ofed/tasks/.main.yml.swp",
        "roles/ofed/tasks/main.yml~",
        "playbooks/site.retry",
        ".DS_Store",
        "nodeforge-gpu-0.0.9.tar.gz",
        "roles/nodeforge/files/old-build.tar.gz",
    ]
    for path in junk:
        (copy / path).parent.mkdir(parents=True, exist_ok=True)
        (copy / path).write_text("junk\n")
    artifact, _ = build(copy, tmp_path / "dist")
    names = members(artifact)
    assert not names & set(junk), sorted(names & set(junk))
    assert not [n for n in names if is_junk(n) or n.endswith(".retry")]
    assert {"roles/ofed/tasks/main.yml", "plugins/module_utils/model.py", "meta/runtime.yml"} <= names


@pytest.mark.slow
def test_artifact_builds_installs_and_runs_by_fqcn(tmp_path):
    """The standard build on the collection's own directory: every role, playbook and plugin in it, no link skipped."""
    artifact, output = build(COLLECTION, tmp_path / "dist")
    assert artifact.name == f"nodeforge-gpu-{__version__}.tar.gz"
    assert "Skipping" not in output, output  # a link leaving the collection would be skipped with a warning
    names = members(artifact)
    roles = sorted(p.name for p in (COLLECTION / "roles").iterdir() if p.is_dir())
    assert len(roles) >= 17 and {"nodeforge", "nvidia_driver", "ofed", "upgrade", "k8s_cluster"} <= set(roles)
    for role in roles:
        assert f"roles/{role}/tasks/main.yml" in names, role
        assert f"roles/{role}/meta/argument_specs.yml" in names, role
    playbooks = {f"playbooks/{p.name}" for p in (COLLECTION / "playbooks").glob("*.yml")}
    assert {"playbooks/site.yml", "playbooks/validate_inventory.yml", "playbooks/upgrade.yml"} <= playbooks <= names
    # Every file of the checkout's collection is in it, but for what ansible-galaxy and build_ignore leave out.
    source = {str(p.relative_to(COLLECTION)) for p in COLLECTION.rglob("*") if p.is_file()}
    missing = {p for p in source if not is_junk(p)} - {"galaxy.yml"} - names
    assert not missing, sorted(missing)
    metadata = {"MANIFEST.json", "FILES.json", "meta/runtime.yml", "meta/execution-environment.yml", "requirements.txt"}
    assert metadata <= names
    assert "roles/nodeforge/files/manifest.yml" in names and "plugins/action/validate_inventory.py" in names
    assert not [n for n in names if is_junk(n)]

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
    # The lab's own content ships (its node image, the playbook that serves a toolkit mirror); no test fixture does:
    # nothing from molecule/ (the fixture repository builder, its specs, stand-ins), no tests.
    for path in ("lab/base-image/build.sh", "lab/serve_mirror.yml", "inventories/lab/hosts.yml"):
        assert "nodeforge/content/" + path in names, path
    assert not [n for n in names if "fixture" in n or "molecule" in n or "/tests/" in n or "standin" in n]


def test_every_filter_plugin_documents_itself_in_yaml_that_parses():
    """ansible-doc and ansible-lint read each filter file's DOCUMENTATION as YAML: one that does not parse (a ": "
    inside a description) is an error there, and the filter has no documentation."""
    import importlib

    files = sorted((REPO / "collections/ansible_collections/nodeforge/gpu/plugins/filter").glob("*.py"))
    documented = 0
    for path in files:
        module = importlib.import_module(f"ansible_collections.nodeforge.gpu.plugins.filter.{path.stem}")
        if hasattr(module, "DOCUMENTATION"):
            doc = yaml.safe_load(module.DOCUMENTATION)
            assert doc["name"] in module.FilterModule().filters(), path.name
            documented += 1
    assert documented >= 8


# What ansible-core does in each worker process that templates a nodeforge.gpu filter: it loads every filter file of
# the collection (plugins/plugin_utils/filter_errors.py says why that matters), then calls the one asked for.
FIRST_FILTER_CALL = """
import json, sys
from ansible.plugins.loader import filter_loader, init_plugin_loader
init_plugin_loader([sys.argv[1]])
def ours():
    return sorted(m.rsplit(".", 1)[1] for m in sys.modules if m.startswith(sys.argv[2] + ".") or m == "jsonschema")
madison = filter_loader.get("nodeforge.gpu.madison")
loaded = ours()
madison.j2_function("nvidia-driver | 1.0 | https://example.invalid bookworm/main amd64 Packages")
print(json.dumps([loaded, ours()]))
"""


def test_loading_the_filter_files_imports_no_module_utils_until_a_filter_runs():
    """A node task that templates one filter loads every filter file in its worker: none of them imports its
    module_utils (the cluster layer's jsonschema among them) before one of its filters runs; then only that one."""
    package = "ansible_collections.nodeforge.gpu.plugins.module_utils"
    run = subprocess.run(
        [sys.executable, "-c", FIRST_FILTER_CALL, str(REPO / "collections"), package],
        capture_output=True,
        text=True,
        check=True,
    )
    loaded, after_call = json.loads(run.stdout)
    assert loaded == [], loaded
    assert after_call == ["parsers"]


def test_every_action_plugin_documents_itself_in_yaml_that_parses():
    """The same for the action plugins: ansible-lint reads their DOCUMENTATION (a "{a: b}" inside a description broke
    k8s_verify's once); its module name is the file's."""
    import ast

    files = sorted((REPO / "collections/ansible_collections/nodeforge/gpu/plugins/action").glob("*.py"))
    for path in files:
        [doc] = [
            node.value.value
            for node in ast.parse(path.read_text()).body
            if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "DOCUMENTATION"
        ]
        parsed = yaml.safe_load(doc)
        assert parsed["module"] == path.stem and parsed["short_description"], path.name
    assert len(files) >= 7


def test_every_nodeforge_environment_variable_the_code_reads_is_documented():
    """docs/cli-reference.md's table (docgen.ENVIRONMENT) names each NODEFORGE_* variable src/ reads."""
    import re

    from nodeforge import docgen

    read = set()
    for path in (REPO / "src" / "nodeforge").rglob("*.py"):
        read |= set(re.findall(r"environ(?:\.get\(|\[)\"(NODEFORGE_\w+)\"", path.read_text()))
    documented = {name for names in docgen.ENVIRONMENT for name in names.split(", ")}
    assert read >= {"NODEFORGE_STATE_DIR", "NODEFORGE_TRACEBACK"}
    assert read <= documented, read - documented
