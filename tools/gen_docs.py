"""Regenerate the generated docs (role README variable tables, docs/inventory-reference.md,
docs/cli-reference.md, docs/json-output.schema.json); with --check, fail when a committed file differs from what
would be generated."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from nodeforge import docgen

REPO = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail on drift instead of writing")
    args = parser.parse_args()
    drift = []
    for path, text in docgen.outputs(REPO).items():
        current = path.read_text() if path.exists() else None
        if current == text:
            continue
        if args.check:
            drift.append(path.relative_to(REPO))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {path.relative_to(REPO)}")
    if drift:
        print("generated docs are out of date (run `make docs`):", *drift, sep="\n  ", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
