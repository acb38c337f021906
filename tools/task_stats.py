"""Count the roles' tasks by kind: every task, set_fact tasks, command/shell tasks and `sh -c` through command.
python tools/task_stats.py [ROLES_DIR]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml


def tasks(items: list) -> list[dict]:
    found = []
    for item in items or []:
        if not isinstance(item, dict):
            continue
        found.append(item)
        for key in ("block", "rescue", "always"):
            found += tasks(item.get(key))
    return found


def _shell_through_command(args: object) -> bool:
    """command with argv [sh|bash, -c, ...], written as a list or built in a Jinja expression."""
    if not isinstance(args, dict):
        return False
    argv = args.get("argv")
    if isinstance(argv, list):
        return argv[:2] in (["sh", "-c"], ["bash", "-c"])
    return isinstance(argv, str) and re.search(r"""['"](ba)?sh['"],\s*['"]-c['"]""", argv) is not None


def main() -> None:
    roles = Path(sys.argv[1] if len(sys.argv) > 1 else "roles")
    every = []
    for path in sorted(roles.glob("*/tasks/**/*.yml")) + sorted(roles.glob("*/handlers/*.yml")):
        every += [t for t in tasks(yaml.safe_load(path.read_text())) if not {"block"} & set(t)]
    kinds = {
        "tasks": len(every),
        "set_fact": sum("ansible.builtin.set_fact" in t for t in every),
        "command/shell": sum(bool({"ansible.builtin.command", "ansible.builtin.shell"} & set(t)) for t in every),
        "sh -c via command": sum(_shell_through_command(t.get("ansible.builtin.command")) for t in every),
        "set _ = mutation idiom": sum("set _ = " in yaml.safe_dump(t, width=10**6) for t in every),
    }
    print(" ".join(f"{k}={v}" for k, v in kinds.items()))


if __name__ == "__main__":
    main()
