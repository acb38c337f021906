"""The lab: podman containers (Debian 12 + systemd) standing in for GPU nodes, reached over SSH as real nodes are.

Each node runs sshd on a loopback-forwarded port and has an admin user who escalates with sudo, as most sites' nodes
do: on the first node root cannot log in over SSH and sudo asks admin's password (the lab's, in a 0600 file of the
lab's directory, which the inventory's ansible_become_password reads at run time, as a site's vaulted one would be),
so the lab reaches it as admin; on the others sudo asks no password (NOPASSWD) and the lab logs in as root.

`lab up --os` starts one node per OS listed (Debian 12 and 13, Rocky 8 and 9, RHEL 8 and 9, Ubuntu 22.04 and 24.04:
the base images of lab/base-image/build.sh), each in its OS's group of the lab inventory.

`lab up` generates every node's host key on the controller before the node first boots and writes the lab's
known_hosts from those keys (never from what a node answers), so host key checking stays on exactly as for a real
inventory.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import shutil
import subprocess
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import SplitResult, urlsplit

import yaml

from nodeforge import content
from nodeforge.runner import RunOptions, run_playbook, state_dir

IMAGE = os.environ.get("NODEFORGE_BASE_IMAGE", "localhost/nodeforge-debian12:latest")
LABEL = "org.nodeforge.lab"
OS_LABEL = "org.nodeforge.os"
DEFAULT_OS = "debian12"
# The node OSes a lab node can run: those the lab's mirror (tools/lab_mirror.py) and its inventory's OS groups serve.
LAB_OSES = ("debian12", "debian13", "rocky8", "rocky9", "rhel8", "rhel9", "ubuntu22.04", "ubuntu24.04")
LOOPBACK = "127.0.0.1"
SSH_PORT = "22/tcp"
SSH_USER = "root"
ADMIN_USER = "admin"
KEY_TYPE = "ed25519"


class LabError(RuntimeError):
    pass


# A lab's name is a directory under <state>/lab (which `lab down` removes) and part of its nodes' container names and
# hostnames (nodeforge-NAME-N): one DNS-label-like word, never a path.
NAME_PATTERN = re.compile(r"[a-z0-9][a-z0-9-]{0,30}")
NAME_RULE = "1 to 31 lowercase letters, digits or '-', starting with a letter or digit"


def name_problem(name: object) -> str | None:
    """Why `name` cannot be a lab's name, or None when it can."""
    if isinstance(name, str) and NAME_PATTERN.fullmatch(name):
        return None
    return f"{name!r} is not a lab name: expected {NAME_RULE} (it names the lab's directory and its nodes)"


def check_name(name: str) -> str:
    problem = name_problem(name)
    if problem:
        raise LabError(problem)
    return name


def check_node(name: str, node: str) -> str:
    """A node of lab `name` is nodeforge-NAME-N: its name is a directory under the lab's, never a path."""
    if not (isinstance(node, str) and re.fullmatch(rf"nodeforge-{re.escape(check_name(name))}-[0-9]+", node)):
        raise LabError(f"{node!r} is not a node of lab {name}: expected nodeforge-{name}-N")
    return node


@dataclass
class Node:
    name: str
    state: str
    port: int | None = None  # the loopback port forwarded to the node's sshd
    os: str = DEFAULT_OS


def parse_oses(value: str) -> list[str]:
    """`--os debian12,rocky9`: the node OSes in node order (node N runs the Nth), each one the lab can run."""
    oses = [item.strip() for item in value.split(",")] if value.strip() else []
    unknown = [item for item in oses if item not in LAB_OSES]
    if not oses or unknown:
        raise LabError(
            f"--os {value!r}: expected a comma-separated list of {', '.join(LAB_OSES)} "
            f"(unknown: {', '.join(repr(u) for u in unknown) or 'none given'})"
        )
    return oses


def image_of(node_os: str) -> str:
    """The base image of a node OS (NODEFORGE_BASE_IMAGE replaces Debian 12's, the default)."""
    return IMAGE if node_os == DEFAULT_OS else f"localhost/nodeforge-{node_os}:latest"


def os_group(node_os: str) -> str:
    """The lab inventory's group of a node OS: lab_debian13, lab_ubuntu2404 (a group name has no dots)."""
    return "lab_" + node_os.replace(".", "")


def lab_dir(name: str) -> Path:
    return state_dir() / "lab" / check_name(name)


def inventory_path(name: str) -> Path:
    return lab_dir(name) / "hosts.yml"


def client_key(name: str) -> Path:
    """The lab's SSH client key (one per lab): its public half is every node's root authorized_keys."""
    return lab_dir(name) / f"id_{KEY_TYPE}"


def become_password_file(name: str) -> Path:
    """The lab's admin password (sudo asks it on the first node), made once per lab."""
    return lab_dir(name) / "become-password"


def password_node(node: str) -> bool:
    """Whether a lab node is the one whose root cannot log in over SSH and whose sudo asks admin's password: node 1."""
    return node.endswith("-1")


def login_user(node: str) -> str:
    return ADMIN_USER if password_node(node) else SSH_USER


def known_hosts_path(name: str) -> Path:
    return lab_dir(name) / "known_hosts"


def host_key(name: str, node: str) -> Path:
    """A node's private host key, generated here and copied into the node before its first boot."""
    return lab_dir(name) / "host_keys" / check_node(name, node) / f"ssh_host_{KEY_TYPE}_key"


def podman_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("CONTAINERS_CONF", str(content.root() / "containers" / "containers.conf"))
    return env


def _podman(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    if not shutil.which("podman"):
        raise LabError("podman is not installed (apt-get install podman runc)")
    proc = subprocess.run(["podman", *args], capture_output=True, text=True, env=podman_env(), check=False)
    if check and proc.returncode != 0:
        raise LabError(f"podman {' '.join(args[:2])} failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def ensure_image(node_os: str = DEFAULT_OS) -> None:
    """Build the OS's base image when missing or stale (the build script caches on its own checksum). The script is
    run at its real path: in a checkout, the EL tier's image is built with the harness beside it (molecule/)."""
    script = (content.root() / "lab" / "base-image" / "build.sh").resolve()
    builder = script.parents[2] / "molecule" / "fixture_repo" / "fixture_rpm.py"
    if node_os.startswith(("rocky", "rhel")) and not builder.is_file():
        raise LabError(
            f"a {node_os} node needs the EL tier's base image, which is built from a checkout of nodeforge (its rpm "
            f"database comes from {builder.relative_to(script.parents[2])}, not shipped in the package): run "
            f"`nodeforge lab up` from the checkout's virtualenv (make setup)"
        )
    env = {**podman_env(), "NODEFORGE_NODE_OS": node_os, "NODEFORGE_BASE_IMAGE": image_of(node_os)}
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise LabError(f"building the {node_os} base image failed ({script}):\n{proc.stderr.strip()}")


def nodes(name: str) -> list[Node]:
    from nodeforge import lab_vm

    if lab_vm.is_vm_lab(name):
        return lab_vm.nodes(name)
    proc = _podman("ps", "-a", "--filter", f"label={LABEL}={name}", "--format", "json")
    data = json.loads(proc.stdout or "[]")
    found = (
        Node(
            c["Names"][0],
            c.get("State", "unknown"),
            _ssh_port_of(c.get("Ports")),
            (c.get("Labels") or {}).get(OS_LABEL, DEFAULT_OS),
        )
        for c in data
    )
    return sorted(found, key=lambda n: n.name)


def _ssh_port_of(ports: list[dict] | None) -> int | None:
    """The host port forwarded to the node's sshd, from `podman ps --format json` (0 or absent: none yet)."""
    for p in ports or []:
        if p.get("container_port") == 22 and p.get("protocol", "tcp") == "tcp" and p.get("host_port"):
            return int(p["host_port"])
    return None


def _private_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.chmod(0o700)  # mkdir's mode is subject to the umask and ignored for a directory that exists
    return path


def _require(*tools: str) -> None:
    for tool in tools:
        if not shutil.which(tool):
            raise LabError(f"{tool} is not installed (apt-get install openssh-client)")


def keygen(path: Path, comment: str) -> Path:
    """An ed25519 key pair at path (0600) and path.pub, unless both exist; returns the public key's path."""
    public = path.with_name(path.name + ".pub")
    if path.exists() and public.exists():
        return public
    _require("ssh-keygen")
    _private_dir(path.parent)
    path.unlink(missing_ok=True)
    public.unlink(missing_ok=True)
    cmd = ["ssh-keygen", "-q", "-t", KEY_TYPE, "-N", "", "-C", comment, "-f", str(path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise LabError(f"ssh-keygen failed for {path}: {proc.stderr.strip()}")
    path.chmod(0o600)
    return public


def known_hosts_line(port: int, public_key: str) -> str:
    """ssh's known_hosts entry for a key served on a loopback port: `[127.0.0.1]:PORT TYPE BASE64` (no comment)."""
    fields = public_key.split()
    if len(fields) < 2 or not fields[0].startswith("ssh-"):
        raise LabError(f"not an OpenSSH public key: {public_key[:60]!r}")
    return f"[{LOOPBACK}]:{port} {fields[0]} {fields[1]}"


def write_known_hosts(name: str, ports: dict[str, int]) -> Path:
    """The lab's known_hosts, from the host keys generated for its nodes (never from what a node answers)."""
    lines = []
    for node, port in sorted(ports.items()):
        public = host_key(name, node).with_name(host_key(name, node).name + ".pub")
        if not public.exists():
            raise _no_host_key(name, node)
        lines.append(known_hosts_line(port, public.read_text()))
    _private_dir(lab_dir(name))
    path = known_hosts_path(name)
    path.write_text("".join(f"{line}\n" for line in lines))
    path.chmod(0o600)
    return path


def _no_host_key(name: str, node: str) -> LabError:
    return LabError(
        f"lab node {node} has no host key in {host_key(name, node).parent} (started by an older nodeforge, or the "
        f"lab's directory was removed): run `nodeforge lab down --name {name}`, then `nodeforge lab up` again"
    )


def ssh_common_args(name: str) -> str:
    """What the lab adds to every ssh command: its own known_hosts, and a host whose key differs is refused."""
    return f"-o UserKnownHostsFile={shlex.quote(str(known_hosts_path(name)))} -o StrictHostKeyChecking=yes"


def ssh_host_vars(name: str, port: int, user: str | None = None) -> dict[str, object]:
    """The per-host connection values `lab up` adds to the sample's settings (with the user it logs in as, and for
    the admin user the lab's password, read from its file when a run needs it: never written into the inventory)."""
    password = f"{{{{ lookup('ansible.builtin.file', {json.dumps(str(become_password_file(name)))}) }}}}"
    return {
        **({"ansible_user": user} if user else {}),
        **({"ansible_become_password": password} if user == ADMIN_USER else {}),
        "ansible_host": LOOPBACK,
        "ansible_port": port,
        "ansible_ssh_private_key_file": str(client_key(name)),
        "ansible_ssh_common_args": ssh_common_args(name),
    }


def _install_keys(name: str, container: str) -> None:
    """Copy the node's host key pair and the lab's client public key into a node that is not running: sshd keeps
    host keys it finds (the image's `ssh-keygen -A` only fills in missing ones)."""
    key = host_key(name, container)
    for src in (key, key.with_name(key.name + ".pub")):
        _podman("cp", str(src), f"{container}:/etc/ssh/{src.name}")
    staged = _private_dir(lab_dir(name) / "authorized")
    authorized = staged / "authorized_keys"
    shutil.copyfile(client_key(name).with_name(client_key(name).name + ".pub"), authorized)
    authorized.chmod(0o600)
    _podman("cp", f"{staged}/.", f"{container}:/root/.ssh")  # the directory's content, /root/.ssh created 0700


def _published_port(container: str) -> int:
    proc = _podman("port", container, SSH_PORT, check=False)
    address = proc.stdout.strip().splitlines()[0] if proc.stdout.strip() else ""
    host, _, port = address.rpartition(":")
    if proc.returncode != 0 or host != LOOPBACK or not port.isdigit():
        raise LabError(
            f"lab node {container} publishes no SSH port on {LOOPBACK} (created by an older nodeforge, reached "
            f"with the podman connection?): run `nodeforge lab down`, then `nodeforge lab up` again"
        )
    return int(port)


def ssh_command(name: str, port: int, *remote: str, user: str = SSH_USER) -> list[str]:
    """ssh to a lab node as Ansible reaches it: the lab's key and known_hosts, host key checking on."""
    return [
        "ssh", "-i", str(client_key(name)), "-o", "IdentitiesOnly=yes",
        "-o", f"UserKnownHostsFile={known_hosts_path(name)}", "-o", "StrictHostKeyChecking=yes",
        "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "-p", str(port), f"{user}@{LOOPBACK}", *remote,
    ]  # fmt: skip


# The admin user of every lab node: the lab's key, sudo; on the password node sudo asks the password (Debian's
# `%sudo ALL=(ALL:ALL) ALL`) and sshd refuses root, elsewhere sudo asks none.
ADMIN_SCRIPT = """set -e
id -u admin >/dev/null 2>&1 || useradd --create-home --shell /bin/bash admin
install -d -m 0700 -o admin -g admin /home/admin/.ssh
install -m 0600 -o admin -g admin /root/.ssh/authorized_keys /home/admin/.ssh/authorized_keys
"""
PASSWORD_NODE_SCRIPT = """chpasswd
usermod -a -G sudo admin
rm -f /etc/sudoers.d/nodeforge-lab-admin
printf 'PermitRootLogin no\\n' > /etc/ssh/sshd_config.d/10-nodeforge-lab.conf
systemctl reload ssh
"""
NOPASSWD_NODE_SCRIPT = """usermod -p '*' admin
printf 'admin ALL=(ALL) NOPASSWD: ALL\\n' > /etc/sudoers.d/nodeforge-lab-admin
chmod 0440 /etc/sudoers.d/nodeforge-lab-admin
visudo -c -q
"""


def _add_admin(name: str, container: str) -> None:
    """The node's admin user (ADMIN_SCRIPT), through podman (sshd may already refuse root)."""
    password_file = become_password_file(name)
    if not password_file.exists():
        _private_dir(password_file.parent)
        fd = os.open(password_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(18))
    if password_node(container):
        script, given = ADMIN_SCRIPT + PASSWORD_NODE_SCRIPT, f"admin:{password_file.read_text().strip()}\n"
    else:
        script, given = ADMIN_SCRIPT + NOPASSWD_NODE_SCRIPT, ""
    cmd = ["podman", "exec", "-i", container, "sh", "-c", script]
    proc = subprocess.run(cmd, input=given, capture_output=True, text=True, env=podman_env(), check=False)
    if proc.returncode != 0:
        raise LabError(f"adding the admin user to lab node {container} failed: {proc.stderr.strip()}")


def _wait_ssh(name: str, container: str, port: int, timeout: float = 60.0, user: str = SSH_USER) -> None:
    """Until the node's sshd accepts the lab's key with the lab's known_hosts; a host key that differs fails now."""
    deadline = time.monotonic() + timeout
    error = ""
    probe = ssh_command(name, port, "true", user=user)
    while time.monotonic() < deadline:
        proc = subprocess.run(probe, capture_output=True, text=True, check=False)
        if proc.returncode == 0:
            return
        error = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"ssh exited {proc.returncode}"
        if "Host key verification failed" in proc.stderr or "HOST IDENTIFICATION HAS CHANGED" in proc.stderr:
            raise LabError(
                f"lab node {container} ({LOOPBACK}:{port}) answers with a host key other than the one generated for "
                f"it in {host_key(name, container).parent}: {error}"
            )
        time.sleep(0.5)
    raise LabError(
        f"lab node {container}: sshd on {LOOPBACK}:{port} did not accept the lab's key within "
        f"{timeout:.0f}s: {error or '?'}"
    )


def _wait_booted(container: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        proc = _podman("exec", container, "systemctl", "is-system-running", check=False)
        state = proc.stdout.strip()
        if state in ("running", "degraded"):
            return
        time.sleep(0.5)
    raise LabError(f"lab node {container} did not finish booting within {timeout:.0f}s (systemd: {state or '?'})")


# The lab's settings live in one place, the sample inventory shipped as inventories/lab/hosts.yml: what the lab's
# container nodes can do (Debian 12's own driver, branch 535; no kernel to build modules for, so
# gpudirect_rdma_require_module false; Debian's RDMA stack), what differs per node OS (its group's vars) and where
# the mirror is served on each node's loopback. `lab up` writes that inventory with its own node names.
SAMPLE = ("inventories", "lab", "hosts.yml")
GROUP = "gpu_nodes"
TOOLKIT = "nvidia_container_toolkit"
# What each node OS installs from the mirror (tools/lab_mirror.py), under the mirror's root: the toolkit's key and
# repository, NVIDIA's CUDA repository for the OSes that can take cuda_repo mode, and the distribution's own that the
# lab's Ubuntu and EL nodes are pointed at (lab/serve_mirror.yml): Ubuntu's archive (its restricted component: the
# server driver packages of `distro` mode), Rocky's or RHEL's BaseOS and AppStream, EPEL.
MIRROR_PATHS = {
    "debian12": ["gpgkey", "stable/deb/amd64/InRelease"],
    "debian13": ["gpgkey", "stable/deb/amd64/InRelease"],
    **{
        node_os: [
            "gpgkey",
            "stable/deb/amd64/InRelease",
            f"compute/cuda/repos/{distro}/x86_64/InRelease",
            f"compute/cuda/repos/{distro}/x86_64/cuda-keyring_1.1-1_all.deb",
            f"ubuntu/dists/{suite}/InRelease",
            "keys/ubuntu-archive-keyring.gpg",
            # The lab's Ubuntu 24.04 node takes DOCA-OFED (ofed_mode doca) from NVIDIA's DOCA repository.
            *(
                ["public/repo/doca/3.4.1/ubuntu24.04/x86_64/InRelease", "public/repo/doca/GPG-KEY-Mellanox.pub"]
                if node_os == "ubuntu24.04"
                else []
            ),
        ]
        for node_os, distro, suite in (
            ("ubuntu22.04", "ubuntu2204", "jammy-updates"),
            ("ubuntu24.04", "ubuntu2404", "noble-updates"),
        )
    },
    **{
        f"{distribution}{major}": [
            "gpgkey",
            "stable/rpm/x86_64/repodata/repomd.xml",
            f"compute/cuda/repos/rhel{major}/x86_64/repodata/repomd.xml",
            f"compute/cuda/repos/rhel{major}/x86_64/D42D0685.pub",
            f"pub/epel/{major}/Everything/x86_64/repodata/repomd.xml",
            f"keys/RPM-GPG-KEY-EPEL-{major}",
            *(
                [
                    f"rocky/{major}/BaseOS/x86_64/os/repodata/repomd.xml",
                    f"rocky/{major}/AppStream/x86_64/os/repodata/repomd.xml",
                    f"keys/RPM-GPG-KEY-Rocky-{major}",
                ]
                if distribution == "rocky"
                else [
                    f"content/dist/rhel{major}/{major}/x86_64/baseos/os/repodata/repomd.xml",
                    f"content/dist/rhel{major}/{major}/x86_64/appstream/os/repodata/repomd.xml",
                    "keys/RPM-GPG-KEY-redhat-release",
                ]
            ),
        ]
        for distribution in ("rocky", "rhel")
        for major in (8, 9)
    },
}


def sample() -> dict:
    return yaml.safe_load(content.root().joinpath(*SAMPLE).read_text())


def _mirror_urls(group_vars: dict) -> dict[str, str]:
    return group_vars["nodeforge_manifest_overrides"][TOOLKIT]


def _sample_key_url() -> SplitResult:
    """The toolkit key's URL in the lab's sample: where every node serves its copy of the mirror."""
    return urlsplit(_mirror_urls(sample()["all"]["children"][GROUP]["vars"])["key_url"])


def _pin(overrides: dict, fingerprints: list[str]) -> None:
    """The mirror's key pinned wherever a role checks a key it fetches from the mirror (the role refuses any other
    key, as it does NVIDIA's): the toolkit's key, cuda-keyring's keyring, the CUDA repository's RPM key and DOCA's
    key."""
    overrides[TOOLKIT]["key_fingerprints"] = list(fingerprints)
    overrides["ofed"]["doca"]["key_fingerprints"] = list(fingerprints)
    cuda = overrides["nvidia_driver"]["cuda_repo"]
    cuda["keyring_fingerprints"] = list(fingerprints)
    cuda["key_fingerprints_rpm"] = list(fingerprints)


def inventory(
    hosts: list[str],
    mirror: bool = True,
    fingerprints: list[str] | None = None,
    host_vars: dict[str, dict] | None = None,
    oses: dict[str, str] | None = None,
    mirror_vars: dict | None = None,
) -> dict:
    """The lab's inventory: the sample's group vars for these nodes, each node's connection values (ssh_host_vars)
    as its host vars, each node not on Debian 12 in its OS's group (oses: node -> OS), the mirror key's fingerprints
    pinned; without a mirror, the vendors' own repositories. mirror_vars: what `nodeforge mirror overrides` writes
    for a pulled mirror (merged over the sample's vendor-layout URLs)."""
    data = sample()
    group = data["all"]["children"][GROUP]
    group["hosts"] = {h: (host_vars or {}).get(h) for h in hosts}
    members: dict[str, list[str]] = {}
    for host, node_os in (oses or {}).items():
        members.setdefault(os_group(node_os), []).append(host)
    children = group.get("children") or {}
    for child in list(children):
        if child in members:
            children[child]["hosts"] = {h: None for h in members[child]}
        else:
            children.pop(child)
    if not children:
        group.pop("children", None)
    if mirror and fingerprints:
        _pin(group["vars"]["nodeforge_manifest_overrides"], fingerprints)
    if not mirror:
        group["vars"].pop("nodeforge_manifest_overrides")
    group["vars"].update(mirror_vars or {})
    return data


def write_inventory(
    name: str,
    hosts: list[str],
    mirror: bool = True,
    fingerprints: list[str] | None = None,
    ports: dict[str, int] | None = None,
    oses: dict[str, str] | None = None,
    mirror_vars: dict | None = None,
) -> Path:
    """The lab's inventory file; hosts with a port in ports are reached over SSH on that loopback port."""
    host_vars = {h: ssh_host_vars(name, port, login_user(h)) for h, port in (ports or {}).items()}
    path = inventory_path(name)
    _private_dir(path.parent)
    header = (
        "# Written by `nodeforge lab up` from the sample inventories/lab/hosts.yml: the lab's container nodes, each\n"
        "# reached over SSH on its loopback port with the lab's key and known_hosts (host key checking on).\n"
    )
    data = inventory(hosts, mirror, fingerprints, host_vars, oses, mirror_vars)
    path.write_text(header + yaml.safe_dump(data, sort_keys=False))
    return path


def mirror_fingerprints(mirror: Path) -> list[str]:
    """The primary-key fingerprints of the mirror's signing key (the file the inventory's key_url names); of a
    `nodeforge mirror pull` directory, its sources' keys as the pull checked them."""
    from nodeforge.collection import parsers

    if is_nodeforge_mirror(mirror):
        from nodeforge import mirror as mirror_module

        try:
            sources = mirror_module.read_index(mirror)["sources"].values()
        except mirror_module.MirrorError as exc:
            raise LabError(f"--mirror: {exc}") from exc
        return sorted({f for source in sources for f in source.get("key_primary") or []})

    key = mirror / _sample_key_url().path.lstrip("/")
    try:
        return parsers.openpgp_fingerprints(key.read_text())["primary"]
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise LabError(f"--mirror: {key} is not an armored OpenPGP public key: {exc}") from exc


# What of MIRROR_PATHS is the distributions' (Ubuntu's archive, EPEL, Rocky's and RHEL's repositories, their keys):
# what a site serves from its own distribution mirror beside a `nodeforge mirror pull` directory.
DISTRIBUTION_PATHS = ("ubuntu/", "keys/", "pub/epel/", "rocky/", "content/")


def is_nodeforge_mirror(mirror: Path) -> bool:
    """A directory `nodeforge mirror pull` wrote (its index at the top), served beside the distributions' stand-ins."""
    from nodeforge import mirror as mirror_module

    return (mirror / mirror_module.INDEX).is_file()


def check_mirror(mirror: Path, oses: list[str] | tuple[str, ...] = (DEFAULT_OS,)) -> None:
    """A mirror has the vendors' layout: what each node OS of the lab installs from it (MIRROR_PATHS); or it is a
    `nodeforge mirror pull` directory, with the distributions' stand-ins beside it."""
    wanted = list(dict.fromkeys(p for node_os in oses for p in MIRROR_PATHS[node_os]))
    if is_nodeforge_mirror(mirror):
        wanted = [p for p in wanted if p.startswith(DISTRIBUTION_PATHS)]
    missing = [p for p in wanted if not (mirror / p).is_file()]
    if not mirror.is_dir() or missing:
        raise LabError(
            f"--mirror {mirror}: expected the vendors' repositories in their own layout (tools/lab_mirror.py builds "
            f"the lab's); missing for {', '.join(dict.fromkeys(oses))}: "
            f"{', '.join(missing) if mirror.is_dir() else 'the directory itself'}"
        )


def up(name: str, count: int, mirror: Path | None = None, oses: list[str] | None = None) -> Path:
    """Start the lab's nodes: `count` Debian 12 nodes, or with `oses` one node per OS listed (node N runs the Nth)."""
    check_name(name)
    if oses is not None:
        count = len(oses)
    if count < 1:
        raise LabError(f"--nodes must be at least 1 (got {count})")
    wanted_os = {f"nodeforge-{name}-{i}": node_os for i, node_os in enumerate(oses or [DEFAULT_OS] * count, 1)}
    if mirror is not None:
        mirror = mirror.resolve()
        check_mirror(mirror, list(wanted_os.values()))
        mirror_fingerprints(mirror)  # a key that cannot be read stops here, before any container starts
    _require("ssh", "ssh-keygen")
    existing = {n.name: n for n in nodes(name)}
    clash = [
        f"{n} runs {existing[n].os}, not {o}"
        for n, o in wanted_os.items()
        if existing.get(n, Node(n, "", os=o)).os != o
    ]
    if clash:
        raise LabError(
            f"lab {name} is up with other node OSes ({'; '.join(clash)}): run `nodeforge lab down --name {name}` "
            f"first (nothing is removed implicitly)"
        )
    for node_os in dict.fromkeys(wanted_os.values()):
        ensure_image(node_os)
    _private_dir(lab_dir(name))
    keygen(client_key(name), f"nodeforge lab {name}")
    _private_dir(lab_dir(name) / "host_keys")
    # Nodes beyond --nodes are kept (and started if stopped): `lab down` removes them; nothing is destroyed implicitly.
    all_nodes = sorted(set(wanted_os) | set(existing))
    node_oses = {n: existing[n].os if n in existing else wanted_os[n] for n in all_nodes}
    for container in all_nodes:
        node = existing.get(container)
        if node is None:
            keygen(host_key(name, container), f"{container} host key")
            _podman(
                "create", "--name", container, "--hostname", container, "--label", f"{LABEL}={name}",
                "--label", f"{OS_LABEL}={node_oses[container]}", "--systemd=always", "--tmpfs", "/tmp",
                "--publish", f"{LOOPBACK}::22", image_of(node_oses[container]), "/sbin/init",
            )  # fmt: skip
            _first_start(name, container)
        elif node.state != "running":
            # Stopped, or created and never started: the same keys go in again, then it starts on the port podman
            # chose when it was created.
            _first_start(name, container)
    for container in all_nodes:
        _wait_booted(container)
        _add_admin(name, container)
    ports = {container: _published_port(container) for container in all_nodes}
    write_known_hosts(name, ports)
    for container in all_nodes:
        _wait_ssh(name, container, ports[container], user=login_user(container))
    fingerprints = mirror_fingerprints(mirror) if mirror is not None else None
    path = write_inventory(name, all_nodes, mirror is not None, fingerprints, ports, node_oses, _pulled_vars(mirror))
    if mirror is not None:
        _serve_mirror(path, mirror)
    return path


def _pulled_vars(mirror: Path | None) -> dict | None:
    """For a `nodeforge mirror pull` directory: its overrides, at the address the nodes serve it on (the sample's)."""
    if mirror is None or not is_nodeforge_mirror(mirror):
        return None
    from nodeforge import mirror as mirror_module

    address = _sample_key_url()
    try:
        # The lab's nodes run no cluster: the mirror's images, if it holds any, are not theirs.
        return mirror_module.overrides(mirror, f"{address.scheme}://{address.netloc}", images=False)
    except mirror_module.MirrorError as exc:
        raise LabError(f"--mirror: {exc}") from exc


def _first_start(name: str, container: str) -> None:
    """Keys into a node that is not running, then start it."""
    if not host_key(name, container).exists():
        raise _no_host_key(name, container)
    _install_keys(name, container)
    _podman("start", container)


def _serve_mirror(inventory_file: Path, mirror: Path) -> None:
    """lab/serve_mirror.yml: the mirror, packed in the lab's directory, unpacked on every node and served on the
    node's loopback."""
    archive = inventory_file.parent / "mirror.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for path in sorted(mirror.rglob("*")):
            if path.is_symlink() or not (path.is_file() or path.is_dir()):
                raise LabError(f"--mirror {mirror}: {path} is not a plain file or directory")
        tar.add(mirror, arcname=".")
    opts = RunOptions(inventory=str(inventory_file), extravars={"lab_mirror_archive": str(archive)})
    result = run_playbook(str(content.root() / "lab" / "serve_mirror.yml"), opts)
    if result.rc != 0:
        detail = "; ".join(f"{f.host}: {f.task}: {f.message}" for f in result.failures) or result.error
        raise LabError(f"serving the mirror to the lab's nodes failed ({result.artifacts}): {detail}")


def _remove(name: str, containers: list[str]) -> None:
    """rm -f stops each node (systemd's stop signal, then SIGKILL after 2 s). A node whose systemd halts in that moment
    makes podman's SIGKILL fail ("container state improper: stopped") and rm fail with it, the other nodes removed;
    that node is stopped by then, and a second rm of what is left takes it."""
    if _podman("rm", "-f", "-t", "2", *containers, check=False).returncode == 0:
        return
    if left := [n.name for n in nodes(name)]:
        _podman("rm", "-f", "-t", "2", *left)


def down(name: str) -> list[str]:
    from nodeforge import lab_vm

    if lab_vm.is_vm_lab(name):
        removed = lab_vm.down(name)
    elif removed := [n.name for n in nodes(name)]:
        _remove(name, removed)
    shutil.rmtree(lab_dir(name), ignore_errors=True)
    return removed
