# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""IBM Storage Scale (Spectrum Scale) client settings: the admin commands' output read, the changes computed.

The role scale_client, `nodeforge check` (rules.py) and the filters share these functions:

- parsers of the human output of mmlscluster, mmlsconfig, mmlsnodeclass and mmgetstate (the formats IBM documents
  and prints; the -Y forms are not used so that what the role reads is what an operator reads): output they cannot
  read whole (a table row wrapped or run into the next, a table cut short, another program's message, a value of
  another type) is a ScaleParseError naming the line, never a table read in part;
- ATTRIBUTES: the mmchconfig attributes the role manages, the kind of value each takes and whether mmchconfig's -i
  (immediate and permanent) is valid for it, after IBM's mmchconfig documentation; an attribute without -i takes
  effect when the GPFS daemon restarts;
- the wanted settings per node class (verbsPorts derived from the hardware profile's HCAs), the changes against
  mmlsconfig (values compared normalised: 16G = 16g = 16384M, yes = true, enable), one mmchconfig argv per node class,
  and which host of a play runs it (hosts of one cluster and node class share the class's settings).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ansible_collections.nodeforge.gpu.plugins.module_utils.model import VALUE_PATTERNS
from ansible_collections.nodeforge.gpu.plugins.module_utils.parsers import ParseError, command_output

COMMON = "common"  # mmlsconfig's section for the whole cluster (mmchconfig without -N)
BIN_DIR = "/usr/lpp/mmfs/bin"


class ScaleError(ValueError):
    """Output that cannot be read, or settings that cannot be applied; the message is meant for the operator."""


class ScaleParseError(ScaleError, ParseError):
    """Output of a Scale admin command that its parser cannot read: a ScaleError (what plan() and the filters report)
    and a ParseError (every parser's error), with the command as `tool`, the offending `line` and what was
    `expected`."""


@dataclass(frozen=True)
class Attribute:
    kind: str  # number | yesno | enable | subnets | ports
    immediate: bool  # mmchconfig -i is valid for it
    what: str


# Kinds: number = digits with an optional K/M/G/T/P suffix (binary multiples, as Scale reads them: 1M = 1048576);
# yesno = yes|no; enable = enable|disable; subnets = space-separated "network[/cluster;cluster...]" entries;
# ports = space-separated "device/port[/fabric]" entries.
ATTRIBUTES: dict[str, Attribute] = {
    "pagepool": Attribute("number", True, "the pinned page pool, e.g. 128G (Redbook: 128G on the DGX-1 clients)"),
    "workerThreads": Attribute("number", False, "threads for file data and metadata operations (Redbook: 1024)"),
    "maxFilesToCache": Attribute("number", False, "inodes cached per node (Redbook: 1M)"),
    "maxStatCache": Attribute("number", False, "stat-only cache entries per node (Redbook: 1M)"),
    "maxMBpS": Attribute("number", True, "the I/O throughput estimate that sizes prefetch (Redbook: 20000)"),
    "ignorePrefetchLUNCount": Attribute("yesno", True, "prefetch by maxMBpS, not by the LUN count (Redbook: yes)"),
    "subnets": Attribute(
        "subnets", False, "daemon subnets, e.g. 10.10.11.0/ess3000.bda.scale.ibm.com;SpectrumScale.ocp4.scale.ibm.com"
    ),
    "verbsRdma": Attribute("enable", False, "InfiniBand RDMA for data transfers (Redbook: enable)"),
    "verbsRdmaSend": Attribute("yesno", False, "RDMA for daemon messages too (Redbook: yes)"),
    "verbsPorts": Attribute("ports", False, "the RDMA ports, device/port[/fabric] (Redbook: mlx5_0/1 ... mlx5_3/1)"),
    "enforceFilesetQuotaOnRoot": Attribute("yesno", True, "fileset quotas apply to root too (Scale CSI needs yes)"),
    "controlSetxattrImmutableSELinux": Attribute(
        "yesno", True, "SELinux labels on immutable files (Scale CSI on OpenShift needs yes)"
    ),
}

_SUFFIXES = {"": 0, "K": 1, "M": 2, "G": 3, "T": 4, "P": 5}
_NUMBER = re.compile(r"([0-9]+)([KMGTP]?)", re.IGNORECASE)
_PORT = re.compile(r"([A-Za-z0-9_.-]+)(?:/([0-9]+)(?:/([0-9]+))?)?")
_SUBNET = re.compile(r"[0-9A-Fa-f.:]+(?:/[A-Za-z0-9_.*;-]+)?")
NODE_CLASS = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_TRUE = ("yes", "true", "on", "1", "enable", "enabled")
_FALSE = ("no", "false", "off", "0", "disable", "disabled")

EXPECTED = {
    "number": "a number with an optional K, M, G, T or P suffix, e.g. 128G or 1M",
    "yesno": "yes or no (true/false)",
    "enable": "enable or disable (true/false)",
    "subnets": "space-separated subnets, each network[/clustername;clustername...] without commas",
    "ports": "space-separated RDMA ports device/port[/fabric] (e.g. mlx5_0/1 mlx5_1/1), a list or a string",
}


# ---- reading the commands' output ------------------------------------------------------------------------------


_CLUSTER_FIELDS = {
    "GPFS cluster name": "name",
    "GPFS cluster id": "id",
    "GPFS UID domain": "uid_domain",
    "Remote shell command": "remote_shell",
    "Remote file copy command": "remote_copy",
    "Repository type": "repository",
}
_COUNT = re.compile(r"[0-9]{1,9}")
_CLUSTER_ID = re.compile(r"[0-9]{1,20}")
_NODE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]*")
_DESIGNATION = re.compile(r"[A-Za-z_]+(?:-[A-Za-z_]+)*")  # quorum, quorum-manager-perfmon; never "quorum-"
_NODE_ROW = (
    "one node per line: node number, daemon node name, IP address, admin node name and a designation such as "
    "quorum-manager (none for a client)"
)


def _node_row(line: str, numbers: set[int]) -> dict[str, Any]:
    parts = line.split()
    whole = (
        len(parts) in (4, 5)
        and _COUNT.fullmatch(parts[0])
        and _NODE_NAME.fullmatch(parts[1])
        and _is_ip(parts[2])
        and _NODE_NAME.fullmatch(parts[3])
        and (len(parts) == 4 or _DESIGNATION.fullmatch(parts[4]))
    )
    if not whole:
        # A row wrapped in print, run into the next one or cut short: reading part of it would lose a node, or
        # give one another's name.
        raise ScaleParseError(
            "mmlscluster", f"a node table line of {len(parts)} fields that is no node", line, _NODE_ROW
        )
    number = int(parts[0])
    if number in numbers:
        raise ScaleParseError("mmlscluster", f"node {number} listed twice", line, _NODE_ROW)
    numbers.add(number)
    return {
        "number": number,
        "daemon_name": parts[1],
        "ip": parts[2],
        "admin_name": parts[3],
        "designation": parts[4] if len(parts) == 5 else "",
    }


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _output(tool: str, text: object) -> str:
    # The command's output as text (or its lines, or bytes); a value of another type is a ScaleParseError, which
    # plan()'s callers and the filters catch as a ScaleError.
    try:
        return command_output(tool, text)
    except ParseError as error:
        raise ScaleParseError(error.tool, error.message, error.line, error.expected) from error


def _first(lines: list[str]) -> str:
    return next((line for line in lines if line.strip()), "")


def _last(lines: list[str]) -> str:
    return _first(lines[::-1])


def parse_mmlscluster(text: object) -> dict[str, Any]:
    """mmlscluster's "GPFS cluster information" block and node table: name, id, uid_domain, remote_shell,
    remote_copy, repository and nodes [{number, daemon_name, ip, admin_name, designation}].

    Every line of the node table must be one whole node: a row wrapped in print or run into the next one (as IBM
    Redbook REDP-5610 prints the table), a continuation line, a table cut inside a row or a table without a node is
    a ScaleParseError naming the line, as is output without the cluster's name and id or without the node table."""
    tool = "mmlscluster"
    lines = _output(tool, text).splitlines()
    result: dict[str, Any] = {key: "" for key in _CLUSTER_FIELDS.values()}
    nodes: list[dict[str, Any]] = []
    numbers: set[int] = set()
    header = None
    for line in lines:
        stripped = line.strip()
        if not stripped:
            continue
        if header is None:
            label, sep, value = stripped.partition(":")
            if sep and label in _CLUSTER_FIELDS:
                result[_CLUSTER_FIELDS[label]] = value.strip()
            elif stripped.startswith("Node") and "Daemon node name" in stripped:
                header = line
            continue
        if not set(stripped) <= {"-"}:
            nodes.append(_node_row(line, numbers))
    block = "the 'GPFS cluster information' block ('GPFS cluster name:', 'GPFS cluster id:', ...) and the node table"
    if not result["name"] or not result["id"]:
        raise ScaleParseError(tool, "printed no GPFS cluster name and id", _first(lines), block)
    if len(result["name"].split()) != 1 or not _CLUSTER_ID.fullmatch(result["id"]):
        found = f"GPFS cluster name: {result['name']} / GPFS cluster id: {result['id']}"
        raise ScaleParseError(tool, "an unreadable cluster name or id", found, "one name, and an id of digits")
    if header is None:
        raise ScaleParseError(tool, "no node table", _last(lines), block)
    if not nodes:
        raise ScaleParseError(tool, "a node table without a node", header, _NODE_ROW)
    result["nodes"] = nodes
    return result


_SECTION = re.compile(r"\[([A-Za-z0-9_.:-]+(?:,[A-Za-z0-9_.:-]+)*)\]")
_CONFIG_LINE = re.compile(r"([A-Za-z][A-Za-z0-9_]*) +(\S.*)")
_CONFIG_EXPECTED = (
    "mmlsconfig's listing: 'Configuration data for cluster NAME:', then 'attribute value' lines and [node class] "
    "headers, then 'File systems in cluster NAME:' and one device per line"
)


def parse_mmlsconfig(text: object) -> dict[str, Any]:
    """mmlsconfig's configuration data: {cluster, sections: {section: {attribute: value}}, file_systems}.

    Lines before the first [..] header belong to the whole cluster, as do those under [common]; a header
    [dgx] or [dgx,storage] starts a node class section (its key: the names joined by commas, as printed). A line
    that is none of these (an attribute without its value, a section header cut short, text before the listing's
    header) is a ScaleParseError naming it."""
    tool = "mmlsconfig"
    lines = _output(tool, text).splitlines()
    cluster = ""
    sections: dict[str, dict[str, str]] = {COMMON: {}}
    file_systems: list[str] = []
    section = COMMON
    part = "head"
    before = ""  # the first line before the header
    for raw in lines:
        line = raw.strip()
        match = re.fullmatch(r"Configuration data for cluster (\S+):", line)
        if match and part == "head":
            if before:
                raise ScaleParseError(
                    tool, "a line before the 'Configuration data for cluster' header", before, _CONFIG_EXPECTED
                )
            cluster, part = match[1], "config"
            continue
        if re.fullmatch(r"File systems in cluster \S+:", line) and part == "config":
            part = "file_systems"
            continue
        if not line or set(line) <= {"-"}:
            continue
        if part == "head":
            before = before or raw
            continue
        if part == "file_systems":
            if len(line.split()) != 1:
                raise ScaleParseError(
                    tool, "a file system line that is no device", raw, "one device per line, e.g. /dev/fs0"
                )
            if line != "(none)":
                file_systems.append(line)
            continue
        header = _SECTION.fullmatch(line)
        if header:
            section = header[1]
            sections.setdefault(section, {})
            continue
        setting = _CONFIG_LINE.fullmatch(line)
        if not setting:
            raise ScaleParseError(tool, "a line that is no 'attribute value' and no [section]", raw, _CONFIG_EXPECTED)
        sections[section][setting[1]] = setting[2].strip()
    if not cluster:
        raise ScaleParseError(tool, "no 'Configuration data for cluster' header", _first(lines), _CONFIG_EXPECTED)
    return {"cluster": cluster, "sections": sections, "file_systems": file_systems}


_MEMBER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]*")
_NODECLASS_EXPECTED = (
    "mmlsnodeclass's table: 'Node Class Name  Members', then one node class per line with its comma-separated "
    "members, a long list continued on the next, indented line after a trailing comma"
)


def parse_mmlsnodeclass(text: object) -> dict[str, list[str]]:
    """mmlsnodeclass's table: node class -> members (node names or node classes). No output is no node class; a
    line that is not a node class and its members (or their continuation after a trailing comma) is a
    ScaleParseError naming it."""
    tool = "mmlsnodeclass"
    classes: dict[str, list[str]] = {}
    last = None
    open_list = False  # the last line ended with a comma: its list continues on the next line
    seen_header = False
    for line in _output(tool, text).splitlines():
        stripped = line.strip()
        if not stripped or set(stripped) <= {"-", " "}:
            continue
        if not seen_header:
            if not stripped.startswith("Node Class Name"):
                raise ScaleParseError(tool, "a line before the table's header", line, _NODECLASS_EXPECTED)
            seen_header = True
            continue
        if line[:1].isspace():  # a long member list continues on the next line
            if last is None or not open_list:
                raise ScaleParseError(
                    tool, "a continuation line after a complete member list", line, _NODECLASS_EXPECTED
                )
            members = stripped
        else:
            last, _, members = stripped.partition(" ")
            if not NODE_CLASS.fullmatch(last) or last in classes:
                raise ScaleParseError(tool, "not a node class name, or one listed twice", line, _NODECLASS_EXPECTED)
            classes[last] = []
            members = members.strip()
        names = [m for m in members.split(",") if m]
        if not all(_MEMBER.fullmatch(m) for m in names):
            raise ScaleParseError(tool, "members that are no node or node class names", line, _NODECLASS_EXPECTED)
        classes[last] += names
        open_list = members.endswith(",")
    return classes


_STATE = re.compile(r"[a-z]+")  # active, arbitrating, down, unknown
_MMGETSTATE_EXPECTED = (
    "mmgetstate's table for this node: 'Node number  Node name  GPFS state', then one row: number, name, state"
)


def parse_mmgetstate(text: object) -> dict[str, Any]:
    """mmgetstate (the local node): {number, node, state}. Anything but its header and one node's row (-L's
    columns, -a's several nodes, a row cut short, an error message) is a ScaleParseError."""
    tool = "mmgetstate"
    lines = _output(tool, text).splitlines()
    header = None
    row = None
    for line in lines:
        stripped = line.strip()
        if not stripped or set(stripped) <= {"-"}:
            continue
        if header is None:
            if stripped.split() != ["Node", "number", "Node", "name", "GPFS", "state"]:
                raise ScaleParseError(tool, "printed no node state", line, _MMGETSTATE_EXPECTED)
            header = line
            continue
        parts = stripped.split()
        whole = len(parts) == 3 and _COUNT.fullmatch(parts[0]) and _NODE_NAME.fullmatch(parts[1])
        if row is not None or not whole or not _STATE.fullmatch(parts[2]):
            raise ScaleParseError(tool, "not this node's one row", line, _MMGETSTATE_EXPECTED)
        row = {"number": int(parts[0]), "node": parts[1], "state": parts[2]}
    if row is None:
        raise ScaleParseError(tool, "printed no node state", header or _first(lines), _MMGETSTATE_EXPECTED)
    return row


# ---- values ----------------------------------------------------------------------------------------------------


def _words(value: Any) -> list[str]:
    if isinstance(value, (list, tuple)):
        return [str(v).strip() for v in value if str(v).strip()]
    return str(value).split()


def canonical(attribute: str, value: Any) -> str:
    """The value as mmchconfig is given it (the attribute's own words, K/M/G upper case); ScaleError if it does not
    fit the attribute."""
    spec = ATTRIBUTES.get(attribute)
    if spec is None:
        raise ScaleError(f"{attribute} is not an attribute nodeforge manages")
    kind = spec.kind
    text = value if isinstance(value, str) else ""
    if isinstance(value, bool) and kind in ("yesno", "enable"):
        text = "yes" if value else "no"
    elif isinstance(value, int) and not isinstance(value, bool) and kind == "number":
        text = str(value)
    if kind == "number":
        match = _NUMBER.fullmatch(text.strip())
        if not match or isinstance(value, bool):
            raise ScaleError(EXPECTED[kind])
        return match[1] + match[2].upper()
    if kind in ("yesno", "enable"):
        word = text.strip().lower()
        if word not in _TRUE + _FALSE:
            raise ScaleError(EXPECTED[kind])
        on = word in _TRUE
        if kind == "yesno":
            return "yes" if on else "no"
        return "enable" if on else "disable"
    words = _words(value) if isinstance(value, (str, list, tuple)) else []
    pattern = _SUBNET if kind == "subnets" else _PORT
    if not words or not all(pattern.fullmatch(w) for w in words):  # neither pattern takes mmchconfig's , or =
        raise ScaleError(EXPECTED[kind])
    return " ".join(words)


def comparable(attribute: str, value: Any) -> Any:
    """A key under which equal settings compare equal: 16G = 16g = 16384M, true = yes, list = string of ports."""
    try:
        text = canonical(attribute, value)
    except ScaleError:
        return ("unreadable", " ".join(str(value).split()))
    if ATTRIBUTES[attribute].kind == "number":
        match = _NUMBER.fullmatch(text)
        assert match
        return int(match[1]) * 1024 ** _SUFFIXES[match[2].upper()]
    return text


def port_devices(value: Any) -> list[str]:
    """The HCA device of each verbsPorts entry (mlx5_0/1/2 -> mlx5_0)."""
    return [w.partition("/")[0] for w in _words(value)]


def derived_verbs_ports(hcas: Iterable[Mapping[str, Any]]) -> str:
    """verbsPorts from a hardware profile's HCAs: port 1 of each (DGX-1: mlx5_0/1 mlx5_1/1 mlx5_2/1 mlx5_3/1)."""
    return " ".join(f"{hca['name']}/1" for hca in hcas if hca.get("name"))


# ---- the inventory's settings ----------------------------------------------------------------------------------


def config_problems(
    config: Any, node_class: Any, hcas: Iterable[Mapping[str, Any]] | None, profile: str = ""
) -> list[tuple[str, str, str]]:
    """(variable path, found, expected) for every part of scale_client_config that the role could not apply.

    hcas None: the profile is unknown (the verbsPorts devices are not checked)."""
    problems: list[tuple[str, str, str]] = []
    base = "scale_client_config"
    if not isinstance(config, Mapping):
        return [(base, repr(config), "a mapping of node class (or common) to {attribute: value}")]
    if not isinstance(node_class, str) or (node_class and not NODE_CLASS.fullmatch(node_class)):
        problems.append(("scale_client_node_class", repr(node_class), "a Scale node class name, e.g. dgx"))
        node_class = ""
    known = ", ".join(ATTRIBUTES)
    devices = [str(h.get("name")) for h in hcas or [] if h.get("name")]
    for section, settings in config.items():
        where = f"{base}.{section}"
        if section not in (COMMON, node_class):
            expected = (
                f"common or {node_class} (scale_client_node_class, this host's node class)"
                if node_class
                else "common, or scale_client_node_class set to the node class these settings are for"
            )
            problems.append((where, "a node class other than this host's", expected))
            continue
        if not isinstance(settings, Mapping):
            problems.append((where, repr(settings), "a mapping of mmchconfig attribute to value"))
            continue
        for attribute, value in settings.items():
            if attribute not in ATTRIBUTES:
                problems.append((f"{where}.{attribute}", "an attribute nodeforge does not manage", f"one of {known}"))
                continue
            try:
                canonical(attribute, value)
            except ScaleError as exc:
                problems.append((f"{where}.{attribute}", repr(value), str(exc)))
                continue
            if attribute == "verbsPorts" and hcas is not None:
                unknown = [d for d in port_devices(value) if d not in devices]
                if unknown:
                    problems.append(
                        (
                            f"{where}.verbsPorts",
                            f"{value!r} naming {', '.join(unknown)}",
                            f"ports of {f'profile {profile}' if profile else 'the host'}'s HCAs: "
                            f"{', '.join(devices) or 'none'}",
                        )
                    )
        wants_rdma = "verbsRdma" in settings and _enabled("verbsRdma", settings["verbsRdma"])
        if section != COMMON and wants_rdma and "verbsPorts" not in settings and hcas is not None and not devices:
            problems.append(
                (
                    f"{where}.verbsRdma",
                    f"enable without verbsPorts on profile {profile or 'the host'}, which has no HCA",
                    "verbsPorts set explicitly, or verbsRdma disable",
                )
            )
    return problems


def _enabled(attribute: str, value: Any) -> bool:
    try:
        return canonical(attribute, value) == "enable"
    except ScaleError:
        return False


def wanted_settings(config: Mapping[str, Any], node_class: str, hcas: Iterable[Mapping[str, Any]]) -> dict:
    """{section: {attribute: value as mmchconfig gets it}}: the inventory's, plus verbsPorts derived from the profile
    for the node class when it enables verbsRdma and names no ports (in its place in ATTRIBUTES' order)."""
    # In a fixed order (the node class, then common; attributes in ATTRIBUTES' order): inventories do not keep the
    # order of mappings (group_vars merged, YAML written sorted), the argv must not change with it.
    wanted: dict[str, dict[str, str]] = {}
    for section in sorted(config, key=lambda name: name == COMMON):
        settings = config[section]
        wanted[section] = {a: canonical(a, settings[a]) for a in ATTRIBUTES if a in settings}
    section = wanted.get(node_class)
    if section is not None and section.get("verbsRdma") == "enable" and "verbsPorts" not in section:
        ports = derived_verbs_ports(hcas)
        if ports:
            section["verbsPorts"] = ports
            wanted[node_class] = {a: section[a] for a in ATTRIBUTES if a in section}
    return wanted


def changes(wanted: Mapping[str, Mapping[str, str]], sections: Mapping[str, Mapping[str, str]]) -> dict:
    """{section: {attribute: {"from": current or None, "to": wanted}}} for what differs; a node class's attribute that
    mmlsconfig does not list for that class counts as unset (the cluster-wide value is not the class's own)."""
    result: dict[str, dict[str, dict[str, str | None]]] = {}
    for section, settings in wanted.items():
        current = sections.get(section, {})
        for attribute, value in settings.items():
            now = current.get(attribute)
            if now is None or comparable(attribute, now) != comparable(attribute, value):
                result.setdefault(section, {})[attribute] = {"from": now, "to": value}
    return result


def mmchconfig_call(section: str, diff: Mapping[str, Mapping[str, Any]], bin_dir: str = BIN_DIR) -> dict[str, Any]:
    """One mmchconfig call for a section's changes ({attribute: {from, to}}): -i when every attribute allows it, -N
    for a node class. `summary` says what changes, for the role's announcement."""
    immediate = all(ATTRIBUTES[a].immediate for a in diff)
    argv = [f"{bin_dir.rstrip('/')}/mmchconfig", ",".join(f"{a}={c['to']}" for a, c in diff.items())]
    if immediate:
        argv.append("-i")
    if section != COMMON:
        argv += ["-N", section]
    changed = ", ".join(f"{a} {'(unset)' if c['from'] is None else c['from']} -> {c['to']}" for a, c in diff.items())
    when = "now (-i)" if immediate else "when the GPFS daemon restarts"
    return {
        "section": section,
        "argv": argv,
        "attributes": list(diff),
        "immediate": immediate,
        "summary": f"[{section}] {changed}; takes effect {when}",
    }


# ---- one host's plan -------------------------------------------------------------------------------------------


def plan(
    host: str,
    outputs: Mapping[str, str],
    config: Mapping[str, Any],
    node_class: str,
    hcas: Iterable[Mapping[str, Any]],
    bin_dir: str = BIN_DIR,
    profile: str = "",
    node_label: str = "scale=true",
) -> dict[str, Any]:
    """What the role does on one host, from the outputs of mmlscluster, mmgetstate, mmlsnodeclass and mmlsconfig
    (keys of `outputs`) and the inventory's settings. ScaleError names the host, the variable and what was expected."""
    hcas = list(hcas)
    problems = config_problems(config, node_class, hcas, profile)
    label_pattern, label_expected = VALUE_PATTERNS["scale_client_node_label"]
    if not isinstance(node_label, str) or not re.fullmatch(label_pattern, node_label):
        problems.append(("scale_client_node_label", repr(node_label), label_expected))
    if problems:
        raise ScaleError(
            f"{host}: scale_client settings refused: "
            + "; ".join(f"{path}: found {found}; expected {expected}" for path, found, expected in problems)
        )
    cluster = parse_mmlscluster(outputs["mmlscluster"])
    state = parse_mmgetstate(outputs["mmgetstate"])
    node = state["node"]
    if node_class:
        classes = parse_mmlsnodeclass(outputs.get("mmlsnodeclass"))  # None: no output
        if node_class not in classes:
            raise ScaleError(
                f"{host}: scale_client_node_class: found {node_class}, which cluster {cluster['name']} does not have "
                f"(mmlsnodeclass lists {', '.join(classes) or 'no user-defined node class'}); expected an existing "
                f"node class: create it on an admin node with mmcrnodeclass {node_class} -N {node}"
            )
        if not _member(node, node_class, classes):
            raise ScaleError(
                f"{host}: scale_client_node_class: found {node_class}, whose members ({', '.join(classes[node_class])})"
                f" do not include this node ({node}); expected a node class this node belongs to: add it on an admin "
                f"node with mmchnodeclass {node_class} add -N {node}"
            )
    current = parse_mmlsconfig(outputs["mmlsconfig"])
    wanted = wanted_settings(config, node_class, hcas)
    diff = changes(wanted, current["sections"])
    calls = [mmchconfig_call(section, attrs, bin_dir) for section, attrs in diff.items()]
    restart = list(dict.fromkeys(a for call in calls if not call["immediate"] for a in call["attributes"]))
    label_key, _, label_value = node_label.partition("=")
    return {
        "host": host,
        "cluster": {"name": cluster["name"], "id": cluster["id"]},
        "node": node,
        "daemon_state": state["state"],
        "node_class": node_class,
        "node_label": {"key": label_key, "value": label_value},
        "wanted": wanted,
        "changes": diff,
        "calls": calls,
        "restart_attributes": restart if state["state"] == "active" else [],
    }


def _member(node: str, node_class: str, classes: Mapping[str, list[str]], depth: int = 0) -> bool:
    short = node.partition(".")[0]
    for member in classes[node_class]:  # a class: plan() checked it, and a member is followed only when it is one
        if member.partition(".")[0] == short:
            return True
        if member in classes and depth < 2 and _member(node, member, classes, depth + 1):
            return True
    return False


def restart_record(previous: Any, attributes: Iterable[str], daemon_log: str, active: bool) -> dict[str, Any]:
    """The GPFS daemon restart a node owes ({} when none): attributes changed without -i since the daemon instance
    `daemon_log` (the target of /var/adm/ras/mmfs.log.latest, a new file at each daemon start) began. A record of an
    earlier instance is settled (the daemon restarted since); a daemon that is not active reads the configuration when
    it starts."""
    if not active:
        return {}
    owed = list(attributes)
    if isinstance(previous, Mapping) and previous.get("daemon_log") == daemon_log:
        owed = list(dict.fromkeys([*previous.get("attributes", []), *owed]))
    return {"attributes": owed, "daemon_log": daemon_log} if owed else {}


def owned_calls(plans: Iterable[Mapping[str, Any]], host: str) -> list[dict[str, Any]]:
    """The calls of `host`'s plan that it runs: each (cluster, section) once, by the first host of the play that wants
    that section. Hosts of one cluster that want different values for a section are refused (naming them): the
    section's settings are shared by every node in it."""
    owners: dict[tuple[str, str], tuple[str, Mapping[str, str]]] = {}
    conflicts = []
    plans = [p for p in plans if p]  # a host without a plan (not a Scale client) has none
    for p in plans:
        for section, settings in p["wanted"].items():
            key = (p["cluster"]["id"], section)
            if key not in owners:
                owners[key] = (p["host"], settings)
                continue
            first, theirs = owners[key]
            differ = sorted(
                a
                for a in set(settings) | set(theirs)
                if a not in settings or a not in theirs or comparable(a, settings[a]) != comparable(a, theirs[a])
            )
            if differ:
                conflicts.append(
                    f"[{section}] of cluster {p['cluster']['name']}: {first} wants "
                    + ", ".join(f"{a}={theirs.get(a, '(unset)')}" for a in differ)
                    + f" but {p['host']} wants "
                    + ", ".join(f"{a}={settings.get(a, '(unset)')}" for a in differ)
                )
    if conflicts:
        raise ScaleError(
            "scale_client_config: hosts of one cluster want different settings for a node class they share: "
            + "; ".join(conflicts)
            + "; expected the same values (set them in the group both hosts are in), or separate node classes"
        )
    mine = next((p for p in plans if p["host"] == host), None)
    if mine is None:
        return []
    # Every call's section is one of the plan's wanted sections (plan() makes them from those): it has an owner.
    return [c for c in mine["calls"] if owners[(mine["cluster"]["id"], c["section"])][0] == host]
