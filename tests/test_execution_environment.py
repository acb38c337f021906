"""The execution environment for AWX (execution-environment.yml): the build context `ansible-builder create` makes
of it names the site's base image, installs the nodeforge.gpu artifact and the pinned collections, and gives the
image the Python packages the collection's plugins import. No container runtime and no network: the context's own
galaxy step and dependency introspection are run here on this machine."""

from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tarfile
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from tests.conftest import REPO
from tests.test_collection import MAIN_LEG_ANSIBLE

COLLECTION = REPO / "collections" / "ansible_collections" / "nodeforge" / "gpu"
EE = REPO / "execution-environment.yml"
BIN = Path(sys.executable).parent
# Where ansible-builder installs collections in the image (its galaxy stage; the final stage copies /usr/share/ansible).
IMAGE_COLLECTIONS = "/usr/share/ansible/collections"

pytestmark = pytest.mark.slow


def definition() -> dict:
    return yaml.safe_load(EE.read_text())


def version() -> str:
    return yaml.safe_load((COLLECTION / "galaxy.yml").read_text())["version"]


def stages(containerfile: str) -> dict[str, list[str]]:
    """The Containerfile's lines per build stage (`FROM ... AS name`)."""
    result: dict[str, list[str]] = {}
    current = ""
    for line in containerfile.splitlines():
        if match := re.match(r"FROM \S+ AS (\w+)$", line):
            current = match[1]
        result.setdefault(current, []).append(line)
    return result


def plugin_imports() -> dict[str, set[str]]:
    """The top-level modules the collection's plugins import that neither Python nor Ansible provides."""
    found: dict[str, set[str]] = {}
    for path in (COLLECTION / "plugins").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in ("__future__", "ansible", "ansible_collections"):
                    found.setdefault(top, set()).add(str(path.relative_to(COLLECTION)))
    return found


def requirement_names(path: Path) -> dict[str, Requirement]:
    lines = [line.split("#", 1)[0].strip() for line in path.read_text().splitlines()]
    return {canonicalize_name(r.name): r for r in (Requirement(line) for line in lines if line)}


@pytest.fixture(scope="module")
def context(tmp_path_factory) -> Path:
    """`ansible-builder create` on the committed definition, in a view of the checkout whose dist/ holds the artifact
    just built by `ansible-galaxy collection build` (as docs/awx.md builds it; the checkout's dist/ is left alone)."""
    root = tmp_path_factory.mktemp("ee")
    view = root / "checkout"
    view.mkdir()
    for entry in REPO.iterdir():
        if entry.name not in ("dist", EE.name):
            (view / entry.name).symlink_to(entry)
    shutil.copy(EE, view / EE.name)
    subprocess.run(
        [str(BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(view / "dist"), str(COLLECTION)],
        capture_output=True,
        text=True,
        check=True,
    )
    out = root / "context"
    run = subprocess.run(
        [
            str(BIN / "ansible-builder"),
            "create",
            "--file",
            str(view / EE.name),
            "--context",
            str(out),
            "--output-filename",
            "Containerfile",
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=root,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    # ansible-builder only warns when an additional build file is missing.
    assert "No matches" not in run.stdout + run.stderr and "does not exist" not in run.stdout + run.stderr
    return out


def test_containerfile_starts_from_the_site_s_base_image(context):
    containerfile = (context / "Containerfile").read_text()
    name = definition()["images"]["base_image"]["name"]
    # The site's image: a placeholder under a reserved domain unless the site names its own (--build-arg).
    assert name.startswith("registry.example.invalid/")
    assert f'ARG EE_BASE_IMAGE="{name}"' in containerfile.splitlines()
    assert "FROM $EE_BASE_IMAGE AS base" in containerfile.splitlines()
    assert "quay.io/ansible/ansible-runner" not in containerfile  # ansible-builder's own default is not used
    # The interpreter ansible-core runs on in the image: Python 3.11 or newer, for the plugins' tomllib.
    [pycmd] = re.findall(r'^ARG PYCMD="(\S+)"$', containerfile, re.M)
    assert int(re.fullmatch(r"/usr/bin/python3\.(\d+)", pycmd)[1]) >= 11, pycmd
    assert f'ARG PYPKG="{Path(pycmd).name}"' in containerfile.splitlines()


def install_refs(context: Path) -> dict[str, SpecifierSet]:
    """The ansible-core and ansible-runner the base stage installs, by package name."""
    containerfile = (context / "Containerfile").read_text()
    assert "RUN $PYCMD -m pip install --no-cache-dir $ANSIBLE_INSTALL_REFS" in stages(containerfile)["base"]
    [refs] = re.findall(r'^ARG ANSIBLE_INSTALL_REFS="(.*)"$', containerfile, re.M)
    return {canonicalize_name(r.name): r.specifier for r in map(Requirement, refs.split())}


def test_ansible_core_is_one_the_collection_supports(context):
    wanted = install_refs(context)
    assert set(wanted) == {"ansible-core", "ansible-runner"}
    runtime = yaml.safe_load((COLLECTION / "meta" / "runtime.yml").read_text())
    lowest = re.search(r">=\s*([\d.]+)", str(wanted["ansible-core"]))[1]
    assert SpecifierSet(runtime["requires_ansible"]).contains(lowest)


def test_ansible_core_and_runner_are_the_main_leg_s(context):
    ansible = importlib.metadata.version("ansible")
    if int(ansible.split(".")[0]) != MAIN_LEG_ANSIBLE:
        pytest.skip(f"ansible {ansible}: the EE runs the main leg's (ansible {MAIN_LEG_ANSIBLE})")
    for package, specifier in install_refs(context).items():
        installed = importlib.metadata.version(package)
        assert specifier.contains(installed), (package, installed, str(specifier))


def test_galaxy_stage_installs_the_artifact_and_the_pinned_collections(context, tmp_path):
    containerfile = (context / "Containerfile").read_text()
    galaxy = stages(containerfile)["galaxy"]
    build = context / "_build"
    # The pins of collections/requirements.yml, installed first.
    assert yaml.safe_load((build / "requirements.yml").read_text()) == yaml.safe_load(
        (REPO / "collections" / "requirements.yml").read_text()
    )
    assert "COPY _build /build" in galaxy and "WORKDIR /build" in galaxy
    pinned = [i for i, line in enumerate(galaxy) if "collection install" in line and "-r requirements.yml" in line]
    [artifact_step] = [i for i, line in enumerate(galaxy) if "collection install" in line and ".tar.gz" in line]
    assert pinned and pinned[0] < artifact_step
    # The artifact: the one just built, in the context where the step (run in /build) looks for it.
    argv = shlex.split(galaxy[artifact_step].removeprefix("RUN "))
    [tarball] = [arg for arg in argv if arg.endswith(".tar.gz")]
    assert tarball == f"collections/nodeforge-gpu-{version()}.tar.gz"
    assert (build / tarball).is_file()
    with tarfile.open(build / tarball) as tar:
        names = set(tar.getnames())
    assert {"roles/nvidia_driver/tasks/main.yml", "playbooks/site.yml", "plugins/action/validate_inventory.py"} <= names
    assert argv[argv.index("--collections-path") + 1] == IMAGE_COLLECTIONS
    assert "--offline" in argv and "--no-deps" in argv
    shared = os.path.dirname(IMAGE_COLLECTIONS)
    assert f"COPY --from=galaxy {shared} {shared}" in stages(containerfile)["final"]

    # The step itself, with this machine's ansible-galaxy, into a stand-in for the image's collections path.
    image = tmp_path / "usr-share-ansible-collections"
    argv[argv.index("--collections-path") + 1] = str(image)
    run = subprocess.run([str(BIN / argv[0]), *argv[1:]], cwd=build, capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    installed = image / "ansible_collections" / "nodeforge" / "gpu"
    assert (installed / "roles" / "nodeforge" / "files" / "manifest.yml").is_file()
    assert (installed / "meta" / "execution-environment.yml").is_file()


def test_image_gets_the_python_packages_the_plugins_import(context, tmp_path):
    """The requirements the plugins' imports need, no fewer and no stale ones, reach the image: named in the EE and
    found by ansible-builder's introspection of the installed collection (as any EE built from the artifact)."""
    imports = plugin_imports()
    distributions = importlib.metadata.packages_distributions()
    needed = {canonicalize_name(dist) for module in imports for dist in distributions[module]}
    assert {"pyyaml", "jsonschema", "kubernetes-validate"} <= needed, imports
    declared = requirement_names(COLLECTION / "requirements.txt")
    assert set(declared) == needed, (sorted(declared), sorted(needed), imports)
    for name, requirement in declared.items():  # what the tests run with is what the image may get
        assert requirement.specifier.contains(importlib.metadata.version(name), prereleases=True), requirement
    build = context / "_build"
    assert requirement_names(build / "requirements.txt") == declared

    # The builder stage's introspection, with the context's own script, over the collections the image gets:
    # the artifact (installed from the context) and the pinned kubernetes.core (this virtualenv's copy of it).
    containerfile = (context / "Containerfile").read_text()
    [introspect] = [line for line in stages(containerfile)["builder"] if "introspect.py introspect" in line]
    assert "--user-pip=requirements.txt" in introspect and "--user-bindep=bindep.txt" in introspect
    with_ansible_core = {canonicalize_name(Requirement(r).name) for r in importlib.metadata.requires("ansible-core")}
    assert "pyyaml" in with_ansible_core
    collections = tmp_path / "collections"
    artifact = next((build / "collections").glob("nodeforge-gpu-*.tar.gz"))
    install = [str(BIN / "ansible-galaxy"), "collection", "install", "--offline", "--no-deps"]
    subprocess.run(
        [*install, "--collections-path", collections, artifact],
        capture_output=True,
        text=True,
        check=True,
    )
    kubernetes_core = Path(sysconfig.get_paths()["purelib"]) / "ansible_collections" / "kubernetes" / "core"
    assert json.loads((kubernetes_core / "MANIFEST.json").read_text())["collection_info"]["name"] == "core"
    (collections / "ansible_collections" / "kubernetes").mkdir()
    (collections / "ansible_collections" / "kubernetes" / "core").symlink_to(kubernetes_core)
    only_collections = tmp_path / "empty-user-requirements.txt"
    only_collections.write_text("")
    introspect_py = build / "scripts" / "introspect.py"
    for user in (only_collections, build / "requirements.txt"):
        written = tmp_path / f"pip-{user.stem}.txt"
        run = subprocess.run(
            [sys.executable, introspect_py, "introspect", collections, f"--user-pip={user}", f"--write-pip={written}"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert run.returncode == 0, run.stdout + run.stderr
        report = yaml.safe_load(run.stdout.split("---", 1)[1])
        assert any(line.startswith("kubernetes-validate") for line in report["python"]), report
        lines = [line.split("#", 1)[0].strip() for line in written.read_text().splitlines()]
        image = {canonicalize_name(Requirement(line).name) for line in lines if line}
        # The collection's own metadata brings its packages even without the EE's list (but those ansible-core
        # requires itself, which the builder leaves to it: PyYAML); kubernetes.core's brings the kubernetes client
        # its k8s modules import on the controller.
        assert (needed - with_ansible_core) | {"kubernetes"} <= image, (user.name, sorted(image))


def test_system_packages_give_the_image_an_ssh_client(context):
    bindep = (context / "_build" / "bindep.txt").read_text().splitlines()
    assert "openssh-clients [platform:rpm]" in bindep and "openssh-client [platform:dpkg]" in bindep
