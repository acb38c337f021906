# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Parsers of the node tools' output, written once: the roles reach them through nodeforge.gpu's filters.

Each parser takes a command's stdout as the tool prints it with LC_ALL=C; the unit tests feed them real captured
outputs (tests/data/outputs/).
"""

from __future__ import annotations

import re
from functools import cmp_to_key

# `dkms status` lines: "name/version, kernel, arch: state" (dkms >= 3) or "name, version, kernel, arch: state"
# (dkms 2.x); a module added but not built for any kernel is "name/version: added".
_DKMS_LINE = re.compile(
    r"^(?P<name>[^/,\s]+)(?:/|, )(?P<version>[^,:\s]+)(?:, (?P<kernel>[^,]+), (?P<arch>[^:]+))?: (?P<state>\S+)"
)


def _text(output: str | list[str]) -> str:
    """A command's stdout, given as the text or as its lines (a registered result's stdout_lines)."""
    return "\n".join(output) if isinstance(output, list) else (output or "")


def madison(stdout: str | list[str]) -> list[str]:
    """The versions `apt-cache madison PKG` lists, once each, in apt's order (newest source first).

    Lines look like " nvidia-driver | 535.216.03-1~deb12u1 | http://deb.debian.org/debian bookworm/non-free amd64
    Packages"; the source lines of a deb-src entry repeat a version with "Sources".
    """
    versions: list[str] = []
    for line in _text(stdout).splitlines():
        fields = [f.strip() for f in line.split("|")]
        if len(fields) >= 3 and fields[1] and fields[1] not in versions:
            versions.append(fields[1])
    return versions


def dpkg_query_status(stdout: str) -> dict:
    """`dpkg-query --show --showformat='${db:Status-Abbrev}${Version}' PKG` -> installed flag and version.

    Status-Abbrev is three characters, the version follows: desired (i, h, r, p, u), status (n, i, c, U, F, H, W, t),
    error flag (a space, or R: reinstallation required). Only status "i" is an installed package; "rc" (removed,
    its configuration left) is not.
    """
    text = stdout.rstrip("\n")
    if len(text) < 3:
        return {"installed": False, "held": False, "version": ""}
    desired, status = text[0], text[1]
    installed = status == "i"
    return {"installed": installed, "held": desired == "h", "version": text[3:].strip() if installed else ""}


def dpkg_query_installed(stdout: str | list[str]) -> dict[str, str]:
    """`dpkg-query --show --showformat='${Package} ${db:Status-Abbrev}${Version}\\n' PKG...` -> the installed
    packages' versions by name (dpkg-query also lists known packages that are not installed: "un ")."""
    installed = {}
    for line in _text(stdout).splitlines():
        name, _, status = line.partition(" ")
        found = dpkg_query_status(status)
        if name and found["installed"] and found["version"]:
            installed[name] = found["version"]
    return installed


def dkms_status(stdout: str | list[str]) -> list[dict]:
    """`dkms status` -> [{name, version, kernel, arch, state}], kernel and arch empty for "added" modules."""
    entries = []
    for line in _text(stdout).splitlines():
        match = _DKMS_LINE.match(line.strip())
        if match:
            entry = {k: (v or "") for k, v in match.groupdict().items()}
            entry["state"] = entry["state"].rstrip(",")
            entries.append(entry)
    return entries


def _order(char: str) -> int:
    # dpkg's ordering of the non-digit parts: ~ sorts before everything, even the end of the string; letters
    # before the other characters.
    if char == "~":
        return -1
    if char.isalpha():
        return ord(char)
    return ord(char) + 256


def _compare_part(a: str, b: str) -> int:
    while a or b:
        a_text = re.match(r"[^0-9]*", a).group()
        b_text = re.match(r"[^0-9]*", b).group()
        for i in range(max(len(a_text), len(b_text))):
            ca = _order(a_text[i]) if i < len(a_text) else 0
            cb = _order(b_text[i]) if i < len(b_text) else 0
            if ca != cb:
                return -1 if ca < cb else 1
        a, b = a[len(a_text) :], b[len(b_text) :]
        a_num = re.match(r"[0-9]*", a).group()
        b_num = re.match(r"[0-9]*", b).group()
        if int(a_num or 0) != int(b_num or 0):
            return -1 if int(a_num or 0) < int(b_num or 0) else 1
        a, b = a[len(a_num) :], b[len(b_num) :]
    return 0


def _split(version: str) -> tuple[int, str, str]:
    epoch, _, rest = version.rpartition(":") if ":" in version else ("0", "", version)
    upstream, _, revision = rest.rpartition("-") if "-" in rest else (rest, "", "")
    return int(epoch or 0), upstream, revision


def deb_version_compare(a: str, b: str) -> int:
    """dpkg --compare-versions: -1, 0 or 1 (epoch, then upstream version, then Debian revision)."""
    (ea, ua, ra), (eb, ub, rb) = _split(a), _split(b)
    if ea != eb:
        return -1 if ea < eb else 1
    return _compare_part(ua, ub) or _compare_part(ra, rb)


# What may follow an exact upstream version in a package version: a Debian revision ("1.20.0-1"), or, for
# repositories that number their builds (DOCA: "3.4.1-1", "3.4.1.2506" ...), any build suffix.
BUILD_SUFFIXES = {"revision": r"(-[^-\s]*)?", "any": r"([-.+~][^|\s]*)?"}


def choose_version(available: list[str], wanted: str, installed: str = "", builds: str = "revision") -> str:
    """The package version to pin for `wanted` (an exact upstream version such as 1.20.0, or a branch prefix
    such as "535."): the installed one when it is of that version, else the newest the repository has (dpkg's
    order); "" when none is. An exact version matches its builds only, never another version: 1.20.0 matches
    1.20.0-1 and 1:1.20.0-1~deb12u1 (and with builds="any" 1.20.0.1234-1), never 1.20.01 or 1.20.1.
    """
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
