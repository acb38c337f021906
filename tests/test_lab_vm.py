"""The VM tier: `nodeforge lab up --vm` QEMU guests with their own Debian kernel, where what containers skip runs for
real (module loading, reboots, preflight's kernel checks, soft-RoCE RDMA), driven through the real CLI.

Every expectation is read from the guests themselves over SSH (their /proc, /sys, rdma and apt), not from the roles'
own probes. The unit tests at the top need no QEMU."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from nodeforge import lab, lab_vm
from nodeforge.cli import main
from tests.conftest import REPO, load_fixture_repo

fixture_repo = load_fixture_repo()
DRIVER_SPEC = REPO / "molecule" / "fixture_repo" / "specs" / "nvidia_driver.yml"

# --- unit: the plan, QEMU's command line and the inventory (no QEMU needed) ------------------------------------------


def test_plan_pairs_consecutive_nodes_on_private_links():
    planned = lab_vm.plan(3)
    first, second, third = planned
    assert (first.link_address, second.link_address) == ("10.77.1.1/24", "10.77.1.2/24")
    assert (first.peer, second.peer) == (2, 1)
    assert third.peer is None and third.link_address is None  # an odd node out has no link
    assert len({n.ssh_port for n in planned}) == 3


def test_qemu_command_line_boots_the_image_kernel_with_the_node_identity(state_dir, tmp_path):
    node = lab_vm.VmNode(name="nodeforge-t-2", index=2, ssh_port=40022, peer=1, link_address="10.77.1.2/24")
    lab_vm.node_dir("t", node.name).mkdir(parents=True)
    argv = lab_vm.qemu_argv("t", node, tmp_path)
    joined = " ".join(argv)
    assert argv[0] == "qemu-system-x86_64" and argv[argv.index("-accel") + 1] == "tcg"
    # A guest reboot ends QEMU (the supervisor starts a fresh one); the console log is kept across boots.
    assert "-no-reboot" in argv and "-daemonize" not in argv
    console = lab_vm.node_dir("t", node.name) / "console.log"
    assert argv[argv.index("-chardev") + 1] == f"file,id=console,path={console},append=on"
    assert argv[argv.index("-kernel") + 1] == str(tmp_path / "vmlinuz")
    assert "systemd.hostname=nodeforge-t-2" in argv[argv.index("-append") + 1]
    # SSH only on loopback; the private link is a datagram socket in the node's directory, sending to node 1's.
    assert "hostfwd=tcp:127.0.0.1:40022-:22" in joined
    link = "dgram,id=link0,local.type=unix,local.path=link.sock,remote.type=unix,remote.path=../nodeforge-t-1/link.sock"
    assert argv[argv.index("-netdev", argv.index("-netdev") + 1) + 1] == link
    key = lab.host_key("t", node.name)
    assert f"name=opt/org.nodeforge/host_key,file={key}" in joined
    address_file = lab_vm.node_dir("t", node.name) / "link_address"
    assert f"name=opt/org.nodeforge/link_address,file={address_file}" in joined
    assert address_file.read_text() == "10.77.1.2/24"


def test_inventory_keeps_the_sample_settings_and_adds_each_node_connection(state_dir):
    nodes = [lab_vm.VmNode("nodeforge-t-1", 1, 40022, 2, "10.77.1.1/24"), lab_vm.VmNode("nodeforge-t-2", 2, 40023)]
    lab._private_dir(lab.lab_dir("t"))
    data = yaml.safe_load(lab_vm.write_inventory("t", nodes).read_text())
    group = data["all"]["children"]["gpu_nodes"]
    assert group["vars"]["nodeforge_profile"] == "lab-vm" and group["vars"]["ofed_soft_roce_netdevs"] == ["eth1"]
    first, second = group["hosts"]["nodeforge-t-1"], group["hosts"]["nodeforge-t-2"]
    assert first["ansible_port"] == 40022 and first["validate_rdma_address"] == "10.77.1.1"
    assert "StrictHostKeyChecking=yes" in first["ansible_ssh_common_args"]
    assert "validate_rdma_address" not in second


FAKE_QEMU = """#!/bin/sh
# A stand-in for QEMU: each start is counted; the first guest reboots, the second powers off (as their kernels print).
echo start >>"$1/starts"
if [ "$(wc -l <"$1/starts")" -eq 1 ]; then line='reboot: Restarting system'; else line='reboot: Power down'; fi
printf '[   65.485998] %s\\n' "$line" >>"$1/console.log"
"""


def _supervised(tmp_path: Path, script: str) -> subprocess.Popen:
    qemu = tmp_path / "qemu"
    qemu.write_text(script)
    qemu.chmod(0o755)
    (tmp_path / "qemu.argv").write_text(json.dumps([str(qemu), str(tmp_path)]))
    return subprocess.Popen([sys.executable, "-m", "nodeforge.vm_supervisor", str(tmp_path)], cwd=REPO / "src")


def test_supervisor_starts_qemu_again_after_a_guest_reboot_and_not_after_a_power_off(tmp_path):
    supervisor = _supervised(tmp_path, FAKE_QEMU)
    assert supervisor.wait(timeout=30) == 0
    assert (tmp_path / "starts").read_text().splitlines() == ["start", "start"]
    assert not (tmp_path / "supervisor.pid").exists()


def test_supervisor_runs_qemu_in_the_node_directory_without_the_last_one_s_link_socket(tmp_path):
    """Each QEMU binds link.sock in the node's directory: the socket a QEMU leaves behind is removed before the next
    one starts (binding fails while it exists), here across a guest reboot."""
    bind = f"{sys.executable} -c 'import socket; socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).bind(\"link.sock\")'"
    script = FAKE_QEMU.replace('echo start >>"$1/starts"', f'[ "$PWD" = "$1" ] && {bind} && echo start >>"$1/starts"')
    socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).bind(str(tmp_path / "link.sock"))  # a QEMU before this one
    supervisor = _supervised(tmp_path, script)
    assert supervisor.wait(timeout=30) == 0
    assert (tmp_path / "starts").read_text().splitlines() == ["start", "start"]


def _inet_sockets() -> set[str]:
    inodes = set()
    for table in ("udp", "udp6", "tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            inodes.add(line.split()[9])
    return inodes


def _send_as(uid: int, path: Path) -> subprocess.CompletedProcess:
    frame = "bytes.fromhex('ffffffffffff5254004e0101') + bytes(52)"  # a broadcast Ethernet frame
    send = f"import socket, sys; socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto({frame}, sys.argv[1])"
    setpriv = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"] if uid != os.getuid() else []
    # The system's Python: a pyenv one (a matrix leg's) loads its libpython from root's home, which uid 65534 cannot.
    python = shutil.which("python3", path=os.defpath)
    return subprocess.run([*setpriv, python, "-c", send, str(path)], capture_output=True, text=True)


def test_a_private_link_takes_frames_from_the_lab_s_owner_only(monkeypatch):
    """Two QEMUs (paused, no guest) on the link as `lab up --vm` sets it: neither has an inet socket, and another
    local user cannot send a frame into either end, while the lab's owner (as the peer QEMU does) can. The state
    directory is one every user may traverse, as $HOME often is."""
    state = Path(tempfile.mkdtemp(prefix="nodeforge-shared-state-"))
    state.chmod(0o711)
    monkeypatch.setenv("NODEFORGE_STATE_DIR", str(state))
    lab._private_dir(lab_vm.vm_dir("t"))
    qemus = []
    try:
        for node in lab_vm.plan(2):
            node.name = f"nodeforge-t-{node.index}"
            here = lab._private_dir(lab_vm.node_dir("t", node.name))
            (here / "link_address").write_text(node.link_address)
            argv = [lab_vm.QEMU, "-accel", "tcg", "-S", "-nodefaults", "-display", "none", "-monitor", "none",
                    *lab_vm.link_argv("t", node)]  # fmt: skip
            qemus.append(subprocess.Popen(argv, cwd=here, stderr=subprocess.PIPE, text=True))
        ends = [lab_vm.node_dir("t", f"nodeforge-t-{i}") / "link.sock" for i in (1, 2)]
        deadline = time.monotonic() + 30
        while not all(end.exists() for end in ends):
            assert time.monotonic() < deadline and all(q.poll() is None for q in qemus), [q.stderr for q in qemus]
            time.sleep(0.1)
        for qemu in qemus:
            fds = [os.readlink(fd) for fd in Path(f"/proc/{qemu.pid}/fd").iterdir()]
            inodes = {fd[len("socket:[") : -1] for fd in fds if fd.startswith("socket:[")}
            assert inodes and not inodes & _inet_sockets()
        for end in ends:
            refused = _send_as(65534, end)  # nobody
            assert refused.returncode != 0 and "PermissionError" in refused.stderr, refused.stderr
            owner = _send_as(os.getuid(), end)
            assert owner.returncode == 0, owner.stderr
    finally:
        for qemu in qemus:
            qemu.kill()
            qemu.wait()
        shutil.rmtree(state)


def test_supervisor_stops_qemu_on_sigterm(tmp_path):
    supervisor = _supervised(tmp_path, '#!/bin/sh\necho $$ >"$1/qemu.pid"\nexec sleep 600\n')
    deadline = time.monotonic() + 30
    while not (tmp_path / "qemu.pid").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    qemu = int((tmp_path / "qemu.pid").read_text())
    assert int((tmp_path / "supervisor.pid").read_text()) == supervisor.pid
    supervisor.terminate()
    assert supervisor.wait(timeout=30) != 0  # QEMU ended by the signal, not by its guest
    assert not Path(f"/proc/{qemu}").exists() or "zombie" in Path(f"/proc/{qemu}/status").read_text()


def test_vm_and_container_nodes_never_share_a_lab(state_dir):
    lab._private_dir(lab.lab_dir("mixed"))
    lab.inventory_path("mixed").write_text("all: {}\n")  # a container lab of that name
    if shutil.which(lab_vm.QEMU) is None:
        pytest.skip("qemu-system-x86 is not installed")
    with pytest.raises(lab.LabError, match="lab mixed has container nodes"):
        lab_vm.up("mixed", 1)


def test_a_vm_lab_runs_one_os_and_says_so_before_building_an_image(state_dir, monkeypatch):
    if shutil.which(lab_vm.QEMU) is None:
        pytest.skip("qemu-system-x86 is not installed")
    built = []
    monkeypatch.setattr(lab_vm, "ensure_image", lambda os_name: built.append(os_name))
    here = lab._private_dir(lab_vm.node_dir("one", "nodeforge-one-1"))
    # A node saved before VM nodes had an OS of their choosing: Debian 12's.
    (here / "node.json").write_text(json.dumps({"name": "nodeforge-one-1", "index": 1, "ssh_port": 40001}))
    assert [(n.name, n.os) for n in lab_vm.nodes("one")] == [("nodeforge-one-1", "debian12")]
    with pytest.raises(lab.LabError) as other:
        lab_vm.up("one", 1, "debian13")
    assert str(other.value).startswith("lab one: nodeforge-one-1 runs debian12, not debian13: the nodes of a VM lab")
    with pytest.raises(lab.LabError, match="a VM node runs one of debian12, debian13, not 'rocky9'"):
        lab_vm.up("two", 1, "rocky9")
    assert built == []


def test_the_image_build_is_told_the_os_and_refuses_one_it_cannot_build(monkeypatch, tmp_path):
    (tmp_path / "lab" / "vm-image").mkdir(parents=True)
    (tmp_path / "lab" / "vm-image" / "build.sh").write_text('echo "built for $NODEFORGE_VM_OS" >&2; exit 7\n')
    monkeypatch.setattr(lab_vm.content, "root", lambda: tmp_path)
    with pytest.raises(lab.LabError) as failed:
        lab_vm.ensure_image("debian13")
    assert str(failed.value) == (
        f"building the debian13 VM image failed ({tmp_path}/lab/vm-image/build.sh):\nbuilt for debian13"
    )
    # The real script, before it touches anything: an OS it has no suite for.
    script = REPO / "lab" / "vm-image" / "build.sh"
    run = subprocess.run(["bash", str(script)], env={**os.environ, "NODEFORGE_VM_OS": "rocky9"}, capture_output=True,
                         text=True, check=False)  # fmt: skip
    assert run.returncode == 2
    assert run.stderr == "error: NODEFORGE_VM_OS is rocky9; the VM image is built for debian12 or debian13\n"


# --- the tier: two guests, end to end ---------------------------------------------------------------------------------

needs_qemu = pytest.mark.skipif(
    shutil.which(lab_vm.QEMU) is None or os.geteuid() != 0,
    reason="qemu-system-x86 and root (the image build) are needed (make setup installs qemu)",
)


@pytest.fixture
def vm_lab():
    name = f"pytestvm{os.getpid()}"
    yield name
    lab.down(name)


def _ssh(name: str, host: str, command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    port = {n.name: n.port for n in lab.nodes(name)}[host]
    proc = subprocess.run(lab.ssh_command(name, port, command), capture_output=True, text=True, check=False)
    if check:
        assert proc.returncode == 0, (host, command, proc.stdout, proc.stderr)
    return proc


def _out(name: str, host: str, command: str) -> str:
    return _ssh(name, host, command).stdout.strip()


def _invoke(*argv: str) -> tuple[int, dict]:
    run = CliRunner().invoke(main, list(argv))
    try:
        return run.exit_code, json.loads(run.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"nodeforge {' '.join(argv)}: no JSON (exit {run.exit_code}):\n{run.output}")


def _task_results(artifacts: str, task: str) -> dict[str, dict]:
    """Per host, the result of the named task, from ansible-runner's job events."""
    found = {}
    for path in sorted(Path(artifacts, "job_events").glob("*.json")):
        event = json.loads(path.read_text())
        data = event.get("event_data", {})
        if event.get("event") == "runner_on_ok" and data.get("task") == task:
            found[data["host"]] = data["res"]
    return found


def _rdma_links(name: str, host: str) -> dict[str, dict]:
    return {link["ifname"]: link for link in json.loads(_out(name, host, "rdma -j link show"))}


OLD_DRIVER, NEW_DRIVER = "580.105.08", "580.126.20"
# The order the upgrade unloads the driver's modules in: users first (nodeforge.gpu.upgrade_modules_to_unload).
UNLOAD_ORDER = ["nvidia_peermem", "nvidia_uvm", "nvidia_drm", "nvidia_modeset", "nvidia"]


def _driver_state(name: str, host: str) -> dict[str, str]:
    """What the guest runs and has installed, from its own kernel, DKMS and dpkg."""
    return {
        "loaded": _out(name, host, "cat /sys/module/nvidia/version 2>/dev/null || echo none"),
        "proc": _out(name, host, "cat /proc/driver/nvidia/version 2>/dev/null | head -1"),
        "dkms": _out(name, host, "dkms status -m nvidia"),
        "package": _out(name, host, "dpkg-query -W -f '${db:Status-Abbrev}${Version}' nvidia-kernel-open-dkms"),
        "holds": _out(name, host, "apt-mark showhold"),
    }


def _standin_unloads(text: str) -> list[str]:
    return [
        line.split("unloaded ")[1].split()[0] for line in text.splitlines() if "nodeforge stand-in: unloaded" in line
    ]


@contextlib.contextmanager
def _cuda_repo(tmp_path: Path, vm_os: str) -> Iterator[Path]:
    """The fixture CUDA repository served on the controller's loopback; yields the extra-vars file that points the
    nodes' nvidia_driver role at it (10.0.2.2: the controller's loopback as QEMU's user network shows it). On Debian 13
    cuda_repo is claimed as a site claims it once it has pinned NVIDIA's debian13 key (the manifest leaves debian13 out
    until that key's fingerprint is confirmed; molecule's nvidia_driver_cuda_repo does the same)."""
    with fixture_repo.served_repo([DRIVER_SPEC], tmp_path / "cuda-repo", flat=True) as repo:
        # NVIDIA publishes cuda-keyring at the top of the repository; the role downloads it from there.
        keyring = next((repo.root / "pool").glob("**/cuda-keyring_*_all.deb"))
        shutil.copy(keyring, repo.root / keyring.name)
        driver_vars = tmp_path / "driver.yml"
        driver_vars.write_text(yaml.safe_dump({
            "nvidia_driver_source": "cuda_repo",
            "nvidia_driver_cuda_repo_url": f"http://10.0.2.2:{repo.port}/",
            # The guests boot the initrd QEMU is given, never one rebuilt inside them: the blacklist's initramfs
            # rebuild (100 s under emulation) would show nothing here (molecule's driver scenarios prove it).
            "nvidia_driver_blacklist_nouveau": False,
            "nodeforge_manifest_overrides": {
                "nvidia_driver": {"cuda_repo": {"keyring_fingerprints": [repo.fingerprint]}},
                **({"os_support": {"nvidia_driver_source": {"cuda_repo": [vm_os]}}} if vm_os != "debian12" else {})},
        }))  # fmt: skip
        yield driver_vars


def _install_driver(name: str, inventory: str, host: str, kernel: str, driver_vars: Path) -> float:
    start = time.monotonic()
    code, installed = _invoke("provision", "-i", inventory, "--limit", host, "--tags", "nvidia_driver", "--json",
                              "-e", f"@{driver_vars}", "-e", f"nvidia_driver_version={OLD_DRIVER}")  # fmt: skip
    elapsed = time.monotonic() - start
    assert code == 0, installed["failures"]
    assert sorted(installed["hosts"]) == [host], installed["hosts"]
    state = _driver_state(name, host)
    # DKMS installed the modules for the running kernel, and the role loaded them (nothing was loaded).
    assert state["loaded"] == OLD_DRIVER, state
    assert f"NVIDIA UNIX Open Kernel Module for x86_64  {OLD_DRIVER}" in state["proc"], state
    assert state["dkms"] == f"nvidia/{OLD_DRIVER}, {kernel}, x86_64: installed", state
    assert state["package"] == f"hi {OLD_DRIVER}-1" and "nvidia-kernel-open-dkms" in state["holds"].split()
    assert installed["reboot_required"][host] is False
    return elapsed


def _upgrade_driver(name: str, inventory: str, host: str, kernel: str, driver_vars: Path) -> float:
    # What a workload adds: the display and peer memory modules, each holding nvidia; and a GPU job, a process
    # holding the control device, which keeps nvidia itself in use.
    _ssh(name, host, "modprobe -a nvidia-drm nvidia-peermem")
    users = int(_out(name, host, "cat /sys/module/nvidia/refcnt"))
    _ssh(name, host, "setsid -f sh -c 'exec sleep 100000 </dev/nvidiactl' >/dev/null 2>&1")
    assert int(_out(name, host, "cat /sys/module/nvidia/refcnt")) == users + 1
    boot = _out(name, host, "cat /proc/sys/kernel/random/boot_id")

    start = time.monotonic()
    run = CliRunner().invoke(main, ["upgrade", "-i", inventory, "--limit", host, "--json", "--component", "driver",
                                    "--to", NEW_DRIVER, "--yes", "-e", f"@{driver_vars}"])  # fmt: skip
    elapsed = time.monotonic() - start
    upgraded = json.loads(run.stdout)
    assert run.exit_code == 0 and upgraded["status"] == "done", run.output
    state = _driver_state(name, host)
    assert state["loaded"] == NEW_DRIVER, state
    assert state["dkms"] == f"nvidia/{NEW_DRIVER}, {kernel}, x86_64: installed", state
    assert state["package"] == f"hi {NEW_DRIVER}-1" and "nvidia-kernel-open-dkms" in state["holds"].split()
    record = json.loads(_out(name, host, "cat /var/lib/nodeforge/upgrade-state.json"))
    assert record["state"] == "upgrade-done" and record["from"] == {"driver": OLD_DRIVER}, record
    # Every module but nvidia unloaded, users first; nvidia stayed (in use), so the upgrade recorded the reboot and
    # the inventory's policy (if_needed) rebooted the node into the new driver before its checks. The previous boot's
    # kernel log is in the node's journal.
    assert _out(name, host, "cat /proc/sys/kernel/random/boot_id") != boot
    before_reboot = _out(name, host, "journalctl -k -b -1 --no-pager -o cat")
    assert _standin_unloads(before_reboot) == UNLOAD_ORDER[:-1], before_reboot[-2000:]
    # The new driver's peer memory module was never loaded on top of the old nvidia (gpudirect_rdma waits for the
    # reboot when the running driver's version is not the module's); the boot loaded it with the new driver.
    assert f"stand-in: loaded nvidia_peermem {NEW_DRIVER}" not in before_reboot, before_reboot[-2000:]
    assert _out(name, host, "cat /sys/module/nvidia_peermem/version") == NEW_DRIVER
    assert _ssh(name, host, "test -e /var/lib/nodeforge/reboot-required", check=False).returncode != 0
    # What the ofed role persisted came back by itself.
    assert _ssh(name, host, "test -d /sys/module/rdma_rxe").returncode == 0
    assert _rdma_links(name, host)["rxe_eth1"]["state"] == "ACTIVE"
    return elapsed


@pytest.mark.slow
# About 17 minutes on a quiet 2-core machine, 47 in its slow phases: `make test-full` runs it (docs/testing.md,
# "What make test runs").
@pytest.mark.full
@needs_qemu
# Each task in an emulated guest starts the guest's Python for its module (ansible-core's own connection: several
# seconds under TCG, docs/testing.md); the test's ~150 node tasks take most of its time.
@pytest.mark.timeout(3000)
# Debian 12, and Debian 13 (trixie's kernel 6.12, its rdma-core and systemd): the same checks on each.
@pytest.mark.parametrize("vm_os", lab_vm.VM_OSES)
def test_vm_nodes_reboot_load_modules_and_pass_rdma_validation(vm_lab, tmp_path, vm_os):
    timings = {}
    start = time.monotonic()
    up = CliRunner().invoke(main, ["lab", "up", "--vm", "--os", vm_os, "--nodes", "2", "--name", vm_lab])
    assert up.exit_code == 0, up.output
    timings["up"] = time.monotonic() - start
    nodes = [f"nodeforge-{vm_lab}-1", f"nodeforge-{vm_lab}-2"]
    inventory = str(lab.inventory_path(vm_lab))
    hosts = yaml.safe_load(Path(inventory).read_text())["all"]["children"]["gpu_nodes"]["hosts"]
    image = lab_vm.ensure_image(vm_os)
    assert [(n.name, n.os) for n in lab.nodes(vm_lab)] == [(node, vm_os) for node in nodes]
    kernels = {}

    for host in nodes:
        # A guest with the image's own kernel, not this machine's, reached with the host key generated for it.
        assert _out(vm_lab, host, "hostname") == host
        kernel = kernels[host] = _out(vm_lab, host, "uname -r")
        assert kernel == (image / "kernel-release").read_text().strip() and kernel != os.uname().release
        assert _out(vm_lab, host, "systemd-detect-virt") == "qemu"
        release = _out(vm_lab, host, ". /etc/os-release && echo $ID $VERSION_ID")
        assert release == {"debian12": "debian 12", "debian13": "debian 13"}[vm_os]
        served = _out(vm_lab, host, "cat /etc/ssh/ssh_host_ed25519_key.pub").split()[:2]
        generated = Path(f"{lab.host_key(vm_lab, host)}.pub").read_text().split()[:2]
        assert served == generated
        # The private link: eth1 carries the address the inventory gives its ib_write_bw peers.
        eth1 = _out(vm_lab, host, "ip -4 -o addr show dev eth1").split()
        assert eth1[3].split("/")[0] == hosts[host]["validate_rdma_address"]

    # ofed (inbox) with soft-RoCE on the private link: rdma_rxe really loaded, the device ACTIVE, both persisted.
    start = time.monotonic()
    code, ofed = _invoke("lab", "provision", "--name", vm_lab, "--tags", "ofed", "--json")
    timings["ofed"] = time.monotonic() - start
    assert code == 0, ofed["failures"]
    for host in nodes:
        assert _ssh(vm_lab, host, "test -d /sys/module/rdma_rxe").returncode == 0
        link = _rdma_links(vm_lab, host)["rxe_eth1"]
        assert (link["state"], link["netdev"]) == ("ACTIVE", "eth1"), link
        assert "rdma_rxe" in _out(vm_lab, host, "cat /etc/modules-load.d/nodeforge-soft-roce.conf").splitlines()
        assert _out(vm_lab, host, "systemctl is-enabled nodeforge-soft-roce.service") == "enabled"

    # preflight, for real: the kernel headers of the running kernel, Secure Boot, and nouveau, which node 2 has loaded.
    _ssh(vm_lab, nodes[1], "modprobe nouveau")
    start = time.monotonic()
    code, preflight = _invoke("preflight", "-i", inventory, "--json")
    timings["preflight"] = time.monotonic() - start
    assert code != 0
    results = {
        host: res["ansible_facts"]["preflight_result"]
        for host, res in _task_results(preflight["artifacts"], "Set the preflight result").items()
    }
    assert sorted(results) == nodes
    for host in nodes:
        result = results[host]
        assert result["in_container"] is False
        assert result["kernel"] == kernels[host]
        # apt itself, a different way: simulating the install of linux-headers-<running kernel> succeeds.
        simulated = _ssh(vm_lab, host, 'apt-get install --simulate "linux-headers-$(uname -r)"', check=False)
        assert result["kernel_headers_installable"] is (simulated.returncode == 0) is True, simulated.stderr
        # Booted by QEMU's -kernel, not through UEFI: no /sys/firmware/efi, so no Secure Boot.
        assert _ssh(vm_lab, host, "test -d /sys/firmware/efi", check=False).returncode != 0
        assert result["secure_boot"] == "disabled"
        loaded = _ssh(vm_lab, host, "test -d /sys/module/nouveau", check=False).returncode == 0
        assert result["nouveau_loaded"] is loaded is (host == nodes[1])
    failed = {f["host"]: f["message"] for f in preflight["failures"]}
    assert sorted(failed) == [nodes[1]] and "nouveau" in failed[nodes[1]], failed
    _ssh(vm_lab, nodes[1], "modprobe -r nouveau")  # validate fails a node with nouveau loaded

    # The reboot policy never, on requirements as a role records them (the boot id first): node 1's names the boot it
    # is in, so it is still owed and no node reboots; node 2's names an earlier boot, met since, so the run clears it.
    # (The policy if_needed reboots node 1 in the driver upgrade below, through the same tasks.)
    boot = {host: _out(vm_lab, host, "cat /proc/sys/kernel/random/boot_id") for host in nodes}
    recorded = {nodes[0]: boot[nodes[0]], nodes[1]: str(uuid.uuid4())}
    marker = "/var/lib/nodeforge/reboot-required"
    for host in nodes:
        _ssh(
            vm_lab,
            host,
            f"mkdir -p /var/lib/nodeforge && printf '%s\\nrecorded by the test\\n' {recorded[host]} >{marker}",
        )
    start = time.monotonic()
    code, never = _invoke("lab", "provision", "--name", vm_lab, "--tags", "reboot", "--json", "-e",
                          "nodeforge_reboot_policy=never")  # fmt: skip
    timings["reboot"] = time.monotonic() - start
    assert code == 0, never["failures"]
    for host in nodes:
        assert _out(vm_lab, host, "cat /proc/sys/kernel/random/boot_id") == boot[host]
    # Node 1: owed, reported and left as it is (nothing changed, the marker with it).
    assert never["reboot_required"][nodes[0]] is True
    assert never["hosts"][nodes[0]]["changed"] == 0, never["changes"]
    # Node 2: met, so not required, and the marker of the earlier boot is gone.
    assert never["reboot_required"][nodes[1]] is False
    assert _ssh(vm_lab, nodes[1], f"test -e {marker}", check=False).returncode != 0
    _ssh(vm_lab, nodes[0], f"rm {marker}")

    # The driver, for real modules, on node 1 (node 2 stays without one: each guest's work costs minutes of both
    # cores): the fixture CUDA repository's older version through provision, then a rolling `upgrade --component
    # driver` to the newer one while a process holds /dev/nvidiactl (a GPU job). The modules above nvidia unload, users
    # first; nvidia cannot, so the upgrade reboots the node.
    with _cuda_repo(tmp_path, vm_os) as driver_vars:
        timings["driver"] = _install_driver(vm_lab, inventory, nodes[0], kernels[nodes[0]], driver_vars)
        timings["upgrade"] = _upgrade_driver(vm_lab, inventory, nodes[0], kernels[nodes[0]], driver_vars)

    # validate --perf: ib_write_bw between the pair over soft-RoCE, against the inventory's floor, then a raised one.
    report_file = tmp_path / "validate.json"
    start = time.monotonic()
    run = CliRunner().invoke(main, ["validate", "-i", inventory, "--perf", "--json", str(report_file)])
    timings["validate"] = time.monotonic() - start
    report = json.loads(report_file.read_text())
    assert run.exit_code == 0, run.output
    floor = float(yaml.safe_load(Path(inventory).read_text())["all"]["children"]["gpu_nodes"]["vars"][
        "validate_rdma_min_bw_mbs"])  # fmt: skip
    measured = []
    for host in nodes:
        checks = {c["check"]: c for c in report["hosts"][host]["checks"]}
        port = checks["hca_port[rxe_eth1]"]
        assert port["status"] == "pass" and port["measured"] == "ACTIVE 2.5 Gb/s Ethernet", port
        sysfs_rate = _out(vm_lab, host, "cat /sys/class/infiniband/rxe_eth1/ports/1/rate")
        assert sysfs_rate.startswith("2.5 Gb/sec"), sysfs_rate
        peer = nodes[1] if host == nodes[0] else nodes[0]
        bw = checks[f"ib_write_bw[rxe_eth1 <-> {peer}]"]
        assert bw["status"] == "pass" and float(bw["expected"]) == floor and float(bw["measured"]) >= floor, bw
        measured.append(float(bw["measured"]))
    raised = max(measured) * 10
    report_file.unlink()
    run = CliRunner().invoke(
        main,
        ["validate", "-i", inventory, "--perf", "--json", str(report_file), "-e", f"validate_rdma_min_bw_mbs={raised}"],
    )
    report = json.loads(report_file.read_text())
    assert run.exit_code != 0, run.output
    for host in nodes:
        peer = nodes[1] if host == nodes[0] else nodes[0]
        bw = {c["check"]: c for c in report["hosts"][host]["checks"]}[f"ib_write_bw[rxe_eth1 <-> {peer}]"]
        assert bw["status"] == "fail" and float(bw["expected"]) == raised and float(bw["measured"]) < raised, bw

    down = CliRunner().invoke(main, ["lab", "down", "--name", vm_lab])
    assert down.exit_code == 0 and all(host in down.output for host in nodes)
    assert lab.nodes(vm_lab) == [] and not lab.lab_dir(vm_lab).exists()
    qemus = subprocess.run(
        ["pgrep", "-f", f"{lab_vm.QEMU} -name nodeforge-{vm_lab}-"], capture_output=True, text=True, check=False
    )
    assert qemus.stdout.strip() == "", qemus.stdout
    print(f"VM tier timings on {vm_os} (s): " + ", ".join(f"{k} {v:.0f}" for k, v in timings.items()))
