"""Package repositories as `nodeforge mirror` reads them: apt's signed Release files and Packages indexes, dnf's
signed repomd.xml and primary metadata, version order as dpkg and rpm define it, and the set of packages a node's
package manager would fetch for what a role installs.

The repositories are mirrored as published: their signed indexes are kept byte for byte (a node verifies the mirror
with the vendor's own key, pinned in the version manifest), and only the packages a node can ask for are copied.
What a node asks for is what its package manager chooses: the role's packages at the pinned version, and for each
dependency the newest version the repository holds that satisfies it (apt and dnf both take the newest candidate) and
the one of the pinned version (the roles pin every driver package to it: apt preferences, dnf versionlock)."""

from __future__ import annotations

import bz2
import gzip
import lzma
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field


class RepoError(ValueError):
    """A repository that is not what its index or signature says."""


# ---- version order ----------------------------------------------------------------------------------------------
def _dpkg_order(char: str) -> int:
    if char == "~":
        return -1
    if char.isdigit():
        return 0
    if char.isalpha():
        return ord(char)
    return ord(char) + 256


def _dpkg_part(a: str, b: str) -> int:
    """dpkg's verrevcmp: alternating non-digit (letters before others, ~ before the end) and numeric runs."""
    i = j = 0
    while i < len(a) or j < len(b):
        first_diff = 0
        while (i < len(a) and not a[i].isdigit()) or (j < len(b) and not b[j].isdigit()):
            ac = _dpkg_order(a[i]) if i < len(a) and not a[i].isdigit() else 0
            bc = _dpkg_order(b[j]) if j < len(b) and not b[j].isdigit() else 0
            if ac != bc:
                return ac - bc
            i, j = i + 1, j + 1
        while i < len(a) and a[i] == "0":
            i += 1
        while j < len(b) and b[j] == "0":
            j += 1
        while i < len(a) and a[i].isdigit() and j < len(b) and b[j].isdigit():
            if not first_diff:
                first_diff = ord(a[i]) - ord(b[j])
            i, j = i + 1, j + 1
        if i < len(a) and a[i].isdigit():
            return 1
        if j < len(b) and b[j].isdigit():
            return -1
        if first_diff:
            return first_diff
    return 0


def _deb_split(version: str) -> tuple[int, str, str]:
    epoch, _, rest = version.rpartition(":") if ":" in version else ("0", "", version)
    upstream, _, revision = rest.rpartition("-") if "-" in rest else (rest, "", "")
    return int(epoch or 0), upstream, revision


def deb_compare(a: str, b: str) -> int:
    """<0, 0, >0 as Debian version a sorts before, with, after b (Debian Policy 5.6.12)."""
    ea, ua, ra = _deb_split(a)
    eb, ub, rb = _deb_split(b)
    if ea != eb:
        return ea - eb
    return _dpkg_part(ua, ub) or _dpkg_part(ra, rb)


def rpmvercmp(a: str, b: str) -> int:
    """rpm's rpmvercmp over one field (version or release): separators skipped, digit runs compared numerically and
    letter runs lexically, a digit run newer than a letter run, ~ older than anything (even the end), ^ newer than
    the end but older than anything else."""
    if a == b:
        return 0
    i = j = 0
    while i < len(a) or j < len(b):
        while i < len(a) and not a[i].isalnum() and a[i] not in "~^":
            i += 1
        while j < len(b) and not b[j].isalnum() and b[j] not in "~^":
            j += 1
        x, y = a[i : i + 1], b[j : j + 1]
        for mark, at_end in (("~", 1), ("^", -1)):  # at_end: the order of the end against the mark
            if mark in (x, y):
                if x != mark:
                    return at_end if not x or mark == "~" else 1
                if y != mark:
                    return -at_end if not y or mark == "~" else -1
                break
        else:
            mark = ""
        if mark:
            i, j = i + 1, j + 1
            continue
        if not (x and y):
            break
        kind = str.isdigit if x.isdigit() else str.isalpha
        si, sj = i, j
        while i < len(a) and a[i].isascii() and kind(a[i]):
            i += 1
        while j < len(b) and b[j].isascii() and kind(b[j]):
            j += 1
        one, two = a[si:i], b[sj:j]
        if not two:  # different kinds: a digit run is newer
            return 1 if kind is str.isdigit else -1
        if kind is str.isdigit:
            one, two = one.lstrip("0"), two.lstrip("0")
            if len(one) != len(two):
                return 1 if len(one) > len(two) else -1
        if one != two:
            return 1 if one > two else -1
    if i >= len(a) and j >= len(b):
        return 0
    return -1 if i >= len(a) else 1


def rpm_compare(a: tuple[str, str, str], b: tuple[str, str, str]) -> int:
    """(epoch, version, release) order."""
    ea, eb = int(a[0] or 0), int(b[0] or 0)
    if ea != eb:
        return 1 if ea > eb else -1
    return rpmvercmp(a[1], b[1]) or (rpmvercmp(a[2], b[2]) if a[2] and b[2] else 0)


# ---- packages -----------------------------------------------------------------------------------------------------
@dataclass
class Package:
    name: str
    version: str  # as the package manager prints it: deb "1:2.3-4", rpm "2.3-4" (epoch apart)
    path: str  # relative to the repository's base
    sha256: str
    size: int
    depends: list[list[tuple[str, str, str]]] = field(default_factory=list)  # clauses of alternatives (name, op, ver)
    provides: list[tuple[str, str]] = field(default_factory=list)  # (name, version or "")
    epoch: str = "0"
    release: str = ""
    arch: str = ""

    def upstream_version(self) -> str:
        """The version without epoch and packaging revision: what the manifest pins (580.126.20)."""
        return _deb_split(self.version)[1] if not self.release else self.version.rpartition("-")[0]


def _decompress(name: str, data: bytes) -> bytes:
    if name.endswith(".gz"):
        return gzip.decompress(data)
    if name.endswith(".xz"):
        return lzma.decompress(data)
    if name.endswith(".bz2"):
        return bz2.decompress(data)
    if name.endswith((".zst", ".zck")):
        raise RepoError(f"{name}: zstd- or zchunk-compressed metadata is not read (expected .gz, .xz or .bz2)")
    return data


def deb822(text: str) -> list[dict[str, str]]:
    """Stanzas of a Debian control-format file (Packages, Release), continuation lines joined with newlines."""
    stanzas, current, key = [], {}, ""
    for line in text.splitlines():
        if not line.strip():
            if current:
                stanzas.append(current)
            current, key = {}, ""
        elif line[0] in " \t" and key:
            current[key] += "\n" + line.strip()
        elif ":" in line:
            key, _, value = line.partition(":")
            current[key] = value.strip()
    if current:
        stanzas.append(current)
    return stanzas


_DEB_DEP = re.compile(r"^\s*([^\s(:]+)(?::\S+)?\s*(?:\(\s*(<<|<=|=|>=|>>|<|>)\s*([^)\s]+)\s*\))?")


def _deb_relations(text: str) -> list[list[tuple[str, str, str]]]:
    clauses = []
    for clause in filter(None, (c.strip() for c in text.split(","))):
        alternatives = []
        for alternative in clause.split("|"):
            found = _DEB_DEP.match(alternative)
            if found:
                alternatives.append((found[1], found[2] or "", found[3] or ""))
        if alternatives:
            clauses.append(alternatives)
    return clauses


def apt_packages(text: str) -> list[Package]:
    """A Packages index."""
    found = []
    for s in deb822(text):
        if "Package" not in s or "Filename" not in s or "SHA256" not in s:
            raise RepoError(f"a Packages stanza without Package, Filename or SHA256: {sorted(s)}")
        provides = [(name, ver) for clause in _deb_relations(s.get("Provides", "")) for name, _, ver in clause[:1]]
        found.append(
            Package(
                name=s["Package"],
                version=s.get("Version", ""),
                path=s["Filename"].removeprefix("./"),
                sha256=s["SHA256"].lower(),
                size=int(s.get("Size") or 0),
                # Recommends too: apt installs them unless told not to (the CUDA repository's sets do not say).
                depends=_deb_relations(
                    ", ".join(filter(None, (s.get(f) for f in ("Pre-Depends", "Depends", "Recommends"))))
                ),
                provides=provides,
                arch=s.get("Architecture", ""),
            )
        )
    return found


def release_files(release_text: str) -> dict[str, tuple[str, int]]:
    """The SHA256 list of a Release or InRelease file: path -> (sha256, size)."""
    body = release_text
    if body.startswith("-----BEGIN PGP SIGNED MESSAGE-----"):
        body = body.split("\n\n", 1)[1].split("\n-----BEGIN PGP SIGNATURE-----", 1)[0]
    stanzas = deb822(body)
    listing = stanzas[0].get("SHA256", "") if stanzas else ""
    files = {}
    for line in listing.splitlines():
        parts = line.split()
        if len(parts) == 3:
            files[parts[2]] = (parts[0].lower(), int(parts[1]))
    if not files:
        raise RepoError("the Release file lists no SHA256 sums (expected a SHA256 field with its index files)")
    return files


# ---- dnf --------------------------------------------------------------------------------------------------------
_NS = {
    "repo": "http://linux.duke.edu/metadata/repo",
    "common": "http://linux.duke.edu/metadata/common",
    "rpm": "http://linux.duke.edu/metadata/rpm",
}
_RPM_FLAGS = {"EQ": "=", "LT": "<<", "LE": "<=", "GT": ">>", "GE": ">="}


def repomd_files(xml: bytes) -> dict[str, tuple[str, str, int]]:
    """repomd.xml: data type -> (location, sha256, size)."""
    try:
        root = ET.fromstring(xml)
    except ET.ParseError as exc:
        raise RepoError(f"repomd.xml is not XML: {exc}") from exc
    found = {}
    for data in root.findall("repo:data", _NS):
        location = data.find("repo:location", _NS)
        checksum = data.find("repo:checksum", _NS)
        if location is None or checksum is None:
            raise RepoError(f"repomd.xml: data {data.get('type')!r} without location or checksum")
        if checksum.get("type") not in ("sha256", "sha"):
            raise RepoError(
                f"repomd.xml: data {data.get('type')!r} has a {checksum.get('type')} checksum (expected sha256)"
            )
        size = data.find("repo:size", _NS)
        found[data.get("type", "")] = (
            location.get("href", ""),
            (checksum.text or "").strip().lower(),
            int(size.text) if size is not None and size.text else -1,
        )
    if "primary" not in found:
        raise RepoError("repomd.xml lists no primary metadata")
    return found


def _rpm_entries(node: ET.Element | None, tag: str) -> list[ET.Element]:
    return [] if node is None else node.findall(f"rpm:{tag}/rpm:entry", _NS)


def _rpm_evr(entry: ET.Element) -> str:
    version = entry.get("ver") or ""
    return f"{version}-{entry.get('rel')}" if entry.get("rel") else version


def dnf_packages(name: str, data: bytes) -> list[Package]:
    """primary.xml (compressed as its name says)."""
    try:
        root = ET.fromstring(_decompress(name, data))
    except ET.ParseError as exc:
        raise RepoError(f"{name} is not XML: {exc}") from exc
    found = []
    for pkg in root.findall("common:package", _NS):
        version = pkg.find("common:version", _NS)
        checksum = pkg.find("common:checksum", _NS)
        location = pkg.find("common:location", _NS)
        if version is None or checksum is None or location is None:
            raise RepoError(f"{name}: a package without version, checksum or location")
        size = pkg.find("common:size", _NS)
        fmt = pkg.find("common:format", _NS)
        # Weak dependencies too: dnf installs them (install_weak_deps defaults to true).
        requires = [
            [(e.get("name", ""), _RPM_FLAGS.get(e.get("flags", ""), ""), _rpm_evr(e))]
            for tag in ("requires", "recommends")
            for e in _rpm_entries(fmt, tag)
            if not e.get("name", "").startswith("rpmlib(")
        ]
        provides = [(e.get("name", ""), _rpm_evr(e)) for e in _rpm_entries(fmt, "provides")]
        files = [f.text for f in (fmt.findall("file", _NS) if fmt is not None else []) if f.text]
        files += [f.text for f in (fmt.findall("common:file", _NS) if fmt is not None else []) if f.text]
        found.append(
            Package(
                name=(pkg.findtext("common:name", "", _NS) or "").strip(),
                version=f"{version.get('ver')}-{version.get('rel')}",
                epoch=version.get("epoch") or "0",
                release=version.get("rel") or "",
                path=location.get("href", ""),
                sha256=(checksum.text or "").strip().lower(),
                size=int(size.get("package") or 0) if size is not None else 0,
                depends=requires,
                provides=provides + [(f, "") for f in files],
                arch=(pkg.findtext("common:arch", "", _NS) or "").strip(),
            )
        )
    return found


# ---- what a node fetches ----------------------------------------------------------------------------------------
def _satisfies(compare: Callable[[str, str], int], version: str, op: str, wanted: str) -> bool:
    if not op:
        return True
    order = compare(version, wanted)
    return {
        "=": order == 0,
        "<<": order < 0,
        "<": order <= 0,
        "<=": order <= 0,
        ">>": order > 0,
        ">": order >= 0,
        ">=": order >= 0,
    }[op]


def version_key(family: str) -> Callable[[Package], object]:
    from functools import cmp_to_key

    if family == "apt":
        return cmp_to_key(lambda a, b: deb_compare(a.version, b.version))
    return cmp_to_key(
        lambda a, b: rpm_compare((a.epoch, *a.version.rsplit("-", 1)), (b.epoch, *b.version.rsplit("-", 1)))
    )


def _compare(family: str) -> Callable[[str, str], int]:
    if family == "apt":
        return deb_compare

    def rpm(a: str, b: str) -> int:
        av, _, ar = a.partition("-")
        bv, _, br = b.partition("-")
        return rpm_compare(("0", av, ar), ("0", bv, br))

    return rpm


def matches_pin(package: Package, pin: str) -> bool:
    """A package of the pinned version: 580.126.20 matches 580.126.20-1, 580.126.20-0ubuntu1, 1:580.126.20-1.el9."""
    if not pin:
        return False
    version = package.version.split(":", 1)[-1]
    return version == pin or package.upstream_version() == pin or version.startswith((pin + "-", pin + "~"))


def closure(
    family: str, packages: list[Package], wants: Iterable[tuple[str, str]], pins: Iterable[str] = ()
) -> tuple[list[Package], list[str]]:
    """The packages a node fetches from this repository for `wants` ((name, version) pairs, "" for the newest), and
    the dependencies the repository does not provide (the distribution's own archive does).

    For each wanted package: the pinned version (a RepoError when the repository has none). For each dependency: the
    newest version that satisfies it, and those of `pins` (the versions the nodes pin) that satisfy it too."""
    pins = [p for p in pins if p]
    compare = _compare(family)
    by_name: dict[str, list[Package]] = {}
    providers: dict[str, list[tuple[Package, str]]] = {}
    for p in packages:
        by_name.setdefault(p.name, []).append(p)
        providers.setdefault(p.name, []).append((p, p.version))
        for name, version in p.provides:
            providers.setdefault(name, []).append((p, version))
    key = version_key(family)
    chosen: dict[tuple[str, str, str], Package] = {}
    external: list[str] = []
    queue: list[Package] = []
    for name, version in wants:
        candidates = by_name.get(name, [])
        picked = [p for p in candidates if matches_pin(p, version)] if version else candidates
        if not picked:
            have = ", ".join(sorted({p.version for p in candidates}, key=str)) or "none"
            raise RepoError(f"{name} {version or ''}".strip() + f" is not in the repository (its versions: {have})")
        queue.append(max(picked, key=key))
    while queue:
        package = queue.pop()
        ident = (package.name, package.version, package.arch)
        if ident in chosen:
            continue
        chosen[ident] = package
        for clause in package.depends:
            candidates = []
            for name, op, wanted in clause:
                candidates = [p for p, v in providers.get(name, []) if _satisfies(compare, v or p.version, op, wanted)]
                if candidates:
                    break
            if not candidates:
                external.append(" | ".join(f"{n} ({o} {w})" if o else n for n, o, w in clause))
                continue
            queue.append(max(candidates, key=key))
            queue += [p for p in candidates if any(matches_pin(p, pin) for pin in pins)]
    ordered = sorted(chosen.values(), key=lambda p: (p.name, p.path))
    return ordered, sorted(set(external))


def sizes(packages: Iterable[Package]) -> int:
    return sum(p.size for p in packages)
