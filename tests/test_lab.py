"""The lab through the real CLI: podman container nodes, reached over SSH with host key checking on, provisioned,
summarised, validated, removed. The end-to-end run is tests/test_lab_upgrade.py's (one 4-node lab for both: the
provision of a lab costs minutes of both cores); the checks it makes of the lab itself are here."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from nodeforge import ansible_settings, lab
from nodeforge.cli import main
from nodeforge.runner import RunOptions, run_playbook
from nodeforge.runner import state_dir as runner_state_dir
from tests.conftest import REPO

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("podman") is None, reason="podman is not installed (make setup installs it)"),
]


def provisioned_lab_is_what_the_roles_say(
    lab_name: str, nodes: list[str], summary: dict, oses=None, mirror: Path | None = None
) -> None:
    """After `lab up --provision --json`: its summary, the SSH path it took, and each node's own state (podman exec,
    never the roles' probes) for its OS (oses: node -> OS, Debian 12 where not given; an EL node needs the lab's
    mirror, whose key its rpm database must hold); `lab status` lists every node and its OS."""
    oses = {host: (oses or {}).get(host, "debian12") for host in nodes}
    assert sorted(summary["hosts"]) == nodes
    for host in nodes:
        counts = summary["hosts"][host]
        assert counts["failed"] == 0 and counts["unreachable"] == 0
        assert counts["ok"] > 0
    assert summary["status"] == "successful"
    assert summary["failures"] == []
    ssh_path_is_the_real_one(lab_name, nodes)

    for host in nodes:
        # The node's own identity, as Ansible's facts read it.
        release = lab._podman("exec", host, "sh", "-c", ". /etc/os-release; echo $ID$VERSION_ID").stdout.strip()
        assert release.startswith(oses[host]), (host, release)  # rocky9.6: the minor is the image's
        if PACKAGING[oses[host]] == "rpm":
            el_node_has_its_stack(host, oses[host], mirror_fingerprint(mirror))
        else:
            apt_node_has_its_stack(host, oses[host])
        # nouveau blacklisted, nvidia-peermem persisted for the next boot (never loaded in a container).
        blacklist = lab._podman("exec", host, "cat", "/etc/modprobe.d/nodeforge-nouveau-blacklist.conf").stdout
        assert "blacklist nouveau" in blacklist and "options nouveau modeset=0" in blacklist
        loads = lab._podman("exec", host, "sh", "-c", "cat /etc/modules-load.d/*peermem*.conf").stdout
        assert "peermem" in loads
        # The memlock limits RDMA users need (every ofed_mode).
        limits = lab._podman("exec", host, "cat", "/etc/security/limits.d/90-nodeforge-rdma.conf").stdout
        assert "* hard memlock unlimited" in limits, limits
        # The toolkit's containerd drop-in imported (containerd itself is not installed on the lab's nodes, which the
        # role reports).
        dropin = lab._podman("exec", host, "cat", "/etc/containerd/conf.d/99-nvidia.toml").stdout
        assert 'BinaryName = "/usr/bin/nvidia-container-runtime"' in dropin
        config = lab._podman("exec", host, "cat", "/etc/containerd/config.toml").stdout
        assert '"/etc/containerd/conf.d/*.toml"' in config
        # The mirror is served by lab/serve_mirror.yml's unit, enabled for the node's next start too.
        unit = lab._podman("exec", host, "systemctl", "is-enabled", "nodeforge-lab-repo.service", check=False)
        assert unit.stdout.strip() == "enabled", unit.stdout + unit.stderr
        # selinux_modules: the lab's nodes have no SELinux policy store; the role says so and builds nothing.
        assert lab._podman("exec", host, "test", "-e", "/var/cache/nodeforge/selinux_modules", check=False).returncode

    status = CliRunner().invoke(main, ["lab", "status", "--name", lab_name])
    assert status.exit_code == 0
    for host in nodes:
        assert f"{host}  running  ssh 127.0.0.1:{_published_port(host)}  {oses[host]}" in status.output


PACKAGING = {
    "debian12": "apt",
    "debian13": "apt",
    "ubuntu22.04": "apt",
    "ubuntu24.04": "apt",
    "rocky8": "rpm",
    "rocky9": "rpm",
    "rhel8": "rpm",
    "rhel9": "rpm",
}
# The driver each OS's node takes (inventories/lab/hosts.yml): Debian's own open DKMS package at the branch the
# release ships; on Ubuntu 22.04 Canonical's server packages from Ubuntu's archive (the mirror's stand-in of its
# restricted component), on 24.04 NVIDIA's CUDA repository (the mirror's), at the older of its two 580 versions.
APT_DRIVER = {
    "debian12": ("nvidia-open-kernel-dkms", "535.", {"nvidia-open-kernel-dkms", "nvidia-smi"}),
    "debian13": ("nvidia-open-kernel-dkms", "550.", {"nvidia-open-kernel-dkms", "nvidia-smi"}),
    "ubuntu22.04": (
        "nvidia-headless-580-server-open",
        "580.126.20-0ubuntu0.22.04.1",
        {"nvidia-headless-580-server-open", "nvidia-utils-580-server", "nvidia-dkms-580-server-open"},
    ),
    "ubuntu24.04": ("nvidia-open", "580.105.08-0ubuntu1", {"nvidia-open", "nvidia-dkms-580-open"}),
}
TOOLKIT = [
    "libnvidia-container-tools",
    "libnvidia-container1",
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
]
INBOX = {"apt": ("rdma-core", "ibverbs-utils", "infiniband-diags", "perftest"),
         "rpm": ("rdma-core", "libibverbs-utils", "infiniband-diags", "perftest")}  # fmt: skip
# The OSes whose node takes DOCA-OFED from NVIDIA's DOCA repository (the mirror's, of the manifest's DOCA 3.4.1) in
# place of the distribution's RDMA packages (inventories/lab/hosts.yml).
DOCA = {"ubuntu24.04"}


def apt_node_has_its_stack(host: str, node_os: str) -> None:
    """dpkg's and apt's own view: the driver at its branch and held, Debian's (or Ubuntu's) RDMA packages or
    DOCA-OFED, the toolkit at the manifest's version from the mirror, its four packages held."""
    held = set(lab._podman("exec", host, "apt-mark", "showheld").stdout.split())
    package, version, must_hold = APT_DRIVER[node_os]
    assert must_hold <= held, (host, held)
    installed = lab._podman("exec", host, "dpkg-query", "-W", "-f", "${Version}", package).stdout
    assert installed.startswith(version), (host, package, installed)
    if node_os in DOCA:
        # The profile package at the pinned DOCA release, held; its ofed_info names the release's OFED base.
        assert "doca-ofed" in held, (host, held)
        doca = lab._podman("exec", host, "dpkg-query", "-W", "-f", "${Version}", "doca-ofed").stdout
        assert doca.startswith("3.4.1-"), (host, doca)
        base = lab._podman("exec", host, "ofed_info", "-s").stdout.strip()
        assert base == "OFED-internal-26.01-0.4.2:", (host, base)
    else:
        for name in INBOX["apt"]:
            state = lab._podman("exec", host, "dpkg-query", "-W", "-f", "${db:Status-Abbrev}", name).stdout
            assert state.startswith("ii"), (host, name, state)
    assert sorted(p for p in held if "nvidia-container" in p) == TOOLKIT, (host, held)
    toolkit = lab._podman("exec", host, "dpkg-query", "-W", "-f", "${Version}", "nvidia-container-toolkit").stdout
    assert toolkit.startswith("1.20.0-"), (host, toolkit)


def mirror_fingerprint(mirror: Path) -> str:
    """The fingerprint of the mirror's signing key, as gpg reads its key file (the one key the mirror signs with)."""
    shown = subprocess.run(
        ["gpg", "--batch", "--show-keys", "--with-colons", str(mirror / "gpgkey")],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return next(line.split(":")[9] for line in shown.splitlines() if line.startswith("fpr:"))


def el_node_has_its_stack(host: str, node_os: str, fingerprint: str) -> None:
    """The rpm database's and dnf's own view: NVIDIA's open driver at 580.105.08 from the CUDA repository, through the
    nvidia-driver module's 580-open stream, and the toolkit at 1.20.0, both locked by dnf versionlock; the mirror's
    key (fingerprint: gpg's reading of the mirror's key file) imported into the rpm database and every repository
    checked against it; the release's RDMA packages."""

    def rpm_version(*names: str) -> list[str]:
        argv = ["rpm", "--query", "--queryformat", "%{NAME} %{VERSION}\n", *names]
        return lab._podman("exec", host, *argv).stdout.splitlines()

    assert rpm_version("nvidia-open", "kmod-nvidia-open-dkms") == [
        "nvidia-open 580.105.08",
        "kmod-nvidia-open-dkms 580.105.08",
    ]
    assert rpm_version(*TOOLKIT) == [f"{name} 1.20.0" for name in TOOLKIT]
    assert [line.split()[0] for line in rpm_version(*INBOX["rpm"])] == list(INBOX["rpm"])
    locked = lab._podman("exec", host, "dnf", "--quiet", "versionlock", "list").stdout.split()
    for name in ("nvidia-open", "kmod-nvidia-open-dkms"):
        assert any(re.fullmatch(rf"{name}-(\d+:)?580\.105\.08-.*", entry) for entry in locked), (name, locked)
    for name in TOOLKIT:
        assert any(re.fullmatch(rf"{name}-(\d+:)?1\.20\.0-.*", entry) for entry in locked), (name, locked)
    # The branch is the module's stream (NVIDIA's EL packaging), enabled by the role, not installed as a profile.
    enabled = lab._podman("exec", host, "dnf", "--quiet", "module", "list", "--enabled", "nvidia-driver").stdout
    assert re.search(r"^nvidia-driver\s+580-open \[e\]", enabled, re.M), (host, enabled)
    # rpm names an imported key gpg-pubkey-<last 8 hex of its id>.
    keys = lab._podman("exec", host, "rpm", "--query", "--queryformat", "%{VERSION}\n", "gpg-pubkey").stdout
    assert fingerprint[-8:].lower() in keys.split(), (host, keys)
    # Every enabled repository is checked by signature, dnf's own reading of the .repo files the roles and the mirror
    # wrote: its packages (gpgcheck), or, for NVIDIA's toolkit repository, which signs only its metadata, that
    # (repo_gpgcheck, as NVIDIA's own .repo has it).
    repos = lab._podman("exec", host, "dnf", "--quiet", "repolist", "--enabled").stdout.split("\n")[1:]
    ids = {line.split()[0] for line in repos if line.strip()}
    assert {"cuda-rhel" + node_os[-1] + "-x86_64", "nvidia-container-toolkit", "epel"} <= ids, (host, ids)
    dumped = lab._podman("exec", host, "dnf", "config-manager", "--dump", *sorted(ids)).stdout
    # One section per repository, each under its "=== repo: ID ===" line.
    sections = dict(re.findall(r"^=+ repo: (\S+) =+$\n(.*?)(?=^=+ repo: |\Z)", dumped, re.M | re.S))
    assert sorted(sections) == sorted(ids), (host, dumped)
    for repo, shown in sections.items():
        check = "repo_gpgcheck" if repo == "nvidia-container-toolkit" else "gpgcheck"
        assert re.search(rf"^{check} = 1$", shown, re.M), (host, repo, shown)


def reprovision_changes_nothing(lab_name: str) -> None:
    again = CliRunner().invoke(main, ["lab", "provision", "--json", "--name", lab_name])
    assert again.exit_code == 0, again.output
    hosts = json.loads(again.stdout)["hosts"]
    assert all(c["changed"] == 0 for c in hosts.values())
    # The run left one SSH master per node in nodeforge's private socket directory, for the next run to ride
    # (ControlPersist): ssh's own answer for each socket there.
    sockets = sorted(ansible_settings.control_path_dir(runner_state_dir()).iterdir())
    checks = [
        subprocess.run(["ssh", "-O", "check", "-S", str(s), "node"], capture_output=True, text=True) for s in sockets
    ]
    assert [c.stderr.startswith("Master running") for c in checks] == [True] * len(hosts), [c.stderr for c in checks]


def lab_down_removes_it(lab_name: str) -> None:
    down = CliRunner().invoke(main, ["lab", "down", "--name", lab_name])
    assert down.exit_code == 0
    assert lab.nodes(lab_name) == []
    assert not lab.inventory_path(lab_name).exists()
    assert not lab.lab_dir(lab_name).exists()  # the lab's keys and known_hosts go with it


def _published_port(host: str) -> int:
    return int(lab._podman("port", host, "22/tcp").stdout.strip().rpartition(":")[2])


def ssh_path_is_the_real_one(lab_name: str, nodes: list[str]) -> None:
    """Probes independent of the code under test: what podman and each node's own files say."""
    inventory = lab.inventory_path(lab_name)
    written = yaml.safe_load(inventory.read_text())["all"]["children"]["gpu_nodes"]
    assert written["vars"]["ansible_connection"] == "ssh" and "podman" not in inventory.read_text()
    known_hosts = dict(line.split(" ", 1) for line in lab.known_hosts_path(lab_name).read_text().splitlines())
    keys = []
    for host in nodes:
        port = _published_port(host)
        assert written["hosts"][host]["ansible_port"] == port
        assert written["hosts"][host]["ansible_host"] == "127.0.0.1"
        # The lab trusts the key the node itself serves, read from inside the node, not from what it answers.
        own = lab._podman("exec", host, "cat", "/etc/ssh/ssh_host_ed25519_key.pub").stdout.split()
        assert known_hosts[f"[127.0.0.1]:{port}"] == f"{own[0]} {own[1]}"
        keys.append(own[1])
        # And the provision went through the node's sshd, with the lab's key.
        log = lab._podman("exec", host, "journalctl", "-u", "ssh.service", "--no-pager").stdout
        assert f"Accepted publickey for {lab.login_user(host)} from" in log, log[-2000:]
    assert len(set(keys)) == len(nodes)  # one host key per node
    assert len(known_hosts) == len(nodes)


def _exec(host: str, *argv: str) -> subprocess.CompletedProcess:
    return lab._podman("exec", host, *argv, check=False)


def validate_checks_the_lab(lab_name: str, nodes: list[str], tmp_path) -> None:
    """`nodeforge validate` on the provisioned lab: each result against what the node itself says (podman exec, not
    the role's probes), the reports read back, then a node whose containerd drop-in is gone fails that check."""
    runner = CliRunner()
    inventory = str(lab.inventory_path(lab_name))
    out = {kind: tmp_path / f"validate.{kind}" for kind in ("json", "xml", "html")}
    argv = [
        "validate",
        "-i",
        inventory,
        "--json",
        str(out["json"]),
        "--junit",
        str(out["xml"]),
        "--html",
        str(out["html"]),
        "--textfile",
        str(tmp_path),
    ]
    run = runner.invoke(main, argv)
    report = json.loads(out["json"].read_text())
    # The textfile for node_exporter, read by the Prometheus client's parser: each check's status as the JSON says.
    from prometheus_client.parser import text_string_to_metric_families

    metrics = {
        f.name: f.samples for f in text_string_to_metric_families((tmp_path / "nodeforge-validate.prom").read_text())
    }
    current = {
        (s.labels["node"], s.labels["check"], s.labels["status"])
        for s in metrics["nodeforge_validate_check_status"]
        if s.value == 1
    }
    hosts = report["hosts"]
    assert current == {(host, c["check"], c["status"]) for host, entry in hosts.items() for c in entry["checks"]}
    passed = {host: float(entry["status"] == "passed") for host, entry in hosts.items()}
    assert {s.labels["node"]: s.value for s in metrics["nodeforge_validate_node_passed"]} == passed
    for host in nodes:
        checks = {c["check"]: c for c in report["hosts"][host]["checks"]}
        for name in ("driver_version", "driver_flavor", "gpu_count", "gpu_model", "peer_memory", "cdi_gpus"):
            assert checks[name]["status"] == "na" and checks[name]["reason"] == "profile lab has no GPU", checks[name]
        assert checks["hca_ports"]["status"] == "na" and checks["hca_ports"]["reason"] == "no HCA in profile lab"
        assert checks["ib_write_bw"]["status"] == "na" and "--perf" in checks["ib_write_bw"]["reason"]
        # nouveau: the module lists the container sees (the host kernel's).
        nouveau = _exec(host, "sh", "-c", "grep -q '^nouveau ' /proc/modules || test -e /sys/module/nouveau").returncode
        visible = _exec(host, "sh", "-c", "test -r /proc/modules || test -d /sys/module").returncode == 0
        expected = ("fail" if nouveau == 0 else "pass") if visible else "na"
        assert checks["nouveau"]["status"] == expected, checks["nouveau"]
        # ofed_mode inbox: Debian's rdma-core, at the version dpkg reports.
        rdma_core = _exec(host, "dpkg-query", "-W", "-f", "${Version}", "rdma-core").stdout
        assert checks["ofed_version"]["status"] == "pass"
        assert checks["ofed_version"]["measured"] == f"rdma-core {rdma_core}"
        # memlock: systemd's own view of containerd.service (not installed on the lab's nodes: not applicable).
        shown = _exec(host, "systemctl", "show", "-p", "LoadState", "-p", "LimitMEMLOCK", "containerd").stdout
        if "LoadState=not-found" in shown:
            assert checks["memlock[containerd]"]["status"] == "na", checks["memlock[containerd]"]
        else:
            status = "pass" if "LimitMEMLOCK=infinity" in shown else "fail"
            assert checks["memlock[containerd]"]["status"] == status, (shown, checks["memlock[containerd]"])
        # The toolkit's runtime: containerd is not installed, so its files, merged as containerd imports them.
        runtime = checks["runtime[containerd]"]
        assert runtime["status"] == "pass" and "/etc/containerd/conf.d/99-nvidia.toml" in runtime["reason"], runtime
        # SELinux: Debian's lab nodes have no policy store (role selinux_modules built nothing there).
        store = _exec(host, "sh", "-c", "ls -d /var/lib/selinux/default /var/lib/selinux/targeted").returncode == 0
        assert (checks["selinux_module[infiniband]"]["status"] != "na") == store, checks["selinux_module[infiniband]"]
        assert report["hosts"][host]["status"] == "passed"
        assert report["hosts"][host]["counts"]["fail"] == 0
    assert run.exit_code == 0, run.output
    for host in nodes:
        assert f"{host}: passed" in run.output
    junit = ET.parse(out["xml"]).getroot()
    total = sum(len(entry["checks"]) for entry in report["hosts"].values())
    skipped = sum(entry["counts"]["na"] for entry in report["hosts"].values())
    assert (junit.get("tests"), junit.get("failures"), junit.get("skipped")) == (str(total), "0", str(skipped))
    assert sorted(s.get("name") for s in junit.findall("testsuite")) == nodes
    page = out["html"].read_text()
    for host in nodes:
        assert host in page
        for check in report["hosts"][host]["checks"]:
            assert check["check"].replace("<", "&lt;").replace(">", "&gt;") in page

    # A broken node: the nvidia runtime's drop-in removed behind nodeforge's back.
    _exec(nodes[0], "rm", "/etc/containerd/conf.d/99-nvidia.toml")
    broken = runner.invoke(main, ["validate", "-i", inventory, "--json"])
    assert broken.exit_code == 2, broken.output
    report = json.loads(broken.stdout)
    first = {c["check"]: c for c in report["hosts"][nodes[0]]["checks"]}
    assert (
        first["runtime[containerd]"]["status"] == "fail"
        and first["runtime[containerd]"]["measured"] == "no nvidia runtime"
    )
    assert [c["check"] for c in report["hosts"][nodes[0]]["checks"] if c["status"] == "fail"] == ["runtime[containerd]"]
    assert report["hosts"][nodes[1]]["status"] == "passed"


PING = """\
- name: Reach the lab's nodes
  hosts: gpu_nodes
  gather_facts: false
  tasks:
    - name: Ping
      ansible.builtin.ping:
"""


def host_key_checking_is_on(lab_name: str, nodes: list[str], tmp_path) -> None:
    """The first node's known_hosts entry replaced by the second node's key: ssh refuses the first node, reaches the
    second; a run through nodeforge's runner (over those two nodes) reports the first unreachable with ssh's own
    verdict."""
    lines = lab.known_hosts_path(lab_name).read_text().splitlines()
    first = f"[127.0.0.1]:{_published_port(nodes[0])}"
    second = next(line for line in lines if line.startswith(f"[127.0.0.1]:{_published_port(nodes[1])} "))
    tampered = tmp_path / "known_hosts"
    tampered.write_text(f"{first} {second.split(' ', 1)[1]}\n{second}\n")
    data = yaml.safe_load(lab.inventory_path(lab_name).read_text())
    group = data["all"]["children"]["gpu_nodes"]
    group["hosts"] = {name: group["hosts"][name] for name in nodes[:2]}
    for i, host in enumerate(group["hosts"].values()):
        host["ansible_ssh_common_args"] = f"-o UserKnownHostsFile={tampered} -o StrictHostKeyChecking=yes"
        # A fresh ControlPath (short: a socket's path has a length limit): a master connection the provision left
        # open would carry this run without a new handshake, so without a host key check.
        host["ansible_control_path"] = f"{tmp_path}/cp{i}"
    inventory = tmp_path / "tampered.yml"
    inventory.write_text(yaml.safe_dump(data))
    playbook = tmp_path / "ping.yml"
    playbook.write_text(PING)
    result = run_playbook(str(playbook), RunOptions(inventory=str(inventory)))
    assert result.hosts[nodes[0]]["unreachable"] == 1, result.hosts
    assert result.hosts[nodes[1]]["ok"] == 1 and result.hosts[nodes[1]]["unreachable"] == 0, result.hosts
    [failure] = result.failures
    assert failure.host == nodes[0] and failure.unreachable
    assert "Host key verification failed" in failure.message, failure.message


def _journal(host: str, since: str) -> str:
    return lab._podman("exec", host, "journalctl", "--no-pager", "-q", "--since", since).stdout


def _now(host: str) -> str:
    return lab._podman("exec", host, "date", "+%Y-%m-%d %H:%M:%S").stdout.strip()


def _as_admin(lab_name: str, tmp_path, hosts: list[str]) -> Path:
    """The lab's inventory without the user it logs into these hosts as and the password it escalates with: the
    run's -u and -K say them, as at a site where the operator connects as themselves."""
    data = yaml.safe_load(lab.inventory_path(lab_name).read_text())
    for host in hosts:
        data["all"]["children"]["gpu_nodes"]["hosts"][host].pop("ansible_user")
        data["all"]["children"]["gpu_nodes"]["hosts"][host].pop("ansible_become_password", None)
    inventory = tmp_path / "as-admin.yml"
    inventory.write_text(yaml.safe_dump(data))
    return inventory


def become_works_as_sites_have_it(lab_name: str, nodes: list[str], tmp_path) -> None:
    """The lab's admin user, as an operator meets one: on node 1 root cannot log in and sudo asks a password, which
    `provision -u admin -b --ask-become-pass` asks once, from a terminal (a pty here), and hands to ansible-playbook;
    on node 2 sudo asks none. Each node's own journal says who logged in and what sudo ran."""
    import pexpect

    first, second = nodes[0], nodes[1]
    denied = subprocess.run(
        lab.ssh_command(lab_name, _published_port(first), "true", user="root"), capture_output=True, text=True
    )
    assert denied.returncode == 255 and "Permission denied" in denied.stderr, denied.stderr
    inventory = _as_admin(lab_name, tmp_path, [first, second])
    password = lab.become_password_file(lab_name).read_text().strip()
    nodeforge = str(Path(sys.executable).parent / "nodeforge")
    since = _now(first)
    summary = tmp_path / "as-admin.json"
    # The summary to a file, the prompt (stderr) to the terminal.
    argv = ["provision", "-i", str(inventory), "-l", first, "-u", "admin", "-b", "--ask-become-pass", "--json"]
    command = " ".join([nodeforge, *argv]) + f" > {summary}"
    child = pexpect.spawn("/bin/sh", ["-c", command], encoding="utf-8", timeout=600)
    child.expect("BECOME password: ")
    child.sendline(password)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before
    hosts = json.loads(summary.read_text())["hosts"]
    assert list(hosts) == [first] and hosts[first]["changed"] == 0 and hosts[first]["ok"] > 0, hosts
    # The run may ride the SSH master the lab's own runs as admin left open (ControlPersist): its mark is sudo's, as
    # admin (root cannot log in here at all: a run that ignored -u would have been unreachable).
    log = _journal(first, since)
    assert "Accepted publickey for root" not in log, log[-2000:]
    assert "admin : PWD=/home/admin ; USER=root ; COMMAND=" in log, log[-2000:]
    assert password not in log and "authentication failure" not in log, log[-2000:]
    # A wrong password: ansible-playbook's own verdict for the host, exit 2.
    child = pexpect.spawn(nodeforge, ["preflight", "-i", str(inventory), "-l", first, "-u", "admin", "-K"],
                          encoding="utf-8", timeout=300, dimensions=(50, 250))  # fmt: skip
    child.expect("BECOME password: ")
    child.sendline("not-" + password)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 2 and "Incorrect sudo password" in " ".join(child.before.split()), child.before
    # Node 2: sudo without a password, -u and -b alone.
    since = _now(second)
    run = CliRunner().invoke(main, ["preflight", "-i", str(inventory), "-l", second, "-u", "admin", "-b", "--json"])
    assert run.exit_code == 0, run.output
    log = _journal(second, since)
    assert "Accepted publickey for admin from" in log and "USER=root ; COMMAND=" in log, log[-2000:]


@pytest.mark.matrix
def test_lab_provisions_a_node_and_reprovisions_it_changing_nothing(tmp_path):
    """`make lab` in small, in the newest-core leg of make test's matrix (tools/matrix.sh; the main session runs the
    mixed lab below): `lab up --provision` of one node through the CLI, each node's state read from the node, then a
    no-op re-provision with 0 changed (the 4-node lab upgrade test of `make test-full` checks the same on four)."""
    name = f"pytestmx{os.getpid()}"
    mirror = tmp_path / "mirror"
    subprocess.run([sys.executable, str(REPO / "tools" / "lab_mirror.py"), str(mirror)], check=True)
    try:
        up = CliRunner().invoke(main, ["lab", "up", "--nodes", "1", "--mirror", str(mirror), "--provision",
                                       "--json", "--name", name])  # fmt: skip
        assert up.exit_code == 0, up.output
        provisioned_lab_is_what_the_roles_say(name, [f"nodeforge-{name}-1"], json.loads(up.stdout))
        reprovision_changes_nothing(name)
    finally:
        lab.down(name)


# Every node OS of the version manifest's os_support, and Debian 13, one node each. Debian 12 is not among them: it is
# the OS of every molecule scenario and of the newest leg's one-node lab above (docs/testing.md, "What make test runs").
MIXED = ["debian13", "rocky8", "rocky9", "rhel8", "rhel9", "ubuntu22.04", "ubuntu24.04"]


def pulled_mirror(tmp_path: Path, nodes: list[str], oses: list[str]) -> tuple[Path, Path]:
    """The air-gapped site in small: the vendors' stand-ins (tools/lab_mirror.py) served on the host's loopback play
    upstream; `nodeforge mirror pull --only nodes` takes what the nodes install (the lab's inventory, each node's
    nodeforge_os declared, its URLs at that upstream); upstream is stopped. What the nodes are then served is the
    pulled mirror beside the distributions' stand-ins (Ubuntu's archive, EPEL, Rocky's and RHEL's repositories: a
    site's own distribution mirror), with none of the vendors' paths: every vendor package a node installs comes from
    the pulled mirror, by the URLs `nodeforge mirror overrides` wrote into the lab's inventory."""
    import functools
    import http.server
    import threading

    upstream, pulled, served = tmp_path / "upstream", tmp_path / "pulled", tmp_path / "served"
    subprocess.run([sys.executable, str(REPO / "tools" / "lab_mirror.py"), str(upstream)], check=True)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(upstream))
    handler.log_message = lambda *_: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    node_os = dict(zip(nodes, oses, strict=True))
    declared = {n: {"nodeforge_os": o} for n, o in node_os.items()}
    site = lab.inventory(nodes, True, lab.mirror_fingerprints(upstream), declared, node_os)
    inventory = tmp_path / "site.yml"
    inventory.write_text(
        yaml.safe_dump(site).replace("http://127.0.0.1:8083/", f"http://127.0.0.1:{server.server_port}/")
    )
    try:
        pull = CliRunner().invoke(main, ["mirror", "pull", "-i", str(inventory), "--only", "nodes", "--to", str(pulled),
                                         "--json"])  # fmt: skip
    finally:
        server.shutdown()
        server.server_close()
    assert pull.exit_code == 0, pull.output
    sources = json.loads(pull.stdout)["sources"]
    assert sorted(sources) == ["cuda rhel8", "cuda rhel9", "cuda ubuntu2404", "doca 3.4.1 ubuntu24.04",
                               "nvidia-container-toolkit apt", "nvidia-container-toolkit dnf"], sources  # fmt: skip
    shutil.copytree(pulled, served)
    for distribution in lab.DISTRIBUTION_PATHS:
        shutil.copytree(upstream / distribution, served / distribution)
    return upstream, served


def a_planted_key_is_refused_on_the_node(tmp_path: Path, name: str, node: str, other: str, upstream: Path) -> None:
    """Another key where the mirror has the toolkit's (on one node's served copy, as a tampered mirror would serve
    it): the role on that node refuses it against the pinned fingerprint, naming the key file's URL and the key it
    holds, and installs nothing; another node, its copy untouched, passes. The run is `lab provision --limit` of the
    two: the other nodes would only repeat the second's run."""
    home = tmp_path / "attacker"
    home.mkdir(mode=0o700)
    gpg = ["gpg", "--batch", "--homedir", str(home), "--passphrase", ""]
    subprocess.run([*gpg, "--quick-gen-key", "attacker <attacker@example.invalid>", "ed25519", "sign", "1d"],
                   check=True, capture_output=True)  # fmt: skip
    planted = subprocess.run([*gpg, "--armor", "--export"], check=True, capture_output=True, text=True).stdout
    listed = subprocess.run([*gpg, "--with-colons", "--list-keys"], check=True, capture_output=True, text=True).stdout
    fingerprint = next(line.split(":")[9] for line in listed.splitlines() if line.startswith("fpr:"))
    served = "/srv/nodeforge-lab-repo/nvidia-container-toolkit/gpgkey"
    copy = subprocess.run(["podman", "exec", "-i", node, "sh", "-c", f"cat > {served}"], input=planted, text=True,
                          capture_output=True, env=lab.podman_env(), check=False)  # fmt: skip
    assert copy.returncode == 0, copy.stderr
    argv = ["--limit", f"{node},{other}", "--tags", "nvidia_container_toolkit", "--json", "--name", name]
    run = CliRunner().invoke(main, ["lab", "provision", *argv])
    assert run.exit_code == 2, run.output
    result = json.loads(run.stdout)
    [failure] = result["failures"]
    assert failure["host"] == node
    # Only the two nodes ran; the other one went through the toolkit's tasks without a failure.
    assert sorted(result["hosts"]) == sorted([node, other]), result["hosts"]
    assert result["hosts"][other]["failed"] == 0 and result["hosts"][other]["ok"] > 0, result["hosts"][other]
    message = " ".join(failure["message"].split())
    assert "file at http://127.0.0.1:8083/nvidia-container-toolkit/gpgkey holds the key(s) " in message, message
    assert f"holds the key(s) {fingerprint}, of which the version manifest does not pin {fingerprint} " in message
    assert f"(pinned: {mirror_fingerprint(upstream)}); nothing was installed" in message


# Run on a node: its own loopback and its default gateway (the host's side of podman's bridge), at the port given;
# exit 0 when neither answers, naming what each said.
_UNREACHABLE = """
import socket, struct, sys, urllib.request
port = sys.argv[1]
routes = [line.split() for line in open("/proc/net/route").read().splitlines()[1:]]
gateway = next(socket.inet_ntoa(struct.pack("<L", int(r[2], 16))) for r in routes if r[1] == "00000000")
for host in ("127.0.0.1", gateway):
    try:
        urllib.request.urlopen(f"http://{host}:{port}/", timeout=5)
    except OSError as error:
        print(f"{host}:{port}: {error}")
    else:
        sys.exit(f"{host}:{port} answered")
"""


def the_nodes_cannot_reach_upstream(nodes: list[str], upstream: Path) -> None:
    """The air gap, by the nodes' network: upstream served again on the host's loopback, as it was for the pull,
    answers the host, and no node reaches it, neither at the address the pull used (a node's loopback is its own)
    nor through the podman bridge's gateway."""
    import functools
    import http.server
    import threading
    import urllib.request

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(upstream))
    handler.log_message = lambda *_: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/gpgkey") as got:
            assert got.status == 200
        for node in nodes:
            probe = _exec(node, "python3", "-c", _UNREACHABLE, str(server.server_port))
            assert probe.returncode == 0, f"{node}: {probe.stdout}{probe.stderr}"
            assert len(probe.stdout.splitlines()) == 2, probe.stdout
    finally:
        server.shutdown()
        server.server_close()


def mixed_lab_provisions_and_reprovisions_changing_nothing(tmp_path, name: str, oses: list[str]) -> None:
    """`lab up --os OS,... --mirror DIR --provision` through the CLI, one node per OS, DIR a `nodeforge mirror pull`
    (pulled_mirror): each with its OS's driver, RDMA and toolkit packages read from its own package manager (dpkg and
    apt, or rpm and dnf), then a no-op re-provision with 0 changed on every node."""
    nodes = [f"nodeforge-{name}-{i}" for i in range(1, len(oses) + 1)]
    upstream, mirror = pulled_mirror(tmp_path, nodes, oses)
    try:
        up = CliRunner().invoke(main, ["lab", "up", "--os", ",".join(oses), "--mirror", str(mirror), "--provision",
                                       "--json", "--name", name])  # fmt: skip
        assert up.exit_code == 0, up.output
        summary = json.loads(up.stdout)
        # The lab's inventory points every vendor source at the pulled mirror's layout on the node.
        written = yaml.safe_load(lab.inventory_path(name).read_text())["all"]["children"]["gpu_nodes"]["vars"]
        assert written["nodeforge_manifest_overrides_mirror"]["nvidia_driver"]["cuda_repo"]["baseurl"] == (
            "http://127.0.0.1:8083/cuda/{distro}/"
        )
        provisioned_lab_is_what_the_roles_say(name, nodes, summary, dict(zip(nodes, oses, strict=True)), upstream)
        the_nodes_cannot_reach_upstream(nodes, upstream)
        # dnf's lock list, with the time of each `dnf versionlock add` in it: a no-op that released and locked again
        # (and hid it with changed_when) would leave other times.
        el_nodes = [node for node, node_os in zip(nodes, oses, strict=True) if PACKAGING[node_os] == "rpm"]
        locks = {node: _exec(node, "cat", "/etc/dnf/plugins/versionlock.list").stdout for node in el_nodes}
        assert all("nvidia-container-toolkit-0:" in text for text in locks.values()), locks
        reprovision_changes_nothing(name)
        assert {node: _exec(node, "cat", "/etc/dnf/plugins/versionlock.list").stdout for node in el_nodes} == locks
        a_planted_key_is_refused_on_the_node(tmp_path, name, nodes[0], nodes[-1], upstream)
        # The nodes' OSes are the lab's: `lab up` again with another list refuses, and removes nothing.
        other = "debian13" if oses[0] != "debian13" else "debian12"
        again = CliRunner().invoke(main, ["lab", "up", "--os", other, "--name", name])
        assert again.exit_code != 0
        assert f"nodeforge-{name}-1 runs {oses[0]}, not {other}" in again.output, again.output
        assert [n.name for n in lab.nodes(name)] == nodes
    finally:
        lab.down(name)


# Seven nodes beside the molecule scenarios of the other worker: 1,042 to 1,407 s in CI's runs of 2026-11-29 to
# 2026-12-01, too near the suite's 1,800 s for the machine's slow phases.
@pytest.mark.timeout(2700)
def test_mixed_lab_provisions_one_node_per_os_and_reprovisions_them_changing_nothing(tmp_path):
    """The mixed lab of make test: Debian 13, Rocky 8 and 9, RHEL 8 and 9, Ubuntu 22.04 and 24.04, one node each. Each
    runs the roles' branch of its OS: Debian 13's own 550 driver, Canonical's server driver packages from Ubuntu
    22.04's archive (distro), the CUDA repository's ubuntu2404, rhel8 and rhel9 builds (apt, or dnf module streams),
    the release's RDMA packages or, on Ubuntu 24.04, DOCA-OFED from NVIDIA's DOCA repository, the toolkit's apt or dnf
    path."""
    mixed_lab_provisions_and_reprovisions_changing_nothing(tmp_path, f"pytestmix{os.getpid()}", MIXED)


def test_lab_provision_without_lab_says_so():
    result = CliRunner().invoke(main, ["lab", "provision", "--name", "never-started"])
    assert result.exit_code != 0
    assert "is not up" in result.output and "nodeforge lab up" in result.output
