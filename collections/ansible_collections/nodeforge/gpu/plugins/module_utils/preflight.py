# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""preflight's probes read into facts, and its disk and repository expectations, written once in Python (the role
calls them through the filters of plugins/filter/preflight.py)."""

from __future__ import annotations

from collections.abc import Mapping

KIB_PER_GIB = 1048576


def df_free_gib(stdout: str) -> float | None:
    """`df -P -k PATH`: the available space in GiB (one decimal), or None when df printed no filesystem line."""
    lines = [line for line in (stdout or "").splitlines() if line.strip()]
    if len(lines) < 2:
        return None
    return round(int(lines[-1].split()[3]) / KIB_PER_GIB, 1)


def free_disk_gib(df_results: list[Mapping]) -> dict:
    """The registered results of df over preflight_min_free_gb (dict2items): path -> free GiB, None when df failed
    (the path does not exist)."""
    return {r["item"]["key"]: df_free_gib(r.get("stdout", "")) if r.get("rc") == 0 else None for r in df_results}


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
