"""nodeforge builds on ansible-core's public interfaces only: no module of src/ or of the collection imports a private
name of ansible-core (or ansible-runner), reads or sets a private attribute of an object it did not define, or
replaces anything in their modules. Checked on the source's syntax tree, over both trees, on every core of the
matrix (the rule's checker is tested on examples of each kind of breach first)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import REPO

TREES = [REPO / "src" / "nodeforge", REPO / "collections" / "ansible_collections" / "nodeforge" / "gpu" / "plugins"]
UPSTREAM = ("ansible", "ansible_runner")
# The one module allowed to read what ansible-core has no public interface for (each entry says why there).
EXCEPTIONS = (
    REPO / "collections" / "ansible_collections" / "nodeforge" / "gpu" / "plugins" / "module_utils" / "upstream.py"
)
OWN = ("nodeforge", "ansible_collections.nodeforge")


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _upstream(module: str) -> bool:
    return module.split(".")[0] in UPSTREAM and not module.startswith("ansible_collections")


class Breaches(ast.NodeVisitor):
    """Each breach as 'line: what'. Names bound to an upstream module or object are tracked per file."""

    def __init__(self) -> None:
        self.found: list[str] = []
        self.upstream: set[str] = set()  # names bound by imports from ansible-core / ansible-runner
        self.own: set[str] = set()  # names bound by imports of nodeforge's own modules

    def add(self, node: ast.AST, what: str) -> None:
        self.found.append(f"{node.lineno}: {what}")

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            bound = alias.asname or alias.name.split(".")[0]
            if _upstream(alias.name):
                if any(_private(part) for part in alias.name.split(".")):
                    self.add(node, f"import {alias.name}")
                self.upstream.add(bound)
            elif alias.name.startswith(OWN):
                self.own.add(bound)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        for alias in node.names:
            bound = alias.asname or alias.name
            if _upstream(module):
                if any(_private(part) for part in module.split(".")) or _private(alias.name):
                    self.add(node, f"from {module} import {alias.name}")
                self.upstream.add(bound)
            elif module.startswith(OWN) or node.level:
                self.own.add(bound)

    def _root(self, node: ast.AST) -> str | None:
        while isinstance(node, ast.Attribute):
            node = node.value
        return node.id if isinstance(node, ast.Name) else None

    def visit_Attribute(self, node: ast.Attribute) -> None:
        base = node.value
        mine = isinstance(base, ast.Name) and (base.id in ("self", "cls") or base.id in self.own)
        if _private(node.attr) and not mine:
            self.add(node, f"private attribute .{node.attr} of {ast.unparse(base)}")
        self.generic_visit(node)

    def _replaces(self, target: ast.AST) -> bool:
        return isinstance(target, ast.Attribute) and self._root(target) in self.upstream

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            if self._replaces(target):
                self.add(node, f"replaces {ast.unparse(target)}")
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if self._replaces(node.target):
            self.add(node, f"replaces {ast.unparse(node.target)}")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        name = ast.unparse(node.func)
        if name in ("setattr", "delattr") and node.args and self._root(node.args[0]) in self.upstream:
            self.add(node, f"{name}({ast.unparse(node.args[0])}, ...)")
        self.generic_visit(node)


def breaches(source: str) -> list[str]:
    visitor = Breaches()
    visitor.visit(ast.parse(source))
    return visitor.found


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from ansible.template import _AnsibleEnvironment", "from ansible.template import _AnsibleEnvironment"),
        ("from ansible._internal import x", "from ansible._internal import x"),
        ("import ansible._internal._templating", "import ansible._internal._templating"),
        ("def f(inventory):\n    return inventory._sources", "private attribute ._sources of inventory"),
        ("def f(vm, v):\n    vm._extra_vars = v", "private attribute ._extra_vars of vm"),
        ("import ansible.constants as C\nC.DEFAULT_FORKS = 3", "replaces C.DEFAULT_FORKS"),
        ("from ansible.module_utils import basic\nbasic.selectors = None", "replaces basic.selectors"),
        ("from ansible.template import Templar\nTemplar.template = None", "replaces Templar.template"),
        ("import ansible.plugins.loader as l\nsetattr(l, 'x', 1)", "setattr(l, ...)"),
    ],
)
def test_the_checker_finds_each_kind_of_breach(source, expected):
    assert [b.split(": ", 1)[1] for b in breaches(source)] == [expected]


@pytest.mark.parametrize(
    "source",
    [
        "from ansible.plugins.action import ActionBase\nclass A(ActionBase):\n    def run(self):\n"
        "        return self._task.args, self._loader, self._execute_module()",
        "from nodeforge import lab\nlab._podman('ps')",
        "from . import acceptance\nacceptance._last_line('x')",
        "from ansible.utils.vars import combine_vars\nx = combine_vars({}, {})",
        "class Own:\n    __slots__ = ()\n    def __repr__(self):\n        return type(self).__name__",
    ],
)
def test_the_checker_allows_public_use_and_nodeforge_s_own_names(source):
    assert breaches(source) == []


def _files() -> list[Path]:
    return sorted(path for tree in TREES for path in tree.rglob("*.py") if path != EXCEPTIONS)


def test_the_exceptions_module_holds_only_documented_functions():
    """Every function of the exceptions module says why no public interface serves."""
    tree = ast.parse(EXCEPTIONS.read_text())
    functions = [node for node in tree.body if isinstance(node, ast.FunctionDef)]
    assert functions and all("public" in (ast.get_docstring(f) or "") for f in functions)
    assert not [
        node
        for node in tree.body
        if isinstance(node, (ast.Import, ast.ImportFrom)) and node.names[0].name != "annotations"
    ]


def test_both_trees_are_read():
    names = {p.name for p in _files()}
    assert {"runner.py", "cli.py", "inventory_check.py", "validate_inventory.py", "managed_files.py"} <= names


@pytest.mark.parametrize("path", _files(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_private_ansible_names_attributes_or_replacements(path):
    assert breaches(path.read_text()) == [], f"{path.relative_to(REPO)} reaches into ansible-core"
