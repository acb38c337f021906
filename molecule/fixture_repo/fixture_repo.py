#!/usr/bin/env python3
"""Signed fixture apt repository with stand-in packages for vendor-only software.

The vendor repositories (NVIDIA CUDA, DOCA, NVIDIA container toolkit) cannot be reached from the test
machines, so roles are tested against a repository built here: a throwaway GPG key, stand-in .deb packages
built with ``dpkg-deb`` from declarative YAML specs, an apt-ftparchive generated and signed Release
(InRelease + Release.gpg), served over HTTP on loopback. A container then uses it exactly like the vendor's
repository: keyring under /usr/share/keyrings, ``signed-by=``, pinning, holds.

Standard library + PyYAML only. External tools: gpg, gpgconf, dpkg-deb, apt-ftparchive.

CLI::

    fixture_repo.py build --spec SPEC.yml [--spec ...] --out DIR [--suite S] [--component C] [...]
    fixture_repo.py serve --dir DIR [--host 127.0.0.1] [--port N] [--url-file F] [--pid-file F]
    fixture_repo.py build-and-serve --spec SPEC.yml --out DIR [build and serve options]

Python::

    with served_repo(["specs/example.yml"], tmp_path) as repo:
        repo.url, repo.keyring_path, repo.armored_key_path, repo.suite, repo.component
        repo.apt_source_line("/usr/share/keyrings/nodeforge-fixture.gpg")
"""

import argparse
import contextlib
import gzip
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

DEFAULT_SUITE = "nodeforge-fixture"
DEFAULT_COMPONENT = "main"
DEFAULT_ORIGIN = "nodeforge-fixture"
DEFAULT_LABEL = "nodeforge fixture repository"
DEFAULT_ARCHITECTURES = ("amd64",)
DEFAULT_MAINTAINER = "nodeforge fixture <fixture@nodeforge.invalid>"
KEYRING_NAME = "fixture-archive-keyring.gpg"  # binary keyring, the form used with signed-by=
ARMORED_KEY_NAME = "fixture-archive-keyring.asc"
METADATA_NAME = "fixture-repo.json"
REPO_SUBDIR = "repo"  # the served tree; the private key stays outside it
GNUPG_SUBDIR = "gnupg"
# Fixed timestamp for package contents: same spec, same .deb.
SOURCE_DATE_EPOCH = "1700000000"

KNOWN_ARCHITECTURES = frozenset(
    {"amd64", "arm64", "armel", "armhf", "i386", "mips64el", "ppc64el", "riscv64", "s390x"},
)
VENDOR_ARCH_NAMES = {"x86_64": "amd64", "aarch64": "arm64", "sbsa": "arm64", "ppc64le": "ppc64el"}
RELATION_FIELDS = {  # spec key -> control field
    "depends": "Depends",
    "pre_depends": "Pre-Depends",
    "recommends": "Recommends",
    "suggests": "Suggests",
    "provides": "Provides",
    "conflicts": "Conflicts",
    "breaks": "Breaks",
    "replaces": "Replaces",
}
SIMPLE_FIELDS = {  # spec key -> control field
    "section": "Section",
    "priority": "Priority",
    "maintainer": "Maintainer",
    "homepage": "Homepage",
    "multi_arch": "Multi-Arch",
}
SCRIPT_FIELDS = ("preinst", "postinst", "prerm", "postrm")
PACKAGE_FIELDS = frozenset(
    {"name", "version", "architecture", "description", "files"}
    | set(RELATION_FIELDS)
    | set(SIMPLE_FIELDS)
    | set(SCRIPT_FIELDS)
)
FILE_SOURCES = ("keyring", "armored-key")  # files whose content is this repository's public key

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")
_VERSION_RE = re.compile(r"^(?:\d+:)?[0-9][A-Za-z0-9.+~]*(?:-[A-Za-z0-9.+~]+)*$")
_RELATION_RE = re.compile(
    r"^[a-z0-9][a-z0-9+.-]+(?::[a-z0-9-]+)?"  # name[:archqual]
    r"(?:\s*\(\s*(?:<<|<=|=|>=|>>)\s*[A-Za-z0-9.+~:-]+\s*\))?"  # (op version)
    r"(?:\s*\[[^\]]+\])?$"  # [arch restriction]
)
_SUITE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+_-]*$")


class FixtureRepoError(Exception):
    """A problem building or serving the fixture repository (message is meant for the user)."""


class SpecError(FixtureRepoError, ValueError):
    """An invalid package spec; the message names the spec file, the package and the field."""


# --------------------------------------------------------------------------------------------------------
# Specs
# --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FileEntry:
    path: str  # absolute path inside the package
    mode: int
    content: bytes | None = None
    source: str | None = None  # one of FILE_SOURCES


@dataclass(frozen=True)
class PackageSpec:
    name: str
    version: str
    architecture: str
    description: str
    spec_path: str
    control: dict[str, str] = field(default_factory=dict)  # extra control fields (Depends, Section...)
    files: tuple[FileEntry, ...] = ()
    scripts: dict[str, str] = field(default_factory=dict)

    @property
    def deb_filename(self) -> str:
        upstream = self.version.split(":", 1)[-1]  # the epoch is not part of file names
        return f"{self.name}_{upstream}_{self.architecture}.deb"


def load_specs(spec_paths: Iterable[str | os.PathLike[str]]) -> list[PackageSpec]:
    """Read and validate spec files; raises SpecError naming the file, the package and the field."""
    packages: list[PackageSpec] = []
    seen: dict[tuple[str, str, str], str] = {}
    paths = [Path(p) for p in spec_paths]
    if not paths:
        raise SpecError("no spec file given")
    for path in paths:
        for pkg in _load_spec_file(path):
            key = (pkg.name, pkg.version, pkg.architecture)
            if key in seen:
                raise SpecError(
                    f"{path}: package '{pkg.name}': version {pkg.version} ({pkg.architecture}) "
                    f"is already defined in {seen[key]}"
                )
            seen[key] = str(path)
            packages.append(pkg)
    return packages


def _load_spec_file(path: Path) -> list[PackageSpec]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"{path}: cannot read spec file: {exc.strerror or exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SpecError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict) or "packages" not in data:
        raise SpecError(f"{path}: a spec must be a mapping with a 'packages' list")
    unknown = sorted(str(k) for k in data if k != "packages")
    if unknown:
        raise SpecError(f"{path}: unknown top-level field(s) {', '.join(unknown)} (only 'packages')")
    items = data["packages"]
    if not isinstance(items, list) or not items:
        raise SpecError(f"{path}: 'packages' must be a non-empty list")
    return [_parse_package(path, index, item) for index, item in enumerate(items, start=1)]


def _parse_package(path: Path, index: int, item: Any) -> PackageSpec:
    where = f"{path}: package #{index}"
    if not isinstance(item, dict):
        raise SpecError(f"{where}: must be a mapping with at least 'name' and 'version'")
    raw = {str(k).replace("-", "_"): v for k, v in item.items()}
    name = raw.get("name")
    if isinstance(name, str) and name:
        where = f"{path}: package '{name}'"

    def fail(fieldname: str, problem: str) -> SpecError:
        return SpecError(f"{where}: field '{fieldname}': {problem}")

    unknown = sorted(k for k in raw if k not in PACKAGE_FIELDS)
    if unknown:
        raise fail(unknown[0], f"unknown field (allowed: {', '.join(sorted(PACKAGE_FIELDS))})")

    if name is None:
        raise fail("name", "missing")
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise fail("name", f"{name!r} is not a Debian package name (lowercase, digits, '+', '-', '.')")

    version = raw.get("version")
    if version is None:
        raise fail("version", "missing")
    if isinstance(version, int | float):
        raise fail(
            "version",
            f'YAML read {version!r} as a number; quote it (version: "{version}") - 1.10 would become 1.1',
        )
    if not isinstance(version, str) or not _VERSION_RE.match(version):
        raise fail("version", f"{version!r} is not a Debian version like 1.0-1 or 2:580.65.06-1")

    arch = raw.get("architecture", "all")
    if not isinstance(arch, str) or (arch != "all" and arch not in KNOWN_ARCHITECTURES):
        hint = f" (Debian calls it {VENDOR_ARCH_NAMES[arch]})" if arch in VENDOR_ARCH_NAMES else ""
        raise fail(
            "architecture",
            f"{arch!r} is not a Debian architecture{hint}; use 'all' or one of "
            + ", ".join(sorted(KNOWN_ARCHITECTURES)),
        )

    description = raw.get("description", f"nodeforge fixture stand-in for {name}")
    if not isinstance(description, str) or not description.strip():
        raise fail("description", "must be a non-empty string (first line is the summary)")

    control: dict[str, str] = {}
    for key, control_field in SIMPLE_FIELDS.items():
        if key in raw:
            value = raw[key]
            if not isinstance(value, str) or not value.strip() or "\n" in value.strip():
                raise fail(key, "must be a single-line string")
            control[control_field] = value.strip()
    for key, control_field in RELATION_FIELDS.items():
        if key in raw:
            control[control_field] = _parse_relations(raw[key], partial(fail, key))

    files = _parse_files(raw.get("files"), partial(fail, "files"), path.parent)

    scripts: dict[str, str] = {}
    for key in SCRIPT_FIELDS:
        if key in raw:
            text = raw[key]
            if not isinstance(text, str) or not text.strip():
                raise fail(key, "must be the script text (a non-empty string)")
            scripts[key] = text

    return PackageSpec(
        name=name,
        version=version,
        architecture=arch,
        description=description,
        spec_path=str(path),
        control=control,
        files=files,
        scripts=scripts,
    )


def _parse_relations(value: Any, fail: Any) -> str:
    if isinstance(value, str):
        relations = [part.strip() for part in value.split(",")]
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        relations = [v.strip() for v in value]
    else:
        raise fail("must be a string 'a (>= 1), b | c' or a list of such relations")
    for relation in relations:
        for alternative in relation.split("|"):
            if not _RELATION_RE.match(alternative.strip()):
                raise fail(f"{alternative.strip()!r} is not a relation like 'pkg', 'pkg (>= 1.0-1)'")
    return ", ".join(relations)


def _parse_files(value: Any, fail: Any, base: Path) -> tuple[FileEntry, ...]:
    """`base`: the spec file's directory, which a {path: ...} file source is relative to."""
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise fail("must be a mapping of absolute path -> content (or {content|source|path, mode})")
    entries = []
    for path, spec in value.items():
        if not isinstance(path, str) or not path.startswith("/") or path.endswith("/"):
            raise fail(f"{path!r}: paths must be absolute file paths like /etc/foo.conf")
        parts = path.strip("/").split("/")
        if any(p in ("", ".", "..") for p in parts) or parts[0] == "DEBIAN":
            raise fail(f"{path!r}: path must be normalised (no '.', '..', '//') and outside DEBIAN/")
        mode = 0o644
        content: bytes | None = None
        source: str | None = None
        if isinstance(spec, str):
            content = spec.encode()
        elif isinstance(spec, dict):
            extra = sorted(str(k) for k in spec if k not in ("content", "source", "path", "mode"))
            if extra:
                raise fail(f"{path}: unknown key(s) {', '.join(extra)} (allowed: content, source, path, mode)")
            if sum(k in spec for k in ("content", "source", "path")) != 1:
                raise fail(f"{path}: give exactly one of 'content', 'source' or 'path'")
            if "content" in spec:
                if not isinstance(spec["content"], str):
                    raise fail(f"{path}: 'content' must be a string")
                content = spec["content"].encode()
            elif "path" in spec:
                # A program kept as its own file (linted and tested where it lies), relative to the spec.
                if not isinstance(spec["path"], str) or not spec["path"]:
                    raise fail(f"{path}: 'path' must be a file path relative to the spec")
                try:
                    content = (base / spec["path"]).read_bytes()
                except OSError as exc:
                    raise fail(f"{path}: 'path' {spec['path']}: cannot read: {exc.strerror or exc}") from exc
            else:
                source = spec["source"]
                if source not in FILE_SOURCES:
                    raise fail(f"{path}: 'source' must be one of {', '.join(FILE_SOURCES)}, got {source!r}")
            if "mode" in spec:
                raw_mode = spec["mode"]
                if not isinstance(raw_mode, str) or not re.fullmatch(r"0?[0-7]{3}", raw_mode):
                    raise fail(f"{path}: 'mode' must be a quoted octal string like '0755', got {raw_mode!r}")
                mode = int(raw_mode, 8)
        else:
            raise fail(f"{path}: value must be the file content (string) or a mapping")
        entries.append(FileEntry(path=path, mode=mode, content=content, source=source))
    return tuple(entries)


# --------------------------------------------------------------------------------------------------------
# Build
# --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BuiltPackage:
    name: str
    version: str
    architecture: str
    filename: str  # relative to the repository root, as in Packages


@dataclass(frozen=True)
class FixtureRepo:
    """A built repository. ``root`` is the tree to serve; the key files lie inside it."""

    out_dir: Path
    root: Path
    keyring_path: Path
    armored_key_path: Path
    fingerprint: str
    suite: str
    codename: str
    component: str | None  # None for a flat repository
    architectures: tuple[str, ...]
    origin: str
    label: str
    flat: bool
    packages: tuple[BuiltPackage, ...]

    def apt_source_line(self, keyring: str | os.PathLike[str], url: str) -> str:
        """One-line sources.list entry for this repository at ``url``, signed-by ``keyring``."""
        url = url.rstrip("/") + "/"
        if self.flat:
            return f"deb [signed-by={keyring}] {url} ./"
        return f"deb [signed-by={keyring}] {url} {self.suite} {self.component}"


def reproducible_env() -> dict[str, str]:
    """The environment of the build tools (dpkg-deb, rpmbuild, createrepo_c): timestamps from SOURCE_DATE_EPOCH, so
    that a fixture built twice is the same bytes."""
    return {**os.environ, "SOURCE_DATE_EPOCH": SOURCE_DATE_EPOCH}


def run(cmd: Sequence[str], *, what: str, **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
    try:
        proc = subprocess.run(list(cmd), capture_output=True, check=False, **kwargs)
    except FileNotFoundError as exc:
        raise FixtureRepoError(f"{what}: '{cmd[0]}' is not installed") from exc
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout or b"").decode(errors="replace").strip()
        raise FixtureRepoError(f"{what} failed ({' '.join(cmd[:3])} ... exit {proc.returncode}): {detail}")
    return proc


class Gpg:
    """gpg in a private GNUPGHOME; the agent it starts is killed on close."""

    def __init__(self, home: Path) -> None:
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        home.chmod(0o700)
        self._link: Path | None = None
        self.home = home
        # gpg-agent's socket lives in GNUPGHOME when /run/user/<uid> is missing; unix socket paths are
        # limited to ~107 bytes, so a deep output dir is reached through a short symlink.
        if len(str(home.resolve())) > 70:
            link = Path(tempfile.mkdtemp(prefix="nf-gpg-")) / "h"
            link.symlink_to(home.resolve())
            self._link = link
            self.home = link

    def __call__(self, *args: str, what: str, **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
        return run(["gpg", "--homedir", str(self.home), "--batch", "--yes", *args], what=what, **kwargs)

    def close(self) -> None:
        kill = ["gpgconf", "--homedir", str(self.home), "--kill", "all"]
        subprocess.run(kill, capture_output=True, check=False)
        if self._link is not None:
            self._link.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                self._link.parent.rmdir()


def secret_fingerprint(gpg: Gpg) -> str | None:
    proc = gpg("--with-colons", "--list-secret-keys", what="list the fixture key")
    for line in proc.stdout.decode().splitlines():
        if line.startswith("fpr:"):
            return line.split(":")[9]
    return None


# gpg's key parameters per kind of fixture key: apt's repositories sign with ed25519 (as the vendors' newer keys do),
# RPM repositories with RSA (rpm verifies RSA signatures on every EL release).
KEY_TYPES = {
    "ed25519": "Key-Type: eddsa\nKey-Curve: ed25519\n",
    "rsa": "Key-Type: RSA\nKey-Length: 3072\n",
}


def ensure_key(gpg: Gpg, name: str, key_type: str = "ed25519") -> str:
    """The fingerprint of the signing key in GPG's home, generated first if it has none."""
    fingerprint = secret_fingerprint(gpg)
    if fingerprint:
        return fingerprint
    params = (
        f"%no-protection\n{KEY_TYPES[key_type]}Key-Usage: sign\n"
        f"Name-Real: {name}\nName-Email: fixture@nodeforge.invalid\nExpire-Date: 0\n%commit\n"
    )
    gpg("--gen-key", what=f"generate the fixture {key_type} signing key", input=params.encode())
    fingerprint = secret_fingerprint(gpg)
    if not fingerprint:
        raise FixtureRepoError(f"generate the fixture {key_type} signing key: gpg reported no secret key afterwards")
    return fingerprint


def _control_text(pkg: PackageSpec, installed_kib: int) -> str:
    summary, _, rest = pkg.description.strip().partition("\n")
    lines = [
        f"Package: {pkg.name}",
        f"Version: {pkg.version}",
        f"Architecture: {pkg.architecture}",
        f"Maintainer: {pkg.control.get('Maintainer', DEFAULT_MAINTAINER)}",
        f"Installed-Size: {installed_kib}",
    ]
    lines += [f"{k}: {v}" for k, v in pkg.control.items() if k != "Maintainer"]
    if "Section" not in pkg.control:
        lines.append("Section: misc")
    if "Priority" not in pkg.control:
        lines.append("Priority: optional")
    lines.append(f"Description: {summary.strip()}")
    for long_line in rest.splitlines():
        lines.append(f" {long_line.rstrip()}" if long_line.strip() else " .")
    return "\n".join(lines) + "\n"


def _pool_dir(pkg: PackageSpec, component: str) -> str:
    prefix = pkg.name[:4] if pkg.name.startswith("lib") else pkg.name[0]
    return f"pool/{component}/{prefix}/{pkg.name}"


def _build_deb(pkg: PackageSpec, stage: Path, dest: Path, key_files: dict[str, bytes]) -> None:
    tree = stage / pkg.deb_filename.removesuffix(".deb")
    shutil.rmtree(tree, ignore_errors=True)
    debian = tree / "DEBIAN"
    debian.mkdir(parents=True)
    size = 0
    conffiles = []
    for entry in pkg.files:
        target = tree / entry.path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        data = entry.content if entry.content is not None else key_files[entry.source or ""]
        target.write_bytes(data)
        target.chmod(entry.mode)
        size += len(data)
        if entry.path.startswith("/etc/"):  # as debhelper does: everything under /etc is a conffile
            conffiles.append(entry.path)
    for directory in [tree, *(p for p in tree.rglob("*") if p.is_dir())]:
        directory.chmod(0o755)
    (debian / "control").write_text(_control_text(pkg, max(1, (size + 1023) // 1024)))
    if conffiles:
        (debian / "conffiles").write_text("".join(f"{c}\n" for c in conffiles))
    for script, text in pkg.scripts.items():
        if not text.startswith("#!"):
            text = "#!/bin/sh\nset -e\n" + text
        script_path = debian / script
        script_path.write_text(text if text.endswith("\n") else text + "\n")
        script_path.chmod(0o755)
    dest.parent.mkdir(parents=True, exist_ok=True)
    env = reproducible_env()
    run(
        ["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(tree), str(dest)],
        what=f"{pkg.spec_path}: package '{pkg.name}' {pkg.version}: dpkg-deb --build",
        env=env,
    )
    shutil.rmtree(tree)


def _write_index(path: Path, text: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text)
    with gzip.GzipFile(path.with_name(path.name + ".gz"), "wb", mtime=0) as gz:
        gz.write(text)


def build_repo(
    spec_paths: Iterable[str | os.PathLike[str]],
    out_dir: str | os.PathLike[str],
    *,
    suite: str = DEFAULT_SUITE,
    codename: str | None = None,
    component: str = DEFAULT_COMPONENT,
    origin: str = DEFAULT_ORIGIN,
    label: str = DEFAULT_LABEL,
    architectures: Sequence[str] = DEFAULT_ARCHITECTURES,
    flat: bool = False,
) -> FixtureRepo:
    """Build a signed apt repository from spec files into ``out_dir``.

    Layout: ``out_dir/repo`` is the tree to serve (dists/ or, with ``flat``, Packages/Release at its top,
    pool/, the public key as .gpg and .asc); ``out_dir/gnupg`` holds the private key. The key is generated
    on the first build and reused when ``out_dir`` is built again, so installed keyrings stay valid.
    Validates every spec before building anything.
    """
    codename = codename or suite
    for value, what in ((suite, "suite"), (codename, "codename"), (component, "component")):
        if not _SUITE_RE.match(value):
            raise FixtureRepoError(f"invalid {what} {value!r} (letters, digits, '.', '+', '_', '-')")
    for arch in architectures:
        if arch not in KNOWN_ARCHITECTURES:
            raise FixtureRepoError(f"invalid repository architecture {arch!r}")
    packages = load_specs(spec_paths)
    concrete = [p.architecture for p in packages if p.architecture != "all"]
    archs = list(dict.fromkeys([*architectures, *concrete]))

    out = Path(out_dir).absolute()
    root = out / REPO_SUBDIR
    for old in ("dists", "pool", "Packages", "Packages.gz", "Release", "InRelease", "Release.gpg"):
        target = root / old
        if target.is_dir():
            shutil.rmtree(target)
        else:
            target.unlink(missing_ok=True)
    root.mkdir(parents=True, exist_ok=True)

    gpg = Gpg(out / GNUPG_SUBDIR)
    try:
        fingerprint = ensure_key(gpg, f"{label} (throwaway test key)")
        keyring = gpg("--export", fingerprint, what="export the public key").stdout
        armored = gpg("--armor", "--export", fingerprint, what="export the public key").stdout
        keyring_path = root / KEYRING_NAME
        armored_key_path = root / ARMORED_KEY_NAME
        keyring_path.write_bytes(keyring)
        armored_key_path.write_bytes(armored)

        pool_component = "main" if flat else component
        stage = Path(tempfile.mkdtemp(prefix="stage-", dir=out))
        built = []
        try:
            for pkg in packages:
                filename = f"{_pool_dir(pkg, pool_component)}/{pkg.deb_filename}"
                _build_deb(pkg, stage, root / filename, {"keyring": keyring, "armored-key": armored})
                built.append(BuiltPackage(pkg.name, pkg.version, pkg.architecture, filename))
        finally:
            shutil.rmtree(stage, ignore_errors=True)

        if flat:
            release_dir = root
            packages_text = run(["apt-ftparchive", "packages", "pool"], what="apt-ftparchive packages", cwd=root).stdout
            _write_index(root / "Packages", packages_text)
        else:
            release_dir = root / "dists" / suite
            for arch in archs:
                packages_text = run(
                    ["apt-ftparchive", "--arch", arch, "packages", "pool"],
                    what="apt-ftparchive packages",
                    cwd=root,
                ).stdout
                _write_index(release_dir / component / f"binary-{arch}" / "Packages", packages_text)
            if codename != suite:
                (root / "dists" / codename).symlink_to(suite)

        options = {
            "Origin": origin,
            "Label": label,
            "Suite": suite,
            "Codename": codename,
            "Architectures": " ".join(archs),
            "Description": f"{label} (stand-in packages for tests)",
        }
        if not flat:
            options["Components"] = component
        cmd = ["apt-ftparchive"]
        for key, value in options.items():
            cmd += ["-o", f"APT::FTPArchive::Release::{key}={value}"]
        release = run([*cmd, "release", "."], what="apt-ftparchive release", cwd=release_dir).stdout
        (release_dir / "Release").write_bytes(release)
        sign = ["--local-user", fingerprint, "--digest-algo", "SHA512"]
        gpg(
            *sign,
            "--clearsign",
            "-o",
            str(release_dir / "InRelease"),
            str(release_dir / "Release"),
            what="sign InRelease",
        )
        gpg(
            *sign,
            "--armor",
            "--detach-sign",
            "-o",
            str(release_dir / "Release.gpg"),
            str(release_dir / "Release"),
            what="sign Release.gpg",
        )
    finally:
        gpg.close()

    repo = FixtureRepo(
        out_dir=out,
        root=root,
        keyring_path=keyring_path,
        armored_key_path=armored_key_path,
        fingerprint=fingerprint,
        suite=suite,
        codename=codename,
        component=None if flat else component,
        architectures=tuple(archs),
        origin=origin,
        label=label,
        flat=flat,
        packages=tuple(built),
    )
    metadata = asdict(repo)
    for key in ("out_dir", "root", "keyring_path", "armored_key_path"):
        metadata[key] = str(metadata[key])
    (out / METADATA_NAME).write_text(json.dumps(metadata, indent=2) + "\n")
    return repo


def load_repo(directory: str | os.PathLike[str]) -> FixtureRepo:
    """A repository built earlier: ``directory`` is build's --out (or its repo/ subdirectory)."""
    path = Path(directory).absolute()
    meta_path = path / METADATA_NAME
    if not meta_path.is_file() and (path.parent / METADATA_NAME).is_file():
        meta_path = path.parent / METADATA_NAME
    if not meta_path.is_file():
        raise FixtureRepoError(f"{path}: no {METADATA_NAME} here; build the repository first (build)")
    data = json.loads(meta_path.read_text())
    for key in ("out_dir", "root", "keyring_path", "armored_key_path"):
        data[key] = Path(data[key])
    data["architectures"] = tuple(data["architectures"])
    data["packages"] = tuple(BuiltPackage(**p) for p in data["packages"])
    return FixtureRepo(**data)


# --------------------------------------------------------------------------------------------------------
# Serve
# --------------------------------------------------------------------------------------------------------


class _Handler(SimpleHTTPRequestHandler):
    quiet = True

    def log_message(self, format: str, *args: Any) -> None:
        if not self.quiet:
            sys.stderr.write(f"{self.address_string()} {format % args}\n")


class _Server(ThreadingHTTPServer):
    daemon_threads = True


def make_server(root: str | os.PathLike[str], host: str = "127.0.0.1", port: int = 0, *, quiet: bool = True):
    """An HTTP server for ``root`` bound to host:port (0: an ephemeral port); call serve_forever()."""
    handler = type("Handler", (_Handler,), {"quiet": quiet})
    server_class = _Server
    if ":" in host:
        server_class = type("Server6", (_Server,), {"address_family": socket.AF_INET6})
    try:
        return server_class((host, port), partial(handler, directory=str(root)))
    except OSError as exc:
        raise FixtureRepoError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc


def server_url(server: ThreadingHTTPServer) -> str:
    host, port = server.server_address[:2]
    if isinstance(host, bytes):
        host = host.decode()
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{port}/"


@dataclass(frozen=True)
class ServedRepo(FixtureRepo):
    """A repository being served: ``url`` is its base URL (what goes into sources.list)."""

    url: str = ""
    host: str = ""
    port: int = 0

    def source_line(self, keyring: str | os.PathLike[str], url: str | None = None) -> str:
        """sources.list line; ``url`` overrides the served URL (e.g. http://10.0.2.2:PORT/, slirp4netns)."""
        return self.apt_source_line(keyring, url or self.url)


@contextlib.contextmanager
def served_repo(
    spec_paths: Iterable[str | os.PathLike[str]],
    workdir: str | os.PathLike[str],
    host: str = "127.0.0.1",
    port: int = 0,
    **build_options: Any,
) -> Iterator[ServedRepo]:
    """Build the repository into ``workdir`` and serve it in a background thread until the block ends.

    ``build_options`` go to build_repo (suite, codename, component, origin, label, architectures, flat).
    """
    repo = build_repo(spec_paths, workdir, **build_options)
    server = make_server(repo.root, host, port)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        fields = {k: getattr(repo, k) for k in FixtureRepo.__dataclass_fields__}
        yield ServedRepo(**fields, url=server_url(server), host=host, port=server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def serve_forever(
    repo: FixtureRepo,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    url_file: str | None = None,
    pid_file: str | None = None,
    quiet: bool = False,
) -> None:
    """Serve in the foreground until SIGINT/SIGTERM; prints the URL first, then how to use it."""
    server = make_server(repo.root, host, port, quiet=quiet)
    url = server_url(server)
    written = []
    for path, text in ((pid_file, f"{os.getpid()}\n"), (url_file, url + "\n")):
        if path:
            tmp = Path(f"{path}.tmp")
            tmp.write_text(text)
            tmp.replace(path)  # atomic: a reader never sees half a URL
            written.append(Path(path))
    print(url)
    print(f"keyring: {repo.keyring_path}  (armored: {repo.armored_key_path})")
    print(f"apt:     {repo.apt_source_line('/usr/share/keyrings/' + KEYRING_NAME, url)}")
    sys.stdout.flush()

    def stop(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        for path in written:
            path.unlink(missing_ok=True)


# --------------------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------------------


def _add_build_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--spec", action="append", required=True, metavar="SPEC.yml", help="spec (repeat)")
    parser.add_argument("--out", required=True, metavar="DIR", help="output dir (its repo/ is served)")
    parser.add_argument("--suite", default=DEFAULT_SUITE, help=f"Suite (default {DEFAULT_SUITE})")
    parser.add_argument("--codename", help="Codename (default: the suite)")
    parser.add_argument("--component", default=DEFAULT_COMPONENT, help="component (default main)")
    parser.add_argument("--origin", default=DEFAULT_ORIGIN, help="Release Origin, e.g. to mimic a vendor")
    parser.add_argument("--label", default=DEFAULT_LABEL, help="Release Label")
    parser.add_argument(
        "--arch", action="append", metavar="ARCH", help="repository architecture (repeat; default amd64)"
    )
    parser.add_argument(
        "--flat", action="store_true", help="flat repository (Packages/Release at the top, 'deb URL ./')"
    )


def _add_serve_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port (default 0: an ephemeral port)")
    parser.add_argument("--url-file", metavar="FILE", help="write the URL here once listening")
    parser.add_argument("--pid-file", metavar="FILE", help="write this process's pid here once listening")
    parser.add_argument("--quiet", action="store_true", help="do not log requests to stderr")


def _build_from_args(args: argparse.Namespace) -> FixtureRepo:
    return build_repo(
        args.spec,
        args.out,
        suite=args.suite,
        codename=args.codename,
        component=args.component,
        origin=args.origin,
        label=args.label,
        architectures=args.arch or DEFAULT_ARCHITECTURES,
        flat=args.flat,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="fixture_repo.py", description="Signed fixture apt repository with stand-in packages."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    build_parser = sub.add_parser("build", help="build and sign the repository")
    _add_build_options(build_parser)
    serve_parser = sub.add_parser("serve", help="serve a built repository over HTTP (foreground)")
    serve_parser.add_argument("--dir", required=True, help="the --out directory of build")
    _add_serve_options(serve_parser)
    both = sub.add_parser("build-and-serve", help="build, then serve (foreground)")
    _add_build_options(both)
    _add_serve_options(both)
    args = parser.parse_args(argv)

    try:
        if args.command == "build":
            repo = _build_from_args(args)
            print(f"built {len(repo.packages)} package(s) into {repo.root}")
            for pkg in repo.packages:
                print(f"  {pkg.name} {pkg.version} {pkg.architecture}")
            print(f"keyring: {repo.keyring_path}")
            return 0
        repo = _build_from_args(args) if args.command == "build-and-serve" else load_repo(args.dir)
        files = {"url_file": args.url_file, "pid_file": args.pid_file}
        serve_forever(repo, args.host, args.port, quiet=args.quiet, **files)
        return 0
    except FixtureRepoError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
