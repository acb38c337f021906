"""The signed fixture apt repository (molecule/fixture_repo): build, sign, serve, and use from a container."""

import gzip
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

from tests.conftest import load_fixture_repo

REPO_ROOT = Path(__file__).resolve().parents[1]
FIXTURE_DIR = REPO_ROOT / "molecule" / "fixture_repo"
SCRIPT = FIXTURE_DIR / "fixture_repo.py"
EXAMPLE_SPEC = FIXTURE_DIR / "specs" / "example.yml"
IMAGE = os.environ.get("NODEFORGE_BASE_IMAGE", "localhost/nodeforge-debian12:latest")
DEMO = "nodeforge-fixture-demo"


fr = load_fixture_repo()

_missing = [t for t in ("gpg", "gpgv", "gpgconf", "dpkg-deb", "apt-ftparchive") if not shutil.which(t)]
pytestmark = pytest.mark.skipif(bool(_missing), reason=f"missing host tools: {', '.join(_missing)}")


def _stanzas(text: str) -> list[dict[str, str]]:
    out = []
    for block in text.strip().split("\n\n"):
        fields = {}
        for line in block.splitlines():
            if line and not line[0].isspace():
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        out.append(fields)
    return out


def _gpgv(keyring: Path, *files: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["gpgv", "--keyring", str(keyring), *map(str, files)], capture_output=True, text=True, check=False
    )


@pytest.fixture(scope="module")
def example_repo(tmp_path_factory):
    return fr.build_repo([EXAMPLE_SPEC], tmp_path_factory.mktemp("example"))


# ------------------------------------------------------------------------------------------------ build


def test_example_repo_is_signed_and_lists_both_versions(example_repo):
    dist = example_repo.root / "dists" / example_repo.suite
    for signed in (dist / "InRelease",):
        result = _gpgv(example_repo.keyring_path, signed)
        assert result.returncode == 0, result.stderr
        assert "Good signature" in result.stderr
    detached = _gpgv(example_repo.keyring_path, dist / "Release.gpg", dist / "Release")
    assert detached.returncode == 0, detached.stderr

    release = _stanzas((dist / "Release").read_text())[0]
    assert release["Suite"] == release["Codename"] == fr.DEFAULT_SUITE
    assert release["Components"] == "main"
    assert release["Architectures"] == "amd64"
    assert release["Origin"] == fr.DEFAULT_ORIGIN
    assert "main/binary-amd64/Packages.gz" in (dist / "Release").read_text()

    packages_path = dist / "main" / "binary-amd64" / "Packages"
    packages = _stanzas(packages_path.read_text())
    assert sorted((p["Package"], p["Version"]) for p in packages) == [(DEMO, "1.0-1"), (DEMO, "1.1-1")]
    assert gzip.decompress(packages_path.with_suffix(".gz").read_bytes()) == packages_path.read_bytes()
    for stanza in packages:
        assert (example_repo.root / stanza["Filename"]).is_file()
    assert {p.version for p in example_repo.packages} == {"1.0-1", "1.1-1"}


def test_keyring_is_the_dearmored_form_of_the_armored_key(example_repo):
    armored = example_repo.armored_key_path.read_bytes()
    assert armored.startswith(b"-----BEGIN PGP PUBLIC KEY BLOCK-----")
    dearmored = subprocess.run(["gpg", "--dearmor"], input=armored, capture_output=True, check=True).stdout
    assert dearmored == example_repo.keyring_path.read_bytes()
    assert example_repo.keyring_path.read_bytes()[0] & 0x80  # an OpenPGP packet, not a keybox
    # The private key never lands in the served tree.
    assert not list(example_repo.root.rglob("private-keys-v1.d"))


def test_packages_carry_files_modes_conffiles_and_scripts(example_repo):
    deb = next(example_repo.root.rglob(f"{DEMO}_1.1-1_all.deb"))
    contents = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True).stdout
    executable = [line for line in contents.splitlines() if line.endswith(f"./usr/bin/{DEMO}")]
    assert executable and executable[0].startswith("-rwxr-xr-x root/root")
    info = subprocess.run(["dpkg-deb", "-I", str(deb)], capture_output=True, text=True, check=True).stdout
    assert "Depends: base-files" in info
    control_tar = subprocess.run(["dpkg-deb", "--ctrl-tarfile", str(deb)], capture_output=True, check=True)
    assert b"./conffiles" in control_tar.stdout and b"./postinst" in control_tar.stdout


def test_a_repo_signed_with_another_key_does_not_verify(example_repo, tmp_path):
    other = fr.build_repo([EXAMPLE_SPEC], tmp_path / "other")
    assert other.fingerprint != example_repo.fingerprint
    result = _gpgv(example_repo.keyring_path, other.root / "dists" / other.suite / "InRelease")
    assert result.returncode != 0


def test_rebuild_reuses_the_key_and_picks_up_new_packages(tmp_path):
    out = tmp_path / "repo"
    first = fr.build_repo([EXAMPLE_SPEC], out)
    extra = tmp_path / "extra.yml"
    extra.write_text(
        'packages:\n  - name: nodeforge-fixture-extra\n    version: "2:580.1-1"\n    architecture: amd64\n'
    )
    second = fr.build_repo([EXAMPLE_SPEC, extra], out)
    assert second.fingerprint == first.fingerprint
    assert _gpgv(first.keyring_path, second.root / "dists" / second.suite / "InRelease").returncode == 0
    names = {(p.name, p.version) for p in second.packages}
    assert ("nodeforge-fixture-extra", "2:580.1-1") in names
    # The epoch stays out of the file name, as in Debian.
    pool = second.root / "pool/main/n/nodeforge-fixture-extra"
    assert (pool / "nodeforge-fixture-extra_580.1-1_amd64.deb").is_file()
    assert fr.load_repo(out) == second


def test_vendor_like_release_fields_and_flat_layout(tmp_path):
    spec = tmp_path / "keyring.yml"
    spec.write_text(
        "packages:\n"
        "  - name: cuda-keyring\n"
        '    version: "1.1-1"\n'
        "    files:\n"
        "      /usr/share/keyrings/cuda-archive-keyring.gpg: {source: keyring}\n"
    )
    dists = fr.build_repo(
        [spec],
        tmp_path / "d",
        suite="stable",
        codename="bookworm",
        component="contrib",
        origin="NVIDIA",
        label="NVIDIA CUDA",
    )
    release = _stanzas((dists.root / "dists/stable/Release").read_text())[0]
    assert (release["Origin"], release["Label"], release["Suite"], release["Codename"]) == (
        "NVIDIA",
        "NVIDIA CUDA",
        "stable",
        "bookworm",
    )
    assert (dists.root / "dists/bookworm/InRelease").is_file()  # codename reachable too
    line = dists.apt_source_line("/k.gpg", "http://h:1")
    assert line == "deb [signed-by=/k.gpg] http://h:1/ stable contrib"

    flat = fr.build_repo([spec], tmp_path / "f", origin="NVIDIA", flat=True)
    assert _gpgv(flat.keyring_path, flat.root / "InRelease").returncode == 0
    assert [p["Package"] for p in _stanzas((flat.root / "Packages").read_text())] == ["cuda-keyring"]
    assert flat.apt_source_line("/k.gpg", "http://h:1/") == "deb [signed-by=/k.gpg] http://h:1/ ./"
    # A file with source: keyring carries this repository's binary keyring.
    deb = next(flat.root.rglob("cuda-keyring_1.1-1_all.deb"))
    extracted = tmp_path / "x"
    subprocess.run(["dpkg-deb", "-x", str(deb), str(extracted)], check=True)
    shipped = extracted / "usr/share/keyrings/cuda-archive-keyring.gpg"
    assert shipped.read_bytes() == flat.keyring_path.read_bytes()


def test_a_file_from_a_path_beside_the_spec(tmp_path):
    """{path: ...} ships a program kept as its own file (linted and tested where it lies), relative to the spec."""
    (tmp_path / "progs").mkdir()
    program = tmp_path / "progs" / "prog.py"
    program.write_text("#!/usr/bin/python3\nprint('stand-in')\n")
    spec = tmp_path / "specs" / "prog.yml"
    spec.parent.mkdir()
    spec.write_text(
        'packages:\n  - name: prog\n    version: "1.0-1"\n    files:\n'
        '      /usr/lib/prog/prog.py: {mode: "0755", path: ../progs/prog.py}\n'
    )
    repo = fr.build_repo([spec], tmp_path / "out")
    deb = next(repo.root.rglob("prog_1.0-1_all.deb"))
    contents = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True).stdout
    assert any(line.startswith("-rwxr-xr-x root/root") and line.endswith("./usr/lib/prog/prog.py") for line in
               contents.splitlines())  # fmt: skip
    subprocess.run(["dpkg-deb", "-x", str(deb), str(tmp_path / "x")], check=True)
    assert (tmp_path / "x/usr/lib/prog/prog.py").read_bytes() == program.read_bytes()


def test_the_scale_stand_in_package_ships_the_program_as_kept(tmp_path):
    repo = fr.build_repo([FIXTURE_DIR / "specs" / "spectrum_scale.yml"], tmp_path / "out")
    assert [(p.name, p.version, p.architecture) for p in repo.packages] == [("gpfs.base", "5.2.3-1", "amd64")]
    deb = next(repo.root.rglob("gpfs.base_5.2.3-1_amd64.deb"))
    subprocess.run(["dpkg-deb", "-x", str(deb), str(tmp_path / "x")], check=True)
    kept = REPO_ROOT / "molecule/fixture_files/spectrum_scale/scale_standin.py"
    assert (tmp_path / "x/usr/lpp/mmfs/lib/nodeforge-standin/scale_standin.py").read_bytes() == kept.read_bytes()
    for command in (
        "mmlscluster",
        "mmlsconfig",
        "mmchconfig",
        "mmlsnodeclass",
        "mmgetstate",
        "mmshutdown",
        "mmstartup",
    ):
        assert (tmp_path / "x/usr/lpp/mmfs/bin" / command).stat().st_mode & 0o111


BAD_SPECS = [
    ("packages:\n  - name: demo\n    version: 1.10\n", "package 'demo': field 'version'", "quote it"),
    ("packages:\n  - name: demo\n", "package 'demo': field 'version': missing", None),
    (
        'packages:\n  - name: demo\n    version: "1.0 beta"\n',
        "package 'demo': field 'version'",
        "Debian version",
    ),
    ('packages:\n  - name: Demo\n    version: "1"\n', "field 'name'", "Debian package name"),
    ('packages:\n  - version: "1"\n', "package #1: field 'name': missing", None),
    (
        'packages:\n  - name: demo\n    version: "1"\n    architecture: x86_64\n',
        "package 'demo': field 'architecture'",
        "amd64",
    ),
    (
        'packages:\n  - name: demo\n    version: "1"\n    depend: foo\n',
        "package 'demo': field 'depend'",
        "unknown",
    ),
    (
        'packages:\n  - name: demo\n    version: "1"\n    depends: "foo (> 1)"\n',
        "field 'depends'",
        "relation",
    ),
    (
        'packages:\n  - name: demo\n    version: "1"\n    files:\n      etc/x: y\n',
        "field 'files'",
        "absolute",
    ),
    (
        'packages:\n  - name: demo\n    version: "1"\n    files:\n      /x: {content: y, mode: 0755}\n',
        "field 'files'",
        "quoted octal",
    ),
    (
        'packages:\n  - name: demo\n    version: "1"\n  - name: demo\n    version: "1"\n',
        "package 'demo'",
        "already defined",
    ),
    (
        'packages:\n  - name: demo\n    version: "1"\n    files:\n      /x: {path: missing.py}\n',
        "field 'files': /x: 'path' missing.py: cannot read",
        "No such file",
    ),
    (
        'packages:\n  - name: demo\n    version: "1"\n    files:\n      /x: {path: a.py, content: b}\n',
        "field 'files'",
        "exactly one of 'content', 'source' or 'path'",
    ),
    ("packages: []\n", "'packages' must be a non-empty list", None),
    ("- name: demo\n", "a spec must be a mapping", None),
    ("packages:\n  - name: demo\n   version: 1\n", "not valid YAML", None),
]


@pytest.mark.parametrize(("text", "expected", "hint"), BAD_SPECS)
def test_broken_spec_names_file_package_and_field(tmp_path, text, expected, hint):
    spec = tmp_path / "broken.yml"
    spec.write_text(text)
    with pytest.raises(fr.SpecError) as excinfo:
        fr.build_repo([spec], tmp_path / "out")
    message = str(excinfo.value)
    assert message.startswith(f"{spec}: ")
    assert expected in message
    if hint:
        assert hint in message
    assert not (tmp_path / "out").exists()  # validated before anything is built


def test_cli_build_and_broken_spec(tmp_path):
    ok = subprocess.run(
        [sys.executable, str(SCRIPT), "build", "--spec", str(EXAMPLE_SPEC), "--out", str(tmp_path / "ok")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr
    assert f"{DEMO} 1.0-1 all" in ok.stdout
    broken = tmp_path / "broken.yml"
    broken.write_text("packages:\n  - name: nodeforge-fixture-demo\n    version: 1.10\n")
    bad = subprocess.run(
        [sys.executable, str(SCRIPT), "build", "--spec", str(broken), "--out", str(tmp_path / "bad")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 2
    assert bad.stderr.startswith(f"error: {broken}: package 'nodeforge-fixture-demo': field 'version'")
    assert "Traceback" not in bad.stderr


# ------------------------------------------------------------------------------------------------ serve


def test_served_repo_serves_over_loopback_and_stops(tmp_path):
    with fr.served_repo([EXAMPLE_SPEC], tmp_path / "served") as repo:
        assert repo.url.startswith("http://127.0.0.1:") and repo.port > 0
        assert (repo.suite, repo.component) == (fr.DEFAULT_SUITE, "main")
        assert repo.keyring_path.is_file() and repo.armored_key_path.is_file()
        body = urllib.request.urlopen(f"{repo.url}dists/{repo.suite}/InRelease", timeout=5).read()
        assert body == (repo.root / "dists" / repo.suite / "InRelease").read_bytes()
        assert repo.source_line("/usr/share/keyrings/f.gpg") == (
            f"deb [signed-by=/usr/share/keyrings/f.gpg] {repo.url} {repo.suite} main"
        )
        url = repo.url
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"{url}dists/", timeout=2)


def test_cli_serve_writes_url_file_and_stops_on_sigterm(tmp_path):
    out, url_file = tmp_path / "out", tmp_path / "url"
    subprocess.run(
        [sys.executable, str(SCRIPT), "build", "--spec", str(EXAMPLE_SPEC), "--out", str(out)],
        check=True,
        capture_output=True,
    )
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), "serve", "--dir", str(out), "--url-file", str(url_file), "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 10
        while not url_file.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        url = url_file.read_text().strip()
        assert url.startswith("http://127.0.0.1:")
        assert (
            urllib.request.urlopen(f"{url}{fr.KEYRING_NAME}", timeout=5).read()
            == (out / "repo" / fr.KEYRING_NAME).read_bytes()
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        stdout, _ = proc.communicate(timeout=10)
    assert proc.returncode == 0
    assert stdout.splitlines()[0] == url
    assert not url_file.exists()


# ----------------------------------------------------------------------------------------- apt in a container

CONTAINERS_ENV = {
    **os.environ,
    "CONTAINERS_CONF": os.environ.get("CONTAINERS_CONF", str(REPO_ROOT / "containers" / "containers.conf")),
}
# Only the fixture source is refreshed: hermetic and fast (the image's Debian sources are not contacted).
APT_ONLY = "-o Dir::Etc::SourceParts=- -o APT::Get::List-Cleanup=0 -o Dir::Etc::SourceList="
KEYRING_IN_CONTAINER = "/usr/share/keyrings/nodeforge-fixture-archive-keyring.gpg"


def _podman_ready() -> str | None:
    if not shutil.which("podman"):
        return "podman is not installed"
    probe = subprocess.run(["podman", "image", "exists", IMAGE], env=CONTAINERS_ENV, check=False)
    return None if probe.returncode == 0 else f"{IMAGE} is not built (lab/base-image/build.sh)"


def _podman(*args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        ["podman", *args],
        input=input,
        capture_output=True,
        text=True,
        env=CONTAINERS_ENV,
        check=False,
        timeout=120,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.mark.slow
@pytest.mark.parametrize(
    ("network", "host_from_container"),
    [
        # The container shares the host's network namespace: the loopback server is at 127.0.0.1.
        ("host", "127.0.0.1"),
        # Private network namespace; slirp4netns maps the host's loopback to 10.0.2.2 when allowed.
        ("slirp4netns:allow_host_loopback=true", "10.0.2.2"),
    ],
    ids=["network-host", "slirp4netns-host-loopback"],
)
def test_container_installs_and_holds_from_the_signed_repo(tmp_path, network, host_from_container):
    reason = _podman_ready()
    if reason:
        pytest.skip(reason)
    name = f"nodeforge-fixture-test-{uuid.uuid4().hex[:8]}"
    with (
        fr.served_repo([EXAMPLE_SPEC], tmp_path / "good") as good,
        fr.served_repo([EXAMPLE_SPEC], tmp_path / "rogue") as rogue,  # same packages, a different key
    ):
        assert good.fingerprint != rogue.fingerprint
        _podman("run", "-d", "--rm", "--name", name, f"--network={network}", IMAGE, "sleep", "infinity")
        try:

            def sh(script: str, check: bool = True) -> subprocess.CompletedProcess[str]:
                return _podman("exec", "-i", name, "sh", "-c", script, check=check)

            _podman("cp", str(good.keyring_path), f"{name}:{KEYRING_IN_CONTAINER}")
            sh(f"chmod 0644 {KEYRING_IN_CONTAINER}")

            def use_source(repo, list_name: str) -> str:
                url = f"http://{host_from_container}:{repo.port}/"
                line = repo.source_line(KEYRING_IN_CONTAINER, url)
                target = f"/etc/apt/sources.list.d/{list_name}"
                _podman("exec", "-i", name, "sh", "-c", f"cat > {target}", input=line + "\n")
                return APT_ONLY + target

            # A repository signed by another key is refused, even though its packages are identical.
            rogue_opts = use_source(rogue, "rogue.list")
            refused = sh(f"apt-get update {rogue_opts}", check=False)
            assert refused.returncode != 0, refused.stdout
            # Refused for the signature (apt names the rogue key), not for want of a connection.
            assert f"NO_PUBKEY {rogue.fingerprint[-16:]}" in refused.stderr, refused.stderr
            assert "is not signed" in refused.stderr, refused.stderr
            sh("rm /etc/apt/sources.list.d/rogue.list")
            assert "Candidate: 1" not in sh(f"apt-cache policy {DEMO}").stdout  # nothing from it was trusted

            # The right key: update verifies InRelease, both versions are visible, 1.0-1 installs exactly.
            opts = use_source(good, "nodeforge-fixture.list")
            update = sh(f"apt-get update {opts}")
            assert "InRelease" in update.stdout and "GPG error" not in update.stderr, update.stderr
            policy = sh(f"apt-cache policy {DEMO}").stdout
            assert "Candidate: 1.1-1" in policy and "1.0-1" in policy, policy
            sh(f"DEBIAN_FRONTEND=noninteractive apt-get install -y {opts} {DEMO}=1.0-1")
            sh(f"apt-mark hold {DEMO}")
            sh(f"DEBIAN_FRONTEND=noninteractive apt-get upgrade -y {opts}")  # the hold keeps 1.0-1

            assert sh(f"dpkg-query -W -f '${{Version}}' {DEMO}").stdout == "1.0-1"
            assert DEMO in sh("apt-mark showhold").stdout.split()
            state = sh("cat /var/lib/nodeforge-fixture-demo.state").stdout
            assert "1.0-1 configured" in state  # the postinst ran
        finally:
            _podman("rm", "-f", "-t", "0", name, check=False)
    assert name not in _podman("ps", "-a", "--format", "{{.Names}}").stdout


@pytest.mark.slow
def test_container_reads_a_flat_repository(tmp_path):
    """Flat layout ('deb [signed-by=K] URL ./'), as the CUDA and container-toolkit repositories are."""
    reason = _podman_ready()
    if reason:
        pytest.skip(reason)
    name = f"nodeforge-fixture-test-{uuid.uuid4().hex[:8]}"
    with fr.served_repo([EXAMPLE_SPEC], tmp_path / "flat", flat=True, origin="NVIDIA") as repo:
        _podman("run", "-d", "--rm", "--name", name, "--network=host", IMAGE, "sleep", "infinity")
        try:
            _podman("cp", str(repo.keyring_path), f"{name}:{KEYRING_IN_CONTAINER}")
            list_path = "/etc/apt/sources.list.d/flat.list"
            line = repo.source_line(KEYRING_IN_CONTAINER) + "\n"
            _podman("exec", "-i", name, "sh", "-c", f"cat > {list_path}", input=line)
            _podman(
                "exec",
                name,
                "sh",
                "-c",
                f"chmod 0644 {KEYRING_IN_CONTAINER}; apt-get update {APT_ONLY}{list_path}",
            )
            policy = _podman("exec", name, "apt-cache", "policy", DEMO).stdout
            assert "Candidate: 1.1-1" in policy and "1.0-1" in policy, policy
            assert "o=NVIDIA" in _podman("exec", name, "apt-cache", "policy").stdout  # pinnable by origin
        finally:
            _podman("rm", "-f", "-t", "0", name, check=False)
