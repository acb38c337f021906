"""preflight's disk and repository logic (module_utils/preflight.py, filters nodeforge.gpu.preflight_*): on real df
output, against the kernel's own numbers (os.statvfs), and as the role's task expressions render it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from nodeforge.collection import preflight
from tests import role_expressions

OUTPUTS = Path(__file__).parent / "data" / "outputs"


def df(path: str) -> dict:
    """A registered result of the role's df task for one path (item as dict2items gives it)."""
    run = subprocess.run(
        ["df", "-P", "-k", "--", path], capture_output=True, text=True, env={"LC_ALL": "C", **os.environ}
    )
    return {"item": {"key": path, "value": 1}, "rc": run.returncode, "stdout": run.stdout}


def test_df_free_gib_of_captured_output():
    text = (OUTPUTS / "df-P-k-debian12.txt").read_text()
    available_kib = int(text.splitlines()[1].split()[3])
    assert preflight.df_free_gib(text) == round(available_kib / 1048576, 1)
    assert preflight.df_free_gib("") is None


def test_free_disk_agrees_with_statvfs():
    free = preflight.free_disk_gib([df("/"), df("/no/such/path")])
    stat = os.statvfs("/")
    # df rounds to KiB; the filesystem moves between the two reads: within 0.1 GiB.
    assert abs(free["/"] - stat.f_bavail * stat.f_frsize / 2**30) < 0.1
    assert free["/no/such/path"] is None


def test_role_records_free_space_through_the_filter():
    results = {"__preflight_df": {"results": [df("/"), df("/no/such/path")]}}
    rendered = role_expressions.render(
        "preflight", "main.yml", "Record the free space per path", "__preflight_free_disk_gb", **results
    )
    assert rendered == preflight.free_disk_gib(results["__preflight_df"]["results"])


def test_disk_unmet_messages():
    unmet = preflight.disk_unmet({"/": 10, "/var": 20.5, "/gone": 1}, {"/": 63.9, "/var": 12.0, "/gone": None})
    assert unmet == [
        "free space on /var is 12.0 GiB, expected at least 20.5 GiB",
        "path /gone does not exist, so its free space (at least 1 GiB) cannot be checked",
    ]


def test_repository_reachability_and_messages():
    results = [
        {"item": "https://ok.example/", "status": 200},
        {"item": "https://moved.example/", "status": 301},
        {"item": "https://missing.example/", "status": 404, "msg": "HTTP Error 404: Not Found "},
        {"item": "https://down.example/", "status": -1, "msg": "Request failed: <urlopen error [Errno 111]>"},
    ]
    assert preflight.reachable(results) == {
        "https://ok.example/": True,
        "https://moved.example/": True,
        "https://missing.example/": False,
        "https://down.example/": False,
    }
    assert preflight.repository_unmet(results) == [
        "repository https://missing.example/ is unreachable from the node (status 404: HTTP Error 404: Not Found)",
        "repository https://down.example/ is unreachable from the node (status -1: Request failed: <urlopen error"
        " [Errno 111]>)",
    ]
