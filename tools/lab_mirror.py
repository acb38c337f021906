#!/usr/bin/env python3
"""Build the lab's stand-ins for the vendor repositories its nodes install from, each in its vendor's own layout.

No vendor repository can be reached from the development machines, so `make lab` and tests/test_lab.py hand
`nodeforge lab up --mirror DIR` a copy built from the signed fixture repositories (molecule/fixture_repo: stand-in
packages faithful in names, versions and metadata; one throwaway key signs them all). The paths under DIR are the
vendors' paths, so the lab inventory points each repository at the node's loopback with one host changed:

    DIR/gpgkey                                    NVIDIA's container toolkit key (nvidia.github.io/libnvidia-container)
    DIR/stable/deb/amd64/                         the toolkit's flat apt repository (InRelease, Packages, pool/)
    DIR/stable/rpm/x86_64/                        the toolkit's dnf repository (repodata signed, as NVIDIA's)
    DIR/compute/cuda/repos/ubuntu2404/x86_64/     NVIDIA's CUDA repository for Ubuntu 24.04 (flat, cuda-keyring)
    DIR/compute/cuda/repos/ubuntu2204/x86_64/     the same for Ubuntu 22.04
    DIR/ubuntu/dists/{noble,jammy}-updates/restricted/   Ubuntu's archive: Canonical's NVIDIA server driver packages
                                                  (nvidia-headless-580-server-open, ...), for `distro` mode on Ubuntu
    DIR/public/repo/doca/3.4.1/ubuntu24.04/x86_64/   NVIDIA's DOCA repository of the manifest's DOCA (flat, signed;
                                                  doca-ofed), with its key at public/repo/doca/GPG-KEY-Mellanox.pub
    DIR/compute/cuda/repos/rhel9/x86_64/          NVIDIA's CUDA repository for EL 9 (RPMs signed, nvidia-driver
                                                  module streams, D42D0685.pub); rhel8/ the same for EL 8
    DIR/pub/epel/9/Everything/x86_64/             EPEL 9 (dkms, which NVIDIA's DKMS packages require); 8/ for EL 8
    DIR/rocky/9/BaseOS/x86_64/os/                 Rocky Linux 9's BaseOS (rdma-core, libibverbs-utils, infiniband-diags)
    DIR/rocky/9/AppStream/x86_64/os/              Rocky Linux 9's AppStream (dnf's versionlock plugin, perftest)
                                                  (rocky/8/: Rocky Linux 8's)
    DIR/content/dist/rhel9/9/x86_64/{baseos,appstream}/os/   RHEL 9's, at Red Hat's CDN paths (the same builds;
                                                  rhel8/8/: RHEL 8's)
    DIR/keys/RPM-GPG-KEY-{Rocky,EPEL}-{8,9}, RPM-GPG-KEY-redhat-release   what rocky-release, epel-release and
                                                  redhat-release install (the same key)
    DIR/keys/ubuntu-archive-keyring.gpg           what ubuntu-keyring installs (the same key, binary keyring)

The Debian nodes install the driver and RDMA packages from Debian itself; the apt repositories above are for the
Ubuntu nodes, the dnf ones for the EL nodes (inventories/lab/hosts.yml).

Usage: tools/lab_mirror.py DIR   (rebuilt from scratch each time; prints DIR)
"""

from __future__ import annotations

import hashlib
import re
import shutil
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
BUILDER = REPO / "molecule" / "fixture_repo"
SPECS = BUILDER / "specs"
sys.path.insert(0, str(BUILDER))

# The harness's builders, beside their specs.
import fixture_rpm  # noqa: E402

import fixture_repo  # noqa: E402

CUDA = "compute/cuda/repos/{distro}/x86_64"
# Ubuntu's archive: one suite per release, the NVIDIA server drivers in its restricted component.
UBUNTU = {"24.04": "noble-updates", "22.04": "jammy-updates"}
# NVIDIA's DOCA repository: one per DOCA release and OS (the manifest's baseurl), its key beside the releases.
DOCA = "public/repo/doca/{version}/{distro}/x86_64"
DOCA_VERSION = "3.4.1"
DOCA_KEY = "public/repo/doca/GPG-KEY-Mellanox.pub"
RHEL = "content/dist/rhel{major}/{major}/x86_64/{repo}/os"


def _with_key(out: Path, key_home: Path) -> Path:
    """An output directory whose gnupg home is the mirror's one key (the builders reuse a key they find there)."""
    out.mkdir(parents=True)
    if key_home.exists():
        shutil.copytree(key_home, out / fixture_repo.GNUPG_SUBDIR)
    return out


def _place(built: Path, dest: Path) -> Path:
    shutil.copytree(built / fixture_repo.REPO_SUBDIR, dest)
    return dest


def _for_el8(text: str) -> str:
    """An el9 spec or module document as its el8 build: the release tag, NVIDIA's rhel8 path, the EL major in the
    comments, and each module stream's context recomputed as NVIDIA's genmodules.py computes it (md5 of name, stream,
    version and the dist tag)."""
    text = text.replace("el9", "el8").replace("EL 9", "EL 8")

    def context(document: str) -> str:
        fields = dict(re.findall(r"^  (name|stream|version): (\S+)$", document, re.M))
        if not {"name", "stream", "version"} <= fields.keys():
            return document
        digest = hashlib.md5((fields["name"] + fields["stream"] + fields["version"] + "el8").encode()).hexdigest()
        return re.sub(r"^  context: \S+$", f"  context: {digest[:10]}", document, flags=re.M)

    return "\n---\n".join(context(document) for document in text.split("\n---\n"))


def _el_repos(work: Path, stage: Path, key_home: Path, major: int) -> None:
    """NVIDIA's CUDA repository for rhel<major> (RPMs signed, nvidia-driver module streams, D42D0685.pub), EPEL and
    Rocky's BaseOS and AppStream of that release. The el8 CUDA and EPEL stand-ins are the el9 specs rebuilt as el8."""

    def source(path: str, name: str) -> Path:
        """A spec as this release builds it: the el8 CUDA and EPEL ones are the el9 specs rewritten."""
        if major == 9 or path.startswith("rocky/"):
            return SPECS / name
        generated = work / f"el8-{path.replace('/', '_')}" / name
        generated.parent.mkdir(exist_ok=True)
        generated.write_text(_for_el8((SPECS / name).read_text()))
        return generated

    specs = {
        CUDA.format(distro=f"rhel{major}"): ("nvidia_driver_el.yml", "nvidia_driver_el.modules.yaml"),
        f"pub/epel/{major}/Everything/x86_64": ("el_epel_baseos.yml", None),
        f"rocky/{major}/BaseOS/x86_64/os": (f"el{major}_rdma.yml", None),
        f"rocky/{major}/AppStream/x86_64/os": (f"el{major}_appstream.yml", None),
    }
    for path, (spec, modules) in specs.items():
        built = _with_key(work / path.replace("/", "_"), key_home)
        module_file = source(path, modules) if modules else None
        fixture_rpm.build_rpm_repo([source(path, spec)], built, sign_packages=True, modules=module_file)
        _place(built, stage / path)
    cuda = stage / CUDA.format(distro=f"rhel{major}")
    (cuda / fixture_rpm.ARMORED_KEY_NAME).rename(cuda / "D42D0685.pub")
    # RHEL's BaseOS and AppStream, at the paths of Red Hat's CDN: the same builds (Rocky rebuilds RHEL's packages at
    # RHEL's versions).
    for repo in ("BaseOS", "AppStream"):
        shutil.copytree(stage / f"rocky/{major}/{repo}/x86_64/os", stage / RHEL.format(major=major, repo=repo.lower()))


def build(out: Path) -> Path:
    with tempfile.TemporaryDirectory(prefix="nodeforge-lab-mirror-") as tmp:
        work = Path(tmp)
        stage = work / "mirror"
        # The first build makes the key (RSA: rpm verifies RSA on every EL release; apt on both Debian releases).
        toolkit_rpm = work / "toolkit-rpm"
        fixture_rpm.build_rpm_repo([SPECS / "nvidia_container_toolkit.yml"], toolkit_rpm)
        key_home = toolkit_rpm / fixture_repo.GNUPG_SUBDIR
        rpm_root = _place(toolkit_rpm, stage / "stable" / "rpm" / "x86_64")
        (rpm_root / fixture_rpm.ARMORED_KEY_NAME).rename(stage / "gpgkey")

        toolkit_deb = _with_key(work / "toolkit-deb", key_home)
        fixture_repo.build_repo([SPECS / "nvidia_container_toolkit.yml"], toolkit_deb, flat=True)
        _place(toolkit_deb, stage / "stable" / "deb" / "amd64")

        # NVIDIA's CUDA repositories for Ubuntu 24.04 and 22.04 (Ubuntu's package names; the spec is written for
        # ubuntu2404, whose name its cuda-keyring's source list carries), cuda-keyring at the top as NVIDIA has it.
        for distro in ("ubuntu2404", "ubuntu2204"):
            spec = work / f"nvidia_driver-{distro}.yml"
            spec.write_text((SPECS / "nvidia_driver_ubuntu.yml").read_text().replace("ubuntu2404", distro))
            cuda_deb = _with_key(work / f"cuda-{distro}", key_home)
            fixture_repo.build_repo([spec], cuda_deb, flat=True)
            ubuntu = _place(cuda_deb, stage / CUDA.format(distro=distro))
            keyring = next(ubuntu.glob("pool/main/c/cuda-keyring/cuda-keyring_*.deb"))
            shutil.copyfile(keyring, ubuntu / keyring.name)

        # Ubuntu's archive with Canonical's server driver packages (the spec is written for 24.04), each release's
        # -updates suite beside the other's, as in archive.ubuntu.com/ubuntu.
        for release, suite in UBUNTU.items():
            spec = work / f"nvidia_driver_server-{release}.yml"
            spec.write_text((SPECS / "nvidia_driver_ubuntu_server.yml").read_text().replace("24.04", release))
            archive = _with_key(work / f"ubuntu-{release}", key_home)
            fixture_repo.build_repo([spec], archive, suite=suite, component="restricted")
            shutil.copytree(archive / fixture_repo.REPO_SUBDIR, stage / "ubuntu", dirs_exist_ok=True)
        ubuntu_keyring = archive / fixture_repo.REPO_SUBDIR / fixture_repo.KEYRING_NAME

        # DOCA's repository for Ubuntu 24.04 holds its own release only: the spec's packages of that doca-ofed.
        spec = yaml.safe_load((SPECS / "ofed_doca.yml").read_text())
        [profile] = [p for p in spec["packages"] if p["name"] == "doca-ofed" and p["version"].startswith(DOCA_VERSION)]
        wanted = {("doca-ofed", profile["version"])} | {
            tuple(re.fullmatch(r"(\S+) \(= (\S+)\)", dep).groups()) for dep in profile["depends"]
        }
        spec["packages"] = [p for p in spec["packages"] if (p["name"], p["version"]) in wanted]
        (work / "doca.yml").write_text(yaml.safe_dump(spec))
        doca = _with_key(work / "doca", key_home)
        fixture_repo.build_repo([work / "doca.yml"], doca, flat=True)
        _place(doca, stage / DOCA.format(version=DOCA_VERSION, distro="ubuntu24.04"))

        for major in (9, 8):
            _el_repos(work, stage, key_home, major)
        keys = stage / "keys"
        keys.mkdir()
        for major in (9, 8):
            for name in (f"RPM-GPG-KEY-Rocky-{major}", f"RPM-GPG-KEY-EPEL-{major}"):
                shutil.copyfile(stage / "gpgkey", keys / name)
        shutil.copyfile(stage / "gpgkey", keys / "RPM-GPG-KEY-redhat-release")
        shutil.copyfile(ubuntu_keyring, keys / "ubuntu-archive-keyring.gpg")
        shutil.copyfile(stage / "gpgkey", stage / DOCA_KEY)
        # The builders' copies of the key: the vendors publish theirs only where the paths above say.
        for name in (fixture_rpm.ARMORED_KEY_NAME, fixture_repo.ARMORED_KEY_NAME, fixture_repo.KEYRING_NAME):
            for leftover in stage.rglob(name):
                leftover.unlink()
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(stage, out)
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    try:
        print(build(Path(sys.argv[1]).resolve()))
    except fixture_repo.FixtureRepoError as exc:
        raise SystemExit(f"building the lab's mirror failed: {exc}") from exc
