"""The controller-only install (docs/install.md): `pip install` of nodeforge's wheel into a fresh virtualenv of the
machine's python3, no `make setup`, no root. The wheel, built from this tree directly or as `python -m build` builds it
(from the sdist), carries every file the CLI reads; installed, the CLI and the collection run from the virtualenv alone,
outside the repository and without it on any path."""

from __future__ import annotations

import ast
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
import zlib
from pathlib import Path

import pathspec
import pytest
import yaml
from click.testing import CliRunner

from nodeforge import __version__
from nodeforge.cli import main
from nodeforge.collection import k8s_validate
from tests.conftest import REPO
from tests.test_k8s_objects import UPSTREAM, independent_problems
from tests.test_k8s_render import MPI_OPERATOR, control_overrides
from tests.test_k8s_render import upstream_url as upstream_url  # the loopback fixture

pytestmark = pytest.mark.slow

# What src/nodeforge/content links to, shipped as nodeforge/content/...: the collection, the sample inventories, the
# lab's files, containers.conf.
CONTENT = ("collections", "containers", "inventories", "lab")
PLUGINS = REPO / "collections" / "ansible_collections" / "nodeforge" / "gpu" / "plugins"
PROFILE = "dgx-1"


def system_python() -> str:
    """The machine's python3 on the default PATH (/bin:/usr/bin), never a virtualenv's: what an operator starts from."""
    python = shutil.which("python3", path=os.defpath)
    assert python, f"no python3 on {os.defpath}: the controller install needs Python 3.11 or newer there"
    version = subprocess.run(
        [python, "-c", "import sys; print(*sys.version_info[:2])"], capture_output=True, text=True, check=True
    ).stdout.split()
    assert tuple(map(int, version)) >= (3, 11), f"{python} is Python {'.'.join(version)}: nodeforge needs 3.11 or newer"
    return python


def run(argv: list, timeout: int = 600, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout, check=False, **kw)


def run_ok(argv: list, timeout: int = 600, **kw) -> subprocess.CompletedProcess:
    proc = run(argv, timeout, **kw)
    assert proc.returncode == 0, f"{' '.join(map(str, argv))}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def without_python_overrides() -> dict[str, str]:
    """This session's environment less what would point a virtualenv's Python elsewhere (PYTHONPATH, PYTHONHOME, a
    VIRTUAL_ENV); pip's own settings (index, cache) stay."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    """The wheel as `pip wheel .` builds it from the tree, and the sdist and the wheel as `python -m build` builds them
    (the wheel from the unpacked sdist), in a virtualenv of its own with `build` in it."""
    out = tmp_path_factory.mktemp("dist")
    run_ok([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", out / "tree", REPO])
    builder = out / "builder"
    env = without_python_overrides()
    run_ok([system_python(), "-m", "venv", builder], env=env)
    run_ok([builder / "bin" / "python", "-m", "pip", "install", "-q", "build"], env=env)
    run_ok([builder / "bin" / "python", "-m", "build", "-o", out / "build", REPO], env=env)
    [tree] = (out / "tree").glob("nodeforge-*.whl")
    [sdist] = (out / "build").glob("nodeforge-*.tar.gz")
    [wheel] = (out / "build").glob("nodeforge-*.whl")
    return {"tree": tree, "sdist": sdist, "wheel": wheel}


def entries(wheel: Path) -> dict[str, tuple[int, bool]]:
    """A wheel's files: their CRC-32 and whether they are executable."""
    with zipfile.ZipFile(wheel) as archive:
        return {i.filename: (i.CRC, bool(i.external_attr >> 16 & 0o100)) for i in archive.infolist() if not i.is_dir()}


def test_the_wheel_carries_every_content_file_whether_built_from_the_tree_or_the_sdist(built):
    tree = entries(built["tree"])
    # Both routes give the same files, byte for byte (an sdist keeps no symlink: pyproject.toml says how).
    assert entries(built["wheel"]) == tree
    # Every file of the four directories that git would keep (hatchling reads .gitignore too), unchanged, with its
    # executable bit (the lab's build scripts); nothing else under nodeforge/content/.
    ignored = pathspec.GitIgnoreSpec.from_lines((REPO / ".gitignore").read_text().splitlines())
    expected = {}
    for top in CONTENT:
        for path in sorted((REPO / top).rglob("*")):
            rel = path.relative_to(REPO).as_posix()
            if path.is_file() and "__pycache__" not in path.parts and not ignored.match_file(rel):
                expected[f"nodeforge/content/{rel}"] = (
                    zlib.crc32(path.read_bytes()),
                    bool(path.stat().st_mode & 0o100),
                )
    shipped = {name: v for name, v in tree.items() if name.startswith("nodeforge/content/")}
    shipped.pop("nodeforge/content/__init__.py")
    assert sorted(set(expected) - set(shipped)) == [], "missing from the wheel"
    assert sorted(set(shipped) - set(expected)) == [], "in the wheel, not in the tree"
    assert [name for name in expected if shipped[name] != expected[name]] == [], "other bytes or mode than the tree's"
    assert "nodeforge/content/collections/ansible_collections/nodeforge/gpu/roles/nodeforge/files/manifest.yml" in tree
    assert "nodeforge/content/containers/containers.conf" in tree
    # The CLI's own modules, and nothing outside the package and its metadata.
    modules = {f"nodeforge/{p.name}" for p in (REPO / "src" / "nodeforge").glob("*.py")}
    assert modules <= set(tree), sorted(modules - set(tree))
    assert {name.split("/")[0] for name in tree} == {"nodeforge", f"nodeforge-{__version__}.dist-info"}


def documentation(path: Path) -> dict:
    """A plugin file's DOCUMENTATION, read without importing it."""
    [value] = [
        node.value.value
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["DOCUMENTATION"]
    ]
    return yaml.safe_load(value)


def shipped_filters() -> set[str]:
    """Every filter the collection's filter plugins define, as the tree's collection loader finds them."""
    from nodeforge import collection

    assert collection.model
    names = set()
    for path in sorted((PLUGINS / "filter").glob("*.py")):
        module = importlib.import_module(f"ansible_collections.nodeforge.gpu.plugins.filter.{path.stem}")
        names |= {f"nodeforge.gpu.{name}" for name in module.FilterModule().filters()}
    return names


def test_a_fresh_venv_runs_the_cli_and_the_collection_outside_the_repository(built, tmp_path, upstream_url):
    venv = tmp_path / "venv"
    bindir = venv / "bin"
    run_ok([system_python(), "-m", "venv", venv], env=without_python_overrides())
    # The dependencies come from the package index (pip's cache kept: where it keeps them, a rerun downloads nothing).
    # --no-compile: byte-compiling the `ansible` package's thousands of modules took 70 s of a 100 s install on 2
    # busy cores; Python compiles what the CLI imports as it runs.
    run_ok(
        [bindir / "python", "-m", "pip", "install", "-q", "--no-compile", built["wheel"]],
        timeout=900,
        env=without_python_overrides(),
    )

    # The operator's shell: outside the repository, no Ansible or Python settings, the virtualenv not activated and
    # nothing of the repository on PATH; the render's download cache in the test's own directory.
    operator = tmp_path / "operator"
    operator.mkdir()
    assert not operator.resolve().is_relative_to(REPO)
    env = {k: v for k, v in without_python_overrides().items() if not k.startswith("ANSIBLE_")}
    path = [
        p for p in env.get("PATH", os.defpath).split(os.pathsep) if p and not Path(p).resolve().is_relative_to(REPO)
    ]
    env.update(PATH=os.pathsep.join(path), XDG_CACHE_HOME=str(tmp_path / "cache"), COLUMNS="500")

    def nodeforge(*args: str) -> subprocess.CompletedProcess:
        return run([bindir / "nodeforge", *args], cwd=operator, env=env)

    # Everything the CLI runs on comes from the virtualenv.
    where = json.loads(
        run_ok(
            [
                bindir / "python",
                "-c",
                "import ansible, ansible_runner, importlib.metadata as m, json, nodeforge\n"
                "from nodeforge import content\n"
                "print(json.dumps({'nodeforge': nodeforge.__file__, 'ansible': ansible.__file__,"
                " 'ansible_runner': ansible_runner.__file__, 'collection': str(content.collection_dir()),"
                " 'collections': str(content.collections_dir()), 'version': m.version('nodeforge')}))",
            ],
            cwd=operator,
            env=env,
        ).stdout
    )
    assert where.pop("version") == __version__
    for name, found in where.items():
        assert Path(found).resolve().is_relative_to(venv.resolve()), f"{name} from {found}"

    version = nodeforge("--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"nodeforge, version {__version__}"

    # init writes the inventory the tree's CLI writes: the same profiles and argument specs.
    init = nodeforge("init", "site", "--profile", PROFILE, "--nodes", "2")
    assert init.returncode == 0, init.stdout + init.stderr
    site = operator / "site"
    written = sorted(p.relative_to(site).as_posix() for p in site.rglob("*") if p.is_file())
    assert written == ["group_vars/all.yml", "group_vars/gpu_nodes.yml", "hosts.yml"]
    assert "wrote site/hosts.yml" in init.stdout
    reference = tmp_path / "reference"
    assert CliRunner().invoke(main, ["init", str(reference), "--profile", PROFILE, "--nodes", "2"]).exit_code == 0
    for name in written:
        assert (site / name).read_text() == (reference / name).read_text(), name

    # Filled in (the nodes' own addresses for init's documentation ones): valid, no placeholder left.
    hosts = site / "hosts.yml"
    filled, count = re.subn(r"ansible_host: 192\.0\.2\.1(\d)", r"ansible_host: 10.20.0.1\1", hosts.read_text())
    assert count == 2
    hosts.write_text(filled)
    check = nodeforge("check", "-i", "site", "--json")
    assert check.returncode == 0, check.stdout + check.stderr
    verdict = json.loads(check.stdout)
    assert (verdict["status"], verdict["problems"]) == ("valid", [])
    assert [w for w in verdict["warnings"] if w["variable"] == "ansible_host"] == []
    assert "ok: site is valid" in nodeforge("check", "-i", "site").stdout

    # Broken: open kernel modules on the DGX-1's Volta GPUs. Exit 1, the problem named with its file and hosts.
    shutil.copytree(site, operator / "broken")
    gpu_vars = operator / "broken" / "group_vars" / "gpu_nodes.yml"
    broken, count = re.subn(
        r"^# nvidia_driver_flavor: .*$", "nvidia_driver_flavor: open", gpu_vars.read_text(), flags=re.M
    )
    assert count == 1
    gpu_vars.write_text(broken)
    refused = nodeforge("check", "-i", "broken")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "1 problem(s) found; no node was touched" in refused.stdout
    assert (
        "broken/group_vars/gpu_nodes.yml: group gpu_nodes, for hosts gpu-node-01, gpu-node-02: nvidia_driver_flavor: "
        "found 'open' on profile dgx-1 (volta); expected proprietary" in refused.stdout
    )

    # A playbook run through ansible-runner (k8s.yml: the validation play, the roles, the collection's action plugins,
    # kubernetes-validate's schemas), the MPI Operator's pinned release from loopback.
    render = nodeforge("k8s", "render", "-i", "site", "-i", str(control_overrides(tmp_path, upstream_url)), "-o", "out")
    assert render.returncode == 0, render.stdout[-3000:] + render.stderr[-3000:]
    files = {p.name: yaml.safe_load(p.read_text()) for p in sorted((operator / "out").glob("*.yaml"))}
    kustomization = files.pop("kustomization.yaml")
    assert sorted(kustomization["resources"]) == sorted(files)
    objects = list(files.values())
    assert independent_problems(objects) == []
    assert sorted(o["metadata"]["name"] for o in objects if o["kind"] == "Node") == ["gpu-node-01", "gpu-node-02"]
    release = k8s_validate.load_documents((UPSTREAM / MPI_OPERATOR).read_text())
    assert [f"{o['kind']} {o['metadata']['name']}" for o in release if o not in objects] == []
    assert f"{len(files) + 1} files in {(operator / 'out').resolve()}" in render.stdout

    # Ansible's own tools from the virtualenv find the installed collection where the CLI points them.
    ansible_env = {**env, "ANSIBLE_COLLECTIONS_PATH": where["collections"]}
    listed = json.loads(
        run_ok(
            [bindir / "ansible-galaxy", "collection", "list", "nodeforge.gpu", "--format", "json"],
            cwd=operator,
            env=ansible_env,
        ).stdout
    )
    assert listed == {where["collections"] + "/ansible_collections": {"nodeforge.gpu": {"version": __version__}}}
    # Every playbook parses, the FQCN modules of its dependencies (the `ansible` package's collections) resolved.
    playbooks = sorted(f"nodeforge.gpu.{p.stem}" for p in (PLUGINS.parent / "playbooks").glob("*.yml"))
    assert sorted(f"nodeforge.gpu.{p.stem}" for p in Path(where["collection"], "playbooks").glob("*.yml")) == playbooks
    syntax = run_ok(
        [bindir / "ansible-playbook", "--syntax-check", "-i", "localhost,", *playbooks], cwd=operator, env=ansible_env
    )
    parsed = [line.removeprefix("playbook: ") for line in syntax.stdout.splitlines() if line.startswith("playbook: ")]
    assert parsed == [f"{where['collection']}/playbooks/{name.rpartition('.')[2]}.yml" for name in playbooks]
    modules = sorted(p.stem for p in (PLUGINS / "modules").glob("*.py") if p.stem != "__init__")
    docs = json.loads(
        run_ok(
            [bindir / "ansible-doc", "--json", "-t", "module", *[f"nodeforge.gpu.{m}" for m in modules]],
            cwd=operator,
            env=ansible_env,
        ).stdout
    )
    for name in modules:
        doc = docs[f"nodeforge.gpu.{name}"]["doc"]
        assert Path(doc["filename"]).resolve().is_relative_to(venv.resolve()), doc["filename"]
        assert doc["short_description"] == documentation(PLUGINS / "modules" / f"{name}.py")["short_description"]
    filters = json.loads(
        run_ok(
            [bindir / "ansible-doc", "--json", "-t", "filter", "-l", "nodeforge.gpu"], cwd=operator, env=ansible_env
        ).stdout
    )
    assert set(filters) == shipped_filters()
