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
    DIR/compute/cuda/repos/rhel9/x86_64/          NVIDIA's CUDA repository for EL 9 (RPMs signed, nvidia-driver
                                                  module streams, D42D0685.pub)
    DIR/pub/epel/9/Everything/x86_64/             EPEL 9 (dkms, which NVIDIA's DKMS packages require)
    DIR/rocky/9/BaseOS/x86_64/os/                 Rocky Linux 9's BaseOS (rdma-core, libibverbs-utils, infiniband-diags)
    DIR/rocky/9/AppStream/x86_64/os/              Rocky Linux 9's AppStream (dnf's versionlock plugin, perftest)
    DIR/keys/RPM-GPG-KEY-Rocky-9, RPM-GPG-KEY-EPEL-9   what rocky-release and epel-release install (the same key)

The Debian nodes install the driver and RDMA packages from Debian itself; the apt repositories above are for the
Ubuntu nodes, the dnf ones for the EL node (inventories/lab/hosts.yml).

Usage: tools/lab_mirror.py DIR   (rebuilt from scratch each time; prints DIR)
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUILDER = REPO / "molecule" / "fixture_repo"
SPECS = BUILDER / "specs"
sys.path.insert(0, str(BUILDER))

# The harness's builders, beside their specs.
import fixture_rpm  # noqa: E402

import fixture_repo  # noqa: E402

CUDA = "compute/cuda/repos/{distro}/x86_64"


def _with_key(out: Path, key_home: Path) -> Path:
    """An output directory whose gnupg home is the mirror's one key (the builders reuse a key they find there)."""
    out.mkdir(parents=True)
    if key_home.exists():
        shutil.copytree(key_home, out / fixture_repo.GNUPG_SUBDIR)
    return out


def _place(built: Path, dest: Path) -> Path:
    shutil.copytree(built / fixture_repo.REPO_SUBDIR, dest)
    return dest


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

        el = {
            CUDA.format(distro="rhel9"): ([SPECS / "nvidia_driver_el.yml"], SPECS / "nvidia_driver_el.modules.yaml"),
            "pub/epel/9/Everything/x86_64": ([SPECS / "el_epel_baseos.yml"], None),
            "rocky/9/BaseOS/x86_64/os": ([SPECS / "el9_rdma.yml"], None),
            "rocky/9/AppStream/x86_64/os": ([SPECS / "el9_appstream.yml"], None),
        }
        for path, (specs, modules) in el.items():
            built = _with_key(work / path.replace("/", "_"), key_home)
            fixture_rpm.build_rpm_repo(specs, built, sign_packages=True, modules=modules)
            _place(built, stage / path)
        rhel9 = stage / CUDA.format(distro="rhel9")
        (rhel9 / fixture_rpm.ARMORED_KEY_NAME).rename(rhel9 / "D42D0685.pub")
        keys = stage / "keys"
        keys.mkdir()
        for name in ("RPM-GPG-KEY-Rocky-9", "RPM-GPG-KEY-EPEL-9"):
            shutil.copyfile(stage / "gpgkey", keys / name)
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
