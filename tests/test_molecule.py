"""Run every molecule scenario (molecule/<name>/molecule.yml) through molecule/run.sh.

Marked `molecule`: needs podman and the locally built base image; deselect with `-m "not molecule"`.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
RUN = REPO / "molecule" / "run.sh"
SCENARIOS = sorted(p.parent.name for p in (REPO / "molecule").glob("*/molecule.yml"))


@pytest.mark.molecule
@pytest.mark.slow
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario(scenario: str) -> None:
    started = time.monotonic()
    proc = subprocess.run(["bash", str(RUN), scenario, "test"], cwd=REPO, check=False)
    elapsed = time.monotonic() - started
    print(f"molecule scenario {scenario}: rc={proc.returncode}, wall time {elapsed:.1f} s")
    assert proc.returncode == 0, f"molecule/run.sh {scenario} test failed (rc={proc.returncode}); output above"
