"""Verify gpudirect_rdma (nvidia-peermem, the NVIDIA DKMS rebuild handler, GDRCopy) against the real container node.

The node has a stand-in open-flavor NVIDIA driver registered with DKMS and built for the Debian kernel headers, and
a proprietary-flavor source of the same version in /usr/src (molecule/gpudirect_rdma/standin/README.md). Playbook
runs use molecule's inventory and the ansible.posix.json callback, so results are parsed rather than grepped.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import verify_lib

SCENARIO_DIR = Path(__file__).resolve().parent.parent
CONVERGE = SCENARIO_DIR / "converge.yml"
REBUILD_TASK = "Rebuild each NVIDIA DKMS module against the current kernel tree and ib_core"
PREPARED = "/var/lib/nodeforge-gpudirect-prepared"
MODPROBE_LOG = "/var/log/nodeforge-modprobe.log"
PEERMEM = "nvidia-current-peermem"
DKMS_NAME, DKMS_VERSION = "nvidia-current-open", "535.261.03"
OPEN_SRC = f"/usr/src/nvidia-current-open-{DKMS_VERSION}/nvidia"
PROPRIETARY_SRC = f"/usr/src/nvidia-current-{DKMS_VERSION}/nvidia"


@pytest.fixture(scope="module")
def kernel(node) -> str:
    return node.file(PREPARED).content_string.strip()


def ctime(node, pattern: str) -> float:
    """Newest ctime of the files matching a shell glob on the node."""
    return max(float(t) for t in node.check_output(f"stat -c %.9Z {pattern}").split())


def test_peermem_is_persisted_under_the_driver_name(node, kernel):
    conf = node.file(f"/etc/modules-load.d/{PEERMEM}.conf")
    assert conf.is_file and conf.mode == 0o644 and conf.user == "root"
    entries = [line for line in conf.content_string.splitlines() if line and not line.startswith("#")]
    assert entries == [PEERMEM]
    assert conf.content_string.endswith("\n")
    for other in ("nvidia-peermem", "nv_peer_mem"):
        assert not node.file(f"/etc/modules-load.d/{other}.conf").exists
    # The persisted name is a module the kernel's module index really has (the stand-in driver's DKMS build).
    assert node.check_output("modinfo -k %s -F filename %s", kernel, PEERMEM) == (
        f"/lib/modules/{kernel}/updates/dkms/{PEERMEM}.ko"
    )


def test_the_ofed_change_rebuilt_the_driver_dkms_modules(node, kernel):
    status = node.check_output("dkms status -m %s -v %s -k %s", DKMS_NAME, DKMS_VERSION, kernel)
    assert status.endswith(": installed")
    # Prepare built it once; the handler notified by the stand-in ofed change in converge rebuilt it after that.
    built = ctime(node, f"/var/lib/dkms/{DKMS_NAME}/{DKMS_VERSION}/{kernel}/*/module/*.ko")
    assert built > ctime(node, PREPARED)
    verify_lib.assert_reboot_recorded_for_this_boot(node, "the rebuild did not record that a reboot is required")


def test_a_newer_ib_core_rebuilds_the_driver_then_nothing_changes(node, kernel):
    # OFED installed after the driver: an ib_core.ko newer than the DKMS build, in the kernel's module index.
    ib_core = f"/lib/modules/{kernel}/updates/ib_core.ko"
    node.run_expect([0], f"cp /lib/modules/{kernel}/updates/dkms/{PEERMEM}.ko {ib_core} && depmod -a {kernel}")
    try:
        before = ctime(node, f"/var/lib/dkms/{DKMS_NAME}/{DKMS_VERSION}/{kernel}/*/module/*.ko")
        run = verify_lib.run_playbook(CONVERGE)
        assert run.rc == 0, run.failed
        [request] = run.results("Request a rebuild of the NVIDIA DKMS modules against the newer ib_core")
        assert request["changed"] is True
        assert f"{DKMS_NAME} {DKMS_VERSION} {kernel} stale {ib_core}" in request["msg"]
        rebuilds = run.results(REBUILD_TASK)
        assert [r["changed"] for r in rebuilds] == [True]
        assert ctime(node, f"/var/lib/dkms/{DKMS_NAME}/{DKMS_VERSION}/{kernel}/*/module/*.ko") > before
        # In a container the module is never loaded; the run says so.
        skips = [r.get("msg", "") for r in run.results("Report that a container never loads the kernel module")]
        assert any(f"is a container: modprobe {PEERMEM} skipped" in msg for msg in skips), skips
        assert all(r.get("skipped") for r in run.results("Load the kernel module with modprobe"))

        # The driver is now newer than ib_core: the next run changes nothing at all.
        run = verify_lib.run_playbook(CONVERGE)
        assert run.rc == 0, run.failed
        assert run.changed == []
        assert run.results("Request a rebuild of the NVIDIA DKMS modules against the newer ib_core")[0].get("skipped")
    finally:
        node.run(f"rm -f {ib_core} && depmod -a {kernel}")


def test_gdrdrv_is_built_for_the_open_driver(node, kernel):
    for package in ("libgdrapi", "gdrdrv-dkms"):
        assert node.package(package).is_installed
        assert node.package(package).version == "2.6-1"
    assert node.file(f"/usr/lib/{node.check_output('gcc -print-multiarch')}/libgdrapi.so.2").exists
    assert node.check_output("dkms status -m gdrdrv -k %s", kernel).endswith(": installed")
    gdrdrv = f"/lib/modules/{kernel}/updates/dkms/gdrdrv.ko"
    # What DKMS really compiled: the fixture records the flavor and the driver source in its modinfo.
    assert node.check_output("modinfo -F nvidia_flavor %s", gdrdrv) == "open"
    assert node.check_output("modinfo -F nvidia_src_dir %s", gdrdrv) == OPEN_SRC
    conf = node.file("/var/lib/dkms/gdrdrv/2.6/source/dkms.conf").content_string
    assert f'NVIDIA_SRC_DIR={OPEN_SRC} NVIDIA_IS_OPENSOURCE=y"\n' in conf
    # Without the pin, GDRCopy's own guess takes the first nv-p2p.c under /usr/src: the proprietary tree.
    guess = node.check_output("find /usr/src/nvidia-* -name nv-p2p.c -print -quit")
    assert guess == f"{PROPRIETARY_SRC}/nv-p2p.c"


def test_gdrdrv_refuses_a_driver_source_of_the_other_flavor(node):
    run = verify_lib.run_playbook(CONVERGE, {"gpudirect_rdma_nvidia_src_dir": PROPRIETARY_SRC})
    assert run.rc == 2
    assert run.failed == ["gpudirect_rdma : Assert that exactly one NVIDIA driver source fits"]
    [res] = run.results("Assert that exactly one NVIDIA driver source fits")
    assert "GDRCopy's gdrdrv must match the driver flavor open (from nvidia_driver_facts.flavor)" in res["msg"]
    assert f"gpudirect_rdma_nvidia_src_dir holds {PROPRIETARY_SRC} (proprietary)" in res["msg"]
    # Refused before anything was rebuilt.
    assert node.check_output("modinfo -F nvidia_flavor /lib/modules/*/updates/dkms/gdrdrv.ko") == "open"


# Last: covers every playbook run above too.
def test_no_modprobe_ran_in_the_container(node):
    assert not node.file(MODPROBE_LOG).exists, node.file(MODPROBE_LOG).content_string
