# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Parsers of the node tools' output, written once: the roles reach them through nodeforge.gpu's filters.

Each parser takes a command's stdout as the tool prints it with LC_ALL=C (the text, its lines as a registered result's
stdout_lines, or bytes, decoded as UTF-8 with an undecodable byte read as U+FFFD; None is no output); the unit tests
feed them real captured outputs (tests/data/outputs/). Whatever the input (another type, binary junk, a line cut
short), a parser returns its documented result or raises ParseError, never another exception: the filters turn
ParseError into an Ansible error that names the parser, the offending line and what was expected.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import re
from functools import cmp_to_key

# `dkms status` lines: "name/version, kernel, arch: state" (dkms >= 3) or "name, version, kernel, arch: state"
# (dkms 2.x); a module added but not built for any kernel is "name/version: added".
_DKMS_LINE = re.compile(
    r"^(?P<name>[^/,\s]+)(?:/|, )(?P<version>[^,:\s]+)(?:, (?P<kernel>[^,]+), (?P<arch>[^:]+))?: (?P<state>\S+)"
)
_SHOWN = 300  # characters of an offending line an error message shows (the line itself stays whole in .line)


class ParseError(ValueError):
    """Input a parser cannot read: output that is damaged, cut short, another program's message or binary junk, or a
    value of a type the parser does not take.

    `tool` names the parser or the output's source, `message` says what was wrong, `line` is the raw offending line
    ("" when the output was empty) and `expected` what the parser reads ("" when the message says it). The parsers of
    this module, of scale.py (ScaleParseError) and of acceptance.py raise it and no other exception on any input.
    """

    def __init__(self, tool: str, message: str, line: str, expected: str = "") -> None:
        self.tool = tool
        self.message = message
        self.line = line
        self.expected = expected
        visible = line if len(line) <= _SHOWN else line[: _SHOWN - 3] + "..."
        super().__init__(f"{tool}: {message}: {visible!r}" + (f"; expected {expected}" if expected else ""))


def shown(value: object) -> str:
    """A value a parser refuses, as its error's offending line: a string as it is, anything else as its repr; cut to
    200 characters."""
    try:
        text = value if isinstance(value, str) else repr(value)
    except ValueError:  # an int of more than 4300 digits has no repr
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 200 else text[:197] + "..."


def _refused(tool: str, what: str, value: object, expected: str) -> ParseError:
    """The error for an argument of a type the parser does not take."""
    return ParseError(tool, f"{what} is of type {type(value).__name__}", shown(value), expected)


def command_output(tool: str, output: object) -> str:
    """A command's output given as text, as its lines (a registered result's stdout_lines) or as bytes (UTF-8; under
    LC_ALL=C the tools print ASCII, so an undecodable byte, read as U+FFFD, fails the parse with its line shown); None
    is no output. Anything else is a ParseError naming `tool`."""
    if output is None:
        return ""
    if isinstance(output, str):
        return output
    if isinstance(output, (bytes, bytearray)):
        return bytes(output).decode("utf-8", "replace")
    if isinstance(output, (list, tuple)) and all(isinstance(line, str) for line in output):
        return "\n".join(output)
    raise _refused(tool, "the output", output, "the command's output: text, its lines (stdout_lines) or bytes")


def _strings(tool: str, value: object, what: str) -> list[str]:
    # A lone string is refused too: iterated, it would be read as a list of its characters.
    if isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value):
        return list(value)
    raise _refused(tool, what, value, f"a list of {what}")


def _string(tool: str, value: object, what: str, expected: str) -> str:
    if isinstance(value, str):
        return value
    raise _refused(tool, what, value, expected)


def madison(stdout: str | list[str]) -> list[str]:
    """The versions `apt-cache madison PKG` lists, once each, in apt's order (newest source first).

    Lines look like " nvidia-driver | 535.216.03-1~deb12u1 | http://deb.debian.org/debian bookworm/non-free amd64
    Packages"; the source lines of a deb-src entry repeat a version with "Sources". Other lines (apt's notices such as
    "N: Unable to locate package ...") list no version.
    """
    versions: list[str] = []
    for line in command_output("madison", stdout).splitlines():
        fields = [f.strip() for f in line.split("|")]
        if len(fields) >= 3 and fields[1] and fields[1] not in versions:
            versions.append(fields[1])
    return versions


# ${db:Status-Abbrev}: desired action, package status, error flag (dpkg-query(1)).
_DESIRED = "uihrp"
_STATUS = "ncHUFWti"
_ERROR_FLAG = " R"
_DPKG_EXPECTED = "dpkg-query's ${db:Status-Abbrev}${Version}, e.g. 'ii 1.0-1', 'hi 1.0-1', 'rc 1.0-1' or 'un '"


def _dpkg_status(tool: str, status: str, line: str) -> dict:
    if not status.strip():
        return {"installed": False, "held": False, "version": ""}
    abbrev = status[:3].ljust(3)
    if abbrev[0] not in _DESIRED or abbrev[1] not in _STATUS or abbrev[2] not in _ERROR_FLAG:
        raise ParseError(tool, f"not a dpkg status ({abbrev!r})", line, _DPKG_EXPECTED)
    version = status[3:].strip()
    if len(version.split()) > 1:
        raise ParseError(tool, "a version with blanks in it", line, _DPKG_EXPECTED)
    installed = abbrev[1] == "i"
    return {"installed": installed, "held": abbrev[0] == "h", "version": version if installed else ""}


def dpkg_query_status(stdout: str) -> dict:
    """`dpkg-query --show --showformat='${db:Status-Abbrev}${Version}' PKG` -> installed flag and version.

    Status-Abbrev is three characters, the version follows: desired (i, h, r, p, u), status (n, i, c, U, F, H, W, t),
    error flag (a space, or R: reinstallation required). Only status "i" is an installed package; "rc" (removed,
    its configuration left) is not. No output (a package dpkg has never seen) is not installed.
    """
    text = command_output("dpkg_query_status", stdout).rstrip("\n")
    return _dpkg_status("dpkg_query_status", text, text)


def _dpkg_lines(tool: str, stdout: object) -> dict[str, dict]:
    state = {}
    for line in command_output(tool, stdout).splitlines():
        if not line.strip():
            continue
        name, _, status = line.partition(" ")
        if not name:
            raise ParseError(tool, "a line without a package name", line, "${Package} ${db:Status-Abbrev}${Version}")
        state[name] = _dpkg_status(tool, status, line)
    return state


def dpkg_query_installed(stdout: str | list[str]) -> dict[str, str]:
    """`dpkg-query --show --showformat='${Package} ${db:Status-Abbrev}${Version}\\n' PKG...` -> the installed
    packages' versions by name (dpkg-query also lists known packages that are not installed: "un ")."""
    state = _dpkg_lines("dpkg_query_installed", stdout)
    # _dpkg_status gives a version only for an installed package.
    return {name: found["version"] for name, found in state.items() if found["version"]}


def dpkg_query_todo(stdout: str | list[str], packages: list[str], version: str = "") -> dict[str, list[str]]:
    """`dpkg-query --show --showformat='${Package} ${db:Status-Abbrev}${Version}\\n' PKG...` -> what apt and dpkg
    still have to do for `packages` to be installed (at `version`, when given) and held: {install: [...], hold:
    [...]}. A package to install is also one to hold again (an install moves it). Both empty: the package manager
    has nothing to do, and a role can skip its calls."""
    tool = "dpkg_query_todo"
    packages = _strings(tool, packages, "package names")
    version = "" if version is None else _string(tool, version, "the version", "a package version or ''")
    state = _dpkg_lines(tool, stdout)
    install = [
        p for p in packages if not state.get(p, {}).get("installed") or (version and state[p]["version"] != version)
    ]
    # A package not to install is installed: dpkg-query has its line.
    hold = [p for p in packages if p in install or not state[p]["held"]]
    return {"install": install, "hold": hold}


def dkms_status(stdout: str | list[str]) -> list[dict]:
    """`dkms status` -> [{name, version, kernel, arch, state}], kernel and arch empty for "added" modules. Lines of
    another form (dkms' warnings) name no module."""
    entries = []
    for line in command_output("dkms_status", stdout).splitlines():
        match = _DKMS_LINE.match(line.strip())
        if match:
            entry = {k: (v or "") for k, v in match.groupdict().items()}
            entry["state"] = entry["state"].removesuffix(",")  # "installed, WARNING! ..." -> installed
            entries.append(entry)
    return entries


def module_table(names: list[str]) -> dict:
    """Kernel module names (as modprobe takes them) -> {kernel name: {modprobe, kernel}}; the kernel writes "_"."""
    names = _strings("module_table", names, "kernel module names")
    return {name.replace("-", "_"): {"modprobe": name, "kernel": name.replace("-", "_")} for name in names}


def dkms_conf(text: str) -> dict:
    """A DKMS package's dkms.conf -> {name, version, modules}: modules as module_table, each module's modprobe name
    the file DKMS installs (DEST_MODULE_NAME, ${PACKAGE_NAME} expanded, else BUILT_MODULE_NAME). dkms.conf is shell:
    quotes are dropped before reading."""
    conf = re.sub("[\"']", "", command_output("dkms_conf", text))

    def first(key: str) -> str:
        match = re.search(rf"^{key}=(\S+)", conf, re.MULTILINE)
        return match.group(1) if match else ""

    name = first("PACKAGE_NAME")
    dest = dict(re.findall(r"^DEST_MODULE_NAME\[([0-9]+)\]=(\S+)", conf, re.MULTILINE))
    modules = {}
    for index, built in re.findall(r"^BUILT_MODULE_NAME\[([0-9]+)\]=(\S+)", conf, re.MULTILINE):
        installed = dest.get(index, built).replace("${PACKAGE_NAME}", name).replace("$PACKAGE_NAME", name)
        modules[built.replace("-", "_")] = {"modprobe": installed, "kernel": built.replace("-", "_")}
    return {"name": name, "version": first("PACKAGE_VERSION"), "modules": modules}


def nvidia_sources(output: str | list[str]) -> list[dict]:
    """The NVIDIA driver source probe's "DIR FLAVOR" lines (roles/gpudirect_rdma/tasks/nvidia_source.yml) ->
    [{dir, flavor, version}], the version read from the directory's name (nvidia[-current][-open]-VERSION)."""
    found = []
    for line in command_output("nvidia_sources", output).splitlines():
        if not line.strip():
            continue
        directory, _, flavor = line.rpartition(" ")
        version = re.search(r"/nvidia-(?:current-)?(?:open-)?([0-9][^/]*)", directory)
        found.append({"dir": directory, "flavor": flavor, "version": version.group(1) if version else ""})
    return found


def rpm_spec(text: str) -> dict:
    """An RPM spec's Version and the release build_module.sh reads ("%{!?_release: %define _release N}"), "0" when
    absent."""
    spec = command_output("rpm_spec", text)
    version = re.search(r"(?m)^Version:\s*(\S+)", spec)
    release = re.search(r"(?:define|global)\s+_release\s+([^}\s]+)", spec)
    return {"version": version.group(1) if version else "0", "release": release.group(1) if release else "0"}


# A dnf versionlock entry as `dnf versionlock add` writes it and `dnf versionlock list` prints it: NAME-EPOCH:VERSION-
# RELEASE.* (an exclude has a leading "!"); `rpm --queryformat '%{NAME}-%{EPOCHNUM}:%{VERSION}-%{RELEASE}.*\n'` prints
# the entry of an installed package in the same form.
_LOCK_ENTRY = re.compile(
    r"^(?P<exclude>!?)(?P<name>[^\s:]+)-(?P<epoch>\d+):(?P<version>[^\s:-]+)-(?P<release>[^\s:]+)\.\*$"
)
_LOCK_EXPECTED = "dnf versionlock entries, one per line, such as 'nvidia-container-toolkit-0:1.17.8-1.*'"


def _lock_entries(tool: str, stdout: object) -> list[str]:
    entries = []
    for raw in command_output(tool, stdout).splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if not _LOCK_ENTRY.match(line):
            raise ParseError(tool, "not a versionlock entry", raw, _LOCK_EXPECTED)
        entries.append(line)
    return entries


def versionlock_entries(stdout: str | list[str]) -> list[str]:
    """The entries of `dnf -q versionlock list` (or of the rpm query above), in order; blank lines and comments
    (the list file's "# Added lock on ...") are no entries. A line of another shape (an error message, a cut line)
    is a ParseError."""
    return _lock_entries("versionlock_entries", stdout)


def versionlock_stale(stdout: str | list[str], names: list[str], version: str) -> list[str]:
    """The lock entries of the packages `names` that hold another version than `version` (VERSION or
    VERSION-RELEASE, as the roles pin it): what must go before dnf can move those packages to the pin. Excludes and
    other packages' entries stay."""
    wanted = set(_strings("versionlock_stale", names, "package names"))
    pin = _string("versionlock_stale", version, "the version", "the pinned version, e.g. '1.17.8-1'")
    stale = []
    for entry in _lock_entries("versionlock_stale", stdout):
        m = _LOCK_ENTRY.match(entry)
        if m["exclude"] or m["name"] not in wanted:
            continue
        if pin not in (m["version"], f"{m['version']}-{m['release']}"):
            stale.append(entry)
    return stale


def versionlock_missing(
    wanted: str | list[str], current: str | list[str], released: list[str] | None = None
) -> list[str]:
    """The entries of `wanted` (the rpm query of the installed packages) that the lock list `current` lacks, once the
    entries `released` are gone from it: what `dnf versionlock add` still has to write. Nothing when the list holds
    them all: a converged node's lock list is left as it is."""
    gone = set(_strings("versionlock_missing", released or [], "released entries"))
    held = {entry for entry in _lock_entries("versionlock_missing", current) if entry not in gone}
    return [entry for entry in _lock_entries("versionlock_missing", wanted) if entry not in held]


def booleans_local(text: str) -> dict[str, str]:
    """libsemanage's booleans.local ("name=1" / "name=0" lines) -> name -> "1" | "0"."""
    local = command_output("booleans_local", text)
    return dict(re.findall(r"^\s*([A-Za-z0-9_]+)\s*=\s*([01])", local, re.MULTILINE))


def prefix_length(netmask: str | int) -> int:
    """An IPv4 netmask as a prefix length: 255.255.255.0 or 24 -> 24; anything else is refused."""
    tool = "prefix_length"
    expected = "a dotted IPv4 netmask such as 255.255.255.0 or a prefix length such as 24"
    if isinstance(netmask, bool) or not isinstance(netmask, (str, int)):
        raise _refused(tool, "the netmask", netmask, expected)
    try:
        return ipaddress.IPv4Network(f"0.0.0.0/{str(netmask).strip()}").prefixlen
    except ValueError as exc:
        raise ParseError(tool, "not an IPv4 netmask or prefix length", shown(netmask), expected) from exc


_KEY_EXPECTED = "an ASCII-armored OpenPGP public key block (-----BEGIN PGP PUBLIC KEY BLOCK----- ... END ...)"
_KEYRING_EXPECTED = "a binary OpenPGP keyring of whole v4 key packets, as bytes or as their base64 text"


def _armored_blocks(tool: str, armored: str) -> tuple[list[bytes], str]:
    """The decoded body of each ASCII-armored public key block, and the last BEGIN line seen (for messages)."""
    blocks: list[bytes] = []
    body: list[str] | None = None
    begin = ""
    for line in command_output(tool, armored).strip().splitlines():
        if line.startswith("-----BEGIN PGP PUBLIC KEY BLOCK-----"):
            body, begin = [], line
        elif line.startswith("-----END PGP PUBLIC KEY BLOCK-----") and body is not None:
            start = 0
            while start < len(body) and ":" in body[start]:  # armor headers (Version: ..., Comment: ...)
                start += 1
            blocks.append(_base64(tool, "".join(b for b in body[start:] if b and not b.startswith("=")), begin))
            body = None
        elif body is not None:
            body.append(line)
    return blocks, begin


def openpgp_fingerprints(armored: str) -> dict[str, list[str]]:
    """ASCII-armored OpenPGP public key blocks -> {primary: [...], subkeys: [...]} v4 fingerprints (upper-case hex,
    as `gpg --with-colons` prints them in its fpr lines), computed here (RFC 4880 12.2: SHA-1 over 0x99, the
    two-octet length and the public-key packet body), so that no gpg and no keyring is needed to check a pin.
    Every block of the file counts (apt and rpm import them all), not only the first."""
    tool = "openpgp_fingerprints"
    found: dict[str, list[str]] = {"primary": [], "subkeys": []}
    blocks, begin = _armored_blocks(tool, armored)
    for block in blocks:
        keys = _keyring(tool, block)
        found = {kind: found[kind] + keys[kind] for kind in found}
    if not found["primary"] and not found["subkeys"]:
        raise ParseError(tool, "not an ASCII-armored OpenPGP public key block", begin, _KEY_EXPECTED)
    return found


def openpgp_dearmor(armored: str) -> bytes:
    """ASCII-armored public key blocks -> the binary keyring they encode (every block, as `gpg --dearmor` writes
    it), for tools that read only binary keyrings (gpgv)."""
    tool = "openpgp_dearmor"
    blocks, begin = _armored_blocks(tool, armored)
    if not blocks:
        raise ParseError(tool, "not an ASCII-armored OpenPGP public key block", begin, _KEY_EXPECTED)
    return b"".join(blocks)


def keyring_fingerprints(data: bytes | str) -> dict[str, list[str]]:
    """The same for a binary keyring (a .gpg file such as the one cuda-keyring ships), given as bytes or as their
    base64 text (how a node hands a binary file to Ansible)."""
    tool = "keyring_fingerprints"
    if isinstance(data, str):
        return _keyring(tool, _base64(tool, "".join(data.split()), data[:200]))
    if isinstance(data, (bytes, bytearray)):
        return _keyring(tool, bytes(data))
    raise _refused(tool, "the keyring", data, _KEYRING_EXPECTED)


def _base64(tool: str, text: str, line: str) -> bytes:
    try:
        return base64.b64decode(text)
    except ValueError as exc:  # binascii.Error, or a character outside ASCII
        raise ParseError(tool, f"not base64 ({exc})", line, _KEYRING_EXPECTED) from exc


def _keyring(tool: str, data: bytes) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {"primary": [], "subkeys": []}
    offset = 0
    while offset < len(data):
        tag, length, start = _packet_header(tool, data, offset)
        if start + length > len(data):
            raise ParseError(
                tool,
                f"a packet of {length} bytes cut short after {len(data) - start} at byte {offset}",
                data[offset : offset + 16].hex(),
                _KEYRING_EXPECTED,
            )
        packet = data[start : start + length]
        if tag in (6, 14):
            if not packet or packet[0] != 4:
                version = packet[0] if packet else "?"
                raise ParseError(
                    tool, f"OpenPGP key packet version {version}: only v4 keys are read", packet[:16].hex()
                )
            digest = hashlib.sha1(b"\x99" + len(packet).to_bytes(2, "big") + packet).hexdigest().upper()
            found["primary" if tag == 6 else "subkeys"].append(digest)
        offset = start + length
    return found


def _packet_header(tool: str, data: bytes, offset: int) -> tuple[int, int, int]:
    """(tag, body length, body offset) of the OpenPGP packet at offset (RFC 4880 4.2: old and new formats)."""
    first = data[offset]
    where = data[offset : offset + 16].hex()
    if not first & 0x80:
        raise ParseError(tool, f"not an OpenPGP packet stream (byte {offset})", where, _KEYRING_EXPECTED)
    if first & 0x40:  # new format: one, two or five length octets
        tag, octet = first & 0x3F, data[offset + 1] if offset + 1 < len(data) else None
        size = None if octet is None else 1 if octet < 192 else 2 if octet < 224 else 5 if octet == 255 else 0
        if size == 0:
            raise ParseError(tool, "partial-length OpenPGP packets do not occur in public keys", where)
    else:
        tag, size = (first >> 2) & 0x0F, {0: 1, 1: 2, 2: 4}.get(first & 0x03)
        if size is None:
            raise ParseError(tool, "indeterminate-length OpenPGP packets do not occur in public keys", where)
    if size is None or offset + 1 + size > len(data):
        raise ParseError(tool, f"a packet header cut short at byte {offset}", where, _KEYRING_EXPECTED)
    octets = data[offset + 1 : offset + 1 + size]
    if not first & 0x40:
        return tag, int.from_bytes(octets, "big"), offset + 1 + size
    if size == 1:
        return tag, octets[0], offset + 2
    if size == 2:
        return tag, ((octets[0] - 192) << 8) + octets[1] + 192, offset + 3
    return tag, int.from_bytes(octets[1:5], "big"), offset + 6


def _order(char: str) -> int:
    # dpkg's ordering of the non-digit parts: ~ sorts before everything, even the end of the string; letters
    # (ASCII, as dpkg's C locale has them) before the other characters.
    if char == "~":
        return -1
    if char.isascii() and char.isalpha():
        return ord(char)
    return ord(char) + 256


_PART = re.compile(r"([^0-9]*)([0-9]*)")


def _compare_digits(a: str, b: str) -> int:
    # As numbers, without int(): Python refuses to convert more than 4300 digits, dpkg compares runs of any length.
    a, b = a.lstrip("0"), b.lstrip("0")
    if len(a) != len(b):
        return -1 if len(a) < len(b) else 1
    return (a > b) - (a < b)


def _compare_part(a: str, b: str) -> int:
    # By position in the strings: slicing off what was compared made a long version of alternating letters and
    # digits quadratic (200 KB: seconds).
    i = j = 0
    while i < len(a) or j < len(b):
        part_a, part_b = _PART.match(a, i), _PART.match(b, j)
        a_text, b_text = part_a[1], part_b[1]
        for k in range(max(len(a_text), len(b_text))):
            ca = _order(a_text[k]) if k < len(a_text) else 0
            cb = _order(b_text[k]) if k < len(b_text) else 0
            if ca != cb:
                return -1 if ca < cb else 1
        found = _compare_digits(part_a[2], part_b[2])
        if found:
            return found
        i, j = part_a.end(), part_b.end()
    return 0


_VERSION_EXPECTED = "a Debian version [epoch:]upstream_version[-debian_revision], the epoch digits"


def _split(version: object) -> tuple[str, str, str]:
    version = _string("deb_version_compare", version, "the version", _VERSION_EXPECTED)
    # dpkg: the epoch ends at the first colon, the revision starts after the last hyphen.
    epoch, colon, rest = version.partition(":")
    if not colon:
        epoch, rest = "", version
    elif not re.fullmatch(r"[0-9]*", epoch):  # empty: dpkg reads it as 0
        raise ParseError("deb_version_compare", "the epoch is not a number", version, _VERSION_EXPECTED)
    upstream, _, revision = rest.rpartition("-") if "-" in rest else (rest, "", "")
    return epoch, upstream, revision


def deb_version_compare(a: str, b: str) -> int:
    """dpkg --compare-versions: -1, 0 or 1 (epoch, then upstream version, then Debian revision)."""
    (ea, ua, ra), (eb, ub, rb) = _split(a), _split(b)
    return _compare_digits(ea, eb) or _compare_part(ua, ub) or _compare_part(ra, rb)


# What may follow an exact upstream version in a package version: a Debian revision ("1.20.0-1"), or, for
# repositories that number their builds (DOCA: "3.4.1-1", "3.4.1.2506" ...), any build suffix.
BUILD_SUFFIXES = {"revision": r"(-[^-\s]*)?", "any": r"([-.+~][^|\s]*)?"}


def choose_version(available: list[str], wanted: str, installed: str = "", builds: str = "revision") -> str:
    """The package version to pin for `wanted` (an exact upstream version such as 1.20.0, or a branch prefix
    such as "535."): the installed one when it is of that version, else the newest the repository has (dpkg's
    order); "" when none is. An exact version matches its builds only, never another version: 1.20.0 matches
    1.20.0-1 and 1:1.20.0-1~deb12u1 (and with builds="any" 1.20.0.1234-1), never 1.20.01 or 1.20.1.
    """
    tool = "choose_version"
    available = _strings(tool, available, "available versions")
    wanted = _string(tool, wanted, "the wanted version", "an upstream version such as 1.20.0 or a prefix such as 535.")
    installed = "" if installed is None else _string(tool, installed, "the installed version", "a version or ''")
    if not isinstance(builds, str) or builds not in BUILD_SUFFIXES:
        raise _refused(tool, "builds", builds, f"one of {', '.join(BUILD_SUFFIXES)}")
    if wanted.endswith("."):
        pattern = re.compile(r"^([0-9]+:)?" + re.escape(wanted))
    else:
        pattern = re.compile(r"^([0-9]+:)?" + re.escape(wanted) + BUILD_SUFFIXES[builds] + "$")
    if installed and pattern.match(installed):
        return installed
    matching = [v for v in available if pattern.match(v)]
    if not matching:
        return ""
    return sorted(matching, key=cmp_to_key(deb_version_compare))[-1]
