"""The signed fixture RPM repository of the EL tier (molecule/fixture_repo/fixture_rpm.py): what rpm and gpg, run
here on its output, read back from it: names, epochs, dependencies, scriptlets, config files, package and metadata
signatures, the module metadata."""

from __future__ import annotations

import shutil
import subprocess
import xml.etree.ElementTree as ET

import pytest
import yaml

from tests.conftest import REPO, load_fixture_repo, load_module_file

load_fixture_repo()  # fixture_rpm imports it under the same name
fr = load_module_file("fixture_rpm", REPO / "molecule" / "fixture_repo" / "fixture_rpm.py")

TOOLS = ("gpg", "gpgv", "gpgconf", "rpm", "rpmbuild", "rpmsign", "createrepo_c", "modifyrepo_c")
_missing = [tool for tool in TOOLS if not shutil.which(tool)]
needs_tools = pytest.mark.skipif(bool(_missing), reason=f"missing host tools (make setup installs them): {_missing}")

SPEC = """\
packages:
  - name: nf-demo-driver
    version: "3:580.65.06-1"
    architecture: amd64
    depends: ["libseccomp2 (>= 2.5.0)", "nf-demo-libs (= 3:580.65.06-1) | nf-demo-compat"]
    conflicts: [nf-demo-old]
    replaces: [nf-demo-legacy]
    description: |
      nodeforge demo driver
      Stands in for a vendor's kernel module package.
    files:
      /etc/nf-demo.conf: "setting = 1\\n"
      /usr/bin/nf-demo:
        mode: "0755"
        content: "#!/bin/sh\\necho demo\\n"
    postinst: |
      echo "configured with $1" > /var/lib/nf-demo.state
    prerm: |
      echo "prerm with $1" >> /var/lib/nf-demo.state
  - name: nf-demo-libs
    version: "3:580.65.06-1"
    architecture: all
    description: |
      nodeforge demo libraries
    files:
      /usr/share/nf-demo/README: "libs\\n"
"""

MODULES = """\
---
document: modulemd
version: 2
data:
  name: nf-demo-driver
  stream: "580-open"
  version: 1
  context: "00000000"
  arch: x86_64
  summary: demo stream
  description: demo stream
  license:
    module: [MIT]
  profiles:
    default:
      rpms: [nf-demo-driver]
  artifacts:
    rpms: ["nf-demo-driver-3:580.65.06-1.x86_64"]
...
"""


@pytest.mark.parametrize(
    ("version", "evr"),
    [
        ("3:580.65.06-1", ("3", "580.65.06", "1")),
        ("1.17.8-1", (None, "1.17.8", "1")),
        ("4.3.0-13.el9", (None, "4.3.0", "13.el9")),
        ("2.0", (None, "2.0", "1")),
        ("1:2.5-1-2", ("1", "2.5-1", "2")),
    ],
)
def test_a_debian_version_becomes_epoch_version_and_release(version, evr):
    assert fr.rpm_evr(version) == evr


@pytest.mark.parametrize(
    ("relation", "rpm"),
    [
        ("libseccomp2 (>= 2.5.0)", "libseccomp >= 2.5.0"),
        ("libc6", "glibc"),
        ("a (<< 2)", "a < 2"),
        ("a (>> 2)", "a > 2"),
        ("a (= 1:2-3)", "a = 1:2-3"),
        ("a:amd64 (<= 1)", "a <= 1"),
        ("a | python3-apt (>= 1) | c", "(a or python3-dnf >= 1 or c)"),
    ],
)
def test_a_debian_relation_becomes_an_rpm_dependency(relation, rpm):
    assert fr.rpm_relation(relation) == rpm


def test_a_relation_rpm_cannot_say_is_refused_naming_it():
    with pytest.raises(fr.debrepo.SpecError, match=r"relation '\(>= 1\)': cannot translate '\(>= 1\)' to RPM"):
        fr.rpm_relation("(>= 1)")


def _rpm(*args: str) -> str:
    return subprocess.run(["rpm", *args], capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="module")
def demo_repo(tmp_path_factory):
    work = tmp_path_factory.mktemp("rpmrepo")
    (work / "demo.yml").write_text(SPEC)
    (work / "modules.yaml").write_text(MODULES)
    metadata = fr.build_rpm_repo([work / "demo.yml"], work / "out", sign_packages=True, modules=work / "modules.yaml")
    return work, metadata


@needs_tools
def test_packages_carry_the_epoch_version_release_and_arch_of_the_spec(demo_repo):
    work, metadata = demo_repo
    repo = work / "out" / "repo"
    files = sorted(path.name for path in (repo / "Packages").glob("*.rpm"))
    assert files == ["nf-demo-driver-580.65.06-1.x86_64.rpm", "nf-demo-libs-580.65.06-1.noarch.rpm"]
    driver = repo / "Packages" / files[0]
    assert _rpm("-qp", "--qf", "%{NAME} %{EPOCH}:%{VERSION}-%{RELEASE}.%{ARCH}", str(driver)) == (
        "nf-demo-driver 3:580.65.06-1.x86_64"
    )
    assert [(p["name"], p["epoch"], p["arch"], p["file"]) for p in metadata["packages"]] == [
        ("nf-demo-driver", "3", "x86_64", "Packages/nf-demo-driver-580.65.06-1.x86_64.rpm"),
        ("nf-demo-libs", "3", "noarch", "Packages/nf-demo-libs-580.65.06-1.noarch.rpm"),
    ]


@needs_tools
def test_relations_scriptlets_and_config_files_are_what_dnf_reads(demo_repo):
    driver = str(demo_repo[0] / "out" / "repo" / "Packages" / "nf-demo-driver-580.65.06-1.x86_64.rpm")
    requires = [line for line in _rpm("-qp", "--requires", driver).splitlines() if not line.startswith("rpmlib(")]
    # /bin/sh: the two scriptlets' interpreter; nothing from the payload (AutoReqProv: no).
    assert requires == [
        "(nf-demo-libs = 3:580.65.06-1 or nf-demo-compat)",
        "/bin/sh",
        "/bin/sh",
        "libseccomp >= 2.5.0",
    ]
    assert _rpm("-qp", "--conflicts", driver).split() == ["nf-demo-old"]
    assert _rpm("-qp", "--obsoletes", driver).split() == ["nf-demo-legacy"]
    assert _rpm("-qp", "--configfiles", driver).split() == ["/etc/nf-demo.conf"]
    modes = dict(
        line.split() for line in _rpm("-qp", "--qf", "[%{FILENAMES} %{FILEMODES:octal}\n]", driver).splitlines()
    )
    assert modes == {"/etc/nf-demo.conf": "100644", "/usr/bin/nf-demo": "100755"}
    scripts = _rpm("-qp", "--scripts", driver)
    # One maintainer script serves both formats: it gets Debian's argument, not rpm's count.
    assert 'postinstall scriptlet (using /bin/sh):\nset -- configure\necho "configured with $1"' in scripts
    assert 'if [ "$1" -eq 0 ]; then set -- remove; else set -- upgrade; fi\necho "prerm with $1"' in scripts
    assert "preuninstall scriptlet" in scripts and "postuninstall scriptlet" not in scripts


@needs_tools
def test_packages_verify_against_the_exported_key_only(demo_repo, tmp_path):
    work, metadata = demo_repo
    repo = work / "out" / "repo"
    driver = str(repo / "Packages" / "nf-demo-driver-580.65.06-1.x86_64.rpm")
    db = tmp_path / "rpmdb"
    db.mkdir()
    key_id = metadata["fingerprint"][-8:].lower()
    unknown = subprocess.run(["rpm", "--dbpath", str(db), "-Kv", driver], capture_output=True, text=True, check=False)
    assert unknown.returncode != 0, unknown.stdout
    assert f"Header V4 RSA/SHA512 Signature, key ID {key_id}: NOKEY" in unknown.stdout, unknown.stdout
    _rpm("--dbpath", str(db), "--import", str(repo / fr.ARMORED_KEY_NAME))
    assert _rpm("--dbpath", str(db), "-K", driver).strip().endswith("digests signatures OK")
    info = _rpm("--dbpath", str(db), "-qpi", driver)
    assert f"Key ID {metadata['fingerprint'][-16:].lower()}" in info, info


@needs_tools
def test_repomd_is_signed_and_a_changed_one_fails(demo_repo, tmp_path):
    repo = demo_repo[0] / "out" / "repo"
    keyring = tmp_path / "key.gpg"
    subprocess.run(["gpg", "--dearmor", "--output", str(keyring), str(repo / fr.ARMORED_KEY_NAME)], check=True)
    repomd = repo / "repodata" / "repomd.xml"
    signature = repo / "repodata" / "repomd.xml.asc"
    good = subprocess.run(["gpgv", "--keyring", str(keyring), str(signature), str(repomd)], capture_output=True)
    assert good.returncode == 0, good.stderr
    changed = tmp_path / "repomd.xml"
    changed.write_bytes(repomd.read_bytes().replace(b"<revision>", b"<revision>1"))
    bad = subprocess.run(["gpgv", "--keyring", str(keyring), str(signature), str(changed)], capture_output=True)
    assert bad.returncode != 0 and b"BAD signature" in bad.stderr, bad.stderr


@needs_tools
def test_repomd_lists_the_packages_and_the_module_streams(demo_repo):
    repo = demo_repo[0] / "out" / "repo"
    ns = {"repo": "http://linux.duke.edu/metadata/repo"}
    root = ET.parse(repo / "repodata" / "repomd.xml").getroot()
    hrefs = {data.get("type"): data.find("repo:location", ns).get("href") for data in root.findall("repo:data", ns)}
    assert {"primary", "filelists", "other", "modules"} <= set(hrefs)
    assert (repo / hrefs["modules"]).is_file() and "modules.yaml" in hrefs["modules"], hrefs


@needs_tools
def test_a_second_build_keeps_the_key(demo_repo, tmp_path):
    built, metadata = demo_repo
    work = tmp_path / "copy"
    shutil.copytree(built, work)  # the other tests read the first build
    again = fr.build_rpm_repo([work / "demo.yml"], work / "out")
    assert again["fingerprint"] == metadata["fingerprint"] and again["signed_packages"] is False
    assert len(metadata["fingerprint"]) == 40
    key = subprocess.run(
        ["gpg", "--with-colons", "--show-keys", str(work / "out" / "repo" / fr.ARMORED_KEY_NAME)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    # RSA (algorithm 1), 3072 bits: what rpm verifies on every EL release.
    assert any(line.startswith("pub:") and line.split(":")[2:4] == ["3072", "1"] for line in key.splitlines()), key


@needs_tools
@pytest.mark.parametrize(
    ("node_os", "release_package"),
    [
        ("rocky8", "rocky-release-{}.noarch"),
        ("rocky9", "rocky-release-{}.noarch"),
        ("rhel8", "redhat-release-{}.x86_64"),
        ("rhel9", "redhat-release-{}.x86_64"),
    ],
)
def test_the_el_userland_is_what_dnf_resolves_against(node_os, release_package, tmp_path):
    """What lab/base-image/el.sh writes into an EL tier node's rpm database: the release and what vendor packages
    require resolve, at the versions el-userland.yml gives."""
    userland = REPO / "lab" / "base-image" / "el-userland.yml"
    entries = yaml.safe_load(userland.read_text())[node_os]
    rpms = fr.build_userland(userland, node_os, tmp_path / "rpms")
    assert sorted(path.name for path in rpms) == sorted(
        f"{e['name']}-{e['version']}.{e.get('arch', 'x86_64')}.rpm" for e in entries
    )
    db = tmp_path / "rpmdb"
    db.mkdir()
    _rpm("--dbpath", str(db), "--install", "--justdb", "--nodeps", "--noscripts", *map(str, rpms))
    installed = _rpm("--dbpath", str(db), "-qa", "--qf", "%{NAME} %{VERSION}-%{RELEASE}\n").splitlines()
    assert sorted(installed) == sorted(f"{e['name']} {e['version']}" for e in entries)
    major = node_os[-1]
    what = _rpm("--dbpath", str(db), "-q", "--whatprovides", "system-release(releasever)", "/bin/sh", "libseccomp")
    release = next(e["version"] for e in entries if e["name"].endswith("-release"))
    bash = next(e["version"] for e in entries if e["name"] == "bash")
    seccomp = next(e["version"] for e in entries if e["name"] == "libseccomp")
    assert what.split() == [
        release_package.format(release),
        f"bash-{bash}.x86_64",
        f"libseccomp-{seccomp}.x86_64",
    ]
    assert release.split(".")[0] == major


def test_an_os_without_a_userland_is_refused_naming_the_file(tmp_path):
    userland = REPO / "lab" / "base-image" / "el-userland.yml"
    has = r"\(has: rocky9, rocky8, rhel9, rhel8\)"
    with pytest.raises(fr.debrepo.SpecError, match=r"el-userland.yml: no userland for 'rhel7' " + has):
        fr.build_userland(userland, "rhel7", tmp_path)
