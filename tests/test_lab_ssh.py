"""The lab's SSH plumbing without containers: keys, known_hosts and the inventory `lab up` writes from them."""

from __future__ import annotations

import json
import shlex
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from nodeforge import lab, lab_vm
from nodeforge.cli import main
from tests.conftest import REPO

needs_ssh_keygen = pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="openssh-client is not installed")


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_known_hosts_line_names_the_loopback_port():
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPRp9xHuadV3JYhAmNKr0j57AA8x+bPQb3gILu03YVK/ node-1 host key\n"
    line = lab.known_hosts_line(40022, key)
    # ssh's own form for a host on a port other than 22, and no comment: exactly what ssh compares.
    assert line == "[127.0.0.1]:40022 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPRp9xHuadV3JYhAmNKr0j57AA8x+bPQb3gILu03YVK/"
    with pytest.raises(lab.LabError, match="not an OpenSSH public key"):
        lab.known_hosts_line(40022, "-----BEGIN OPENSSH PRIVATE KEY-----")


@needs_ssh_keygen
def test_keys_are_generated_once_and_private(state_dir):
    public = lab.keygen(lab.client_key("t"), "nodeforge lab t")
    private = lab.client_key("t")
    assert public.read_text().startswith("ssh-ed25519 ") and public.read_text().rstrip().endswith("nodeforge lab t")
    assert _mode(private) == 0o600
    assert _mode(lab.lab_dir("t")) == 0o700
    # A second `lab up` keeps the lab's keys: nodes already trust them.
    before = private.read_bytes()
    lab.keygen(private, "nodeforge lab t")
    assert private.read_bytes() == before
    # ssh-keygen derives the same public key from the private one: the pair is whole.
    derived = subprocess.run(["ssh-keygen", "-y", "-f", str(private)], capture_output=True, text=True, check=True)
    assert derived.stdout.split()[:2] == public.read_text().split()[:2]


@needs_ssh_keygen
def test_known_hosts_is_written_from_the_generated_host_keys(state_dir):
    ports = {"nodeforge-t-1": 40001, "nodeforge-t-2": 40002}
    publics = {node: lab.keygen(lab.host_key("t", node), f"{node} host key").read_text() for node in ports}
    assert publics["nodeforge-t-1"].split()[1] != publics["nodeforge-t-2"].split()[1]
    path = lab.write_known_hosts("t", ports)
    assert path == lab.known_hosts_path("t") and _mode(path) == 0o600
    assert path.read_text().splitlines() == [
        f"[127.0.0.1]:{port} {' '.join(publics[node].split()[:2])}" for node, port in sorted(ports.items())
    ]
    # ssh itself finds each node's key under its port, and only there.
    for node, port in ports.items():
        found = subprocess.run(
            ["ssh-keygen", "-F", f"[127.0.0.1]:{port}", "-f", str(path)], capture_output=True, text=True, check=False
        )
        assert found.returncode == 0 and publics[node].split()[1] in found.stdout
    assert subprocess.run(["ssh-keygen", "-F", "[127.0.0.1]:40003", "-f", str(path)], check=False).returncode == 1
    # A node whose host key is not in the lab's directory cannot be trusted: say which and what to do.
    with pytest.raises(lab.LabError, match=r"lab node nodeforge-t-3 has no host key .*nodeforge lab down --name t"):
        lab.write_known_hosts("t", {**ports, "nodeforge-t-3": 40003})


def test_written_inventory_reaches_each_node_over_ssh(state_dir):
    ports = {"nodeforge-t-1": 40001, "nodeforge-t-2": 40002}
    path = lab.write_inventory("t", sorted(ports), mirror=False, ports=ports)
    assert _mode(path.parent) == 0o700
    group = yaml.safe_load(path.read_text())["all"]["children"]["gpu_nodes"]
    assert group["vars"]["ansible_connection"] == "ssh" and "ansible_user" not in group["vars"]
    # Node 1 is reached as the admin user (root cannot log in there), the others as root.
    assert {node: group["hosts"][node]["ansible_user"] for node in ports} == {
        "nodeforge-t-1": "admin",
        "nodeforge-t-2": "root",
    }
    # sudo asks admin's password on node 1: read from the lab's 0600 file when a run needs it, never written here.
    assert group["hosts"]["nodeforge-t-1"]["ansible_become_password"] == (
        f"{{{{ lookup('ansible.builtin.file', \"{lab.become_password_file('t')}\") }}}}"
    )
    assert "ansible_become_password" not in group["hosts"]["nodeforge-t-2"]
    assert "podman" not in path.read_text()
    for node, port in ports.items():
        host = group["hosts"][node]
        assert host["ansible_host"] == "127.0.0.1" and host["ansible_port"] == port
        assert host["ansible_ssh_private_key_file"] == str(lab.client_key("t"))
        args = shlex.split(host["ansible_ssh_common_args"])
        assert args == ["-o", f"UserKnownHostsFile={lab.known_hosts_path('t')}", "-o", "StrictHostKeyChecking=yes"]
        # Connection sharing is nodeforge's shipped setting for every run, not the lab's: nothing of it here.
        assert not any("Control" in a for a in args)
    # The probe `lab up` waits with connects as Ansible does: the same key, known_hosts and strict checking.
    probe = lab.ssh_command("t", 40001, "true")
    assert probe[-2:] == ["root@127.0.0.1", "true"] and probe[probe.index("-p") + 1] == "40001"
    for option in args:
        assert option in probe
    assert str(lab.client_key("t")) in probe
    # The written inventory passes nodeforge's own check, host vars and all.
    checked = CliRunner().invoke(main, ["check", "-i", str(path)])
    assert checked.exit_code == 0, checked.output


def test_a_state_dir_with_spaces_stays_one_ssh_argument(tmp_path, monkeypatch):
    monkeypatch.setenv("NODEFORGE_STATE_DIR", str(tmp_path / "my state"))
    args = shlex.split(lab.ssh_host_vars("t", 40001)["ansible_ssh_common_args"])
    assert args[1] == f"UserKnownHostsFile={tmp_path / 'my state' / 'lab' / 't' / 'known_hosts'}"


def test_sample_inventory_is_the_ssh_lab():
    sample = yaml.safe_load((REPO / "inventories" / "lab" / "hosts.yml").read_text())
    group_vars = sample["all"]["children"]["gpu_nodes"]["vars"]
    assert group_vars["ansible_connection"] == "ssh"
    # The per-node values are lab up's: a sample cannot know the ports or the lab's directory.
    assert all(v is None for v in sample["all"]["children"]["gpu_nodes"]["hosts"].values())


def test_published_ssh_port_is_read_from_podman_ps():
    ports = [
        {"host_ip": "127.0.0.1", "container_port": 8083, "host_port": 8083, "range": 1, "protocol": "tcp"},
        {"host_ip": "127.0.0.1", "container_port": 22, "host_port": 41873, "range": 1, "protocol": "tcp"},
    ]
    assert lab._ssh_port_of(ports) == 41873
    assert lab._ssh_port_of(None) is None
    assert lab._ssh_port_of([{"container_port": 22, "host_port": 0, "protocol": "tcp"}]) is None


def test_lab_nodes_are_read_from_podman_ps_with_their_os(monkeypatch):
    """Each node's OS is its container's org.nodeforge.os label; a node started before labels were written (none)
    runs Debian 12, the only OS such a lab had."""
    listing = [
        {"Names": ["nodeforge-t-2"], "State": "running", "Labels": {"org.nodeforge.os": "rocky9"},
         "Ports": [{"container_port": 22, "host_port": 41874, "protocol": "tcp"}]},
        {"Names": ["nodeforge-t-1"], "State": "exited", "Labels": {"org.nodeforge.lab": "t"}, "Ports": None},
    ]  # fmt: skip
    calls = []

    def podman(*args, check=True):
        calls.append(args)
        return subprocess.CompletedProcess(args, 0, json.dumps(listing), "")

    monkeypatch.setattr(lab, "_podman", podman)
    assert lab.nodes("t") == [
        lab.Node("nodeforge-t-1", "exited", None, "debian12"),
        lab.Node("nodeforge-t-2", "running", 41874, "rocky9"),
    ]
    assert calls == [("ps", "-a", "--filter", "label=org.nodeforge.lab=t", "--format", "json")]


def test_lab_status_shows_each_nodes_ssh_address_and_os(monkeypatch):
    found = [lab.Node("nodeforge-t-1", "running", 41873), lab.Node("nodeforge-t-2", "exited", None, "ubuntu24.04")]
    monkeypatch.setattr(lab, "nodes", lambda name: found)
    result = CliRunner().invoke(main, ["lab", "status", "--name", "t"])
    assert result.exit_code == 0, result.output
    assert "nodeforge-t-1  running  ssh 127.0.0.1:41873  debian12" in result.output
    assert "nodeforge-t-2  exited  ssh: no port published  ubuntu24.04" in result.output
    assert f"known_hosts: {lab.known_hosts_path('t')}" in result.output


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--os", "debian12,sles15"], "--os 'debian12,sles15': expected a comma-separated list of debian12, debian13"),
        (["--os", "debian12", "--nodes", "2"], "give --os or --nodes, not both"),
        (
            ["--os", "rocky9", "--vm"],
            "--os with --vm names the one OS of the VM nodes, debian12 or debian13, not 'rocky9'",
        ),
        (["--os", "debian12,debian13", "--vm"], "not 'debian12,debian13' (--nodes says how many)"),
        (["--mirror", "/nowhere", "--vm"], "--mirror is for container nodes"),
    ],
)
def test_lab_up_refuses_an_os_list_it_cannot_start_before_any_node(monkeypatch, argv, message):
    started = []
    monkeypatch.setattr(lab, "up", lambda *a: started.append(a))
    monkeypatch.setattr(lab_vm, "up", lambda *a: started.append(a))
    result = CliRunner().invoke(main, ["lab", "up", "--name", "t", *argv])
    assert result.exit_code != 0
    assert message in " ".join(result.output.split()), result.output
    assert started == []


def test_lab_up_hands_the_os_list_to_the_lab_in_node_order(monkeypatch):
    seen = []
    monkeypatch.setattr(lab, "up", lambda *a: seen.append(a) or Path("/x/hosts.yml"))
    monkeypatch.setattr(lab, "nodes", lambda name: [])
    result = CliRunner().invoke(main, ["lab", "up", "--name", "t", "--os", "rocky9,debian12", "--mirror", "/m"])
    assert result.exit_code == 0, result.output
    assert seen == [("t", 2, Path("/m"), ["rocky9", "debian12"])]
    assert "repositories: from /m, served on each node's loopback" in result.output


def test_lab_up_vm_hands_its_one_os_and_the_node_count_to_the_vm_lab(monkeypatch):
    seen = []
    monkeypatch.setattr(lab_vm, "up", lambda *a: seen.append(a) or Path("/x/hosts.yml"))
    monkeypatch.setattr(lab, "nodes", lambda name: [])
    for argv in (["--vm", "--os", "debian13", "--nodes", "3"], ["--vm"]):
        result = CliRunner().invoke(main, ["lab", "up", "--name", "t", *argv])
        assert result.exit_code == 0, result.output
    assert seen == [("t", 3, "debian13"), ("t", 2, "debian12")]


def test_an_el_node_outside_a_checkout_says_where_its_image_comes_from(monkeypatch, tmp_path):
    """An installed nodeforge ships lab/ without the harness: a Rocky node's image cannot be built there, and `lab up`
    says why before it runs the build script (which a Debian node's image still gets)."""
    (tmp_path / "lab" / "base-image").mkdir(parents=True)
    (tmp_path / "lab" / "base-image" / "build.sh").write_text("echo built for $NODEFORGE_NODE_OS >&2; exit 7\n")
    monkeypatch.setattr(lab.content, "root", lambda: tmp_path)
    for node_os in ("rocky9", "rhel8"):
        with pytest.raises(lab.LabError) as el:
            lab.ensure_image(node_os)
        assert f"a {node_os} node needs the EL tier's base image, which is built from a checkout" in str(el.value)
        assert "molecule/fixture_repo/fixture_rpm.py" in str(el.value)
    with pytest.raises(lab.LabError) as debian:
        lab.ensure_image("debian13")
    assert str(debian.value).endswith("building the debian13 base image failed "
                                      f"({tmp_path}/lab/base-image/build.sh):\nbuilt for debian13")  # fmt: skip
