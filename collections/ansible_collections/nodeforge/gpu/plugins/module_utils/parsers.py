# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Parsers of the node tools' output, written once: the roles reach them through nodeforge.gpu's filters.

Each parser takes a command's stdout as the tool prints it with LC_ALL=C; the unit tests feed them real captured
outputs (tests/data/outputs/).
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


def dpkg_query_todo(stdout: str | list[str], packages: list[str], version: str = "") -> dict[str, list[str]]:
    """`dpkg-query --show --showformat='${Package} ${db:Status-Abbrev}${Version}\\n' PKG...` -> what apt and dpkg
    still have to do for `packages` to be installed (at `version`, when given) and held: {install: [...], hold:
    [...]}. A package to install is also one to hold again (an install moves it). Both empty: the package manager
    has nothing to do, and a role can skip its calls."""
    state = {}
    for line in _text(stdout).splitlines():
        name, _, status = line.partition(" ")
        if name:
            state[name] = dpkg_query_status(status)
    install = [
        p for p in packages if not state.get(p, {}).get("installed") or (version and state[p]["version"] != version)
    ]
    hold = [p for p in packages if p in install or not state.get(p, {}).get("held")]
    return {"install": install, "hold": hold}


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


def module_table(names: list[str]) -> dict:
    """Kernel module names (as modprobe takes them) -> {kernel name: {modprobe, kernel}}; the kernel writes "_"."""
    return {name.replace("-", "_"): {"modprobe": name, "kernel": name.replace("-", "_")} for name in names}


def dkms_conf(text: str) -> dict:
    """A DKMS package's dkms.conf -> {name, version, modules}: modules as module_table, each module's modprobe name
    the file DKMS installs (DEST_MODULE_NAME, ${PACKAGE_NAME} expanded, else BUILT_MODULE_NAME). dkms.conf is shell:
    quotes are dropped before reading."""
    conf = re.sub("[\"']", "", _text(text))

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
    for line in _text(output).splitlines():
        if not line.strip():
            continue
        directory, _, flavor = line.rpartition(" ")
        version = re.search(r"/nvidia-(?:current-)?(?:open-)?([0-9][^/]*)", directory)
        found.append({"dir": directory, "flavor": flavor, "version": version.group(1) if version else ""})
    return found


def rpm_spec(text: str) -> dict:
    """An RPM spec's Version and the release build_module.sh reads ("%{!?_release: %define _release N}"), "0" when
    absent."""
    version = re.search(r"(?m)^Version:\s*(\S+)", text or "")
    release = re.search(r"(?:define|global)\s+_release\s+([^}\s]+)", text or "")
    return {"version": version.group(1) if version else "0", "release": release.group(1) if release else "0"}


def booleans_local(text: str) -> dict[str, str]:
    """libsemanage's booleans.local ("name=1" / "name=0" lines) -> name -> "1" | "0"."""
    return dict(re.findall(r"^\s*([A-Za-z0-9_]+)\s*=\s*([01])", text or "", re.MULTILINE))


def prefix_length(netmask: str | int) -> int:
    """An IPv4 netmask as a prefix length: 255.255.255.0 or 24 -> 24; anything else is refused."""
    try:
        return ipaddress.IPv4Network(f"0.0.0.0/{str(netmask).strip()}").prefixlen
    except ValueError as exc:
        raise ValueError(f"not an IPv4 netmask or prefix length: {netmask!r}") from exc


def openpgp_fingerprints(armored: str) -> dict[str, list[str]]:
    """ASCII-armored OpenPGP public key blocks -> {primary: [...], subkeys: [...]} v4 fingerprints (upper-case hex,
    as `gpg --with-colons` prints them in its fpr lines), computed here (RFC 4880 12.2: SHA-1 over 0x99, the
    two-octet length and the public-key packet body), so that no gpg and no keyring is needed to check a pin.
    Every block of the file counts (apt and rpm import them all), not only the first."""
    found: dict[str, list[str]] = {"primary": [], "subkeys": []}
    body: list[str] | None = None
    for line in (armored or "").strip().splitlines():
        if line.startswith("-----BEGIN PGP PUBLIC KEY BLOCK-----"):
            body = []
        elif line.startswith("-----END PGP PUBLIC KEY BLOCK-----") and body is not None:
            while body and ":" in body[0]:  # armor headers (Version: ..., Comment: ...)
                body = body[1:]
            keys = keyring_fingerprints(base64.b64decode("".join(b for b in body if b and not b.startswith("="))))
            found = {kind: found[kind] + keys[kind] for kind in found}
            body = None
        elif body is not None:
            body.append(line)
    if not found["primary"] and not found["subkeys"]:
        raise ValueError("not an ASCII-armored OpenPGP public key block")
    return found


def keyring_fingerprints(data: bytes | str) -> dict[str, list[str]]:
    """The same for a binary keyring (a .gpg file such as the one cuda-keyring ships), given as bytes or as their
    base64 text (how a node hands a binary file to Ansible)."""
    if isinstance(data, str):
        data = base64.b64decode("".join(data.split()))
    found: dict[str, list[str]] = {"primary": [], "subkeys": []}
    offset = 0
    while offset < len(data):
        tag, length, offset = _packet_header(data, offset)
        packet = data[offset : offset + length]
        offset += length
        if tag in (6, 14):
            if not packet or packet[0] != 4:
                raise ValueError(f"OpenPGP key packet version {packet[0] if packet else '?'}: only v4 keys are read")
            digest = hashlib.sha1(b"\x99" + len(packet).to_bytes(2, "big") + packet).hexdigest().upper()
            found["primary" if tag == 6 else "subkeys"].append(digest)
    return found


def _packet_header(data: bytes, offset: int) -> tuple[int, int, int]:
    """(tag, body length, body offset) of the OpenPGP packet at offset (RFC 4880 4.2: old and new formats)."""
    first = data[offset]
    if not first & 0x80:
        raise ValueError("not an OpenPGP packet stream")
    if first & 0x40:  # new format
        tag, octet = first & 0x3F, data[offset + 1]
        if octet < 192:
            return tag, octet, offset + 2
        if octet < 224:
            return tag, ((octet - 192) << 8) + data[offset + 2] + 192, offset + 3
        if octet == 255:
            return tag, int.from_bytes(data[offset + 2 : offset + 6], "big"), offset + 6
        raise ValueError("partial-length OpenPGP packets do not occur in public keys")
    tag, kind = (first >> 2) & 0x0F, first & 0x03
    size = {0: 1, 1: 2, 2: 4}.get(kind)
    if size is None:
        raise ValueError("indeterminate-length OpenPGP packets do not occur in public keys")
    return tag, int.from_bytes(data[offset + 1 : offset + 1 + size], "big"), offset + 1 + size


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
