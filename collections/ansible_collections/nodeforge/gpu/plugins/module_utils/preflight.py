# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""preflight's probes read into facts, and its disk and repository expectations, written once in Python (the role
calls them through the filters of plugins/filter/preflight.py)."""

from __future__ import annotations

from collections.abc import Mapping

KIB_PER_GIB = 1048576


def free_disk_gib(stdout: str, paths: list[str]) -> dict:
    """`df -k --output=avail,file -- PATH...`, one call for every checked path: path -> free GiB (one decimal), None
    for a path df did not measure (it does not exist: df names it on stderr and prints no line for it). df prints each
    FILE as it was given, after the right-aligned Avail column, so a path with spaces comes back whole."""
    measured = {}
    for line in (stdout or "").splitlines()[1:]:
        avail, _, path = line.lstrip().partition(" ")
        if avail.isdigit():
            measured[path] = round(int(avail) / KIB_PER_GIB, 1)
    return {path: measured.get(path) for path in paths}


def reachable(probe_results: list[Mapping]) -> dict:
    """The registered results of uri over the repository URLs: URL -> whether it answered 2xx or 3xx."""
    return {r["item"]: 200 <= int(r.get("status", -1)) < 400 for r in probe_results}


def disk_unmet(min_free_gb: Mapping, free_gib: Mapping) -> list[str]:
    """Each checked path that does not exist or has less free space than asked."""
    unmet = []
    for path, min_gb in min_free_gb.items():
        free = free_gib.get(path)
        if free is None:
            unmet.append(f"path {path} does not exist, so its free space (at least {min_gb} GiB) cannot be checked")
        elif free < float(min_gb):
            unmet.append(f"free space on {path} is {free} GiB, expected at least {min_gb} GiB")
    return unmet


def repository_unmet(probe_results: list[Mapping]) -> list[str]:
    """Each repository URL the node could not reach, with uri's status and message."""
    reach = reachable(probe_results)
    return [
        f"repository {r['item']} is unreachable from the node (status {r.get('status', -1)}: "
        f"{str(r.get('msg', 'no response')).strip()})"
        for r in probe_results
        if not reach[r["item"]]
    ]
