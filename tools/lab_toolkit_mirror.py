#!/usr/bin/env python3
"""Build the lab's stand-in for NVIDIA's container toolkit repository, in NVIDIA's own layout.

NVIDIA's repository cannot be reached from the development machines, so `make lab` and tests/test_lab.py hand
`nodeforge lab up --toolkit-mirror DIR` a copy built from the signed fixture repository
(molecule/fixture_repo/specs/nvidia_container_toolkit.yml: stand-in packages, a throwaway key):

    DIR/gpgkey                  the repository's armored signing key
    DIR/stable/deb/amd64/       the flat, signed repository (InRelease, Packages, pool/)

Usage: tools/lab_toolkit_mirror.py DIR   (rebuilt from scratch each time; prints DIR)
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUILDER = REPO / "molecule" / "fixture_repo"


def build(out: Path) -> Path:
    with tempfile.TemporaryDirectory(prefix="nodeforge-toolkit-mirror-") as work:
        argv = [sys.executable, str(BUILDER / "fixture_repo.py"), "build", "--flat", "--out", work]
        argv += ["--spec", str(BUILDER / "specs" / "nvidia_container_toolkit.yml")]
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise SystemExit(f"building the stand-in toolkit repository failed:\n{proc.stderr or proc.stdout}")
        shutil.rmtree(out, ignore_errors=True)
        flat = out / "stable" / "deb" / "amd64"
        shutil.copytree(Path(work) / "repo", flat)
        (flat / "fixture-archive-keyring.asc").rename(out / "gpgkey")
        (flat / "fixture-archive-keyring.gpg").unlink()
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    print(build(Path(sys.argv[1]).resolve()))
