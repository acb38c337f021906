"""preflight's disk and repository logic (module_utils/preflight.py, filters nodeforge.gpu.preflight_*): on real df
output, against the kernel's own numbers (os.statvfs), and as the role's task expressions render it."""

from __future__ import annotations

import os
import subprocess

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from nodeforge.collection import preflight
from tests import role_expressions


def df(*paths: str) -> dict:
    """What the role's probe returns for its df command (the role's own argv) over the checked paths, run here: the
    exit status, and the output without its last line break as nodeforge.gpu.probe returns it."""
    commands = role_expressions.render_arg(
        "preflight",
        "main.yml",
        "Read the node (kernel headers, Secure Boot, loaded modules, PCI devices, free space)",
        "nodeforge.gpu.probe",
        "commands",
        preflight_min_free_gb=dict.fromkeys(paths, 1),
        __preflight_secure_boot_efivar="/sys/firmware/efi/efivars/SecureBoot-x",
        __preflight_headers_argv=[],
    )
    run = subprocess.run(commands["df"], capture_output=True, text=True, env={**os.environ, "LC_ALL": "C"})
    return {"rc": run.returncode, "stdout": run.stdout.rstrip("\n"), "stderr_lines": run.stderr.splitlines()}


def test_free_disk_agrees_with_statvfs(tmp_path):
    spaced = tmp_path / "a dir with spaces"
    spaced.mkdir()
    paths = ["/", "/no/such/path", str(spaced), "/"]
    free = preflight.free_disk_gib(df(*paths)["stdout"], paths)
    assert set(free) == set(paths)
    for path in ("/", str(spaced)):
        stat = os.statvfs(path)
        # df rounds to KiB; the filesystem moves between the two reads: within 0.1 GiB.
        assert abs(free[path] - stat.f_bavail * stat.f_frsize / 2**30) < 0.1
    assert free["/no/such/path"] is None


def test_role_records_free_space_through_the_filter():
    registered = df("/", "/no/such/path")
    assert registered["rc"] == 1  # df's exit status for a missing path, which the role does not count as a failure
    empty = {"rc": 0, "stdout": "", "stdout_lines": [], "stderr": "", "stderr_lines": [], "skipped": False}
    probe = {
        "commands": {"mokutil": empty, "secure_boot_byte": empty, "modules": empty, "pci": empty, "df": registered},
        "paths": {path: {"exists": False} for path in ("/efivar", "/sys/firmware/efi", "/sys/module/nouveau")},
    }
    task = role_expressions.task("preflight", "main.yml", "Set the preflight result")
    variables = {
        "__preflight_probe": probe,
        "preflight_min_free_gb": {"/": 10, "/no/such/path": 10},
        "__preflight_secure_boot_efivar": "/efivar",
        "nodeforge_in_container": False,
        "nodeforge_hw": {"hcas": []},
    }
    rendered = Templar(loader=DataLoader(), variables=variables).template(task["vars"]["__preflight_probed"])
    assert rendered["free_disk_gb"] == preflight.free_disk_gib(registered["stdout"], ["/", "/no/such/path"])
    assert rendered["free_disk_gb"]["/"] > 0 and rendered["free_disk_gb"]["/no/such/path"] is None


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
