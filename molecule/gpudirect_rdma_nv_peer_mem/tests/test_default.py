"""Verify the nv_peer_mem path of gpudirect_rdma against the real container node.

nv_peer_mem was built without CUDA from the nv_peer_memory fixture tarball (served on the node's loopback), with a
real `make` against the Debian kernel headers, the stand-in R450 driver's nv-p2p.h and symbol versions and the
stand-in MLNX_OFED tree, packaged as a .deb per kernel, installed and persisted in modules-load.d.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import verify_lib

SCENARIO_DIR = Path(__file__).resolve().parent.parent
CONVERGE = SCENARIO_DIR / "converge.yml"
PREPARED = "/var/lib/nodeforge-gpudirect-prepared"
MODPROBE_LOG = "/var/log/nodeforge-modprobe.log"
URL = "http://127.0.0.1:8080/nv_peer_memory-1.3-0.tar.gz"
DRIVER_SRC = "/usr/src/nvidia-450.248.02/nvidia"
VERSION = re.compile(r"^1\.3-0\+nf[0-9]{14}\.[0-9a-f]{10}$")


@pytest.fixture(scope="module")
def kernel(node) -> str:
    return node.file(PREPARED).content_string.strip()


@pytest.fixture(scope="module")
def package(kernel) -> str:
    return f"nvidia-peer-memory-modules-{kernel}"


def test_nv_peer_mem_is_packaged_for_the_kernel_and_installed(node, kernel, package):
    pkg = node.package(package)
    assert pkg.is_installed
    assert VERSION.match(pkg.version), pkg.version
    module = f"/lib/modules/{kernel}/extra/nv_peer_mem.ko"
    assert module in node.check_output("dpkg -L %s", package).splitlines()
    # The package's postinst ran depmod: the kernel's module index resolves nv_peer_mem.
    assert node.check_output("modinfo -k %s -F filename nv_peer_mem", kernel) == module
    # Compiled against that kernel's headers ...
    assert node.check_output("modinfo -F vermagic %s", module).startswith(f"{kernel} SMP")
    # ... and against the driver's nv-p2p.h, not the compat header a CUDA-less build falls back to.
    assert node.check_output("modinfo -F nv_p2p_h %s", module) == "driver 450.248.02"
    assert node.check_output("modinfo -F version %s", module) == "1.3-0"


def test_the_build_took_the_driver_source_instead_of_cuda(node, kernel):
    build = f"/var/cache/nodeforge/gpudirect_rdma/build/nv_peer_mem-{kernel}/src"
    assert node.file(f"{build}/nv-p2p.h").content == node.file(f"{DRIVER_SRC}/nv-p2p.h").content
    # create_nv.symvers.sh read the symbol versions from the driver's DKMS-built module.
    symvers = node.file(f"{build}/nv.symvers").content_string
    for symbol in ("nvidia_p2p_get_pages", "nvidia_p2p_put_pages", "nvidia_p2p_free_page_table"):
        assert f"\t{symbol}\t/lib/modules/{kernel}/updates/dkms/nvidia" in symvers
    assert not node.exists("nvcc")
    assert not node.file("/usr/local/cuda").exists


def test_nv_peer_mem_is_enabled_at_boot(node):
    conf = node.file("/etc/modules-load.d/nv_peer_mem.conf")
    assert conf.is_file and conf.mode == 0o644 and conf.user == "root"
    assert [line for line in conf.content_string.splitlines() if line and not line.startswith("#")] == ["nv_peer_mem"]
    for other in ("nvidia-peermem", "nvidia-current-peermem"):
        assert not node.file(f"/etc/modules-load.d/{other}.conf").exists


def test_an_ofed_change_rebuilds_nv_peer_mem(node, kernel, package):
    before = node.package(package).version
    # OFED changed: an ib_core appears in (or, when a previous verify left one, leaves) the kernel's module index;
    # any module file serves as the stand-in.
    ib_core = f"/lib/modules/{kernel}/updates/ib_core.ko"
    if node.file(ib_core).exists:
        node.run_expect([0], f"rm {ib_core} && depmod -a {kernel}")
    else:
        node.run_expect([0], f"cp /lib/modules/{kernel}/updates/dkms/nvidia.ko {ib_core} && depmod -a {kernel}")
    run = verify_lib.run_playbook(CONVERGE)
    assert run.rc == 0, run.failed
    after = node.package(package).version
    assert VERSION.match(after) and after != before
    assert [r["changed"] for r in run.results("Install the package")] == [True]
    # In a container the module is never loaded; the run says so.
    skips = [r.get("msg", "") for r in run.results("Report that a container never loads the kernel module")]
    assert any("is a container: modprobe nv_peer_mem skipped" in msg for msg in skips), skips
    assert all(r.get("skipped") for r in run.results("Load the kernel module with modprobe"))


def test_a_bad_checksum_fails_with_a_clear_message(node, package):
    installed = node.package(package).version
    run = verify_lib.run_playbook(CONVERGE, {"gpudirect_rdma_nv_peer_mem_checksum": "sha256:" + "0" * 64})
    assert run.rc == 2
    # get_url refuses the tarball; the rescue turns its message into one that says where the checksum came from.
    assert run.failed == [
        "gpudirect_rdma : Download the source tarball and verify its checksum",
        "gpudirect_rdma : Explain why the source tarball is not used",
    ]
    [res] = run.results("Explain why the source tarball is not used")
    assert f"nv_peer_memory source {URL} failed checksum verification and was not used" in res["msg"]
    assert f"The expected checksum sha256:{'0' * 64} comes from gpudirect_rdma_nv_peer_mem_checksum" in res["msg"]
    assert node.package(package).version == installed


def test_the_shipped_manifest_without_a_checksum_is_refused():
    # Without the site's overrides the role sees the shipped manifest: upstream URL, no verified checksum.
    run = verify_lib.run_playbook(CONVERGE, {"nodeforge_manifest_overrides": {}})
    assert run.rc == 2
    assert run.failed == ["gpudirect_rdma : Assert that the nv_peer_memory source has a URL and a checksum"]
    [res] = run.results("Assert that the nv_peer_memory source has a URL and a checksum")
    expected = "the nv_peer_memory checksum is empty (from version manifest gpudirect_rdma.nv_peer_mem.checksum)"
    assert expected in res["msg"]
    assert "an unverified tarball is never built" in res["msg"]


def test_a_missing_source_url_fails_with_a_clear_message():
    overrides = {"gpudirect_rdma": {"nv_peer_mem": {"url": None, "checksum": "sha256:" + "0" * 64}}}
    run = verify_lib.run_playbook(CONVERGE, {"nodeforge_manifest_overrides": overrides})
    assert run.rc == 2
    [res] = run.results("Assert that the nv_peer_memory source has a URL and a checksum")
    assert "there is no nv_peer_memory source URL: set gpudirect_rdma_nv_peer_mem_url" in res["msg"]
    assert "gpudirect_rdma.nv_peer_mem.url" in res["msg"]


def test_nv_peer_mem_is_refused_with_a_driver_that_has_nvidia_peermem():
    run = verify_lib.run_playbook(CONVERGE, {"nvidia_driver_branch": "580"})
    assert run.rc == 2
    [res] = run.results("Assert that the peer memory module suits the driver branch")
    expected = "gpudirect_rdma_module is nv_peer_mem but the NVIDIA driver branch is 580 (from nvidia_driver_branch)"
    assert expected in res["msg"]
    assert "set gpudirect_rdma_module: nvidia-peermem" in res["msg"]


# Last: covers every playbook run above too.
def test_no_modprobe_ran_in_the_container(node):
    assert not node.file(MODPROBE_LOG).exists, node.file(MODPROBE_LOG).content_string
