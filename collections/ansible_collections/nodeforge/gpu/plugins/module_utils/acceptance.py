# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""`nodeforge validate`'s acceptance checks, written once: parsers of the node tools' output and the evaluators that
compare what they read with the profile's and the version manifest's expectations (the playbook reaches them through
the filters of plugins/filter/acceptance.py).

Parsers take a command's output as the tool prints it with LC_ALL=C (the text, its lines as a registered result's
stdout_lines, or bytes) and return plain dicts and lists. Output they cannot read (damaged, truncated, another tool's
error message in place of the report, binary junk) raises ParseError, which carries the offending raw line; no other
exception comes out of a parser, whatever the input text.

Evaluators return check results: {check, status, measured, expected, reason, unit}, status one of 'pass', 'fail' and
'na' (not applicable, with the reason). They take a parser's result or the raw output; raw output that does not
parse, and anything that is neither (a number, a mapping or list of another shape), is a failed check whose reason
ends with the raw offending line, never an exception.

Units: bandwidth thresholds and measurements of RDMA tests are in MB/s of 10^6 bytes per second (see
rdma_threshold_mbs; perftest's own "MB/sec" is 2^20 bytes per second and is converted); NCCL bandwidths are nccl-tests'
GB/s (10^9 bytes per second) and its times microseconds.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

# One error for every parser of the collection: `tool` the output's source, `line` the raw offending line as the tool
# printed it ("" when the output was empty), `message` what was wrong with it.
from ansible_collections.nodeforge.gpu.plugins.module_utils.parsers import ParseError, shown

# perftest divides by 0x100000 for its "MB/sec" and by 125000000 for "Gb/sec" (perftest_resources.c, format_factor).
PERFTEST_MB = 1048576
GBIT_BYTES = 125000000

# Valid fields of `nvidia-smi --query-gpu`. The row remapper's fields belong to `--query-remapped-rows`
# (nvidia-smi --help-query-remapped-rows), whose output nvidia_smi_remapped_rows reads.
GPU_QUERY_FIELDS = ("index", "name", "pci.bus_id", "persistence_mode", "ecc.mode.current", "retired_pages.pending")
REMAPPED_ROWS_QUERY_FIELDS = ("gpu_bus_id", "remapped_rows.pending", "remapped_rows.failure")

_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
_INTEGER = re.compile(r"\d+")
_VERSION = re.compile(r"[0-9][0-9A-Za-z.\-_+~]*")


def _text(tool: str, output: object) -> str:
    """A command's output given as text, stdout_lines or bytes; None is no output."""
    if output is None:
        return ""
    if isinstance(output, str):
        return output
    if isinstance(output, bytes):
        return output.decode("utf-8", "replace")
    if isinstance(output, (list, tuple)) and all(isinstance(item, str) for item in output):
        return "\n".join(output)
    raise ParseError(tool, f"expected the command's output as text, got {type(output).__name__}", shown(output))


def _nonblank(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def _last_line(text: str) -> str:
    lines = _nonblank(text)
    return lines[-1] if lines else ""


def _number(tool: str, token: str, line: str, what: str) -> float:
    if not _NUMBER.fullmatch(token):
        raise ParseError(tool, f"{what} is not a number ({token!r})", line)
    return float(token)


def _integer(tool: str, token: str, line: str, what: str) -> int:
    # Python refuses to convert strings of more than 4300 digits; no tool prints such a count.
    if not _INTEGER.fullmatch(token) or len(token) > 30:
        raise ParseError(tool, f"{what} is not an integer ({token!r})", line)
    return int(token)


# ---------------------------------------------------------------------------------------------------------------
# NVIDIA driver


# The ID line read in three steps, each one pass over the line: the head, then the first "Kernel Module", then the
# first whole version token after it with another token behind it (a version cut at the line's end is no version).
# One pattern with two lazy gaps and \s+ on both sides of the version backtracked quadratically on a long line of
# blanks or of repeated "Kernel Module" (20 KB of blanks after the module's name took 7 s, 112 KB minutes).
_NVRM_HEAD = re.compile(r"NVRM version:\s+(?=NVIDIA UNIX\b)")
_NVRM_MODULE = re.compile(r"Kernel Module\b")
_NVRM_VERSION = re.compile(r"(?<!\S)(?P<version>\d+\.\d+(?:\.\d+)*)\s+\S")


def _nvrm_id_and_version(line: str) -> tuple[str, str] | None:
    """("NVIDIA UNIX ... Kernel Module ...", "535.261.03") from an NVRM version line, or None."""
    head = _NVRM_HEAD.match(line)
    if not head:
        return None
    module = _NVRM_MODULE.search(line, head.end())
    if not module:
        return None
    found = _NVRM_VERSION.search(line, module.end())
    if not found:
        return None
    return line[head.end() : found.start()], found["version"]  # the ID with the blanks before the version


def nvidia_driver_version(output: object) -> dict:
    """`cat /proc/driver/nvidia/version` -> {version, flavor_hint, raw, gcc}.

    The loaded module's ID line ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.261.03  <build date>", or
    "NVIDIA UNIX Open Kernel Module for x86_64  535.261.03  Release Build ..." for the open modules): flavor_hint is
    'open' for the open kernel modules, else 'proprietary' (the module license is the source of truth for the flavor,
    see module_license_flavor). gcc is the compiler line ("" when absent).
    """
    tool = "/proc/driver/nvidia/version"
    text = _text(tool, output)
    lines = _nonblank(text)
    nvrm = [line for line in lines if line.startswith("NVRM version:")]
    if not nvrm:
        raise ParseError(tool, "no 'NVRM version:' line (is the nvidia module loaded?)", lines[0] if lines else "")
    match = _nvrm_id_and_version(nvrm[0])
    if not match:
        raise ParseError(tool, "unreadable NVRM version line", nvrm[0])
    module_id, version = match
    gcc = [line.split(":", 1)[1].strip() for line in lines if line.startswith("GCC version:")]
    return {
        "version": version,
        "flavor_hint": "open" if "Open Kernel Module" in module_id else "proprietary",
        "raw": nvrm[0],
        "gcc": gcc[0] if gcc else "",
    }


_LICENSE_FLAVOR = {"Dual MIT/GPL": "open", "NVIDIA": "proprietary"}


def module_license_flavor(output: object) -> str:
    """`modinfo -F license nvidia` (or the "license:" line of `modinfo nvidia`) -> 'open' or 'proprietary'.

    MODULE_LICENSE("Dual MIT/GPL") is the open kernel modules' (kernel-open/nvidia/nv.c), "NVIDIA" the proprietary
    ones'.
    """
    tool = "modinfo license"
    lines = _nonblank(_text(tool, output))
    if not lines:
        raise ParseError(tool, "no license in the output", "")
    tagged = [line for line in lines if line.startswith("license:")]
    line = tagged[0] if tagged else lines[0]
    value = line.split(":", 1)[1].strip() if tagged else line.strip()
    if value not in _LICENSE_FLAVOR:
        raise ParseError(tool, f"not an NVIDIA module license ({value!r})", line)
    return _LICENSE_FLAVOR[value]


_NA = {"[N/A]", "N/A", "[Not Supported]", "Not Supported"}
_ENABLED = {"Enabled": True, "Disabled": False}
_YES = {"Yes": True, "No": False, "1": True, "0": False}
_BUS_ID = re.compile(r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]")
_GPU_KEYS = {
    "index": "index",
    "name": "name",
    "pci.bus_id": "bus_id",
    "gpu_bus_id": "bus_id",
    "persistence_mode": "persistence",
    "ecc.mode.current": "ecc",
    "retired_pages.pending": "retired_pages_pending",
    "remapped_rows.pending": "remapped_rows_pending",
    "remapped_rows.failure": "remapped_rows_failure",
}


def _gpu_value(tool: str, field: str, value: str, line: str) -> object:
    if field == "index":
        return _integer(tool, value, line, "the GPU index")
    if field in ("pci.bus_id", "gpu_bus_id"):
        if not _BUS_ID.fullmatch(value):
            raise ParseError(tool, f"not a PCI bus id ({value!r})", line)
        return value.upper()
    if field in ("persistence_mode", "ecc.mode.current"):
        if value in _NA:
            return None
        if value not in _ENABLED:
            raise ParseError(tool, f"{field} is {value!r}, neither Enabled nor Disabled", line)
        return _ENABLED[value]
    if field in ("retired_pages.pending", "remapped_rows.pending", "remapped_rows.failure"):
        if value in _NA:
            return None
        if value not in _YES:
            raise ParseError(tool, f"{field} is {value!r}, neither Yes nor No", line)
        return _YES[value]
    if not value:
        raise ParseError(tool, f"{field} is empty", line)
    return value


def _nvidia_smi_csv(tool: str, output: object, fields: Sequence[str]) -> list[dict]:
    fields = [f.strip() for f in (fields.split(",") if isinstance(fields, str) else fields)]
    lines = _nonblank(_text(tool, output))
    if not lines:
        raise ParseError(tool, "no GPU in the output", "")
    header = [re.sub(r"\s*\[.*\]$", "", v.strip()) for v in lines[0].split(",")]
    if header == fields:
        lines = lines[1:]
        if not lines:
            raise ParseError(tool, "a header and no GPU", "")
    rows = []
    for line in lines:
        values = [v.strip() for v in line.split(",")]
        if len(values) != len(fields):
            raise ParseError(tool, f"{len(values)} values where {len(fields)} fields were asked for", line)
        rows.append(
            {
                _GPU_KEYS.get(f, f.replace(".", "_")): _gpu_value(tool, f, v, line)
                for f, v in zip(fields, values, strict=True)
            }
        )
    return rows


def nvidia_smi_gpus(output: object, fields: Sequence[str] | str = GPU_QUERY_FIELDS) -> list[dict]:
    """`nvidia-smi --query-gpu=<fields> --format=csv,noheader` (a header line is skipped too) -> one dict per GPU.

    Keys: index (int), name, bus_id (upper case), persistence and ecc (True for Enabled, False for Disabled, None for
    [N/A]), retired_pages_pending, remapped_rows_pending, remapped_rows_failure (True for Yes, False for No, None for
    [N/A]); other fields keep their name with dots as underscores. A value nvidia-smi could not read ("[Unknown
    Error]", "[GPU requires reset]") is a ParseError: that GPU is not healthy.
    """
    return _nvidia_smi_csv("nvidia-smi --query-gpu", output, fields)


def nvidia_smi_remapped_rows(output: object, fields: Sequence[str] | str = REMAPPED_ROWS_QUERY_FIELDS) -> list[dict]:
    """`nvidia-smi --query-remapped-rows=gpu_bus_id,remapped_rows.pending,remapped_rows.failure
    --format=csv,noheader` -> [{bus_id, remapped_rows_pending, remapped_rows_failure}] (Ampere and later)."""
    return _nvidia_smi_csv("nvidia-smi --query-remapped-rows", output, fields)


# ---------------------------------------------------------------------------------------------------------------
# RDMA stack


_OFED_INFO = re.compile(r"(?P<prefix>MLNX_OFED_LINUX|OFED-internal)-(?P<version>[0-9][0-9A-Za-z.\-_]*?)(?::| \(.*\):)")


def ofed_info(output: object) -> dict:
    """`ofed_info -s` -> {stack, version, raw}: "MLNX_OFED_LINUX-4.7-3.2.9.0:" is MLNX_OFED 4.7-3.2.9.0 (stack
    'mlnx_ofed'); DOCA-OFED prints the MLNX_OFED base of its release, "OFED-internal-24.10-1.1.4:" (stack 'doca').
    The first line of a full `ofed_info` ("MLNX_OFED_LINUX-5.4-1.0.3.0 (OFED-5.4-1.0.3):") reads the same."""
    tool = "ofed_info -s"
    lines = _nonblank(_text(tool, output))
    if not lines:
        raise ParseError(tool, "no output (is OFED installed?)", "")
    match = _OFED_INFO.fullmatch(lines[0].strip())
    if not match:
        raise ParseError(tool, "not an OFED version line", lines[0])
    return {
        "stack": "mlnx_ofed" if match["prefix"] == "MLNX_OFED_LINUX" else "doca",
        "version": match["version"],
        "raw": lines[0].strip(),
    }


# Port states as ibstat names them (port_state_str) and as sysfs does ("4: ACTIVE"), one vocabulary.
_IBSTAT_STATES = {"Down": "DOWN", "Initializing": "INIT", "Armed": "ARMED", "Active": "ACTIVE", "???": "UNKNOWN"}
_SYSFS_STATES = {"NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER", "UNKNOWN"}
_PHYS_STATES = {
    "No state change",
    "Sleep",
    "Polling",
    "Disabled",
    "PortConfigurationTraining",
    "LinkUp",
    "LinkErrorRecovery",
    "PhyTest",
    "Phy Test",
    "<unknown>",
    "???",
    "unknown",
}
_LINK_LAYERS = {"InfiniBand": "InfiniBand", "IB": "InfiniBand", "Ethernet": "Ethernet", "Unknown": "Unknown"}
_IBSTAT_CA = re.compile(r"(?P<type>CA|Switch|Router|iWARP RNIC|\?\?\?)(?P<alone>:)? '(?P<ca>[^']*)'")
_IBSTAT_CA_KEYS = {"Number of ports", "Firmware version", "Hardware version", "Node GUID", "System image GUID"}
_IBSTAT_PORT_KEYS = {
    "State": "state",
    "Physical state": "phys_state",
    "Rate": "rate",
    "Base lid": "base_lid",
    "LMC": "lmc",
    "SM lid": "sm_lid",
    "Capability mask": "capability_mask",
    "Port GUID": "port_guid",
    "Link layer": "link_layer",
}
_REQUIRED_PORT_KEYS = ("state", "phys_state", "rate", "link_layer")


def _port(tool: str, ca: str, port: int, values: dict, last_line: str) -> dict:
    missing = [key for key in _REQUIRED_PORT_KEYS if key not in values]
    if missing:
        raise ParseError(tool, f"{ca} port {port} ends without {', '.join(missing)}", last_line)
    return {
        "ca": ca,
        "port": port,
        "state": values["state"],
        "phys_state": values["phys_state"],
        "rate_gbps": values["rate"],
        "link_layer": values["link_layer"],
    }


def ibstat(output: object) -> list[dict]:
    """`ibstat` (all CAs, or `ibstat CA PORT`) -> [{ca, port, state, phys_state, rate_gbps, link_layer}].

    state in sysfs' vocabulary (ACTIVE, DOWN, INIT, ARMED), phys_state as printed (LinkUp, Polling, Disabled...),
    rate_gbps a float (ibstat prints the signalling rate in Gb/s: 100 for 4X EDR, 2.5 for 1X SDR), link_layer
    InfiniBand or Ethernet. No output is no CA: [].
    """
    tool = "ibstat"
    lines = _text(tool, output).splitlines()
    ports: list[dict] = []
    ca = None
    declared = None
    ca_line = ""
    ca_ports = 0
    port = None
    values: dict = {}
    last = ""

    def close_port() -> None:
        nonlocal port, values, ca_ports
        if port is not None:
            ports.append(_port(tool, ca, port, values, last))
            ca_ports += 1
        port, values = None, {}

    def close_ca() -> None:
        close_port()
        if ca is not None and (ca_ports == 0 or (declared is not None and ca_ports not in (declared, declared + 1))):
            raise ParseError(tool, f"{ca} declares {declared} ports and shows {ca_ports}", ca_line)

    for line in lines:
        stripped = line.strip()
        if not stripped:
            continue
        head = _IBSTAT_CA.fullmatch(stripped)
        if head:
            close_ca()
            ca, ca_line, declared, ca_ports = head["ca"], line, None, 0
            continue
        if ca is None:
            raise ParseError(tool, "output does not start with a CA", line)
        port_head = re.fullmatch(r"Port (\d+):", stripped)
        if port_head:
            close_port()
            port = _integer(tool, port_head[1], line, "the port number")
            last = line
            continue
        key, sep, value = stripped.partition(":")
        value = value.strip()
        if not sep:
            raise ParseError(tool, "not a 'key: value' line", line)
        if port is None:
            if key == "Number of ports":
                declared = _integer(tool, value, line, "the number of ports")
            elif key not in _IBSTAT_CA_KEYS and not key.endswith(" type"):
                raise ParseError(tool, f"unknown CA field {key!r}", line)
        elif key in _IBSTAT_PORT_KEYS:
            name = _IBSTAT_PORT_KEYS[key]
            if name == "state":
                if value not in _IBSTAT_STATES:
                    raise ParseError(tool, f"unknown port state {value!r}", line)
                values[name] = _IBSTAT_STATES[value]
            elif name == "phys_state":
                if value not in _PHYS_STATES:
                    raise ParseError(tool, f"unknown physical state {value!r}", line)
                values[name] = value
            elif name == "rate":
                rate = re.fullmatch(r"(\d+(?:\.\d+)?)(?: \(FDR10\))?", value)
                if not rate:
                    raise ParseError(tool, f"unreadable rate {value!r}", line)
                values[name] = float(rate[1])
            elif name == "link_layer":
                if value not in _LINK_LAYERS:
                    raise ParseError(tool, f"unknown link layer {value!r}", line)
                values[name] = _LINK_LAYERS[value]
            # The other fields (lids, LMC, capability mask, GUID) are known and not read.
        else:
            raise ParseError(tool, f"unknown port field {key!r}", line)
        last = line
    close_ca()
    return ports


_IBSTATUS_HEAD = re.compile(r"Infiniband device '(?P<ca>[^']*)' port (?P<port>\d+) status:")
_IBSTATUS_KEYS = {
    "default gid": "gid",
    "base lid": "base_lid",
    "sm lid": "sm_lid",
    "state": "state",
    "phys state": "phys_state",
    "rate": "rate",
    "link_layer": "link_layer",
}


def _ibstatus_value(tool: str, name: str, value: str, line: str) -> object:
    if name == "state":
        if value == "unknown":
            return "UNKNOWN"
        state = re.fullmatch(r"\d+:\s*(\S+)", value)
        if not state or state[1] not in _SYSFS_STATES:
            raise ParseError(tool, f"unknown port state {value!r}", line)
        return state[1]
    if name == "phys_state":
        phys = re.fullmatch(r"(?:\d+:\s*)?(.+)", value)
        if not phys or phys[1] not in _PHYS_STATES:
            raise ParseError(tool, f"unknown physical state {value!r}", line)
        return phys[1]
    if name == "rate":
        if value == "unknown":
            return None
        rate = re.fullmatch(r"(\d+(?:\.\d+)?) Gb/sec(?: \(.*\))?", value)
        if not rate:
            raise ParseError(tool, f"unreadable rate {value!r}", line)
        return float(rate[1])
    if name == "link_layer":
        if value not in _LINK_LAYERS:
            raise ParseError(tool, f"unknown link layer {value!r}", line)
        return _LINK_LAYERS[value]
    return value


def ibstatus(output: object) -> list[dict]:
    """`ibstatus` (infiniband-diags' script over /sys/class/infiniband) -> the same port dicts as ibstat.

    rate_gbps is None where sysfs has no rate ("unknown"); a missing link_layer file reads "IB", InfiniBand.
    """
    tool = "ibstatus"
    ports: list[dict] = []
    current = None
    values: dict = {}
    last = ""
    for line in _text(tool, output).splitlines():
        if not line.strip():
            continue
        head = _IBSTATUS_HEAD.fullmatch(line.strip())
        if head:
            if current:
                ports.append(_port(tool, current[0], current[1], values, last))
            current, values, last = (head["ca"], _integer(tool, head["port"], line, "the port")), {}, line
            continue
        if current is None:
            raise ParseError(tool, "output does not start with an 'Infiniband device' line", line)
        key, sep, value = line.strip().partition(":")
        value = value.strip()
        if not sep or key not in _IBSTATUS_KEYS:
            raise ParseError(tool, "not a port status line", line)
        if not value:
            raise ParseError(tool, f"{key} without a value", line)
        name = _IBSTATUS_KEYS[key]
        values[name] = _ibstatus_value(tool, name, value, line)
        last = line
    if current:
        ports.append(_port(tool, current[0], current[1], values, last))
    return ports


def hca_ports(output: object) -> list[dict]:
    """ibstat's or ibstatus' output, whichever it is (told apart by ibstatus' "Infiniband device" lines)."""
    text = _text("ibstat/ibstatus", output)
    lines = _nonblank(text)
    if lines and lines[0].strip().startswith("Infiniband device"):
        return ibstatus(text)
    return ibstat(text)


_IB_WRITE_BW_HEADER = re.compile(
    r"#bytes\s+#iterations\s+BW peak\[(?P<unit>MiB|MB|Gb)/sec\]\s+BW average\[(?P=unit)/sec\]\s+MsgRate\[Mpps\].*"
)
# A warning perftest prints inside its table, between the header and the rows, when the CPUs' clocks differ.
_PERFTEST_TABLE_WARNING = re.compile(r"Conflicting CPU frequency values detected: .*")


# perftest counts a transfer in CPU cycles and measures the CPU's clock after it (get_clock.c: 200 timed busy loops and
# a line fitted through them); where the fit is poor (r^2 below 0.9: a busy or emulated CPU) the clock is 0 MHz, and
# with -F perftest prints its report all the same, every rate 0.00. Such a report measured nothing.
_PERFTEST_NO_CLOCK = re.compile(r"Correlation coefficient r\^2: (?P<r2>\S+) < 0\.9")


def perftest_clock_unmeasured(output: object) -> bool:
    """True for perftest output whose CPU clock could not be measured and that has no rate ib_write_bw reads (a report
    of 0.00 with -F, none without): the run is worth repeating, where a report below a floor or a failed connection
    is not."""
    text = _text("ib_write_bw", output)
    if not _PERFTEST_NO_CLOCK.search(text):
        return False
    try:
        ib_write_bw(text)
    except ParseError:
        return True
    return False


def ib_write_bw(output: object) -> dict:
    """perftest's report (ib_write_bw and its siblings) -> {bytes, iterations, bw_peak_mbs, bw_avg_mbs,
    msg_rate_mpps, unit, bw_peak, bw_avg, rows}.

    bw_peak_mbs and bw_avg_mbs are in MB/s of 10^6 bytes: perftest's "BW average[MB/sec]" counts 2^20 bytes per
    second (its Redbook run: 11264.11 MB/sec is 11811.3 MB/s here, and 65536 B x 0.180226 Mpps agrees), as does the
    "BW average[MiB/sec]" that releases since April 2024 print for the same number (linux-rdma/perftest pull request
    257; Debian 13's perftest 25.01), and its "BW average[Gb/sec]" (--report_gbits) 10^9 bits. bw_peak and bw_avg are
    the numbers as printed, unit "MB/sec", "MiB/sec" or "Gb/sec". rows lists every message size of the table (-a); the
    top-level values are its last row's. perftest's warning of conflicting CPU clocks inside the table is passed over.
    """
    tool = "ib_write_bw"
    text = _text(tool, output)
    lines = text.splitlines()
    headers = [i for i, line in enumerate(lines) if _IB_WRITE_BW_HEADER.fullmatch(line.strip())]
    if not headers:
        raise ParseError(tool, "no bandwidth report", _last_line("\n".join(lines)))
    header = lines[headers[-1]]
    unit = _IB_WRITE_BW_HEADER.fullmatch(header.strip())["unit"]
    factor = GBIT_BYTES / 1e6 if unit == "Gb" else PERFTEST_MB / 1e6
    rows = []
    for line in lines[headers[-1] + 1 :]:
        tokens = line.split()
        if not tokens or _PERFTEST_TABLE_WARNING.fullmatch(line.strip()):
            continue
        if set(line.strip()) <= {"-", "_"}:
            break
        if len(tokens) < 5:
            raise ParseError(tool, "a result row with fewer than 5 columns", line)
        peak = _number(tool, tokens[2], line, "BW peak")
        avg = _number(tool, tokens[3], line, "BW average")
        rows.append(
            {
                "bytes": _integer(tool, tokens[0], line, "#bytes"),
                "iterations": _integer(tool, tokens[1], line, "#iterations"),
                "bw_peak": peak,
                "bw_avg": avg,
                "bw_peak_mbs": round(peak * factor, 2),
                "bw_avg_mbs": round(avg * factor, 2),
                "msg_rate_mpps": _number(tool, tokens[4], line, "MsgRate"),
            }
        )
    if not rows:
        raise ParseError(tool, "the report has a header and no result", header)
    unmeasured = _PERFTEST_NO_CLOCK.search(text)
    if unmeasured and rows[-1]["bw_avg"] == 0:
        raise ParseError(
            tool,
            f"perftest could not measure the CPU clock it times the transfer with (r^2 {unmeasured['r2']} < 0.9: a "
            "busy or emulated CPU), so its 0.00 is no measurement",
            unmeasured.group(0),
        )
    return {**rows[-1], "unit": f"{unit}/sec", "rows": rows}


def rdma_threshold_mbs(rate_gbps: float, fraction: float = 0.9) -> float:
    """The default ib_write_bw floor: `fraction` of the port's line rate, in MB/s of 10^6 bytes per second.

    100 Gb/s EDR: 100e9 / 8 / 1e6 * 0.9 = 11250 MB/s. ib_write_bw's own "MB/sec" is 2^20 bytes per second, so
    ib_write_bw parses it into this unit before the comparison; the IBM Redbook's floor of 11,000 perftest MB/sec
    (REDP-5610, 4.1) is 11534.3 MB/s in this unit.
    """
    return round(float(rate_gbps) * 125 * float(fraction), 3)  # Gb/s -> MB/s: 1e9 bits / 8 / 1e6 bytes


def systemd_memlock(output: object) -> str | int:
    """`systemctl show -p LimitMEMLOCK UNIT` ("LimitMEMLOCK=infinity"), or its --value form -> 'infinity' or the
    limit in bytes. A LoadState=not-found line (asked for with -p LoadState) is a ParseError: systemctl shows the
    default limits for units that do not exist."""
    tool = "systemctl show -p LimitMEMLOCK"
    lines = _nonblank(_text(tool, output))
    if not lines:
        raise ParseError(tool, "no output", "")
    for line in lines:
        if line.strip() == "LoadState=not-found":
            raise ParseError(tool, "the unit does not exist", line)
    tagged = [line for line in lines if line.startswith("LimitMEMLOCK=")]
    if tagged:
        line, value = tagged[0], tagged[0].split("=", 1)[1].strip()
    elif len(lines) == 1 and "=" not in lines[0]:
        line, value = lines[0], lines[0].strip()
    else:
        raise ParseError(tool, "no LimitMEMLOCK= line", lines[0])
    if value == "infinity":
        return "infinity"
    return _integer(tool, value, line, "LimitMEMLOCK")


def memory_peers_version(output: object) -> str:
    """`cat /sys/kernel/mm/memory_peers/*/version` (or `grep . .../version`, "PATH:VERSION") -> the peer memory
    client's version: nvidia-peermem registers "nv_mem" (and "nv_mem_nc") with the driver's version, the legacy
    nv_peer_mem its own ("1.0-9"). Clients of different versions at once are a ParseError."""
    tool = "/sys/kernel/mm/memory_peers/*/version"
    lines = _nonblank(_text(tool, output))
    if not lines:
        raise ParseError(tool, "no peer memory client registered", "")
    versions = []
    for line in lines:
        value = line.rsplit(":", 1)[1] if line.startswith("/") and ":" in line else line
        value = value.strip()
        if not _VERSION.fullmatch(value):
            raise ParseError(tool, "not a version", line)
        if versions and value != versions[0]:
            raise ParseError(tool, f"peer memory clients of different versions ({versions[0]}, {value})", line)
        versions.append(value)
    return versions[0]


# ---------------------------------------------------------------------------------------------------------------
# NCCL and DCGM


def _nccl_part(tool: str, tokens: list[str], line: str, prefix: str) -> dict:
    wrong = tokens[3]
    return {
        f"{prefix}_time_us": _number(tool, tokens[0], line, "time"),
        f"{prefix}_algbw": _number(tool, tokens[1], line, "algbw"),
        f"{prefix}_busbw": _number(tool, tokens[2], line, "busbw"),
        f"{prefix}_wrong": None if wrong == "N/A" else _number(tool, wrong, line, "#wrong/error"),
    }


def nccl_all_reduce(output: object) -> dict:
    """nccl-tests' all_reduce_perf output -> {rows, avg_busbw, out_of_bounds, complete}.

    rows: {size, count, type, redop, root, oop_time_us, oop_algbw, oop_busbw, oop_wrong, ip_time_us, ip_algbw,
    ip_busbw, ip_wrong}, bandwidths in GB/s (10^9 bytes), times in microseconds. Both layouts read: nccl-tests before
    the root column (size count type redop | time algbw busbw error, twice: the IBM Redbook's, root None) and after it
    (#wrong counts; per-iteration and timestamp columns ignored). avg_busbw is "# Avg bus bandwidth" and
    out_of_bounds "# Out of bounds values" (None when the output ends before them); complete says whether it did.
    Lines of NCCL's own log in between are skipped.
    """
    tool = "all_reduce_perf"
    text = _text(tool, output)
    rows = []
    avg_busbw = None
    out_of_bounds = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            body = stripped.lstrip("#").strip()
            if body.startswith("Avg bus bandwidth"):
                found = re.fullmatch(r"Avg bus bandwidth\s*:\s*(\S+)(?:\s+\S+)?", body)
                if not found:
                    raise ParseError(tool, "unreadable average bus bandwidth", line)
                avg_busbw = _number(tool, found[1], line, "Avg bus bandwidth")
            elif body.startswith("Out of bounds values"):
                found = re.fullmatch(r"Out of bounds values\s*:\s*(\d+)(?:\s+\S+)?", body)
                if not found:
                    raise ParseError(tool, "unreadable out-of-bounds count", line)
                out_of_bounds = _integer(tool, found[1], line, "Out of bounds values")
            continue
        tokens = stripped.split()
        if not tokens or not _INTEGER.fullmatch(tokens[0]):
            continue
        # 12 tokens: before the root column; 13 (+2 with timestamps): with it; 21 (+2): per-iteration statistics.
        if len(tokens) == 12:
            offset, width, root = 4, 4, None
        elif len(tokens) in (13, 15, 21, 23):
            offset, width = 5, 4 if len(tokens) in (13, 15) else 8
            root = -1 if tokens[4] == "-1" else _integer(tool, tokens[4], line, "root")
        else:
            raise ParseError(tool, f"a result row of {len(tokens)} columns", line)
        row = {
            "size": _integer(tool, tokens[0], line, "size"),
            "count": _integer(tool, tokens[1], line, "count"),
            "type": tokens[2],
            "redop": tokens[3],
            "root": root,
        }
        row.update(_nccl_part(tool, tokens[offset : offset + 4], line, "oop"))
        row.update(_nccl_part(tool, tokens[offset + width : offset + width + 4], line, "ip"))
        rows.append(row)
    if not rows:
        raise ParseError(tool, "no result rows", _last_line(text))
    return {
        "rows": rows,
        "avg_busbw": avg_busbw,
        "out_of_bounds": out_of_bounds,
        "complete": avg_busbw is not None,
    }


_NCCL_NET = re.compile(r"NCCL INFO NET/(?P<net>\w+)\s*:\s*Using\s+(?P<devices>.*?)(?:\s*;.*)?$")
_NCCL_VIA = re.compile(r"\bvia NET/(?P<net>\w+)/\d+(?:\(\d+\))?(?P<gdr>/GDRDMA)?")


def nccl_transport(output: object) -> dict:
    """An NCCL_DEBUG=INFO log -> {net, devices, connections, gdrdma_connections, gdrdma}.

    net is the network NCCL's channels went over ("IB", "Socket"; from "NET/IB : Using ..." when no channel line is
    in the log; None when the log names none), devices its "NET/IB : Using [0]mlx5_3:1/IB ..." list, connections the
    channels "via NET/...", gdrdma_connections those ending in /GDRDMA (GPUDirect RDMA); gdrdma is whether any did or
    NCCL logged "GPU Direct RDMA Enabled".
    """
    text = _text("NCCL log", output)
    using_net = None
    via_net = None
    devices: list[str] = []
    connections = 0
    gdrdma_connections = 0
    enabled = False
    for line in text.splitlines():
        using = _NCCL_NET.search(line)
        # "NET/Plugin: Using internal network plugin." names no network.
        if using and using["net"] != "Plugin":
            using_net = using["net"]
            for device in re.findall(r"\[\d+\](\S+)", using["devices"]):
                if device not in devices:
                    devices.append(device)
        for via in _NCCL_VIA.finditer(line):
            via_net = via_net or via["net"]
            connections += 1
            gdrdma_connections += 1 if via["gdr"] else 0
        if "GPU Direct RDMA Enabled" in line:
            enabled = True
    return {
        "net": via_net or using_net,
        "devices": devices,
        "connections": connections,
        "gdrdma_connections": gdrdma_connections,
        "gdrdma": gdrdma_connections > 0 or enabled,
    }


_DCGM_SECTION = re.compile(r"[|+]-----\s+(?P<name>\w[\w ]*?)\s+-+\+-+[|+]")


def dcgmi_diag(output: object) -> dict:
    """`dcgmi diag -r 1` (or -r 2/3) -> {metadata, tests, messages, passed}.

    tests maps each test row to its result ("Pass", "Fail", "Skip", "Pass - All", "Fail - GPU: 3"...), metadata the
    Metadata section (DCGM Version, Driver Version Detected...), messages the Error/Warning/Info rows ({test, kind,
    text}, wrapped lines joined); passed is no result starting with Fail. Output without the table's closing border
    (cut short) or with dcgmi's error instead of the table is a ParseError.
    """
    tool = "dcgmi diag"
    lines = _text(tool, output).splitlines()
    nonblank = [line for line in lines if line.strip()]
    if not any(line.strip() == "Successfully ran diagnostic for group." for line in nonblank):
        raise ParseError(tool, "the diagnostic did not run", nonblank[0] if nonblank else "")
    metadata: dict = {}
    tests: dict = {}
    messages: list[dict] = []
    section = None
    last_test = None
    closed = False
    for line in nonblank:
        stripped = line.strip()
        if stripped == "Successfully ran diagnostic for group.":
            continue
        head = _DCGM_SECTION.fullmatch(stripped)
        if head:
            section = head["name"]
            continue
        if re.fullmatch(r"\+[-=]+\+[-=]+\+", stripped):
            closed = True
            continue
        cells = stripped.split("|")
        if len(cells) != 4 or cells[0] or cells[3]:
            raise ParseError(tool, "not a table row", line)
        name, info = cells[1].strip(), cells[2].strip()
        closed = False
        if (name, info) == ("Diagnostic", "Result"):
            continue
        if section == "Metadata":
            if name:
                metadata[name] = info
            continue
        if name in ("Error", "Warning", "Info"):
            messages.append({"test": last_test, "kind": name, "text": info})
        elif not name:
            if messages and messages[-1]["test"] == last_test:
                messages[-1]["text"] += info
            elif last_test is not None:
                messages.append({"test": last_test, "kind": "Detail", "text": info})
            else:
                raise ParseError(tool, "a continuation row before any test", line)
        else:
            if not info:
                raise ParseError(tool, f"{name} without a result", line)
            tests[name] = info
            last_test = name
    if not closed:
        raise ParseError(tool, "the table ends without its closing border", nonblank[-1])
    if not tests:
        raise ParseError(tool, "no test results", nonblank[-1])
    return {
        "metadata": metadata,
        "tests": tests,
        "messages": messages,
        "passed": not any(result.startswith("Fail") for result in tests.values()),
    }


# ---------------------------------------------------------------------------------------------------------------
# Check results


def check_result(
    check: str,
    status: str,
    measured: object = None,
    expected: object = None,
    reason: str = "",
    unit: str | None = None,
) -> dict:
    """One check's result; status 'pass', 'fail' or 'na'."""
    if status not in ("pass", "fail", "na"):
        raise ValueError(f"status must be pass, fail or na, not {status!r}")
    return {
        "check": check,
        "status": status,
        "measured": measured,
        "expected": expected,
        "reason": reason,
        "unit": unit,
    }


def not_applicable(check: str, reason: str, expected: object = None) -> dict:
    """A check that does not apply to this node, and why (e.g. "no HCA in profile lab")."""
    return check_result(check, "na", None, expected, reason)


def parse_failure(check: str, error: ParseError, expected: object = None) -> dict:
    """A failed check for output its parser could not read; the reason ends with the raw offending line."""
    line = error.line if error.line else "(empty output)"
    return check_result(
        check, "fail", None, expected, f"{error.tool} output could not be read: {error.message}; line: {line}"
    )


def _raw(data: object) -> bool:
    return (
        data is None
        or isinstance(data, (str, bytes))
        or (isinstance(data, (list, tuple)) and all(isinstance(item, str) for item in data))
    )


_SCALAR = (str, int, float, bool, type(None))
_NUMBER_TYPES = (int, float)


def _has(data: object, **kinds: type | tuple[type, ...]) -> bool:
    """data is a mapping with these keys, each value of its kind."""
    return isinstance(data, Mapping) and all(key in data and isinstance(data[key], kind) for key, kind in kinds.items())


def _all(data: object, valid: Callable[[object], bool], empty: bool = True) -> bool:
    """data is a list (or tuple) of items that are valid, and not empty unless `empty`."""
    return isinstance(data, (list, tuple)) and (empty or bool(data)) and all(valid(item) for item in data)


def _gpu_row(row: object) -> bool:
    return (
        isinstance(row, Mapping)
        and all(isinstance(value, _SCALAR) for value in row.values())
        and isinstance(row.get("name", ""), str)
    )


# What each parser returns, as much of it as the evaluators read: a result handed to an evaluator in place of the raw
# output (the playbook may parse once and evaluate twice) is used only when it has this shape.
_RESULT_SHAPES: dict[Callable, Callable[[object], bool]] = {
    nvidia_driver_version: lambda d: _has(d, version=str, flavor_hint=str),
    nvidia_smi_gpus: lambda d: _all(d, _gpu_row),
    nvidia_smi_remapped_rows: lambda d: _all(d, _gpu_row),
    ofed_info: lambda d: _has(d, version=str, raw=str),
    hca_ports: lambda d: _all(
        d,
        lambda p: _has(
            p, ca=str, port=int, state=str, phys_state=str, rate_gbps=(*_NUMBER_TYPES, type(None)), link_layer=str
        ),
    ),
    ib_write_bw: lambda d: _has(d, bw_avg_mbs=_NUMBER_TYPES, bytes=_SCALAR, bw_avg=_SCALAR, unit=_SCALAR),
    nccl_all_reduce: lambda d: (
        _has(d, rows=(list, tuple), avg_busbw=_SCALAR, out_of_bounds=_SCALAR, complete=_SCALAR)
        and _all(
            d["rows"],
            lambda r: _has(r, size=_NUMBER_TYPES, oop_busbw=_NUMBER_TYPES, oop_time_us=_NUMBER_TYPES),
            empty=False,
        )
    ),
    nccl_transport: lambda d: (
        _has(d, net=(str, type(None)), devices=(list, tuple), gdrdma=_SCALAR)
        and _all(d["devices"], lambda device: isinstance(device, str))
    ),
    dcgmi_diag: lambda d: (
        _has(d, tests=Mapping, messages=(list, tuple))
        and all(isinstance(k, str) and isinstance(v, str) for k, v in d["tests"].items())
        and _all(d["messages"], lambda m: _has(m, test=(str, type(None)), kind=str, text=str))
    ),
}


def _read(data: object, parser: Callable) -> object:
    """The parser's result: of raw output (text, lines, bytes, None), or data that is such a result already. Anything
    else (a number, a mapping or list of another shape) is a ParseError, which the evaluators report as a failed
    check like any output they cannot read."""
    if _raw(data):
        return parser(data)
    if _RESULT_SHAPES[parser](data):
        return data
    what = f"neither the command's output (text, lines or bytes) nor a {parser.__name__} result"
    raise ParseError(parser.__name__, f"{what}: a value of type {type(data).__name__}", shown(data))


def _version_matches(measured: str, expected: str) -> bool:
    """Equal, or expected is a leading part of measured up to a separator ("580" matches "580.126.20")."""
    measured, expected = str(measured), str(expected)
    return measured == expected or (measured.startswith(expected) and measured[len(expected)] in ".-")


def evaluate_driver_version(version_output: object, expected_version: str | None) -> dict:
    """The loaded module's version (/proc/driver/nvidia/version) equals the installed or pinned one."""
    check = "driver_version"
    if not expected_version:
        return not_applicable(check, "no driver version pinned for this node")
    try:
        parsed = _read(version_output, nvidia_driver_version)
    except ParseError as error:
        return parse_failure(check, error, expected_version)
    measured = parsed["version"]
    if _version_matches(measured, expected_version):
        return check_result(check, "pass", measured, expected_version, f"loaded module {measured}")
    return check_result(
        check, "fail", measured, expected_version, f"loaded module {measured}, expected {expected_version}"
    )


def evaluate_driver_flavor(license_output: object, expected_flavor: str | None, version_output: object = None) -> dict:
    """The module's flavor, from its license, is the configured one (open or proprietary); with
    /proc/driver/nvidia/version given, its ID line must agree. license_output None (no modinfo on the node): the ID
    line alone."""
    check = "driver_flavor"
    if not expected_flavor:
        return not_applicable(check, "no driver flavor configured for this node")
    try:
        hint = None if version_output is None else _read(version_output, nvidia_driver_version)["flavor_hint"]
        if license_output is None and hint is not None:
            status = "pass" if hint == expected_flavor else "fail"
            reason = f"{hint} kernel modules (the loaded module's ID line; no modinfo on the node to read the license)"
            return check_result(check, status, hint, expected_flavor, reason)
        flavor = license_output if license_output in ("open", "proprietary") else module_license_flavor(license_output)
    except ParseError as error:
        return parse_failure(check, error, expected_flavor)
    if hint is not None and hint != flavor:
        return check_result(
            check, "fail", flavor, expected_flavor, f"the module license says {flavor}, its ID line says {hint}"
        )
    if flavor != expected_flavor:
        return check_result(
            check, "fail", flavor, expected_flavor, f"{flavor} modules loaded, expected {expected_flavor}"
        )
    return check_result(check, "pass", flavor, expected_flavor, f"{flavor} kernel modules")


_GPU_CHECKS = ("gpu_count", "gpu_model", "gpu_persistence", "gpu_ecc", "gpu_retired_pages", "gpu_remapped_rows")


def _gpu_flag(check: str, gpus: list[dict], key: str, want: bool, what: str, unsupported: str) -> dict:
    values = [(gpu.get("index", i), gpu.get(key)) for i, gpu in enumerate(gpus)]
    if all(value is None for _, value in values):
        return not_applicable(check, unsupported)
    bad = [str(index) for index, value in values if value is not want]
    measured = f"{len(values) - len(bad)}/{len(values)}"
    if bad:
        return check_result(check, "fail", measured, f"{len(values)}/{len(values)}", f"GPU {', '.join(bad)}: {what}")
    return check_result(check, "pass", measured, f"{len(values)}/{len(values)}")


def evaluate_gpus(
    smi_output: object,
    expected_count: int | None = None,
    expected_model: str | None = None,
    ecc: bool | None = None,
    remapped_rows_output: object = None,
) -> list[dict]:
    """nvidia-smi's GPUs against the profile: gpu_count, gpu_model (the profile's model a case-insensitive substring
    of each GPU's name), gpu_persistence (on), gpu_ecc (as `ecc` says; None: not checked), gpu_retired_pages (none
    pending) and gpu_remapped_rows (no remapping pending or failed; from the GPU query's remapped_rows fields or
    `--query-remapped-rows` output). Output that does not parse fails every one of these checks with its line."""
    try:
        gpus = _read(smi_output, nvidia_smi_gpus)
        remapped = None if remapped_rows_output is None else _read(remapped_rows_output, nvidia_smi_remapped_rows)
    except ParseError as error:
        return [parse_failure(check, error) for check in _GPU_CHECKS]
    results = []
    count = len(gpus)
    if expected_count is None:
        results.append(not_applicable("gpu_count", "no GPU count in the profile"))
    else:
        status = "pass" if count == int(expected_count) else "fail"
        results.append(
            check_result("gpu_count", status, count, int(expected_count), f"{count} GPUs visible to nvidia-smi")
        )
    # gpus is never empty: nvidia_smi_gpus refuses output without a GPU, and _read parses an empty list as such.
    names = sorted({gpu.get("name", "") for gpu in gpus})
    if not expected_model or expected_model == "none":
        results.append(not_applicable("gpu_model", "no GPU model in the profile"))
    else:
        wrong = [name for name in names if expected_model.lower() not in name.lower()]
        status = "fail" if wrong else "pass"
        shown = [name or "(no name reported)" for name in wrong]
        reason = f"{', '.join(shown)} is not a {expected_model}" if wrong else ""
        results.append(check_result("gpu_model", status, ", ".join(names), expected_model, reason))
    results.append(
        _gpu_flag("gpu_persistence", gpus, "persistence", True, "persistence mode off", "persistence mode not reported")
    )
    if ecc is None:
        results.append(not_applicable("gpu_ecc", "the profile does not set an ECC mode"))
    else:
        state = "ECC disabled" if ecc else "ECC enabled"
        results.append(_gpu_flag("gpu_ecc", gpus, "ecc", bool(ecc), state, "these GPUs have no ECC ([N/A])"))
    results.append(
        _gpu_flag(
            "gpu_retired_pages",
            gpus,
            "retired_pages_pending",
            False,
            "page retirement pending (reset the GPU)",
            "these GPUs do not retire pages ([N/A]; row remapping replaces it from Ampere on)",
        )
    )
    by_bus = {row.get("bus_id"): row for row in remapped or []}
    merged = []
    for gpu in gpus:
        row = by_bus.get(gpu.get("bus_id"), gpu)
        pending, failure = row.get("remapped_rows_pending"), row.get("remapped_rows_failure")
        merged.append(
            {
                "index": gpu.get("index"),
                "remap": None if pending is None and failure is None else bool(pending or failure),
            }
        )
    results.append(
        _gpu_flag(
            "gpu_remapped_rows",
            merged,
            "remap",
            False,
            "row remapping pending or failed",
            "no row remapper reported (before Ampere, or not queried)",
        )
    )
    return results


def evaluate_ofed(ofed_output: object, expected_version: str | None) -> dict:
    """`ofed_info -s` reports the manifest's MLNX_OFED/DOCA-OFED version (or a leading part of it, "24.10")."""
    check = "ofed_version"
    if not expected_version:
        return not_applicable(check, "no OFED version pinned (inbox RDMA stack)")
    try:
        parsed = _read(ofed_output, ofed_info)
    except ParseError as error:
        return parse_failure(check, error, expected_version)
    measured = parsed["version"]
    status = "pass" if _version_matches(measured, expected_version) else "fail"
    return check_result(check, status, measured, expected_version, parsed["raw"])


def evaluate_hca_ports(
    port_output: object,
    profile_hcas: Sequence[Mapping] | None,
    profile_name: str | None = None,
    unreadable: str | None = None,
) -> list[dict]:
    """Each of the profile's HCAs (hcas: [{name, rate_gbps, link_layer, port (default 1)}]) is present in ibstat's or
    ibstatus' output, its port ACTIVE, at the profile's rate and link layer: one check hca_port[NAME] each.
    unreadable: why there is no output to read (the tool is not installed): every port fails with that reason."""
    if not profile_hcas:
        where = f" {profile_name}" if profile_name else ""
        return [not_applicable("hca_ports", f"no HCA in profile{where}")]
    names = [f"hca_port[{hca.get('name')}]" for hca in profile_hcas]
    expectations = [f"ACTIVE {hca.get('rate_gbps')} Gb/s {hca.get('link_layer')}" for hca in profile_hcas]
    if unreadable:
        return [check_result(n, "fail", None, e, unreadable) for n, e in zip(names, expectations, strict=True)]
    try:
        ports = _read(port_output, hca_ports)
    except ParseError as error:
        return [parse_failure(name, error) for name in names]
    results = []
    for name, hca, expected in zip(names, profile_hcas, expectations, strict=True):
        want_port = int(hca.get("port", 1))
        found = [p for p in ports if p["ca"] == hca.get("name") and p["port"] == want_port]
        if not found:
            results.append(check_result(name, "fail", None, expected, f"{hca.get('name')} port {want_port} not found"))
            continue
        port = found[0]
        rate = port["rate_gbps"]
        measured = f"{port['state']} {rate if rate is None else f'{rate:g}'} Gb/s {port['link_layer']}"
        problems = []
        if port["state"] != "ACTIVE":
            problems.append(f"state {port['state']} ({port['phys_state']})")
        if hca.get("rate_gbps") is not None and (rate is None or rate != float(hca["rate_gbps"])):
            problems.append(f"rate {rate} Gb/s, expected {hca['rate_gbps']}")
        if hca.get("link_layer") and port["link_layer"] != hca["link_layer"]:
            problems.append(f"link layer {port['link_layer']}, expected {hca['link_layer']}")
        results.append(check_result(name, "fail" if problems else "pass", measured, expected, "; ".join(problems)))
    return results


def evaluate_ib_write_bw(report: object, threshold_mbs: float | None, check: str = "ib_write_bw") -> dict:
    """ib_write_bw's average bandwidth, in MB/s of 10^6 bytes, is at least threshold_mbs (see rdma_threshold_mbs)."""
    if threshold_mbs is None:
        return not_applicable(check, "no RDMA bandwidth threshold set")
    threshold = float(threshold_mbs)
    try:
        parsed = _read(report, ib_write_bw)
    except ParseError as error:
        return parse_failure(check, error, threshold)
    measured = parsed["bw_avg_mbs"]
    reason = (
        f"{parsed['bytes']}-byte messages: {measured} MB/s average (ib_write_bw printed {parsed['bw_avg']} "
        f"{parsed['unit']}), floor {threshold} MB/s"
    )
    return check_result(check, "pass" if measured >= threshold else "fail", measured, threshold, reason, "MB/s")


def _nccl(table: object, check: str, expected: object, require_summary: bool) -> tuple[dict | None, dict | None]:
    """(parsed table, None), or (None, the failed check) for a table that cannot be judged."""
    try:
        parsed = _read(table, nccl_all_reduce)
    except ParseError as error:
        return None, parse_failure(check, error, expected)
    if require_summary and not parsed["complete"]:
        last = parsed["rows"][-1]["size"]
        reason = f"all_reduce_perf ended after the {last}-byte row, without its summary"
        return None, check_result(check, "fail", None, expected, reason)
    if parsed["out_of_bounds"]:
        reason = f"all_reduce_perf found {parsed['out_of_bounds']} wrong values"
        return None, check_result(check, "fail", None, expected, reason)
    return parsed, None


def evaluate_nccl_busbw(table: object, min_busbw_gbs: float | None, require_summary: bool = True) -> dict:
    """all_reduce_perf's peak out-of-place bus bandwidth (GB/s) is at least min_busbw_gbs. A run cut short (no "# Avg
    bus bandwidth" summary) fails unless require_summary is False; wrong values found by the test fail."""
    check = "nccl_busbw"
    if min_busbw_gbs is None:
        return not_applicable(check, "no NCCL bus bandwidth threshold set")
    threshold = float(min_busbw_gbs)
    parsed, failure = _nccl(table, check, threshold, require_summary)
    if failure:
        return failure
    best = max(parsed["rows"], key=lambda row: row["oop_busbw"])
    measured = best["oop_busbw"]
    reason = (
        f"peak {measured} GB/s at {best['size']} bytes (average {parsed['avg_busbw']} GB/s), floor {threshold} GB/s"
    )
    return check_result(check, "pass" if measured >= threshold else "fail", measured, threshold, reason, "GB/s")


def evaluate_nccl_latency(table: object, max_latency_us: float | None, require_summary: bool = True) -> dict:
    """all_reduce_perf's out-of-place time for its smallest message is at most max_latency_us (thousands of
    microseconds mean NCCL did not use RDMA: IBM Redbook REDP-5610, 4.4)."""
    check = "nccl_latency"
    if max_latency_us is None:
        return not_applicable(check, "no NCCL latency threshold set")
    threshold = float(max_latency_us)
    parsed, failure = _nccl(table, check, threshold, require_summary)
    if failure:
        return failure
    smallest = min(parsed["rows"], key=lambda row: row["size"])
    measured = smallest["oop_time_us"]
    reason = f"{measured} us for {smallest['size']} bytes, ceiling {threshold} us"
    return check_result(check, "pass" if measured <= threshold else "fail", measured, threshold, reason, "us")


def evaluate_nccl_transport(log: object, require_gdrdma: bool = True) -> dict:
    """NCCL's log shows it used InfiniBand ("NET/IB"), and GPUDirect RDMA ("via NET/IB/0/GDRDMA") when required."""
    check = "nccl_transport"
    expected = "NET/IB with GDRDMA" if require_gdrdma else "NET/IB"
    try:
        parsed = _read(log, nccl_transport)
    except ParseError as error:
        return parse_failure(check, error, expected)
    if parsed["net"] is None:
        return check_result(check, "fail", None, expected, "no NET/ line in the NCCL log (run with NCCL_DEBUG=INFO)")
    measured = f"NET/{parsed['net']}" + (" with GDRDMA" if parsed["gdrdma"] else "")
    devices = f" over {' '.join(parsed['devices'])}" if parsed["devices"] else ""
    if parsed["net"] != "IB":
        return check_result(
            check, "fail", measured, expected, f"NCCL used NET/{parsed['net']}{devices}, not InfiniBand"
        )
    if require_gdrdma and not parsed["gdrdma"]:
        return check_result(check, "fail", measured, expected, f"NCCL used NET/IB{devices} without GPUDirect RDMA")
    return check_result(check, "pass", measured, expected, f"NCCL used {measured}{devices}")


def evaluate_dcgm_diag(output: object) -> dict:
    """`dcgmi diag -r 1` passed: no test failed (the failed tests and their messages are the reason)."""
    check = "dcgm_diag"
    try:
        parsed = _read(output, dcgmi_diag)
    except ParseError as error:
        return parse_failure(check, error, "Pass")
    failed = [name for name, result in parsed["tests"].items() if result.startswith("Fail")]
    if not failed:
        return check_result(check, "pass", "Pass", "Pass", f"{len(parsed['tests'])} tests passed or skipped")
    notes = [f"{m['test']}: {m['text']}" for m in parsed["messages"] if m["test"] in failed and m["kind"] != "Info"]
    reason = f"failed: {', '.join(failed)}" + (f" ({'; '.join(notes)})" if notes else "")
    return check_result(check, "fail", "Fail", "Pass", reason)


def evaluate_memlock(output: object, service: str | None = None) -> dict:
    """The container runtime's service runs with LimitMEMLOCK=infinity: with systemd's default (8 MiB) ibv_reg_mr
    fails in pods and NCCL falls back to TCP."""
    check = f"memlock[{service}]" if service else "memlock"
    try:
        # A limit in bytes as systemd_memlock returns it (systemd's are 64-bit); anything else is read as output.
        limit = isinstance(output, int) and not isinstance(output, bool) and 0 <= output < 2**64
        value = output if limit else systemd_memlock(output)
    except ParseError as error:
        return parse_failure(check, error, "infinity")
    if value == "infinity":
        return check_result(check, "pass", value, "infinity", "")
    return check_result(check, "fail", value, "infinity", f"LimitMEMLOCK is {value} bytes, not unlimited", "bytes")


def evaluate_memory_peers(output: object, expected_version: str | None = None) -> dict:
    """A peer memory client (nvidia-peermem or nv_peer_mem) is registered with ib_core, of expected_version when
    given (nvidia-peermem's is the driver's)."""
    check = "peer_memory"
    try:
        version = memory_peers_version(output)
    except ParseError as error:
        return parse_failure(check, error, expected_version)
    if expected_version and not _version_matches(version, expected_version):
        return check_result(check, "fail", version, expected_version, f"peer memory client {version} registered")
    return check_result(check, "pass", version, expected_version, f"peer memory client {version} registered")
