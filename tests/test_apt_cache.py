"""The harness's package cache (tools/apt_cache.py) with the base image's apt hook (lab/base-image/apt-proxy-detect).

Containers on podman's default network fetch Debian's packages through the cache, as apt-cacher-ng's own transfer
log and cache directory show; a container on a network where nothing answers on its gateway's port 3142 fetches them
direct; fixture repositories on a node's loopback are always direct; a list fetched by hash is kept. The session's
cache is shared (the xdist controller started it, other scenarios may be using it): this test registers as one more
owner and never stops it for the others.
"""

from __future__ import annotations

import lzma
import os
import re
import shutil
import subprocess
import urllib.error
import urllib.request
import uuid

import pytest

from tests.conftest import REPO, load_apt_cache

IMAGE = "localhost/nodeforge-debian12:latest"
PACKAGE = "hello"  # small, in main, never in the base image
ENV = {**os.environ, "CONTAINERS_CONF": str(REPO / "containers" / "containers.conf")}

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not shutil.which("podman"), reason="podman is not installed"),
    pytest.mark.skipif(not shutil.which("apt-cacher-ng"), reason="apt-cacher-ng is not installed (tools/setup.sh)"),
]


def podman(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, env=ENV, check=check)


# In the container: which proxy the hook picks for Debian and for a loopback fixture repository, the address apt's
# requests come from, then apt-get update and a download of PACKAGE.
SCRIPT = f"""set -e
hook=/usr/local/sbin/nodeforge-apt-proxy-detect
echo "debian-proxy=$($hook http://deb.debian.org/debian/dists/bookworm/InRelease)"
echo "fixture-proxy=$($hook http://127.0.0.1:8083/stable/deb/amd64/Release)"
echo "address=$(hostname -I | cut -d' ' -f1)"
apt-get update -qq
cd /tmp && apt-get download -qq {PACKAGE} && ls {PACKAGE}_*.deb
"""


def run_node(network: str) -> dict[str, str]:
    proc = podman("run", "--rm", "--network", network, IMAGE, "bash", "-c", SCRIPT, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    facts = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    facts["downloaded"] = proc.stdout.strip().splitlines()[-1]
    return facts


@pytest.fixture(scope="module")
def apt_cache():
    module = load_apt_cache()
    state = module.start(owner=os.getpid())
    yield module, module.Layout(module.default_root()), state
    module.stop(owner=os.getpid())


@pytest.fixture(scope="module")
def image():
    if podman("image", "exists", IMAGE, check=False).returncode != 0:
        pytest.skip(f"{IMAGE} is not built (tools/setup.sh)")


def test_debian_through_the_cache(apt_cache, image):
    module, layout, state = apt_cache
    gateway = module.podman_gateway()
    assert gateway in state["addresses"], state
    offset = layout.transfer_log.stat().st_size if layout.transfer_log.exists() else 0

    facts = run_node("podman")

    assert facts["debian-proxy"] == f"http://{gateway}:{module.PORT}"
    assert facts["fixture-proxy"] == "DIRECT"
    assert facts["downloaded"].startswith(f"{PACKAGE}_")
    # apt-cacher-ng's own record: it served the lists and the package to this container (O: out to a client).
    with layout.transfer_log.open() as log:
        log.seek(offset)
        served = [line.split("|") for line in log.read().splitlines()]
    to_node = {f[4] for f in served if len(f) >= 5 and f[1] == "O" and f[3] == facts["address"]}
    assert any(path.endswith("/" + facts["downloaded"]) for path in to_node), sorted(to_node)
    assert any("/dists/bookworm/" in path for path in to_node), sorted(to_node)
    assert list(layout.cache.glob(f"debrep/pool/main/*/{PACKAGE}/{facts['downloaded']}")), "not in the cache directory"


def test_direct_without_a_cache_on_the_gateway(apt_cache, image):
    _, layout, _ = apt_cache
    # A network of its own: its gateway is an address the cache does not listen on, as for a node with no cache.
    network = f"nodeforge-nocache-{uuid.uuid4().hex[:8]}"
    podman("network", "create", network)
    try:
        offset = layout.transfer_log.stat().st_size if layout.transfer_log.exists() else 0
        facts = run_node(network)
    finally:
        podman("network", "rm", "-f", network, check=False)

    assert facts["debian-proxy"] == "DIRECT"
    assert facts["fixture-proxy"] == "DIRECT"
    assert facts["downloaded"].startswith(f"{PACKAGE}_")
    with layout.transfer_log.open() as log:
        log.seek(offset)
        assert facts["address"] not in log.read()


UPDATES_RELEASE = "http://deb.debian.org/debian/dists/bookworm-updates/InRelease"


def through_cache(url: str) -> tuple[int, bytes]:
    """GET through the cache on loopback the way apt asks for an index (revalidate): (status, body)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": "http://127.0.0.1:3142"}))
    request = urllib.request.Request(url, headers={"Cache-Control": "max-age=0", "User-Agent": "Debian APT-HTTP/1.3"})
    try:
        with opener.open(request, timeout=60) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def test_lists_by_hash_stay_cached(apt_cache):
    # What apt fetches by hash never changes: it is stored in the cache directory.
    _, layout, _ = apt_cache
    status, release = through_cache(UPDATES_RELEASE)
    assert status == 200
    digest = re.search(rb"^ ([0-9a-f]{64}) +\d+ main/binary-amd64/Packages\.xz$", release, re.M).group(1).decode()
    url = f"http://deb.debian.org/debian/dists/bookworm-updates/main/binary-amd64/by-hash/SHA256/{digest}"
    status, body = through_cache(url)
    assert status == 200 and b"\nPackage: " in lzma.decompress(body)
    stored = layout.cache / f"debrep/dists/bookworm-updates/main/binary-amd64/by-hash/SHA256/{digest}"
    assert stored.read_bytes() == body
