#!/usr/bin/python3
"""nodeforge fixture stand-in for IBM Storage Scale's admin commands on a client node (see README.md here).

Installed by the fixture package gpfs.base as /usr/lpp/mmfs/lib/nodeforge-standin/scale_standin.py; each command in
/usr/lpp/mmfs/bin is a two-line wrapper that runs this program with its own name first. Standard library only.

State: a JSON file (NODEFORGE_SCALE_STANDIN_STATE, default /var/mmfs/gen/nodeforge-standin.json). Without it the
node is not a cluster member and every command fails as Scale's do. Every mmchconfig, mmshutdown and mmstartup
invocation is appended to the call log (NODEFORGE_SCALE_STANDIN_LOG, default
/var/mmfs/gen/nodeforge-standin-calls.log) as one JSON object per line: {"command", "argv", "rc"}.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

STATE = Path(os.environ.get("NODEFORGE_SCALE_STANDIN_STATE", "/var/mmfs/gen/nodeforge-standin.json"))
CALLS = Path(os.environ.get("NODEFORGE_SCALE_STANDIN_LOG", "/var/mmfs/gen/nodeforge-standin-calls.log"))
RAS = Path(os.environ.get("NODEFORGE_SCALE_STANDIN_RAS", "/var/adm/ras"))
COMMON = "common"

# The attributes this stand-in knows (IBM's mmchconfig command reference): the kind of value, whether -i (immediate
# and permanent) and -I (immediate, not persistent) are valid for it, and the default mmlsconfig ATTR shows when it
# is not set ("" = none shown). Kept apart from the collection's own table on purpose: a role that asks for -i where
# Scale refuses it fails here.
ATTRIBUTES = {
    #  name: (kind, -i, -I, default)
    "pagepool": ("number", True, True, "1G"),
    "workerThreads": ("number", False, False, "48"),
    "maxFilesToCache": ("number", False, False, "4000"),
    "maxStatCache": ("number", False, False, "1000"),
    "maxMBpS": ("number", True, True, "2048"),
    "ignorePrefetchLUNCount": ("yesno", True, True, "no"),
    "subnets": ("subnets", False, False, ""),
    "verbsRdma": ("enable", False, False, "disable"),
    "verbsRdmaSend": ("yesno", False, False, "no"),
    "verbsPorts": ("ports", False, False, ""),
    "enforceFilesetQuotaOnRoot": ("yesno", True, False, "no"),
    "controlSetxattrImmutableSELinux": ("yesno", True, False, "no"),
}
VALUES = {
    "number": re.compile(r"[0-9]+[KMGTPkmgtp]?"),
    "yesno": re.compile(r"yes|no"),
    "enable": re.compile(r"enable|disable"),
    "subnets": re.compile(r"[0-9A-Fa-f.:]+(/[A-Za-z0-9_.*;-]+)?( [0-9A-Fa-f.:]+(/[A-Za-z0-9_.*;-]+)?)*"),
    "ports": re.compile(r"[A-Za-z0-9_.-]+(/[0-9]+(/[0-9]+)?)?( [A-Za-z0-9_.-]+(/[0-9]+(/[0-9]+)?)?)*"),
}
USAGE = {
    "mmchconfig": "Usage:\n  mmchconfig Attribute=value[,Attribute=value...] [-i | -I]\n"
    "             [-N {Node[,Node...] | NodeFile | NodeClass}]",
    "mmlsconfig": "Usage:\n  mmlsconfig [Attribute[,Attribute...]] [-Y]",
    "mmlscluster": "Usage:\n  mmlscluster [-Y] [--ces | --cnfs | --cloud-gateway | --comment]",
    "mmlsnodeclass": "Usage:\n  mmlsnodeclass [ClassName[,ClassName...] | --user | --system | --all] [-Y]",
    "mmgetstate": "Usage:\n  mmgetstate [-L] [-s] [-v] [-Y] [-a | -N {Node[,Node...] | NodeFile | NodeClass}]",
    "mmshutdown": "Usage:\n  mmshutdown [-t UnmountTimeout] [-a | -N {Node[,Node...] | NodeFile | NodeClass}]",
    "mmstartup": "Usage:\n  mmstartup [-a | -N {Node[,Node...] | NodeFile | NodeClass}] [-E EnvVar=value ...]",
}
LOGGED = ("mmchconfig", "mmshutdown", "mmstartup")


class Failed(Exception):
    """A command failure: the lines to print on stderr; the exit status is 1."""


def out(*lines: str) -> None:
    sys.stdout.write("".join(f"{line}\n" for line in lines))


def fail(command: str, *lines: str) -> Failed:
    """Scale's way of failing: the command's own messages, then its closing line."""
    closing = f"{command}: Command failed.  Examine previous error messages to determine cause."
    return Failed([*(f"{command}: {line}" for line in lines), closing])


def load(command: str) -> dict:
    if not STATE.is_file():
        raise fail(command, "This node does not belong to a GPFS cluster.")
    return json.loads(STATE.read_text())


def save(state: dict) -> None:
    tmp = STATE.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    tmp.replace(STATE)


def stamp() -> str:
    return time.strftime("%a %b %e %H:%M:%S %Z %Y")


def short(name: str) -> str:
    return name.split(".", 1)[0]


def local_node(state: dict) -> dict:
    [node] = [n for n in state["nodes"] if short(n["daemon_name"]) == short(state["local_node"])]
    return node


def table(rows: list[list[str]], headers: list[str], indent: str = " ") -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = [indent + "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    line.append("-" * (len(line[0]) + 2))
    line += [indent + "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return line


# ---- the commands ----------------------------------------------------------------------------------------------


def mmlscluster(args: list[str]) -> None:
    if args:
        raise Failed([USAGE["mmlscluster"]])
    state = load("mmlscluster")
    cluster = state["cluster"]
    out(
        "",
        "GPFS cluster information",
        "========================",
        f"  GPFS cluster name:         {cluster['name']}",
        f"  GPFS cluster id:           {cluster['id']}",
        f"  GPFS UID domain:           {cluster.get('uid_domain', cluster['name'])}",
        f"  Remote shell command:      {cluster.get('remote_shell', '/usr/bin/ssh')}",
        f"  Remote file copy command:  {cluster.get('remote_copy', '/usr/bin/scp')}",
        f"  Repository type:           {cluster.get('repository', 'CCR')}",
        "",
    )
    rows = [
        [str(n["number"]), n["daemon_name"], n["ip"], n["admin_name"], n.get("designation", "")] for n in state["nodes"]
    ]
    headers = ["Node", "Daemon node name", "IP address", "Admin node name", "Designation"]
    out(*table([[f"  {r[0]}", *r[1:]] for r in rows], headers), "")


def sections(state: dict) -> list[dict]:
    return state["config"]["sections"]


def mmlsconfig(args: list[str]) -> None:
    if len(args) > 1 or (args and args[0].startswith("-")):
        raise Failed([USAGE["mmlsconfig"]])
    state = load("mmlsconfig")
    config = state["config"]
    if args:
        for name in args[0].split(","):
            shown = []
            if name in config["head"]:
                shown.append(f"{name} {config['head'][name]}")
            for section in sections(state):
                if name in section["attributes"]:
                    where = "" if section["classes"] == [COMMON] else f" [{','.join(section['classes'])}]"
                    shown.append(f"{name} {section['attributes'][name]}{where}")
            if not shown and name not in ATTRIBUTES:
                raise fail("mmlsconfig", f"Unknown attribute: {name}")
            if not shown and ATTRIBUTES[name][3]:
                shown.append(f"{name} {ATTRIBUTES[name][3]}")
            out(*shown)
        return
    name = state["cluster"]["name"]
    header = f"Configuration data for cluster {name}:"
    lines = [header, "-" * len(header)]
    lines += [f"{k} {v}" for k, v in config["head"].items()]
    for section in sections(state):
        if section["attributes"]:
            lines.append(f"[{','.join(section['classes'])}]")
            lines += [f"{k} {v}" for k, v in section["attributes"].items()]
    trailer = f"File systems in cluster {name}:"
    lines += ["", trailer, "-" * len(trailer), *state.get("file_systems", [])]
    out(*lines)


def node_classes(state: dict) -> dict[str, list[str]]:
    return state.get("node_classes", {})


def mmlsnodeclass(args: list[str]) -> None:
    state = load("mmlsnodeclass")
    classes = node_classes(state)
    wanted = list(classes)
    if args and args[0] not in ("--user", "--all"):
        wanted = args[0].split(",")
        for name in wanted:
            if name not in classes:
                raise fail("mmlsnodeclass", f"Node class {name} not found.")
    rows = [[name, ",".join(classes[name])] for name in wanted]
    out("Node Class Name       Members", "--------------------- " + "-" * 59)
    out(*(f"{name:<21} {members}" for name, members in rows))


def mmgetstate(args: list[str]) -> None:
    state = load("mmgetstate")
    node = local_node(state)
    if args and args[0] != "-N":
        raise Failed([USAGE["mmgetstate"]])
    rows = [[f"      {node['number']}", short(node["daemon_name"]), state.get("daemon", "down")]]
    out("", *table(rows, ["Node number", "Node name", "GPFS state"]))


def parse_settings(text: str) -> list[tuple[str, str]]:
    pairs = []
    for item in text.split(","):
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise Failed([USAGE["mmchconfig"]])
        pairs.append((name, value))
    return pairs


def mmchconfig(args: list[str]) -> None:
    if not args or args[0].startswith("-") or "=" not in args[0]:
        raise Failed([USAGE["mmchconfig"]])
    settings = parse_settings(args[0])
    immediate = persistent_off = False
    target = None
    rest = args[1:]
    while rest:
        option = rest.pop(0)
        if option == "-i":
            immediate = True
        elif option == "-I":
            persistent_off = True
        elif option == "-N" and rest:
            target = rest.pop(0)
        else:
            raise Failed([USAGE["mmchconfig"]])
    if immediate and persistent_off:
        raise Failed([USAGE["mmchconfig"]])
    state = load("mmchconfig")
    for name, value in settings:
        if name not in ATTRIBUTES:
            raise fail("mmchconfig", f"Unknown attribute: {name}")
        kind, allows_i, allows_big_i, _ = ATTRIBUTES[name]
        if value != "DEFAULT" and not VALUES[kind].fullmatch(value):
            raise fail("mmchconfig", f"Incorrect value for attribute {name}: {value}")
        if immediate and not allows_i:
            raise fail("mmchconfig", f"The -i option is not valid for attribute {name}.")
        if persistent_off and not allows_big_i:
            raise fail("mmchconfig", f"The -I option is not valid for attribute {name}.")
    classes = [COMMON]
    if target:
        known = set(node_classes(state)) | {short(n["daemon_name"]) for n in state["nodes"]}
        for name in target.split(","):
            if short(name) not in known:
                raise fail("mmchconfig", f"Incorrect node {name} specified for command.")
        classes = target.split(",")
    if not persistent_off:  # -I changes only the running daemons
        apply(state, settings, classes)
        save(state)
    out("mmchconfig: Command successfully completed")
    if not immediate and not persistent_off and state.get("daemon") == "active":
        names = ", ".join(name for name, _ in settings)
        out(f"mmchconfig: The following attributes take effect only after the GPFS daemon is restarted: {names}")
    out(
        "mmchconfig: Propagating the cluster configuration data to all",
        "  affected nodes.  This is an asynchronous process.",
    )


def apply(state: dict, settings: list[tuple[str, str]], classes: list[str]) -> None:
    config = state["config"]
    if classes == [COMMON]:
        for name, value in settings:
            homes = [config["head"]] + [s["attributes"] for s in sections(state) if s["classes"] == [COMMON]]
            home = next((h for h in homes if name in h), None)
            if home is None:
                trailing = [s for s in sections(state) if s["classes"] == [COMMON]]
                if not trailing:
                    sections(state).append({"classes": [COMMON], "attributes": {}})
                    trailing = sections(state)[-1:]
                home = trailing[-1]["attributes"]
            set_value(home, name, value)
        return
    section = next((s for s in sections(state) if s["classes"] == classes), None)
    if section is None:
        section = {"classes": classes, "attributes": {}}
        index = next((i for i, s in enumerate(sections(state)) if s["classes"] == [COMMON]), len(sections(state)))
        sections(state).insert(index, section)
    for name, value in settings:
        set_value(section["attributes"], name, value)


def set_value(attributes: dict, name: str, value: str) -> None:
    if value == "DEFAULT":
        attributes.pop(name, None)
    else:
        attributes[name] = value


def local_only(command: str, args: list[str], state: dict) -> None:
    if args and not (len(args) == 2 and args[0] == "-N" and short(args[1]) == short(state["local_node"])):
        raise Failed([USAGE[command]])


def mmshutdown(args: list[str]) -> None:
    state = load("mmshutdown")
    local_only("mmshutdown", args, state)
    out(f"{stamp()}: mmshutdown: Starting force unmount of GPFS file systems")
    out(f"{stamp()}: mmshutdown: Shutting down GPFS daemons")
    state["daemon"] = "down"
    save(state)
    out(f"{stamp()}: mmshutdown: Finished")


def mmstartup(args: list[str]) -> None:
    state = load("mmstartup")
    local_only("mmstartup", args, state)
    out(f"{stamp()}: mmstartup: Starting GPFS ...")
    state["daemon"] = "active"
    save(state)
    start_log(short(state["local_node"]))


def start_log(node: str) -> None:
    """As mmfsd does when it starts: a new /var/adm/ras/mmfs.log.<time>.<node>, linked as mmfs.log.latest."""
    RAS.mkdir(parents=True, exist_ok=True)
    when = time.time()
    while True:
        name = f"mmfs.log.{time.strftime('%Y.%m.%d.%H.%M.%S', time.localtime(when))}.{node}"
        if not (RAS / name).exists():
            break
        when += 1
    (RAS / name).write_text(f"{time.strftime('%Y-%m-%d_%H:%M:%S', time.localtime(when))}: runmmfs starting\n")
    latest = RAS / "mmfs.log.latest"
    if latest.is_symlink():
        previous = RAS / "mmfs.log.previous"
        previous.unlink(missing_ok=True)
        previous.symlink_to(os.readlink(latest))
        latest.unlink()
    latest.symlink_to(name)


COMMANDS = {
    "mmlscluster": mmlscluster,
    "mmlsconfig": mmlsconfig,
    "mmlsnodeclass": mmlsnodeclass,
    "mmgetstate": mmgetstate,
    "mmchconfig": mmchconfig,
    "mmshutdown": mmshutdown,
    "mmstartup": mmstartup,
}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in COMMANDS:
        sys.stderr.write(f"usage: scale_standin.py {{{'|'.join(COMMANDS)}}} [ARGS...]\n")
        return 2
    command, args = argv[0], argv[1:]
    rc = 0
    try:
        COMMANDS[command](args)
    except Failed as exc:
        sys.stdout.flush()
        sys.stderr.write("".join(f"{line}\n" for line in exc.args[0]))
        rc = 1
    if command in LOGGED:
        CALLS.parent.mkdir(parents=True, exist_ok=True)
        with CALLS.open("a", encoding="utf-8") as log:
            log.write(json.dumps({"command": command, "argv": [command, *args], "rc": rc}) + "\n")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
