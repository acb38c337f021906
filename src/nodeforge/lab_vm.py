"""The lab's VM nodes (`nodeforge lab up --vm`): QEMU guests with their own Debian 12 kernel (or Debian 13's, with
`--os debian13`), reached over SSH as real nodes are, for what containers cannot show (module loading, reboots, RDMA
devices). The nodes of one VM lab run one OS.

Each node boots the image of lab/vm-image/build.sh (cached by its checksum) from a copy-on-write overlay of its own,
under software emulation (`-accel tcg`: KVM guests do not boot on every machine this runs on). Its sshd is reached on a
loopback-forwarded port; its identity (host key, the lab's client key, its private link address) goes in through QEMU's
fw_cfg, read in the guest before sshd starts, so that the lab's known_hosts is written from keys generated here, as
for the container nodes. Consecutive nodes (1-2, 3-4, ...) share a private link, eth1 in the guests, where two nodes
run RDMA tests against each other over soft-RoCE: a QEMU dgram netdev between two Unix datagram sockets, each in its
node's directory (mode 0700, the lab's owner only), named relative to it so that no state directory is too long for a
socket address. No other local user can send a frame into the link (a UDP port on loopback let anyone), and no port
is chosen long before QEMU takes it. Each QEMU runs under nodeforge.vm_supervisor, which starts it again when its
guest reboots.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from nodeforge import content, lab, vm_supervisor

QEMU = "qemu-system-x86_64"
SAMPLE = ("inventories", "lab-vm", "hosts.yml")
# TCG emulates the newest CPU model faster for guest user space than qemu64 (python3 starts in 0.5 s against 0.73 s).
CPU = "max"
MEMORY_MB = int(os.environ.get("NODEFORGE_VM_MEMORY_MB", "1024"))
BOOT_TIMEOUT = float(os.environ.get("NODEFORGE_VM_BOOT_TIMEOUT", "600"))
FW_CFG = "opt/org.nodeforge"
LINK_NET = "10.77"  # pair k's link: 10.77.k.1/24 and 10.77.k.2/24
SUPERVISOR = vm_supervisor.__name__
# The OSes lab/vm-image/build.sh builds a guest image of (NODEFORGE_VM_OS); the first is the default.
VM_OSES = ("debian12", "debian13")


@dataclass
class VmNode:
    """What `lab up --vm` chose for a node, kept in its directory (node.json) so that a restart reuses it."""

    name: str
    index: int
    ssh_port: int
    peer: int | None = None  # the index of the node at the other end of the private link
    link_address: str | None = None  # CIDR on eth1
    os: str = VM_OSES[0]  # its image's OS (a node saved before there was a choice runs Debian 12)


def vm_dir(name: str) -> Path:
    return lab.lab_dir(name) / "vm"


def node_dir(name: str, node: str) -> Path:
    return vm_dir(name) / lab.check_node(name, node)


def is_vm_lab(name: str) -> bool:
    return vm_dir(name).is_dir()


def check_os(os_name: str) -> str:
    if os_name not in VM_OSES:
        raise lab.LabError(f"a VM node runs one of {', '.join(VM_OSES)}, not {os_name!r}")
    return os_name


def ensure_image(os_name: str = VM_OSES[0]) -> Path:
    """The directory of the OS's VM image (rootfs.img, vmlinuz, initrd.img), built when missing or stale."""
    script = content.root() / "lab" / "vm-image" / "build.sh"
    env = {**os.environ, "NODEFORGE_VM_OS": check_os(os_name)}
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=False, env=env)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise lab.LabError(f"building the {os_name} VM image failed ({script}):\n{proc.stderr.strip()}")
    return Path(lines[-1])


def _free_port() -> int:
    # QEMU's user network binds the port for ssh; a local user who takes it first makes QEMU fail to start, and
    # cannot pass for the node anyway: the lab's known_hosts holds the host key generated here.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((lab.LOOPBACK, 0))
        return sock.getsockname()[1]


def plan(count: int) -> list[VmNode]:
    """Node names, loopback ports and link addresses for count nodes; nodes 2k-1 and 2k share link k."""
    planned = []
    for i in range(1, count + 1):
        planned.append(VmNode(name="", index=i, ssh_port=_free_port()))
    for first, second in zip(planned[0::2], planned[1::2], strict=False):
        pair = (first.index + 1) // 2
        first.peer, second.peer = second.index, first.index
        first.link_address, second.link_address = f"{LINK_NET}.{pair}.1/24", f"{LINK_NET}.{pair}.2/24"
    return planned


def _mac(node: VmNode, nic: int) -> str:
    """Locally administered, per node and NIC (0: user network, 1: private link)."""
    return f"52:54:00:4e:{nic:02x}:{node.index:02x}"


def qemu_argv(name: str, node: VmNode, image: Path) -> list[str]:
    """The QEMU command line of a node, run by vm_supervisor in the node's directory (console on ttyS0, appended to
    console.log)."""
    here = node_dir(name, node.name)
    key = lab.host_key(name, node.name)
    client = lab.client_key(name)
    argv = [
        QEMU, "-name", node.name, "-accel", "tcg", "-cpu", CPU, "-smp", "1", "-m", str(MEMORY_MB),
        "-kernel", str(image / "vmlinuz"), "-initrd", str(image / "initrd.img"),
        "-append", f"root=/dev/vda rw console=ttyS0 net.ifnames=0 systemd.hostname={node.name} panic=-1",
        "-drive", f"file={here / 'disk.qcow2'},if=virtio,format=qcow2",
        "-netdev", f"user,id=net0,hostfwd=tcp:{lab.LOOPBACK}:{node.ssh_port}-:22",
        "-device", f"virtio-net-pci,netdev=net0,mac={_mac(node, 0)},romfile=",
        "-fw_cfg", f"name={FW_CFG}/host_key,file={key}",
        "-fw_cfg", f"name={FW_CFG}/host_key_pub,file={key.with_name(key.name + '.pub')}",
        "-fw_cfg", f"name={FW_CFG}/authorized,file={client.with_name(client.name + '.pub')}",
        "-display", "none", "-monitor", "none",
        "-chardev", f"file,id=console,path={here / 'console.log'},append=on", "-serial", "chardev:console",
        # A guest reboot ends QEMU; vm_supervisor starts a fresh one, which boots twice as fast under emulation.
        "-no-reboot", "-pidfile", str(here / "qemu.pid"),
    ]  # fmt: skip
    if node.peer is not None:
        (here / "link_address").write_text(node.link_address or "")
        argv += link_argv(name, node)
    return argv


def link_argv(name: str, node: VmNode) -> list[str]:
    """The private link's NIC: this node's datagram socket in its own directory, sending to the peer's in the next
    directory (paths relative to the node's directory, where vm_supervisor runs QEMU)."""
    peer = lab.check_node(name, f"nodeforge-{name}-{node.peer}")
    local, remote = vm_supervisor.LINK_SOCKET, f"../{peer}/{vm_supervisor.LINK_SOCKET}"
    return [
        "-netdev", f"dgram,id=link0,local.type=unix,local.path={local},remote.type=unix,remote.path={remote}",
        "-device", f"virtio-net-pci,netdev=link0,mac={_mac(node, 1)},romfile=",
        "-fw_cfg", f"name={FW_CFG}/link_address,file={node_dir(name, node.name) / 'link_address'}",
    ]  # fmt: skip


def _pid(name: str, node: str, pidfile: str = "qemu.pid") -> int | None:
    """The pid of the node's QEMU (or, with vm_supervisor.PIDFILE, of its supervisor), when it runs: the pidfile's
    process is one of this node's."""
    here = node_dir(name, node)
    try:
        pid = int((here / pidfile).read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return None
    if pidfile == vm_supervisor.PIDFILE:
        return pid if SUPERVISOR.encode() in cmdline and str(here).encode() in cmdline else None
    return pid if Path(cmdline[0].decode()).name == QEMU and node.encode() in cmdline else None


def _pids(name: str, node: str) -> list[int]:
    """The node's running supervisor and QEMU, supervisor first; either may be missing (between a guest's reboot and
    the fresh QEMU that boots it again there is no QEMU)."""
    return [pid for pid in (_pid(name, node, vm_supervisor.PIDFILE), _pid(name, node)) if pid is not None]


def _running(name: str, node: str) -> bool:
    return bool(_pids(name, node))


def _saved(name: str) -> list[VmNode]:
    found = []
    fields = set(VmNode.__dataclass_fields__)
    for path in sorted(vm_dir(name).glob("*/node.json")):
        saved = json.loads(path.read_text())
        if saved.get("link_address") and saved.get("peer") is None:  # written before the link was a socket pair
            saved["peer"] = saved["index"] + 1 if saved["index"] % 2 else saved["index"] - 1
        found.append(VmNode(**{key: value for key, value in saved.items() if key in fields}))
    return sorted(found, key=lambda n: n.index)


def nodes(name: str) -> list[lab.Node]:
    return [
        lab.Node(n.name, "running" if _running(name, n.name) else "stopped", n.ssh_port, n.os) for n in _saved(name)
    ]


def up(name: str, count: int, os_name: str = VM_OSES[0]) -> Path:
    lab.check_name(name)
    check_os(os_name)
    if count < 1:
        raise lab.LabError(f"--nodes must be at least 1 (got {count})")
    if not shutil.which(QEMU):
        raise lab.LabError(f"{QEMU} is not installed (apt-get install qemu-system-x86 qemu-utils)")
    lab._require("ssh", "ssh-keygen", "qemu-img")
    if not is_vm_lab(name) and lab.inventory_path(name).exists():
        raise lab.LabError(
            f"lab {name} has container nodes: choose another --name for the VM nodes, or `nodeforge lab down --name "
            f"{name}` first"
        )
    saved = {n.index: n for n in _saved(name)}
    for node in saved.values():
        if node.os != os_name:
            raise lab.LabError(
                f"lab {name}: {node.name} runs {node.os}, not {os_name}: the nodes of a VM lab run one OS (`nodeforge "
                f"lab down --name {name}` first, or choose another --name)"
            )
    image = ensure_image(os_name)
    lab._private_dir(vm_dir(name))
    lab.keygen(lab.client_key(name), f"nodeforge lab {name}")
    # Nodes beyond --nodes are kept (and started when stopped), as for container nodes: `lab down` removes them.
    planned = plan(max(count, max(saved, default=0)))
    wanted = []
    for node in planned:
        node.name = f"nodeforge-{name}-{node.index}"
        node.os = os_name
        if node.index in saved:
            node = saved[node.index]
        else:
            here = lab._private_dir(node_dir(name, node.name))
            lab.keygen(lab.host_key(name, node.name), f"{node.name} host key")
            _qemu_img(
                "create", "-q", "-f", "qcow2", "-F", "raw", "-b", str(image / "rootfs.img"), str(here / "disk.qcow2")
            )
            (here / "node.json").write_text(json.dumps(asdict(node), indent=2) + "\n")
        wanted.append(node)
    for node in wanted:
        if not _running(name, node.name):
            _start(name, node, image)
    ports = {node.name: node.ssh_port for node in wanted}
    lab.write_known_hosts(name, ports)
    for node in wanted:
        lab._wait_ssh(name, node.name, node.ssh_port, timeout=BOOT_TIMEOUT)
    return write_inventory(name, wanted)


def _qemu_img(*args: str) -> None:
    proc = subprocess.run(["qemu-img", *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise lab.LabError(f"qemu-img {args[0]} failed: {proc.stderr.strip()}")


def _start(name: str, node: VmNode, image: Path) -> None:
    here = node_dir(name, node.name)
    if not lab.host_key(name, node.name).exists():
        raise lab._no_host_key(name, node.name)
    (here / "console.log").unlink(missing_ok=True)
    (here / "qemu.argv").write_text(json.dumps(qemu_argv(name, node, image)) + "\n")
    log = here / "supervisor.log"
    with log.open("wb") as out:
        supervisor = subprocess.Popen(
            [sys.executable, "-m", SUPERVISOR, str(here)],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    # QEMU writes its pidfile once the machine is set up; a bad option or a missing file ends it before that.
    deadline = time.monotonic() + 30
    while _pid(name, node.name) is None:
        if supervisor.poll() is not None or time.monotonic() > deadline:
            supervisor.kill()
            raise lab.LabError(f"lab node {node.name}: {QEMU} did not start: {log.read_text().strip()}")
        time.sleep(0.1)


def write_inventory(name: str, vm_nodes: list[VmNode]) -> Path:
    """The sample inventories/lab-vm/hosts.yml with these nodes: each one's connection (lab.ssh_host_vars) and its
    private link address, which its ib_write_bw peer connects to."""
    data = yaml.safe_load(content.root().joinpath(*SAMPLE).read_text())
    hosts = {}
    for node in vm_nodes:
        host_vars = lab.ssh_host_vars(name, node.ssh_port)
        if node.link_address:
            host_vars["validate_rdma_address"] = node.link_address.split("/")[0]
        hosts[node.name] = host_vars
    data["all"]["children"][lab.GROUP]["hosts"] = hosts
    path = lab.inventory_path(name)
    header = (
        "# Written by `nodeforge lab up --vm` from the sample inventories/lab-vm/hosts.yml: the lab's VM nodes, each\n"
        "# reached over SSH on its loopback port with the lab's key and known_hosts (host key checking on).\n"
    )
    path.write_text(header + yaml.safe_dump(data, sort_keys=False))
    return path


def down(name: str) -> list[str]:
    """Stop every VM node of the lab (SIGTERM, then SIGKILL); returns their names. The caller removes the files."""
    stopped = []
    for node in _saved(name):
        # The supervisor first, so that it does not start QEMU again.
        for pid in _pids(name, node.name):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while _running(name, node.name) and time.monotonic() < deadline:
            time.sleep(0.2)
        for pid in _pids(name, node.name):
            os.kill(pid, signal.SIGKILL)
        stopped.append(node.name)
    return stopped
