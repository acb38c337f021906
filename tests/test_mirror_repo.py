"""nodeforge.mirror_repo: version order against dpkg's and rpm's own, the indexes as apt and dnf publish them, and
the packages a node's package manager fetches for what a role installs."""

from __future__ import annotations

import gzip
import subprocess

import pytest

from nodeforge import mirror_repo

DEB_VERSIONS = [
    "1.0",
    "1.0~rc1",
    "1.0~~",
    "1.0-1",
    "1.0-1.1",
    "1.0+b1",
    "1.0a",
    "1:0.1",
    "0:1.0",
    "2.6-1~bpo12+1",
    "580.126.20-0ubuntu1",
    "580.105.08-0ubuntu1",
    "1.9.9-1",
    "10",
    "9.9",
    "1.00",
    "1.0-0",
]
RPM_VERSIONS = [
    "1.0",
    "1.0~rc1",
    "1.0^",
    "1.0^git1",
    "1.0.1",
    "1.0a",
    "a",
    "1",
    "1.010",
    "1.9",
    "5.5p1",
    "5.5p10",
    "el9",
    "el9_2",
    "580.126.20",
    "580.105.08",
    "1.20.0",
    "1..0",
    "1_0",
    "2.0~~",
    "10a",
    "10b",
]


def _sign(n: int) -> int:
    return (n > 0) - (n < 0)


@pytest.mark.parametrize("a", DEB_VERSIONS)
def test_deb_order_is_dpkgs(a):
    for b in DEB_VERSIONS:
        lower = subprocess.run(["dpkg", "--compare-versions", a, "lt", b], check=False).returncode == 0
        equal = not lower and subprocess.run(["dpkg", "--compare-versions", a, "eq", b], check=False).returncode == 0
        assert _sign(mirror_repo.deb_compare(a, b)) == (-1 if lower else 0 if equal else 1), (a, b)


def test_rpm_order_is_rpms():
    pairs = [(a, b) for a in RPM_VERSIONS for b in RPM_VERSIONS]
    script = "".join(f'print(rpm.vercmp("{a}", "{b}") .. " ") ' for a, b in pairs)
    out = subprocess.run(["rpm", "--eval", "%{lua: " + script + "}"], capture_output=True, text=True, check=True)
    expected = [int(line) for line in out.stdout.split()]
    assert len(expected) == len(pairs)
    got = [_sign(mirror_repo.rpmvercmp(a, b)) for a, b in pairs]
    assert [(p, g) for p, g, e in zip(pairs, got, expected, strict=True) if g != e] == []


def _stanza(name, version, depends="", provides="", arch="amd64"):
    lines = [f"Package: {name}", f"Version: {version}", f"Architecture: {arch}"]
    lines += [f"Depends: {depends}"] if depends else []
    lines += [f"Provides: {provides}"] if provides else []
    lines += [f"Filename: pool/{name}_{version}_{arch}.deb", "Size: 10", f"SHA256: {name}{version}".ljust(20, "0")]
    return "\n".join(lines) + "\n"


PACKAGES = "\n".join(
    [
        _stanza("nvidia-open", "580.105.08-1", "nvidia-driver-580-open (= 580.105.08-1)"),
        _stanza("nvidia-open", "580.126.20-1", "nvidia-driver-580-open (= 580.126.20-1)"),
        _stanza("nvidia-open", "595.91.07-1", "nvidia-driver-595-open (= 595.91.07-1)"),
        _stanza("nvidia-driver-580-open", "580.105.08-1", "libc6, nvidia-kernel-common (>= 580)"),
        _stanza(
            "nvidia-driver-580-open",
            "580.126.20-1",
            "libc6 (>= 2.34), nvidia-kernel-common (>= 580) | fallback, dkms | nvidia-dkms-any",
        ),
        _stanza("nvidia-kernel-common", "580.105.08-1"),
        _stanza("nvidia-kernel-common", "580.126.20-1"),
        _stanza("nvidia-kernel-common", "595.91.07-1"),
        _stanza("nvidia-dkms-580-open", "580.126.20-1", provides="nvidia-dkms-any"),
        _stanza("cuda-drivers", "580.126.20-1", "nvidia-driver-580 (= 580.126.20-1)"),
    ]
)


def test_packages_index_is_parsed_as_apt_reads_it():
    packages = mirror_repo.apt_packages(PACKAGES)
    assert [(p.name, p.version) for p in packages][:2] == [
        ("nvidia-open", "580.105.08-1"),
        ("nvidia-open", "580.126.20-1"),
    ]
    driver = next(p for p in packages if p.name == "nvidia-driver-580-open" and p.version == "580.126.20-1")
    assert driver.depends == [
        [("libc6", ">=", "2.34")],
        [("nvidia-kernel-common", ">=", "580"), ("fallback", "", "")],
        [("dkms", "", ""), ("nvidia-dkms-any", "", "")],
    ]
    assert driver.path == "pool/nvidia-driver-580-open_580.126.20-1_amd64.deb"
    with pytest.raises(mirror_repo.RepoError, match="without Package, Filename or SHA256"):
        mirror_repo.apt_packages("Package: x\nVersion: 1\n")


def test_closure_takes_the_pinned_version_the_newest_dependency_and_the_pinned_one():
    chosen, external = mirror_repo.closure(
        "apt", mirror_repo.apt_packages(PACKAGES), [("nvidia-open", "580.126.20")], ["580.126.20"]
    )
    assert [(p.name, p.version) for p in chosen] == [
        ("nvidia-dkms-580-open", "580.126.20-1"),  # the first alternative (dkms) is not here: the second is
        ("nvidia-driver-580-open", "580.126.20-1"),
        ("nvidia-kernel-common", "580.126.20-1"),  # the pinned version, which the role's apt pin makes apt take
        ("nvidia-kernel-common", "595.91.07-1"),  # the newest satisfying one, which apt takes without a pin
        ("nvidia-open", "580.126.20-1"),
    ]
    assert external == ["libc6 (>= 2.34)"]
    # Two nodes on two pins (a rolling upgrade half done): each pin's packages, each dependency's at both pins.
    chosen, _ = mirror_repo.closure(
        "apt",
        mirror_repo.apt_packages(PACKAGES),
        [("nvidia-open", "580.126.20"), ("nvidia-open", "580.105.08")],
        ["580.126.20", "580.105.08"],
    )
    assert [(p.name, p.version) for p in chosen if p.name != "nvidia-dkms-580-open"] == [
        ("nvidia-driver-580-open", "580.105.08-1"),
        ("nvidia-driver-580-open", "580.126.20-1"),
        ("nvidia-kernel-common", "580.105.08-1"),
        ("nvidia-kernel-common", "580.126.20-1"),
        ("nvidia-kernel-common", "595.91.07-1"),
        ("nvidia-open", "580.105.08-1"),
        ("nvidia-open", "580.126.20-1"),
    ]
    # Without a pin for dependencies, only the newest satisfying version.
    chosen, _ = mirror_repo.closure("apt", mirror_repo.apt_packages(PACKAGES), [("nvidia-open", "580.126.20")])
    assert ("nvidia-kernel-common", "580.126.20-1") not in [(p.name, p.version) for p in chosen]
    # No version wanted: the newest.
    chosen, _ = mirror_repo.closure("apt", mirror_repo.apt_packages(PACKAGES), [("nvidia-open", "")])
    assert ("nvidia-open", "595.91.07-1") in [(p.name, p.version) for p in chosen]


def test_a_pinned_version_the_repository_lacks_is_named_with_the_versions_it_has():
    with pytest.raises(mirror_repo.RepoError) as error:
        mirror_repo.closure("apt", mirror_repo.apt_packages(PACKAGES), [("nvidia-open", "580.95.05")], ["580.95.05"])
    assert str(error.value) == (
        "nvidia-open 580.95.05 is not in the repository (its versions: 580.105.08-1, 580.126.20-1, 595.91.07-1)"
    )


def test_release_files_reads_the_sha256_list_of_a_signed_release():
    signed = (
        "-----BEGIN PGP SIGNED MESSAGE-----\nHash: SHA256\n\nOrigin: x\nSHA256:\n"
        " " + "a" * 64 + " 120 Packages\n " + "B" * 64 + " 80 Packages.gz\n"
        "-----BEGIN PGP SIGNATURE-----\n\nxx\n-----END PGP SIGNATURE-----\n"
    )
    assert mirror_repo.release_files(signed) == {"Packages": ("a" * 64, 120), "Packages.gz": ("b" * 64, 80)}
    with pytest.raises(mirror_repo.RepoError, match="lists no SHA256 sums"):
        mirror_repo.release_files("Origin: x\nMD5Sum:\n 00 1 Packages\n")


PRIMARY = """<?xml version="1.0" encoding="UTF-8"?>
<metadata xmlns="http://linux.duke.edu/metadata/common" xmlns:rpm="http://linux.duke.edu/metadata/rpm" packages="3">
<package type="rpm"><name>nvidia-open</name><arch>noarch</arch><version epoch="3" ver="580.126.20" rel="1.el9"/>
<checksum type="sha256" pkgid="YES">AA</checksum><location href="Packages/nvidia-open-580.126.20-1.el9.noarch.rpm"/>
<size package="7"/><format><rpm:requires><rpm:entry name="nvidia-driver" flags="EQ" epoch="3" ver="580.126.20"
rel="1.el9"/><rpm:entry name="rpmlib(CompressedFileNames)"/><rpm:entry name="/bin/sh"/></rpm:requires></format>
</package>
<package type="rpm"><name>nvidia-driver</name><arch>x86_64</arch><version epoch="3" ver="580.126.20" rel="1.el9"/>
<checksum type="sha256" pkgid="YES">bb</checksum><location href="Packages/nvidia-driver-580.126.20-1.el9.x86_64.rpm"/>
<size package="9"/><format><rpm:provides><rpm:entry name="nvidia-driver" flags="EQ" epoch="3" ver="580.126.20"
rel="1.el9"/></rpm:provides><rpm:requires><rpm:entry name="nvidia-kmod"/></rpm:requires></format></package>
<package type="rpm"><name>kmod-nvidia-open-dkms</name><arch>noarch</arch>
<version epoch="3" ver="580.126.20" rel="1.el9"/>
<checksum type="sha256" pkgid="YES">cc</checksum><location href="Packages/kmod.rpm"/><size package="5"/>
<format><rpm:provides><rpm:entry name="nvidia-kmod" flags="EQ" epoch="3" ver="580.126.20"/></rpm:provides></format>
</package>
</metadata>"""


def test_primary_metadata_is_parsed_and_resolved_as_dnf_would():
    packages = mirror_repo.dnf_packages("x-primary.xml.gz", gzip.compress(PRIMARY.encode()))
    assert [(p.name, p.version, p.epoch, p.sha256, p.size) for p in packages] == [
        ("nvidia-open", "580.126.20-1.el9", "3", "aa", 7),
        ("nvidia-driver", "580.126.20-1.el9", "3", "bb", 9),
        ("kmod-nvidia-open-dkms", "580.126.20-1.el9", "3", "cc", 5),
    ]
    chosen, external = mirror_repo.closure("dnf", packages, [("nvidia-open", "580.126.20")], ["580.126.20"])
    assert [p.path for p in chosen] == [
        "Packages/kmod.rpm",
        "Packages/nvidia-driver-580.126.20-1.el9.x86_64.rpm",
        "Packages/nvidia-open-580.126.20-1.el9.noarch.rpm",
    ]
    assert external == ["/bin/sh"]


def test_repomd_lists_its_data_by_sha256():
    repomd = b"""<repomd xmlns="http://linux.duke.edu/metadata/repo"><data type="primary"><checksum type="sha256">AB
</checksum><location href="repodata/ab-primary.xml.gz"/><size>12</size></data><data type="modules"><checksum
type="sha256">cd</checksum><location href="repodata/cd-modules.yaml.gz"/></data></repomd>"""
    assert mirror_repo.repomd_files(repomd) == {
        "primary": ("repodata/ab-primary.xml.gz", "ab", 12),
        "modules": ("repodata/cd-modules.yaml.gz", "cd", -1),
    }
    with pytest.raises(mirror_repo.RepoError, match="has a md5 checksum"):
        mirror_repo.repomd_files(repomd.replace(b'"sha256">cd', b'"md5">cd'))
    with pytest.raises(mirror_repo.RepoError, match="lists no primary metadata"):
        mirror_repo.repomd_files(b'<repomd xmlns="http://linux.duke.edu/metadata/repo"/>')


def test_recommended_and_weak_dependencies_are_fetched_as_apt_and_dnf_install_them():
    index = _stanza("nvidia-open", "580.126.20-1", "nvidia-kernel-common") + "Recommends: nvidia-settings\n\n"
    index += _stanza("nvidia-kernel-common", "580.126.20-1") + "\n" + _stanza("nvidia-settings", "580.126.20-1")
    chosen, _ = mirror_repo.closure("apt", mirror_repo.apt_packages(index), [("nvidia-open", "580.126.20")])
    assert [p.name for p in chosen] == ["nvidia-kernel-common", "nvidia-open", "nvidia-settings"]
    weak = PRIMARY.replace(
        '<rpm:requires><rpm:entry name="nvidia-kmod"/></rpm:requires>',
        '<rpm:recommends><rpm:entry name="nvidia-kmod"/></rpm:recommends>',
    )
    packages = mirror_repo.dnf_packages("primary.xml", weak.encode())
    chosen, _ = mirror_repo.closure("dnf", packages, [("nvidia-open", "580.126.20")], ["580.126.20"])
    assert "Packages/kmod.rpm" in [p.path for p in chosen]
