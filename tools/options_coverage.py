"""Which public role options no test sets to a value other than its default.

python tools/options_coverage.py [--all]

The options: the top-level options of every entry point of every role's meta/argument_specs.yml, with their
defaults. An option counts as set by a test when one of these sets it to a value other than its default (a value
that is not a literal, such as a Jinja template or a Python expression, counts as non-default):

- tests/**/*.py, read with Python's ast: a dict literal's key (`{"name": value}`, an extravars or inventory dict),
  a keyword argument (`f(name=value)`), a subscript assignment (`x["name"] = value`), or, inside a string constant
  or an f-string's literal text, `name=value` (the `-e` form), `name: value` or `"name": value` (YAML or JSON
  text the test writes). Nothing inside an `assert` statement counts, nor docstrings; comments are not in the ast.
  tests/test_options_coverage.py, whose sources are samples of this rule, is left out.
  Known blind spot: a dict literal assigned outside an assert only to be compared later counts as setting.
- YAML under tests/playbooks and tests/data, the molecule scenarios (every *.yml under molecule/ but the verifiers,
  verify*.yml, and the fixture trees), and the sample inventories that tests/test_samples.py checks
  (inventories/*/ but the labs', which `nodeforge lab up` writes): a mapping key anywhere in the document.
- A CLI flag that sets the option (CLI_FLAGS below, each checked against src/nodeforge/*.py), given in a test's
  list, tuple or call arguments together with the command words it belongs to.

Options no test sets need a reason in tools/options_coverage.yml (option: why no test sets it, and where that is
documented or tested instead). Exit status 1 when an option has neither a test nor a reason, when a reason names an
option that does not exist or that a test sets (stale), or when a CLI_FLAGS entry no longer matches the source.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
ROLES = REPO / "collections" / "ansible_collections" / "nodeforge" / "gpu" / "roles"
REASONS = REPO / "tools" / "options_coverage.yml"
LAB_INVENTORIES = ("lab", "lab-vm")
# The tool's own tests: their sources are samples of the matching rule, not settings.
NOT_TESTS = ("tests/test_options_coverage.py",)


@dataclass(frozen=True)
class Flag:
    """A CLI flag (None: the command itself) that sets `option`; `words`: the command words it belongs to;
    `value`: the value a flag without an argument sets (None: the flag takes the next word as its value)."""

    source: str
    words: tuple[str, ...]
    flag: str | None
    option: str
    value: Any = None


# The CLI's own settings of role options (src/nodeforge/upgrade_cli.py _settings/_batch_vars, k8s.py, cli.py).
CLI_FLAGS = (
    Flag("upgrade_cli.py", ("upgrade",), "--component", "upgrade_component"),
    Flag("upgrade_cli.py", ("upgrade",), "--drain", "upgrade_drain"),
    Flag("upgrade_cli.py", ("upgrade",), "--resume", "upgrade_resume", True),
    Flag("upgrade_cli.py", ("upgrade",), "--allow-downgrade", "upgrade_allow_downgrade", True),
    Flag("upgrade_cli.py", ("upgrade",), "--batch", "upgrade_batch"),
    Flag("upgrade_cli.py", ("upgrade",), "--max-unavailable", "upgrade_max_unavailable"),
    Flag("upgrade_cli.py", ("upgrade",), None, "upgrade_plan_only", True),
    Flag("upgrade_cli.py", ("plan", "--upgrade"), None, "upgrade_plan_only", True),
    Flag("upgrade_cli.py", ("upgrade", "--yes"), None, "upgrade_stop_file", "(a path)"),
    Flag("k8s.py", ("k8s", "render"), "--output", "k8s_cluster_render_dir"),
    Flag("k8s.py", ("k8s", "render"), "-o", "k8s_cluster_render_dir"),
    Flag("k8s.py", ("k8s", "render"), "--include-secrets", "k8s_cluster_include_secrets", True),
    Flag("k8s.py", ("k8s",), "--kubeconfig", "k8s_cluster_kubeconfig"),
    Flag("k8s.py", ("k8s",), "--context", "k8s_cluster_context"),
    Flag("k8s.py", ("k8s", "apply"), None, "k8s_cluster_action", "apply"),
    Flag("k8s.py", ("k8s", "diff"), None, "k8s_cluster_action", "apply"),
    # tests/test_k8s_verify_replay.py runs `nodeforge k8s verify` through a helper whose argv starts with "verify".
    Flag("k8s.py", ("verify",), "--no-jobs", "k8s_cluster_verify_jobs", False),
    Flag("cli.py", ("validate",), "--perf", "validate_perf", True),
)


@dataclass
class Finding:
    option: str
    role: str
    default: Any
    set_in: list[str] = field(default_factory=list)


def options(roles: Path = ROLES) -> dict[str, Finding]:
    """Every role's public options (each entry point's top-level options) with their defaults."""
    found = {}
    for spec_file in sorted(roles.glob("*/meta/argument_specs.yml")):
        entry_points = (yaml.safe_load(spec_file.read_text()) or {}).get("argument_specs") or {}
        for entry in entry_points.values():
            for name, spec in ((entry or {}).get("options") or {}).items():
                found.setdefault(name, Finding(name, spec_file.parent.parent.name, (spec or {}).get("default")))
    return found


# --- values -----------------------------------------------------------------------------------------------------------

UNKNOWN = object()  # a value the tool cannot evaluate: a template, an expression


def is_default(value: Any, default: Any) -> bool:
    if value is UNKNOWN:
        return False
    if isinstance(value, str) and "{{" in value:
        return False
    if isinstance(default, bool) and isinstance(value, str):
        return value.strip().lower() in (("true", "yes", "on", "1") if default else ("false", "no", "off", "0"))
    if default is None:
        return value is None or value == ""
    if value == default:
        return True
    # `-e name=10` hands Ansible the string '10'; argument_specs convert it to the option's type.
    return not isinstance(value, dict | list) and str(value) == str(default)


def _scalar(text: str) -> Any:
    """A value as written after `name=` or `name:` in text (YAML's reading of it); UNKNOWN when cut off."""
    text = text.strip().rstrip(",")
    if not text:
        return UNKNOWN
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return UNKNOWN


# --- Python tests -----------------------------------------------------------------------------------------------------


PLACEHOLDER = "__options_coverage_placeholder__"  # an f-string's {...} in the text the tool reads


def _value(value: Any) -> Any:
    return UNKNOWN if isinstance(value, str) and PLACEHOLDER in value else value


def _text_settings(text: str, names: set[str], pattern: re.Pattern) -> Iterator[tuple[str, Any]]:
    """`name=value` anywhere in a string (the `-e` form); mapping keys of a string that is a YAML or JSON document
    (more than one line, or a flow mapping or list)."""
    for match in pattern.finditer(text):
        yield match.group(1), _value(_scalar(match.group(2))) if match.group(2) else ""
    stripped = text.strip()
    if "\n" in stripped or stripped[:1] in ("{", "["):
        for name, value in yaml_settings(text, names):
            yield name, _value(value)


def _literal(node: ast.AST) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return UNKNOWN


class _PythonSettings(ast.NodeVisitor):
    def __init__(self, names: set[str]):
        self.names = names
        alternatives = "|".join(re.escape(name) for name in sorted(names, key=len, reverse=True))
        self.pattern = re.compile(rf"(?<![\w.])({alternatives})=(?!=)(\S*)")
        self.found: list[tuple[str, Any, int]] = []

    def _text(self, text: str, line: int) -> None:
        for name, value in _text_settings(text, self.names, self.pattern):
            self.found.append((name, value, line))

    def visit_Assert(self, node: ast.Assert) -> None:  # what a test checks is not what it sets
        return

    def _body(self, body: list[ast.stmt]) -> None:
        for index, stmt in enumerate(body):
            if index == 0 and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                continue  # a docstring
            self.visit(stmt)

    def visit_Module(self, node: ast.Module) -> None:
        self._body(node.body)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        for decorator in node.decorator_list:
            self.visit(decorator)
        self.visit(node.args)
        self._body(node.body)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for decorator in node.decorator_list:
            self.visit(decorator)
        self._body(node.body)

    def visit_Dict(self, node: ast.Dict) -> None:
        for key, value in zip(node.keys, node.values, strict=True):
            if isinstance(key, ast.Constant) and key.value in self.names:
                self.found.append((key.value, _literal(value), node.lineno))
        self.generic_visit(node)

    def visit_keyword(self, node: ast.keyword) -> None:
        if node.arg in self.names:
            self.found.append((node.arg, _literal(node.value), node.value.lineno))
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            key = target.slice if isinstance(target, ast.Subscript) else None
            if isinstance(key, ast.Constant) and key.value in self.names:
                self.found.append((key.value, _literal(node.value), node.lineno))
        self.generic_visit(node)

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        text = ""
        for part in node.values:
            if isinstance(part, ast.Constant):
                text += str(part.value)
            else:
                text += PLACEHOLDER
                self.visit(part)
        self._text(text, node.lineno)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            self._text(node.value, node.lineno)


def python_settings(source: str, names: set[str]) -> list[tuple[str, Any, int]]:
    """(option, value, line) for each place the source sets an option by the rules in this module's docstring."""
    visitor = _PythonSettings(names)
    visitor.visit(ast.parse(source))
    return visitor.found


def _words(node: ast.AST) -> list[Any] | None:
    """A list, tuple or call's positional arguments as words: literal strings, else UNKNOWN."""
    if isinstance(node, ast.List | ast.Tuple):
        items = node.elts
    elif isinstance(node, ast.Call):
        items = node.args
    else:
        return None
    words = []
    for item in items:
        value = _literal(item)
        words.append(value if isinstance(value, str) else UNKNOWN)
    return words


def flag_settings(source: str, flags: Iterable[Flag] = CLI_FLAGS) -> list[tuple[str, Any, int]]:
    """(option, value, line) for each CLI_FLAGS flag in an argv-like sequence (a list, a tuple, a call's positional
    arguments) of a test file that runs the flag's command: some sequence of the file (not in an assert) starts with
    the command's first word and holds the others. A flag's value is the word after it."""
    tree = ast.parse(source)
    asserts = {id(n) for a in ast.walk(tree) if isinstance(a, ast.Assert) for n in ast.walk(a)}
    sequences = [(node.lineno, words) for node in ast.walk(tree) if id(node) not in asserts and (words := _words(node))]
    found = []
    for flag in flags:
        if not any(words[0] == flag.words[0] and set(flag.words) <= set(words) for _, words in sequences):
            continue
        for line, words in sequences:
            if flag.flag is None:
                if words[0] == flag.words[0] and set(flag.words) <= set(words):
                    found.append((flag.option, flag.value, line))
            elif flag.flag in words:
                at = words.index(flag.flag)
                value = flag.value if flag.value is not None else (words[at + 1] if at + 1 < len(words) else UNKNOWN)
                found.append((flag.option, value, line))
    return found


def flag_problems(flags: Iterable[Flag] = CLI_FLAGS, source_dir: Path = REPO / "src" / "nodeforge") -> list[str]:
    """CLI_FLAGS entries that no longer match the CLI: the flag or the option's name gone from the source file."""
    problems = []
    for flag in flags:
        text = (source_dir / flag.source).read_text()
        for needed in (flag.flag, flag.option):
            if needed and f'"{needed}"' not in text:
                problems.append(f"CLI_FLAGS: {needed} is not in src/nodeforge/{flag.source}")
    return problems


# --- YAML -------------------------------------------------------------------------------------------------------------


def yaml_settings(text: str, names: set[str]) -> list[tuple[str, Any]]:
    found = []
    seen: set[int] = set()

    def walk(node: Any) -> None:
        if id(node) in seen:  # an alias: read once (a test's hostile inputs refer to themselves)
            return
        if isinstance(node, dict | list):
            seen.add(id(node))
        if isinstance(node, dict):
            for key, value in node.items():
                if key in names:
                    found.append((key, value))
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    try:
        documents = list(yaml.safe_load_all(text))
    except yaml.YAMLError:
        return []
    for document in documents:
        walk(document)
    return found


def yaml_files(repo: Path = REPO) -> list[Path]:
    files = [
        p for d in ("tests/playbooks", "tests/data") for p in (repo / d).rglob("*") if p.suffix in (".yml", ".yaml")
    ]
    for path in (repo / "molecule").rglob("*.yml"):
        parts = path.relative_to(repo / "molecule").parts
        if not path.name.startswith("verify") and parts[0] not in ("fixture_files", "fixture_repo"):
            files.append(path)
    for inventory in sorted((repo / "inventories").iterdir()):
        if inventory.is_dir() and inventory.name not in LAB_INVENTORIES:
            files += inventory.rglob("*.yml")
    return sorted(files)


# --- the report -------------------------------------------------------------------------------------------------------


def coverage(repo: Path = REPO) -> dict[str, Finding]:
    """Every option, with where tests set it to a non-default value (empty: nowhere)."""
    found = options(repo / ROLES.relative_to(REPO))
    names = set(found)

    def record(option: str, value: Any, where: str) -> None:
        if not is_default(value, found[option].default):
            found[option].set_in.append(where)

    for path in sorted((repo / "tests").rglob("*.py")):
        where = path.relative_to(repo)
        if str(where) in NOT_TESTS:
            continue
        source = path.read_text()
        for option, value, line in python_settings(source, names) + flag_settings(source):
            if option in names:
                record(option, value, f"{where}:{line}")
    for path in yaml_files(repo):
        for option, value in yaml_settings(path.read_text(), names):
            record(option, value, str(path.relative_to(repo)))
    return found


def reasons(path: Path = REASONS) -> dict[str, str]:
    return (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}


def problems(found: dict[str, Finding], why: dict[str, str]) -> list[str]:
    """Uncovered options, stale reasons and CLI_FLAGS entries the source no longer has."""
    out = [f"{name}: no test sets it and tools/options_coverage.yml gives no reason" for name, f in found.items()
           if not f.set_in and name not in why]  # fmt: skip
    for name in why:
        if name not in found:
            out.append(f"{name}: a reason for an option no role declares")
        elif found[name].set_in:
            out.append(f"{name}: a stale reason: set in {found[name].set_in[0]}")
        elif not str(why[name] or "").strip():
            out.append(f"{name}: an empty reason")
    return out + flag_problems()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--all", action="store_true", help="List every option with the first test that sets it.")
    args = parser.parse_args(argv)
    found = coverage()
    why = reasons()
    unset = [f for f in found.values() if not f.set_in]
    for f in found.values() if args.all else unset:
        where = f.set_in[0] if f.set_in else ("reason: " + why[f.option] if f.option in why else "NO TEST, NO REASON")
        print(f"{f.option:50} {where}")
    found_problems = problems(found, why)
    for problem in found_problems:
        print(f"error: {problem}", file=sys.stderr)
    print(
        f"{len(found)} options: {len(found) - len(unset)} set by tests, "
        f"{sum(f.option in why for f in unset)} with a reason, {sum(f.option not in why for f in unset)} uncovered"
    )
    return 1 if found_problems else 0


if __name__ == "__main__":
    sys.exit(main())
