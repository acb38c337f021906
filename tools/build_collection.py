"""Build the nodeforge.gpu collection artifact (dist/nodeforge-gpu-<version>.tar.gz).

The collection's roles/ and playbooks/ are symlinks to the repository's top-level roles/ and playbooks/, and
`ansible-galaxy collection build` skips links that leave the collection: stage a copy with the links followed,
then build that.
    python tools/build_collection.py [--output-path DIR]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COLLECTION = REPO / "collections" / "ansible_collections" / "nodeforge" / "gpu"
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")


def build(output: Path) -> Path:
    output.mkdir(parents=True, exist_ok=True)
    galaxy = str(Path(sys.executable).parent / "ansible-galaxy")
    with tempfile.TemporaryDirectory(prefix="nodeforge-collection-") as tmp:
        staged = Path(tmp) / "gpu"
        shutil.copytree(COLLECTION, staged, symlinks=False, ignore=IGNORE)
        run = subprocess.run(
            [galaxy, "collection", "build", "--force", "--output-path", str(output.resolve()), str(staged)],
            capture_output=True,
            text=True,
            check=False,
        )
    if run.returncode != 0:
        raise SystemExit(f"ansible-galaxy collection build failed:\n{run.stdout}{run.stderr}")
    [artifact] = [line.rsplit(" ", 1)[-1] for line in run.stdout.splitlines() if "Created collection" in line]
    return Path(artifact)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output-path", type=Path, default=REPO / "dist")
    print(build(parser.parse_args().output_path))


if __name__ == "__main__":
    main()
