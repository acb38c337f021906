"""bench/run.py's no-op floor: the shape of a run read from its job events, and the same-shape playbook it builds."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import ansible_runner

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("bench_run", ROOT / "bench" / "run.py")
bench = importlib.util.module_from_spec(spec)
sys.modules["bench_run"] = bench
spec.loader.exec_module(bench)


def test_same_shape_playbook_runs_as_the_shape_it_was_built_from(tmp_path):
    shape = {"node": 3, "controller": 4, "skipped": 5}
    playbook = bench.shape_playbook(shape, tmp_path / "project" / "same_shape.yml")
    (tmp_path / "runner").mkdir()
    run = ansible_runner.run(
        private_data_dir=str(tmp_path / "runner"),
        playbook=str(playbook),
        inventory="localhost ansible_connection=local",
        quiet=True,
        envvars={
            "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        },
    )
    assert run.status == "successful"
    assert run.stats["ok"] == {"localhost": shape["node"] + shape["controller"]}
    assert run.stats["skipped"] == {"localhost": shape["skipped"]}
    # Read back from the run's own job events: the stats and the shape agree.
    assert bench.task_shape(bench.job_events(run.config.artifact_dir)) == shape
