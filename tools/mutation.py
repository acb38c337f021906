"""Mutation testing of nodeforge's decision code with mutmut (`make mutation`).

mutmut 3 copies the code it mutates into mutants/ and imports it from there by the module name its path gives
(src/ stripped). The collection's module_utils are imported through Ansible's collection loader as
ansible_collections.nodeforge.gpu.plugins.module_utils.NAME, from the collections path nodeforge.content points at.
So the run happens in a staging project, build/mutation/, laid out for both:

    src/ansible_collections/nodeforge/gpu   the collection (copied)
    src/nodeforge                           the CLI package; content/collections -> ../.. (that is, src/)
    tests/                                  the tests (copied)
    pyproject.toml                          mutmut's and pytest's settings
    mutants/<every other top-level entry>   links to the repository's (tools, molecule, docs, .venv...);
                                            mutants/collections/ansible_collections -> ../src/ansible_collections,
                                            so a test reading the collection's files reads the mutated copy

mutmut runs the fast suite (not slow, molecule or matrix) once to learn which tests reach each function, then runs
each mutant against those tests only, two at a time. This script then prints the score per module and every
surviving mutant that docs/testing.md does not list as equivalent (tools/mutation_equivalent.txt holds their
names, one per line with the reason after a '#').

Usage: python tools/mutation.py [--module NAME ...] [--max-children N] [--report-only] [--resume] [MUTANT ...]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STAGE = REPO / "build" / "mutation"
COLLECTION = Path("ansible_collections/nodeforge/gpu")
MODULE_UTILS = COLLECTION / "plugins/module_utils"
EQUIVALENT = REPO / "tools" / "mutation_equivalent.txt"

# The decision modules (the 90% bar) and the CLI's runner and report logic.
DECISION_MODULES = [
    "rules",
    "settings",
    "decisions",
    "acceptance",
    "validate",
    "upgrade",
    "scale",
    "k8s_objects",
    "mpijob_convert",
    "parsers",
]
CLI_MODULES = ["runner", "report"]

# Top-level entries of the repository that the staging project builds itself; every other one is linked.
OWN = {"src", "tests", "collections", "pyproject.toml", "build", "roles", "playbooks", ".git", "mutants"}
PYTEST_ARGS = [
    *("-p", "no:cacheprovider", "-p", "no:xdist", "-m", "not slow and not molecule and not matrix"),
    # Checks the repository's layout (roles/ links into collections/), which the staging project lays out otherwise.
    *("--deselect", "tests/test_collection.py::test_model_reads_the_collection_s_roles"),
]


def source_path(module: str) -> str:
    if module in CLI_MODULES:
        return f"src/nodeforge/{module}.py"
    return f"src/{MODULE_UTILS}/{module}.py"


def module_of(mutant: str) -> str:
    """`ansible_collections.nodeforge.gpu.plugins.module_utils.rules.x_f__mutmut_3` -> rules."""
    return mutant.split(".x")[0].rsplit(".", 1)[-1] if ".x" in mutant else mutant.rsplit(".", 2)[-2]


# Appended to the staged tests/conftest.py: mutmut runs a mutant's tests with -x in no particular order, so a slow
# test that passes (the damaged-output sweep of test_acceptance: 6 s) ran before the quick one that kills the mutant.
# Fastest first, by the durations mutmut recorded, a killed mutant costs its quickest failing test.
ORDER_HOOK = """

# ---- added by tools/mutation.py (the staged copy only) ----
_ordered_by_the_repository = pytest_collection_modifyitems


def pytest_collection_modifyitems(items):
    _ordered_by_the_repository(items)
    for stats in (Path("mutmut-stats.json"), Path("mutants/mutmut-stats.json")):
        if stats.exists():
            durations = json.loads(stats.read_text()).get("duration_by_test", {})
            items.sort(key=lambda item: durations.get(item.nodeid.removeprefix("mutants/"), 0.0))
            return
"""


def stage(modules: list[str]) -> None:
    if STAGE.exists():
        shutil.rmtree(STAGE)
    (STAGE / "src").mkdir(parents=True)
    sync()
    pytest_settings = _pytest_settings()
    config = [
        "[tool.mutmut]",
        'source_paths = ["src/"]',
        f"only_mutate = {json.dumps([source_path(m) for m in modules])}",
        f"pytest_add_cli_args = {json.dumps(PYTEST_ARGS)}",
        'pytest_add_cli_args_test_selection = ["tests/"]',
        "use_git_change_detection = false",
        "",
        pytest_settings,
    ]
    (STAGE / "pyproject.toml").write_text("\n".join(config) + "\n")
    mutants = STAGE / "mutants"
    for entry in REPO.iterdir():
        if entry.name not in OWN:
            (mutants / entry.name).symlink_to(entry)
    (mutants / "collections").mkdir()
    for entry in (REPO / "collections").iterdir():
        target = "../src/ansible_collections" if entry.name == "ansible_collections" else entry
        (mutants / "collections" / entry.name).symlink_to(target)
    if (REPO.parent / "shared").exists():  # the upstream references some tests read, beside the repository
        (STAGE / "shared").symlink_to(REPO.parent / "shared")
    for link in ("roles", "playbooks"):
        (mutants / link).symlink_to(f"src/{COLLECTION}/{link}")
    (mutants / "build").mkdir()


def sync() -> None:
    """The collection, the CLI package and the tests, copied into the staging project as they stand now (a resumed
    run: mutmut makes new mutants of what changed and keeps the verdicts of the functions that did not)."""
    for copy in (STAGE / "src" / COLLECTION, STAGE / "src" / "nodeforge", STAGE / "tests"):
        if copy.exists():
            shutil.rmtree(copy)
    shutil.copytree(REPO / "collections" / COLLECTION, STAGE / "src" / COLLECTION, symlinks=True)
    shutil.copytree(REPO / "src" / "nodeforge", STAGE / "src" / "nodeforge", symlinks=True)
    # mutmut copies files, not the links of nodeforge/content: the staged package and its copy in mutants/ get them
    # here (mutmut leaves a path it finds in mutants/ as it is).
    for content in (STAGE / "src/nodeforge/content", STAGE / "mutants/src/nodeforge/content"):
        content.mkdir(parents=True, exist_ok=True)
        for link in ("collections", "containers", "inventories", "lab"):
            (content / link).unlink(missing_ok=True)
            (content / link).symlink_to("../.." if link == "collections" else REPO / link)
    shutil.copytree(REPO / "tests", STAGE / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    conftest = STAGE / "tests" / "conftest.py"
    conftest.write_text(conftest.read_text() + ORDER_HOOK)


def _pytest_settings() -> str:
    """The repository's [tool.pytest.ini_options] section, as it stands."""
    lines = (REPO / "pyproject.toml").read_text().splitlines()
    start = lines.index("[tool.pytest.ini_options]")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("[")), len(lines))
    return "\n".join(lines[start:end])


def results() -> dict[str, str]:
    """Every mutant's status, as `mutmut results --all true` prints them."""
    out = subprocess.run(
        [str(REPO / ".venv/bin/mutmut"), "results", "--all", "true"],
        cwd=STAGE,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    statuses = {}
    for line in out.splitlines():
        name, sep, status = line.strip().rpartition(": ")
        if sep:
            statuses[name] = status
    return statuses


def equivalent() -> dict[str, str]:
    if not EQUIVALENT.exists():
        return {}
    reasons = {}
    for line in EQUIVALENT.read_text().splitlines():
        name, _, reason = line.partition("#")
        if name.strip():
            reasons[name.strip()] = reason.strip()
    return reasons


def report(statuses: dict[str, str]) -> int:
    """The table per module: killed, survived (the tests that reach the mutant pass), no tests (no test of the fast
    suite reaches its function), equivalent (tools/mutation_equivalent.txt), not run (a run cut short). The score is
    killed over the mutants run, less the equivalent ones; "no tests" counts against it."""
    known = equivalent()
    table: dict[str, Counter] = {}
    survivors = []
    for name, status in sorted(statuses.items()):
        counts = table.setdefault(module_of(name), Counter())
        counts["mutants"] += 1
        if status in ("killed", "timeout", "segfault", "caught by type check"):
            counts["killed"] += 1
        elif status == "not checked":
            counts["not run"] += 1
        elif name in known:
            counts["equivalent"] += 1
        else:
            counts["no tests" if status == "no tests" else "survived"] += 1
            survivors.append((name, status))
    columns = ("mutants", "killed", "survived", "no tests", "equivalent", "not run")
    print(f"{'module':<16}" + "".join(f"{c:>11}" for c in columns) + f"{'score':>8}")
    failing = []
    for module, counts in sorted(table.items()):
        effective = counts["mutants"] - counts["equivalent"] - counts["not run"]
        score = 100.0 * counts["killed"] / effective if effective else 100.0
        print(f"{module:<16}" + "".join(f"{counts[c]:>11}" for c in columns) + f"{score:>7.1f}%")
        if module in DECISION_MODULES and (score < 90.0 or counts["not run"]):
            failing.append(module)
    # Of the modules this run mutated: an equivalent mutant it killed, or no longer made.
    stale = sorted(
        name
        for name in known
        if module_of(name) in table and statuses.get(name, "killed") in ("killed", "timeout", "segfault")
    )
    print(f"\n{len(survivors)} surviving mutants (`cd {STAGE.relative_to(REPO)} && mutmut show NAME` shows one):")
    for name, status in survivors:
        print(f"  {status:<10} {name}")
    if stale:
        print(f"\n{EQUIVALENT.relative_to(REPO)} lists mutants this run killed or did not make: {', '.join(stale)}")
    if failing:
        print(f"\ndecision modules under 90% (or not fully run): {', '.join(failing)}")
    return 1 if failing or stale else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--module", action="append", choices=DECISION_MODULES + CLI_MODULES)
    parser.add_argument("--max-children", type=int, default=2)
    parser.add_argument("--report-only", action="store_true", help="print the last run's table again")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="go on with the last run (stopped, or its code and tests changed since): the same modules, the verdicts "
        "of unchanged functions kept; with NAME arguments, run those mutants again (their survivors, after new tests)",
    )
    parser.add_argument(
        "names",
        nargs="*",
        help="mutants to run (mutmut's names or globs): with --resume, run them again; in a new run, only them (the "
        "others are made but not run)",
    )
    args = parser.parse_args()
    if args.resume and not (STAGE / "mutants").exists():
        parser.error(f"--resume: no run to go on with in {STAGE.relative_to(REPO)}")
    if not args.report_only:
        if args.resume:
            sync()
        else:
            stage(args.module or DECISION_MODULES + CLI_MODULES)
        # The fast suite needs no package cache (only molecule and the lab fetch packages): without this, pytest's
        # configure in each mutant's fork would start and stop it, waiting on its lock.
        env = {**os.environ, "NODEFORGE_APT_CACHE": "0"}
        run = subprocess.run(
            [str(REPO / ".venv/bin/mutmut"), "run", "--max-children", str(args.max_children), *args.names],
            cwd=STAGE,
            env=env,
        )
        if run.returncode:
            print(f"mutmut run failed (exit {run.returncode})", file=sys.stderr)
            return run.returncode
    return report(results())


if __name__ == "__main__":
    sys.exit(main())
