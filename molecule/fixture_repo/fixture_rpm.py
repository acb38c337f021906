#!/usr/bin/env python3
"""Signed fixture dnf repository: the same package specs as the .deb fixtures (fixture_repo.py), built as RPMs.

The EL tier's nodes (lab/base-image/build.sh, NODEFORGE_NODE_OS=rocky8/rocky9) run Debian's real dnf and rpm; the
vendors' RPM repositories cannot be reached from here, so roles are tested against one built here: RPMs made with
``rpmbuild`` from the YAML specs that also make the .deb stand-ins (NVIDIA names its packages alike in both
formats), repository metadata from ``createrepo_c`` (and ``modifyrepo_c`` for a modules.yaml: the driver's dnf module
streams), ``repomd.xml.asc`` signed with a throwaway RSA key (what ``repo_gpgcheck=1`` checks) and, with
``--sign-packages``, every RPM signed by that key (what ``gpgcheck=1`` checks).

How a .deb spec becomes an RPM (docs/testing.md, "The EL tier"):
  - version ``[epoch:]upstream-revision`` -> Epoch, Version, Release; architecture amd64 -> x86_64, all -> noarch;
  - depends/pre_depends -> Requires, provides -> Provides, conflicts/breaks -> Conflicts, replaces -> Obsoletes,
    ``a | b`` -> ``(a or b)``; Debian names of EL packages are translated (EL_NAMES); recommends/suggests are dropped;
  - the maintainer scripts run as %pre/%post/%preun/%postun with Debian's first argument (``configure``,
    ``remove``...), so one script serves both formats; no automatic file dependencies (AutoReqProv: no).

Standard library + PyYAML only. External tools: gpg, gpgconf, rpmbuild, rpmsign, createrepo_c, modifyrepo_c.

CLI::

    fixture_rpm.py build --spec SPEC.yml [--spec ...] --out DIR [--sign-packages] [--modules modules.yaml]
    fixture_rpm.py userland --spec lab/base-image/el-userland.yml --os rocky9 --out DIR

The served tree is DIR/repo (Packages/, repodata/, RPM-GPG-KEY-nodeforge-fixture); DIR/fixture-repo.json holds the
key's fingerprint; the private key stays in DIR/gnupg.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fixture_repo as debrepo  # the spec format and the gpg helpers

ARMORED_KEY_NAME = "RPM-GPG-KEY-nodeforge-fixture"
METADATA_NAME = debrepo.METADATA_NAME
REPO_SUBDIR = debrepo.REPO_SUBDIR
GNUPG_SUBDIR = debrepo.GNUPG_SUBDIR
RPM_ARCH = {"amd64": "x86_64", "all": "noarch", "arm64": "aarch64", "ppc64el": "ppc64le", "s390x": "s390x"}
# Debian names in the specs' relations -> the EL package that provides the same (as NVIDIA's RPMs require it).
EL_NAMES = {"libseccomp2": "libseccomp", "libc6": "glibc", "python3-apt": "python3-dnf"}
RELATION_TAGS = {
    "Depends": "Requires",
    "Pre-Depends": "Requires(pre)",
    "Provides": "Provides",
    "Conflicts": "Conflicts",
    "Breaks": "Conflicts",
    "Replaces": "Obsoletes",
}
# Debian maintainer script -> RPM scriptlet, and the Debian arguments it is handed ($1 in RPM is a count).
SCRIPTLETS = {
    "preinst": ("pre", 'if [ "$1" -gt 1 ]; then set -- upgrade; else set -- install; fi'),
    "postinst": ("post", "set -- configure"),
    "prerm": ("preun", 'if [ "$1" -eq 0 ]; then set -- remove; else set -- upgrade; fi'),
    "postrm": ("postun", 'if [ "$1" -eq 0 ]; then set -- remove; else set -- upgrade; fi'),
}
_DEB_OPS = {"<<": "<", "<=": "<=", "=": "=", ">=": ">=", ">>": ">"}
_RELATION_RE = re.compile(r"^(?P<name>[^\s(:\[]+)(?::\S+)?\s*(?:\(\s*(?P<op><<|<=|=|>=|>>)\s*(?P<ver>[^\s)]+)\s*\))?")


def rpm_evr(version: str) -> tuple[str | None, str, str]:
    """A Debian version as RPM's (epoch, version, release): '1:580.65.06-1' -> ('1', '580.65.06', '1')."""
    epoch, _, rest = version.rpartition(":") if ":" in version else (None, "", version)
    upstream, sep, release = rest.rpartition("-")
    if not sep:
        upstream, release = rest, "1"
    return (epoch or None), upstream, release


def rpm_relation(relation: str) -> str:
    """One Debian relation ('a (>= 1-1) | b') as an RPM dependency ('(a >= 1-1 or b)')."""
    alternatives = []
    for part in (p.strip() for p in relation.split("|")):
        match = _RELATION_RE.match(part)
        if not match:
            raise debrepo.SpecError(f"relation {relation!r}: cannot translate {part!r} to RPM")
        name = EL_NAMES.get(match["name"], match["name"])
        alternatives.append(f"{name} {_DEB_OPS[match['op']]} {match['ver']}" if match["op"] else name)
    return alternatives[0] if len(alternatives) == 1 else "(" + " or ".join(alternatives) + ")"


def spec_text(pkg: debrepo.PackageSpec) -> str:
    """The rpmbuild .spec of a package whose files rpmbuild copies from SOURCE (the staged tree)."""
    epoch, version, release = rpm_evr(pkg.version)
    summary, _, rest = pkg.description.strip().partition("\n")
    lines = [
        f"Name: {pkg.name}",
        f"Version: {version}",
        f"Release: {release}",
        f"Summary: {summary.strip()}",
        "License: nodeforge fixture",
        f"BuildArch: {RPM_ARCH[pkg.architecture]}",
        "AutoReqProv: no",
    ]
    if epoch:
        lines.append(f"Epoch: {epoch}")
    for control_field, tag in RELATION_TAGS.items():
        for relation in filter(None, (r.strip() for r in pkg.control.get(control_field, "").split(","))):
            lines.append(f"{tag}: {rpm_relation(relation)}")
    lines += ["", "%description", (rest.strip() or summary.strip()), "", "%install"]
    lines.append("cp -a %{_sourcedir}/tree/. %{buildroot}/")
    lines += ["", "%files"]
    for entry in pkg.files:
        config = "%config(noreplace) " if entry.path.startswith("/etc/") else ""
        lines.append(f"{config}%attr({entry.mode:04o},root,root) {entry.path}")
    for script, text in pkg.scripts.items():
        scriptlet, arguments = SCRIPTLETS[script]
        body = text if not text.startswith("#!") else text.split("\n", 1)[1]
        lines += ["", f"%{scriptlet}", arguments, body.rstrip("\n")]
    return "\n".join(lines) + "\n"


def _rpmbuild(spec: Path, defines: dict[str, str], *, what: str) -> None:
    """rpmbuild -bb of SPEC with these macros, its timestamps from the fixtures' SOURCE_DATE_EPOCH."""
    argv = ["rpmbuild", "-bb", "--quiet"]
    for name, value in defines.items():
        argv += ["--define", f"{name} {value}"]
    debrepo.run([*argv, str(spec)], what=what, env=debrepo.reproducible_env())


def _build_rpm(pkg: debrepo.PackageSpec, stage: Path, dest: Path, key_files: dict[str, bytes]) -> Path:
    top = stage / f"{pkg.name}-{pkg.version}"
    shutil.rmtree(top, ignore_errors=True)
    tree = top / "SOURCES" / "tree"
    tree.mkdir(parents=True)
    for entry in pkg.files:
        target = tree / entry.path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(entry.content if entry.content is not None else key_files[entry.source or ""])
        target.chmod(entry.mode)
    spec = top / f"{pkg.name}.spec"
    spec.write_text(spec_text(pkg))
    defines = {
        "_topdir": str(top),
        "_rpmdir": str(dest),
        "_build_id_links": "none",
        "__os_install_post": "%{nil}",
        "_binary_payload": "w9.gzdio",
        "source_date_epoch_from_changelog": "0",
        "use_source_date_epoch_as_buildtime": "1",
        "clamp_mtime_to_source_date_epoch": "1",
        "_dbpath": str(top / "rpmdb"),
    }
    _rpmbuild(spec, defines, what=f"{pkg.spec_path}: package '{pkg.name}' {pkg.version}: rpmbuild")
    shutil.rmtree(top)
    _epoch, version, release = rpm_evr(pkg.version)
    return dest / RPM_ARCH[pkg.architecture] / f"{pkg.name}-{version}-{release}.{RPM_ARCH[pkg.architecture]}.rpm"


def build_rpm_repo(
    spec_paths: Iterable[str | os.PathLike[str]],
    out_dir: str | os.PathLike[str],
    *,
    sign_packages: bool = False,
    modules: str | os.PathLike[str] | None = None,
    key_name: str = "nodeforge fixture RPM repository",
) -> dict[str, Any]:
    """Build DIR/repo from the specs; returns (and writes to DIR/fixture-repo.json) the key's fingerprint and the
    packages (name, epoch, version, release, arch, file)."""
    packages = debrepo.load_specs(spec_paths)
    out = Path(out_dir)
    repo = out / REPO_SUBDIR
    shutil.rmtree(repo, ignore_errors=True)
    (repo / "Packages").mkdir(parents=True)
    gpg = debrepo.Gpg(out / GNUPG_SUBDIR)
    try:
        fingerprint = debrepo.ensure_key(gpg, key_name, "rsa")
        armored = gpg("--armor", "--export", fingerprint, what="export the fixture key").stdout
        (repo / ARMORED_KEY_NAME).write_bytes(armored)
        key_files = {"armored-key": armored, "keyring": gpg("--export", fingerprint, what="export the key").stdout}
        built = []
        with tempfile.TemporaryDirectory(prefix="nf-rpm-") as stage:
            for pkg in packages:
                rpm = _build_rpm(pkg, Path(stage) / "build", Path(stage) / "rpms", key_files)
                target = repo / "Packages" / rpm.name
                shutil.move(rpm, target)
                epoch, version, release = rpm_evr(pkg.version)
                built.append(
                    {
                        "name": pkg.name,
                        "epoch": epoch or "0",
                        "version": version,
                        "release": release,
                        "arch": RPM_ARCH[pkg.architecture],
                        "file": f"Packages/{target.name}",
                    }
                )
        if sign_packages:
            rpms = sorted(str(p) for p in (repo / "Packages").glob("*.rpm"))
            debrepo.run(
                [
                    "rpmsign",
                    "--addsign",
                    "--define",
                    f"_gpg_name {fingerprint}",
                    "--define",
                    "__gpg /usr/bin/gpg",
                    "--define",
                    f"_gpg_path {gpg.home}",
                    *rpms,
                ],
                what="rpmsign the fixture packages",
            )
        debrepo.run(
            ["createrepo_c", "--quiet", "--no-database", str(repo)], what="createrepo_c", env=debrepo.reproducible_env()
        )
        if modules is not None:
            debrepo.run(
                ["modifyrepo_c", "--mdtype=modules", "--new-name=modules.yaml", str(modules), str(repo / "repodata")],
                what="modifyrepo_c modules.yaml",
            )
        gpg(
            "--armor",
            "--detach-sign",
            "--local-user",
            fingerprint,
            "--output",
            str(repo / "repodata" / "repomd.xml.asc"),
            str(repo / "repodata" / "repomd.xml"),
            what="sign repomd.xml",
        )
    finally:
        gpg.close()
    metadata = {
        "fingerprint": fingerprint,
        "key": ARMORED_KEY_NAME,
        "signed_packages": sign_packages,
        "packages": built,
    }
    (out / METADATA_NAME).write_text(json.dumps(metadata, indent=2) + "\n")
    return metadata


def build_userland(userland: str | os.PathLike[str], node_os: str, dest: str | os.PathLike[str]) -> list[Path]:
    """The EL userland an EL tier node's rpm database holds (lab/base-image/el-userland.yml): header-only RPMs,
    installed with --justdb, whose files are Debian's. Returns the RPMs built in DEST."""
    data = yaml.safe_load(Path(userland).read_text(encoding="utf-8"))
    try:
        entries = data[node_os]
    except (KeyError, TypeError):
        raise debrepo.SpecError(f"{userland}: no userland for {node_os!r} (has: {', '.join(data or {})})") from None
    out = Path(dest)
    out.mkdir(parents=True, exist_ok=True)
    built = []
    with tempfile.TemporaryDirectory(prefix="nf-userland-") as stage:
        for entry in entries:
            version, _, release = str(entry["version"]).rpartition("-")
            arch = entry.get("arch", "x86_64")
            lines = [
                f"Name: {entry['name']}",
                f"Version: {version}",
                f"Release: {release}",
                f"Summary: {entry['name']} (nodeforge EL tier: the package's files are Debian's)",
                "License: nodeforge fixture",
                f"BuildArch: {arch}",
                "AutoReqProv: no",
            ]
            lines += [f"Provides: {provide}" for provide in entry.get("provides", [])]
            lines += ["", "%description", "nodeforge EL tier userland (rpm database entry only).", "", "%files", ""]
            top = Path(stage) / entry["name"]
            top.mkdir()
            spec = top / f"{entry['name']}.spec"
            spec.write_text("\n".join(lines))
            _rpmbuild(
                spec,
                {"_topdir": str(top), "_rpmdir": str(out), "_dbpath": str(top / "rpmdb")},
                what=f"{userland}: {node_os}: {entry['name']}: rpmbuild",
            )
            built.append(out / arch / f"{entry['name']}-{version}-{release}.{arch}.rpm")
    return built


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build a signed fixture dnf repository from package specs.")
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build and sign the repository")
    build.add_argument("--spec", action="append", required=True, metavar="SPEC.yml", help="spec (repeat)")
    build.add_argument("--out", required=True, metavar="DIR", help="output dir (its repo/ is served)")
    build.add_argument("--sign-packages", action="store_true", help="sign every RPM too (gpgcheck=1)")
    build.add_argument("--modules", metavar="modules.yaml", help="module metadata (dnf module streams)")
    userland = sub.add_parser("userland", help="header-only RPMs of an EL node's userland (rpm --justdb)")
    userland.add_argument("--spec", required=True, metavar="USERLAND.yml", help="lab/base-image/el-userland.yml")
    userland.add_argument("--os", required=True, help="the node OS, e.g. rocky9")
    userland.add_argument("--out", required=True, metavar="DIR", help="where the RPMs go (DIR/<arch>/)")
    args = parser.parse_args(argv)
    try:
        if args.command == "userland":
            for rpm in build_userland(args.spec, args.os, args.out):
                print(rpm)
            return 0
        metadata = build_rpm_repo(args.spec, args.out, sign_packages=args.sign_packages, modules=args.modules)
    except debrepo.FixtureRepoError as exc:
        print(f"fixture_rpm: {exc}", file=sys.stderr)
        return 1
    print(
        f"built {len(metadata['packages'])} packages in {Path(args.out) / REPO_SUBDIR} (key {metadata['fingerprint']})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
