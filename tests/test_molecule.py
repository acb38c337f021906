"""Run every molecule scenario (molecule/<name>/molecule.yml) through molecule/run.sh on Debian 12, and the scenarios
molecule/images.yml lists under `node_oses` on those OSes too.

Marked `molecule`: needs podman and the locally built base images; deselect with `-m "not molecule"`.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
RUN = REPO / "molecule" / "run.sh"
SCENARIOS = sorted(p.parent.name for p in (REPO / "molecule").glob("*/molecule.yml"))
IMAGES = yaml.safe_load((REPO / "molecule" / "images.yml").read_text(encoding="utf-8"))
NODE_OSES = IMAGES["node_oses"]
EL_ONLY = IMAGES["el_only"]
RUNS = [(scenario, "debian12") for scenario in SCENARIOS if scenario not in EL_ONLY] + [
    (scenario, node_os) for node_os, scenarios in sorted(NODE_OSES.items()) for scenario in scenarios
]
FULL_ONLY = IMAGES["full_only"]


def run_id(scenario: str, node_os: str) -> str:
    return scenario if node_os == "debian12" else f"{scenario}-{node_os}"


def run_param(scenario: str, node_os: str):
    marks = [pytest.mark.full] if run_id(scenario, node_os) in FULL_ONLY else []
    return pytest.param(scenario, node_os, id=run_id(scenario, node_os), marks=marks)


def test_node_os_scenarios_exist() -> None:
    """A scenario named under node_oses that does not exist would be a run nobody notices is missing."""
    listed = {scenario for scenarios in NODE_OSES.values() for scenario in scenarios}
    assert listed <= set(SCENARIOS), (
        f"molecule/images.yml node_oses names no scenario {sorted(listed - set(SCENARIOS))}"
    )
    # An EL-only scenario no OS lists would never run at all.
    assert set(EL_ONLY) <= listed, f"molecule/images.yml el_only: {sorted(set(EL_ONLY) - listed)} run nowhere"
    # A run left to make test-full that is no run at all would leave nothing out, and say it did.
    ids = {run_id(scenario, node_os) for scenario, node_os in RUNS}
    assert set(FULL_ONLY) <= ids, f"molecule/images.yml full_only: {sorted(set(FULL_ONLY) - ids)} are no runs"


@pytest.mark.molecule
@pytest.mark.slow
@pytest.mark.parametrize(("scenario", "node_os"), [run_param(scenario, node_os) for scenario, node_os in RUNS])
def test_scenario(scenario: str, node_os: str) -> None:
    started = time.monotonic()
    env = {**os.environ, "NODEFORGE_NODE_OS": node_os}
    proc = subprocess.run(["bash", str(RUN), scenario, "test"], cwd=REPO, env=env, check=False)
    elapsed = time.monotonic() - started
    print(f"molecule scenario {scenario} on {node_os}: rc={proc.returncode}, wall time {elapsed:.1f} s")
    assert proc.returncode == 0, (
        f"molecule/run.sh {scenario} test on {node_os} failed (rc={proc.returncode}); output above"
    )
