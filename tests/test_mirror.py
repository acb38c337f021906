"""`nodeforge mirror`: pulled from the lab's stand-ins of the vendor repositories (tools/lab_mirror.py, signed as the
vendors sign theirs) served on loopback, then checked by apt itself, by rpm's signature check, and by `mirror
verify`."""

from __future__ import annotations

import contextlib
import functools
import gzip
import hashlib
import http.server
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
import yaml

from nodeforge import lab, mirror
from nodeforge.collection import k8s_validate, parsers
from tests.test_json_output import VALIDATOR

from ansible_collections.nodeforge.gpu.plugins.module_utils import k8s_images  # isort: skip (after the loader)

REPO = Path(__file__).resolve().parents[1]
UPSTREAM_MANIFESTS = REPO.parent / "shared" / "reference" / "upstream-manifests"
NODEFORGE = [str(Path(sys.executable).parent / "nodeforge")]

pytestmark = pytest.mark.slow


class RangeHandler(http.server.SimpleHTTPRequestHandler):
    """http.server with byte ranges (as the vendors' CDNs answer them), recording each request's path and headers."""

    requests: ClassVar[list[tuple[str, dict]]] = []

    def log_message(self, *args):
        return None

    def do_GET(self):
        self.requests.append((self.path, dict(self.headers)))
        wanted = self.headers.get("Range", "")
        path = Path(self.translate_path(self.path))
        if not wanted.startswith("bytes=") or not path.is_file():
            return super().do_GET()
        start = int(wanted.removeprefix("bytes=").split("-")[0])
        body = path.read_bytes()[start:]
        self.send_response(206)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


# The images the cluster layer of these inventories names, under their real names (the MPI Operator's from its
# release); the device plugin's is multi-platform, as NVIDIA publishes it.
IMAGES = [
    "nvcr.io/nvidia/k8s-device-plugin:v0.20.0",
    "ghcr.io/mellanox/k8s-rdma-shared-dev-plugin:v1.5.3",
    "nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-distroless",
    "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0",
    "docker.io/mellanox/cuda-perftest:latest",
    "docker.io/mpioperator/nccl-tests:latest",
    "docker.io/mpioperator/mpi-operator:0.8.0",
]
MULTI_PLATFORM = "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"
# Set by the upstream fixture: the registries.conf that sends skopeo to the loopback registry for the real names.
REGISTRIES: dict[str, Path] = {}


def oci_image(layout: Path, name: str, platforms: tuple[str, ...] = ("amd64",)) -> dict[str, str]:
    """An image built here into an OCI layout under name: per platform one layer holding a file that names the image
    and platform; several platforms make an image index. {platform: manifest digest}."""
    blobs = layout / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)

    def blob(data: bytes, media_type: str) -> dict:
        digest = hashlib.sha256(data).hexdigest()
        (blobs / digest).write_bytes(data)
        return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data)}

    manifests, digests = [], {}
    for arch in platforms:
        content = f"{name} linux/{arch}\n".encode()
        tar = io.BytesIO()
        with tarfile.open(fileobj=tar, mode="w") as archive:
            member = tarfile.TarInfo("etc/image")
            member.size = len(content)
            archive.addfile(member, io.BytesIO(content))
        layer = gzip.compress(tar.getvalue(), mtime=0)
        diff_id = "sha256:" + hashlib.sha256(tar.getvalue()).hexdigest()
        config = {"architecture": arch, "os": "linux", "rootfs": {"type": "layers", "diff_ids": [diff_id]}}
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": blob(json.dumps(config).encode(), "application/vnd.oci.image.config.v1+json"),
            "layers": [blob(layer, "application/vnd.oci.image.layer.v1.tar+gzip")],
        }
        described = blob(json.dumps(manifest).encode(), manifest["mediaType"])
        digests[arch] = described["digest"]
        manifests.append({**described, "platform": {"architecture": arch, "os": "linux"}})
    top = manifests[0]
    if len(manifests) > 1:
        top = blob(
            json.dumps(
                {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": manifests}
            ).encode(),
            "application/vnd.oci.image.index.v1+json",
        )
    top = {**top, "annotations": {"org.opencontainers.image.ref.name": "built"}}
    (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [top]}))
    (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    return digests


@contextlib.contextmanager
def registry(directory: Path) -> Iterator[str]:
    """Debian's docker-registry (CNCF distribution) on a loopback port, storing under directory: host:port."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "registry.yml"
    storage = {"filesystem": {"rootdirectory": str(directory / "data")}}
    config.write_text(yaml.safe_dump({"version": 0.1, "storage": storage, "http": {"addr": f"127.0.0.1:{port}"}}))
    server = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        for _ in range(100):
            with contextlib.suppress(OSError), urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=1):
                break
            time.sleep(0.1)
        else:
            raise AssertionError("docker-registry did not answer")
        yield f"127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=10)


def skopeo(*args: str) -> bytes:
    return subprocess.run(["skopeo", *args], check=True, capture_output=True).stdout


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    root = tmp_path_factory.mktemp("upstream")
    subprocess.run([sys.executable, str(REPO / "tools" / "lab_mirror.py"), str(root)], check=True, capture_output=True)
    shutil.copy(UPSTREAM_MANIFESTS / "mpi-operator-v0.8.0.yaml", root / "mpi-operator.yaml")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(RangeHandler, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    # The image registries: one loopback registry holding the images under their real names, which a
    # registries.conf (as a site behind a proxy keeps one) maps nvcr.io, ghcr.io and docker.io onto.
    registries = tmp_path_factory.mktemp("registries")
    with registry(registries) as address:
        for ref in IMAGES:
            built = registries / ref.replace("/", "_").replace(":", "_")
            oci_image(built, ref, ("amd64", "arm64") if ref == MULTI_PLATFORM else ("amd64",))
            skopeo(
                "copy", "--quiet", "--all", "--dest-tls-verify=false", f"oci:{built}:built", f"docker://{address}/{ref}"
            )
        conf = registries / "registries.conf"
        conf.write_text("".join(
            f'[[registry]]\nprefix = "{host}"\nlocation = "{address}/{host}"\ninsecure = true\n\n'
            for host in ("nvcr.io", "ghcr.io", "docker.io")
        ))  # fmt: skip
        REGISTRIES["conf"] = conf
        REGISTRIES["address"] = address
        yield root, f"http://127.0.0.1:{server.server_address[1]}"
    REGISTRIES.clear()
    server.shutdown()


def inventory(tmp_path: Path, upstream, hosts: dict, **extra) -> Path:
    """Two GPU nodes as a site declares them (nodeforge_os), the vendors' URLs pointed at the loopback stand-ins and
    their key pinned, as the lab pins it."""
    root, url = upstream
    fingerprints = lab.mirror_fingerprints(root)
    overrides = {
        "nvidia_container_toolkit": {
            "deb_url": f"{url}/stable/deb/$(ARCH)",
            "rpm_url": f"{url}/stable/rpm/$basearch",
            "key_url": f"{url}/gpgkey",
            "key_fingerprints": fingerprints,
        },
        "nvidia_driver": {
            "cuda_repo": {
                "baseurl": url + "/compute/cuda/repos/{distro}/x86_64/",
                "key_url_rpm": url + "/compute/cuda/repos/{distro}/x86_64/D42D0685.pub",
                "keyring_fingerprints": fingerprints,
                "key_fingerprints_rpm": fingerprints,
            }
        },
        "ofed": {
            "doca": {
                "baseurl": url + "/public/repo/doca/{version}/{distro}/x86_64/",
                "key_url": f"{url}/public/repo/doca/GPG-KEY-Mellanox.pub",
                "key_fingerprints": fingerprints,
            }
        },
        "kubernetes": {"mpi_operator": {"url": f"{url}/mpi-operator.yaml"}},
    }
    data = {
        "all": {
            "children": {
                "gpu_nodes": {
                    "hosts": hosts,
                    "vars": {
                        "nodeforge_profile": "lab",
                        "nvidia_driver_source": "cuda_repo",
                        "nvidia_driver_branch": "580",
                        "nodeforge_manifest_overrides": overrides,
                        **extra,
                    },
                }
            }
        }
    }
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(data))
    return path


SITE = {
    "node-u24": {"nodeforge_os": "ubuntu24.04", "ofed_mode": "doca"},
    "node-r9": {"nodeforge_os": "rocky9", "ofed_mode": "inbox"},
}


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """The CLI; a pull reaches the image registries through the upstream fixture's registries.conf. A --json
    document is checked against the published schema."""
    if args[:2] == ("mirror", "pull") and REGISTRIES:
        args = (*args, "--registries-conf", str(REGISTRIES["conf"]))
    done = subprocess.run(NODEFORGE + list(args), capture_output=True, text=True, check=False, env=env)
    if "--json" in args:
        VALIDATOR.validate(json.loads(done.stdout))
    return done


def rel_files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def test_pull_fetches_exactly_the_pinned_packages_verified_and_a_second_pull_downloads_nothing(tmp_path, upstream):
    root, _ = upstream
    inv = inventory(tmp_path, upstream, SITE)
    to = tmp_path / "mirror"
    first = run("mirror", "pull", "-i", str(inv), "--to", str(to), "--json")
    assert first.returncode == 0, first.stdout + first.stderr
    result = json.loads(first.stdout)
    assert result["problems"] == []
    files = rel_files(to)
    # The signed indexes as published, byte for byte: nodes verify them with the vendor's pinned key.
    for published in ("InRelease", "Packages"):
        ours = to / "cuda/ubuntu2404" / published
        assert ours.read_bytes() == (root / "compute/cuda/repos/ubuntu2404/x86_64" / published).read_bytes()
    assert (to / "cuda/rhel9/repodata/repomd.xml.asc").read_bytes() == (
        root / "compute/cuda/repos/rhel9/x86_64/repodata/repomd.xml.asc"
    ).read_bytes()
    # The open flavor's packages at the pinned 580.126.20, the branch's pinning package; not 580.105.08, and not the
    # proprietary flavor's cuda-drivers, which no node of this inventory installs.
    debs = sorted(Path(f).name for f in files if f.startswith("cuda/ubuntu2404/pool/"))
    assert debs == [
        "nvidia-compute-utils-580_580.126.20-0ubuntu1_all.deb",
        "nvidia-dkms-580-open_580.126.20-0ubuntu1_all.deb",
        "nvidia-driver-580-open_580.126.20-0ubuntu1_all.deb",
        "nvidia-driver-pinning-580_580.126.20-0ubuntu1_all.deb",
        "nvidia-open_580.126.20-0ubuntu1_all.deb",
    ]
    rpms = sorted(Path(f).name for f in files if f.startswith("cuda/rhel9/Packages/"))
    assert "nvidia-open-580.126.20-1.el9.noarch.rpm" in rpms
    assert [r for r in rpms if "580.105.08" in r or r.startswith("cuda-drivers")] == []
    assert sorted(Path(f).name for f in files if f.startswith("doca/3.4.1/ubuntu24.04/pool/")) == [
        "doca-ofed_3.4.1-1_amd64.deb",
        "mlnx-ofed-kernel-utils_26.01.OFED.26.01.0.4.2.1-1_amd64.deb",
    ]
    assert "files/mpi_operator/v0.8.0/mpi-operator.yaml" in files
    # Nothing of the Rocky node's OFED (inbox: the distribution's) and no DOCA for EL: no node asks for them.
    assert not any(f.startswith(("rocky/", "doca/3.4.1/rhel9")) for f in files)
    assert result["from_distribution"] == ["/bin/sh", "dkms", "dkms (>= 3.1.8)", "libseccomp", "libseccomp2"]
    # Every byte in the mirror was downloaded once, but the indexes nodeforge and skopeo write.
    written = (mirror.INDEX, "images/index.json", "images/oci-layout")
    assert sum(s["downloaded"] for s in result["sources"].values()) == sum(
        p.stat().st_size for p in to.rglob("*") if p.is_file()
    ) - sum((to / name).stat().st_size for name in written)

    RangeHandler.requests.clear()
    second = run("mirror", "pull", "-i", str(inv), "--to", str(to), "--json")
    assert second.returncode == 0, second.stdout + second.stderr
    assert {s["downloaded"] for s in json.loads(second.stdout)["sources"].values()} == {0}
    # Packages and pinned files are not asked for again; the indexes only conditionally (304 when unchanged).
    assert [
        p for p, _ in RangeHandler.requests if "/pool/" in p or "/Packages/" in p or p.endswith((".yaml", ".gz"))
    ] == []
    assert all("If-Modified-Since" in headers for _, headers in RangeHandler.requests)

    verified = run("mirror", "verify", str(to))
    assert verified.returncode == 0, verified.stdout
    assert f"{len(files) - 1} files verified" in " ".join(verified.stdout.split())

    # check --mirror: the mirror holds everything the inventory needs; then names what it lacks, and who needs it.
    checked = run("check", "-i", str(inv), "--mirror", str(to))
    assert checked.returncode == 0, checked.stdout
    assert "holds all it needs" in " ".join(checked.stdout.split())
    (to / "cuda/rhel9/Packages/nvidia-open-580.126.20-1.el9.noarch.rpm").unlink()
    (to / "doca/GPG-KEY-Mellanox.pub").unlink()
    checked = run("check", "-i", str(inv), "--mirror", str(to), "--json")
    assert checked.returncode == 1
    assert [(p["scope"], p["variable"], p["found"]) for p in json.loads(checked.stdout)["problems"]] == [
        (
            "hosts node-r9",
            "version manifest nvidia_driver.cuda_repo.baseurl",
            "cuda/rhel9/Packages/nvidia-open-580.126.20-1.el9.noarch.rpm (nvidia-open 580.126.20-1.el9) "
            "not in the mirror",
        ),
        (
            "hosts node-u24",
            "version manifest ofed.doca.baseurl",
            "doca/GPG-KEY-Mellanox.pub (its key) not in the mirror",
        ),
    ]


def test_an_inventory_pointed_at_the_served_mirror_pulls_from_it_and_apt_and_rpm_accept_it(tmp_path, upstream):
    inv = inventory(tmp_path, upstream, SITE)
    to = tmp_path / "mirror"
    # The repositories and files (the images, which a registry serves, have their own test below).
    files_only = ("--only", "nodes", "--only", "cluster")
    assert run("mirror", "pull", "-i", str(inv), "--to", str(to), *files_only).returncode == 0
    with mirror.serving(to) as url:
        written = run("mirror", "overrides", str(to), "--url", url)
        assert written.returncode == 0, written.stderr
        # The site's inventory with the file `mirror overrides` wrote: check accepts it, and every source it plans is
        # the mirror's (its own pins kept: nodeforge_manifest_overrides_mirror merges over them).
        data = yaml.safe_load(inv.read_text())
        data["all"]["children"]["gpu_nodes"]["vars"] |= yaml.safe_load(written.stdout)
        inv.write_text(yaml.safe_dump(data))
        checked = run("check", "-i", str(inv))
        assert checked.returncode == 0, checked.stdout + checked.stderr
        again = run("mirror", "pull", "-i", str(inv), "--to", str(tmp_path / "copy"), *files_only, "--json")
        assert again.returncode == 0, again.stdout + again.stderr
        index = mirror.read_index(tmp_path / "copy")
        assert sorted({s["url"][: len(url)] for s in index["sources"].values()}) == [url]
        assert rel_files(tmp_path / "copy") == rel_files(to)
        overrides = yaml.safe_load(written.stdout)["nodeforge_manifest_overrides_mirror"]
        # apt itself, in its own state directory: the InRelease verified with the pinned keyring, a package by its hash.
        apt = tmp_path / "apt"
        for sub in (
            "etc/apt/sources.list.d",
            "var/lib/apt/lists/partial",
            "var/cache/apt/archives/partial",
            "var/lib/dpkg",
        ):
            (apt / sub).mkdir(parents=True)
        (apt / "var/lib/dpkg/status").write_text("")
        keyring = apt / "toolkit.gpg"
        keyring.write_bytes(parsers.openpgp_dearmor((to / "nvidia-container-toolkit/gpgkey").read_text()))
        deb_url = overrides["nvidia_container_toolkit"]["deb_url"].replace("$(ARCH)", "amd64")
        (apt / "etc/apt/sources.list").write_text(f"deb [signed-by={keyring}] {deb_url} /\n")
        options = [
            "-o",
            f"Dir={apt}",
            "-o",
            "Dir::State::status=" + str(apt / "var/lib/dpkg/status"),
            "-o",
            "APT::Architecture=amd64",
            "-o",
            "Debug::NoLocking=1",
        ]
        subprocess.run(["apt-get", *options, "update"], check=True, capture_output=True)

        def download(version: str) -> subprocess.CompletedProcess:
            argv = ["apt-get", *options, "download", f"nvidia-container-toolkit={version}"]
            return subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, check=False)

        got = download("1.20.0-1")
        assert got.returncode == 0, got.stderr
        assert (tmp_path / "nvidia-container-toolkit_1.20.0-1_amd64.deb").is_file()
        # A package the mirror does not hold (not pinned: 1.19.1) is in the signed index, and not served.
        missing = download("1.19.1-1")
        assert missing.returncode != 0 and "404" in missing.stderr
    # rpm's own signature and digest check of the mirrored RPMs, with the key the mirror keeps.
    db = tmp_path / "rpmdb"
    subprocess.run(["rpm", "--dbpath", str(db), "--import", str(to / "cuda/rhel9/D42D0685.pub")], check=True)
    for package in (to / "cuda/rhel9/Packages").glob("*.rpm"):
        checked = subprocess.run(["rpm", "--dbpath", str(db), "-K", str(package)], capture_output=True, text=True)
        assert checked.returncode == 0 and "signatures OK" in checked.stdout, checked.stdout


def test_verify_names_a_tampered_file_and_anything_unexpected(tmp_path, upstream):
    inv = inventory(tmp_path, upstream, {"node-u24": SITE["node-u24"]})
    to = tmp_path / "mirror"
    assert run("mirror", "pull", "-i", str(inv), "--to", str(to)).returncode == 0
    deb = next((to / "cuda/ubuntu2404/pool").rglob("nvidia-open_*.deb"))
    deb.write_bytes(deb.read_bytes() + b"x")
    (to / "cuda/ubuntu2404/pool/planted.deb").write_bytes(b"x")
    result = run("mirror", "verify", str(to))
    assert result.returncode == 1
    out = " ".join(result.stdout.split())
    assert (
        "cuda/ubuntu2404/pool/main/n/nvidia-open/nvidia-open_580.126.20-0ubuntu1_all.deb: does not match the "
        "repository's signed index (nvidia-open 580.126.20-0ubuntu1)" in out
    )
    assert "cuda/ubuntu2404/pool/planted.deb: not pulled (unexpected in the mirror)" in out
    # A pull puts back what verify refused.
    (to / "cuda/ubuntu2404/pool/planted.deb").unlink()
    assert run("mirror", "pull", "-i", str(inv), "--to", str(to)).returncode == 0
    assert run("mirror", "verify", str(to)).returncode == 0


def test_a_partial_download_is_resumed_with_a_range_request(tmp_path, upstream):
    root, _ = upstream
    inv = inventory(tmp_path, upstream, {"node-r9": SITE["node-r9"]})
    to = tmp_path / "mirror"
    part = to / "files/mpi_operator/v0.8.0/mpi-operator.yaml.part"
    part.parent.mkdir(parents=True)
    whole = (root / "mpi-operator.yaml").read_bytes()
    part.write_bytes(whole[:1000])
    RangeHandler.requests.clear()
    result = run("mirror", "pull", "-i", str(inv), "--to", str(to), "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(result.stdout)["sources"]["mpi_operator"]["downloaded"] == len(whole) - 1000
    assert [h.get("Range") for p, h in RangeHandler.requests if p == "/mpi-operator.yaml"] == ["bytes=1000-"]
    assert (to / "files/mpi_operator/v0.8.0/mpi-operator.yaml").read_bytes() == whole


def test_what_cannot_be_verified_is_refused_naming_it(tmp_path, upstream):
    root, url = upstream
    # A key other than the pinned one: refused before any package is fetched.
    inv = inventory(tmp_path, upstream, {"node-u24": SITE["node-u24"]})
    data = yaml.safe_load(inv.read_text())
    data["all"]["children"]["gpu_nodes"]["vars"]["nodeforge_manifest_overrides"]["ofed"]["doca"]["key_fingerprints"] = [
        "C95B321B61E88C1809C4F759DDCAE044F796ECB0"
    ]
    inv.write_text(yaml.safe_dump(data))
    result = run("mirror", "pull", "-i", str(inv), "--to", str(tmp_path / "m1"))
    assert result.returncode == 1
    assert (
        f"doca 3.4.1 ubuntu24.04: the key at {url}/public/repo/doca/GPG-KEY-Mellanox.pub has primary fingerprint(s) "
        f"{lab.mirror_fingerprints(root)[0]}, not the pinned C95B321B61E88C1809C4F759DDCAE044F796ECB0"
    ) in " ".join(result.stdout.split())
    assert not any((tmp_path / "m1/doca").rglob("*.deb"))
    # A release manifest whose sha256 is not the pinned one: not kept.
    inv = inventory(tmp_path, upstream, {"node-r9": SITE["node-r9"]})
    data = yaml.safe_load(inv.read_text())
    data["all"]["children"]["gpu_nodes"]["vars"]["nodeforge_manifest_overrides"]["kubernetes"]["mpi_operator"][
        "url"
    ] = f"{url}/gpgkey"
    inv.write_text(yaml.safe_dump(data))
    result = run("mirror", "pull", "-i", str(inv), "--to", str(tmp_path / "m2"))
    assert result.returncode == 1
    assert f"{url}/gpgkey: sha256 " in result.stdout and "does not match the pinned b38def13" in " ".join(
        result.stdout.split()
    )
    assert [p for p in (tmp_path / "m2").rglob("*") if p.is_file() and "mpi" in p.name] == []
    # MLNX_OFED without a checksum pinned (the check's problem), a node without its OS: refused before any fetch.
    inv = inventory(tmp_path, upstream, {"node-r9": {"nodeforge_os": "rocky9", "ofed_mode": "mlnx_ofed"}})
    result = run("mirror", "pull", "-i", str(inv), "--to", str(tmp_path / "m3"))
    assert result.returncode == 1
    assert "host node-r9: ofed_mlnx_ofed_checksum: found no checksum for the mlnx_ofed tarball" in result.stdout
    assert not (tmp_path / "m3").exists()
    inv = inventory(tmp_path, upstream, {"node-x": {"ofed_mode": "inbox"}})
    result = run("mirror", "pull", "-i", str(inv), "--to", str(tmp_path / "m4"))
    assert result.returncode == 1
    assert "host node-x: nodeforge_os is not set, and no --os given" in result.stderr
    result = run("mirror", "pull", "-i", str(inv), "--to", str(tmp_path / "m4"), "--os", "rocky9", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["sources"]["cuda rhel9"]["files"] > 0


def test_k8s_render_works_offline_from_the_mirror(tmp_path):
    """The Redbook sample's cluster layer (MPI Operator and Scale CSI releases) pulled with --only cluster, upstream
    then gone: render reads both releases from the mirror, each still verified by its pinned sha256."""
    sample = str(REPO / "inventories" / "dgx1-openshift")
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(RangeHandler, directory=str(UPSTREAM_MANIFESTS))
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    upstream = f"http://127.0.0.1:{server.server_address[1]}"
    releases = {"mpi_operator": "mpi-operator-v0.8.0.yaml", "scale_csi": "ibm-spectrum-scale-csi-operator-v3.0.0.yaml"}
    control = tmp_path / "control.yml"
    pins = {name: {"url": f"{upstream}/{file}"} for name, file in releases.items()}
    control.write_text(yaml.safe_dump({"k8s_control": {"hosts": {"localhost": {
        "nodeforge_manifest_overrides": {"kubernetes": pins}}}}}))  # fmt: skip
    to = tmp_path / "mirror"
    pulled = run("mirror", "pull", "-i", sample, "-i", str(control), "--only", "cluster", "--to", str(to), "--json")
    server.shutdown()
    server.server_close()
    assert pulled.returncode == 0, pulled.stdout + pulled.stderr
    assert sorted(json.loads(pulled.stdout)["sources"]) == ["mpi_operator", "scale_csi"]
    assert rel_files(to) == {
        mirror.INDEX,
        "files/mpi_operator/v0.8.0/mpi-operator-v0.8.0.yaml",
        "files/scale_csi/v3.0.0/ibm-spectrum-scale-csi-operator-v3.0.0.yaml",
    }
    with mirror.serving(to) as url:
        pointed = tmp_path / "mirror.yml"
        variables = yaml.safe_load(run("mirror", "overrides", str(to), "--url", url).stdout)
        pointed.write_text(yaml.safe_dump({"k8s_control": {"hosts": {"localhost": variables}}}))
        out = tmp_path / "out"
        # An empty download cache: the releases can only come from the mirror (upstream is gone).
        cache = tmp_path / "cache"
        env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
        argv = ["k8s", "render", "-i", sample, "-i", str(control), "-i", str(pointed), "-o", str(out), "--json"]
        rendered = run(*argv, env=env)
    assert rendered.returncode == 0, rendered.stdout[-3000:] + rendered.stderr[-3000:]
    assert sorted(p.name.split("-")[0] for p in (cache / "nodeforge/k8s").iterdir()) == ["ibm", "mpi"]
    objects = [yaml.safe_load(p.read_text()) for p in out.glob("*.yaml")]
    for name, file in releases.items():
        release = k8s_validate.load_documents((UPSTREAM_MANIFESTS / file).read_text())
        assert [f"{o['kind']} {o['metadata']['name']}" for o in release if o not in objects] == [], name


def test_serve_answers_over_tls_with_the_sites_certificate(tmp_path, upstream):
    import ssl
    import urllib.request

    inv = inventory(tmp_path, upstream, {"node-r9": SITE["node-r9"]})
    to = tmp_path / "mirror"
    assert run("mirror", "pull", "-i", str(inv), "--to", str(to), "--only", "cluster").returncode == 0
    cert, key = tmp_path / "mirror.pem", tmp_path / "mirror.key"
    openssl = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"]
    subprocess.run([*openssl, "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)  # fmt: skip
    argv = [*NODEFORGE, "mirror", "serve", str(to), "--port", "0", "--tls-cert", str(cert), "--tls-key", str(key)]
    server = subprocess.Popen([*argv, "--json"], stdout=subprocess.PIPE, text=True)
    try:
        lines = []
        while not lines or lines[-1] != "}\n":
            lines.append(server.stdout.readline())
        serving = json.loads("".join(lines))
        VALIDATOR.validate(serving)
        url = serving["url"]
        assert url.startswith("https://127.0.0.1:")
        context = ssl.create_default_context(cafile=str(cert))
        with urllib.request.urlopen(url + "files/mpi_operator/v0.8.0/mpi-operator.yaml", context=context) as answer:
            assert answer.read() == (to / "files/mpi_operator/v0.8.0/mpi-operator.yaml").read_bytes()
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
            urllib.request.urlopen(url + mirror.INDEX, context=ssl.create_default_context())
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_a_mirror_whose_index_is_lost_is_indexed_again_without_fetching_its_packages(tmp_path, upstream):
    inv = inventory(tmp_path, upstream, SITE)
    to = tmp_path / "mirror"
    first = run("mirror", "pull", "-i", str(inv), "--to", str(to), "--json")
    assert first.returncode == 0, first.stdout
    (to / mirror.INDEX).unlink()
    RangeHandler.requests.clear()
    again = run("mirror", "pull", "-i", str(inv), "--to", str(to), "--json")
    assert again.returncode == 0, again.stdout
    # Packages and pinned files are checked by their sha256 where they lie; only keys and signed indexes come again.
    assert [p for p, _ in RangeHandler.requests if "/pool/" in p or "/Packages/" in p or p.endswith(".yaml")] == []
    files = {name: s["files"] for name, s in json.loads(again.stdout)["sources"].items()}
    assert files == {name: s["files"] for name, s in json.loads(first.stdout)["sources"].items()}
    assert run("mirror", "verify", str(to)).returncode == 0


def test_images_are_copied_by_digest_pushed_to_the_sites_registry_and_rendered_from_it(tmp_path, upstream):
    """The cluster's images: skopeo copies each into the mirror's OCI layout by digest (one platform of a
    multi-platform image), verify checks every blob, push puts them in the site's registry digests unchanged, and
    render with the overrides names only the site's registry, each image by the digest that registry serves."""
    inv = inventory(tmp_path, upstream, {"node-u24": SITE["node-u24"]})
    to = tmp_path / "mirror"
    argv = ["mirror", "pull", "-i", str(inv), "--to", str(to), "--only", "cluster", "--only", "images", "--json"]
    pulled = run(*argv)
    assert pulled.returncode == 0, pulled.stdout + pulled.stderr
    assert json.loads(pulled.stdout)["sources"]["images"]["downloaded"] > 0
    index = json.loads((to / mirror.INDEX).read_text())
    # Not the RDMA plugin's (the lab profile has no HCA) nor the exporter's (monitoring is off).
    unused = {
        "ghcr.io/mellanox/k8s-rdma-shared-dev-plugin:v1.5.3",
        "nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-distroless",
    }
    assert sorted(index["images"]) == sorted(set(IMAGES) - unused)
    assert index["images"]["docker.io/mpioperator/mpi-operator:0.8.0"]["components"] == "mpi_operator"
    # The device plugin: linux/amd64's image of the index, by its own digest; nothing of arm64.
    built = oci_image(tmp_path / "built", MULTI_PLATFORM, ("amd64", "arm64"))
    entry = index["images"][MULTI_PLATFORM]
    assert entry["digest"] == built["amd64"] != entry["source_digest"]
    assert not (to / "images/blobs/sha256" / built["arm64"].partition(":")[2]).exists()
    assert run("mirror", "verify", str(to)).returncode == 0
    again = run(*argv)
    assert json.loads(again.stdout)["sources"]["images"]["downloaded"] == 0, again.stdout

    # A changed layer is named by verify.
    layer = next(
        p
        for p in (to / "images/blobs/sha256").iterdir()
        if p.stat().st_size > 100 and p.read_bytes()[:2] == b"\x1f\x8b"
    )
    kept = layer.read_bytes()
    layer.write_bytes(kept + b"x")
    verified = run("mirror", "verify", str(to))
    assert verified.returncode == 1
    assert f"images/blobs/sha256/{layer.name}: sha256" in " ".join(verified.stdout.split())
    layer.write_bytes(kept)

    with registry(tmp_path / "site") as site:
        pushed = run("mirror", "push", str(to), "--registry", f"{site}/gpu", "--no-tls-verify", "--json")
        assert pushed.returncode == 0, pushed.stdout + pushed.stderr
        variables = yaml.safe_load(
            run("mirror", "overrides", str(to), "--url", upstream[1], "--registry", f"{site}/gpu").stdout
        )
        images = variables["k8s_cluster_image_mirror"]
        assert images[MULTI_PLATFORM] == f"{site}/gpu/nvcr.io/nvidia/k8s-device-plugin@{built['amd64']}"
        pointed = tmp_path / "pointed.yml"
        # The cluster is reached from localhost, which reads the releases from where the nodes' settings say.
        overrides = yaml.safe_load(inv.read_text())["all"]["children"]["gpu_nodes"]["vars"][
            "nodeforge_manifest_overrides"
        ]
        control = {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}
        control["nodeforge_manifest_overrides"] = overrides
        control["k8s_cluster_image_mirror"] = images
        pointed.write_text(yaml.safe_dump({"k8s_control": {"hosts": {"localhost": control}}}))
        out = tmp_path / "out"
        rendered = run("k8s", "render", "-i", str(inv), "-i", str(pointed), "-o", str(out), "--json")
        assert rendered.returncode == 0, rendered.stdout[-3000:] + rendered.stderr[-3000:]
        objects = [
            d for p in out.glob("*.yaml") for d in k8s_validate.load_documents(p.read_text()) if isinstance(d, dict)
        ]
        named = k8s_images.named(objects)
        # The device plugin's DaemonSet and the MPI Operator's Deployment (from its release).
        assert sorted(k8s_images.repository(ref) for ref in named) == [
            f"{site}/gpu/docker.io/mpioperator/mpi-operator",
            f"{site}/gpu/nvcr.io/nvidia/k8s-device-plugin",
        ]
        for ref in named:
            assert ref.startswith(f"{site}/gpu/") and "@sha256:" in ref, ref
            raw = skopeo("inspect", "--tls-verify=false", "--raw", f"docker://{ref}")
            assert "sha256:" + hashlib.sha256(raw).hexdigest() == ref.split("@")[1]

    # check --mirror names an image the mirror lacks, and what needs it.
    nccl = index["images"]["docker.io/mpioperator/nccl-tests:latest"]["digest"]
    (to / "images/blobs/sha256" / nccl.partition(":")[2]).unlink()
    checked = run("check", "-i", str(inv), "--mirror", str(to), "--json")
    assert checked.returncode == 1
    # (and the nodes' repositories, which this pull left out)
    found = [p["found"] for p in json.loads(checked.stdout)["problems"] if p["found"].startswith("image ")]
    assert found == ["image docker.io/mpioperator/nccl-tests:latest (k8s job (nccl_tests)) not in the mirror"]
