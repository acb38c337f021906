"""What every scenario's testinfra verifier shares: the node (over SSH, or `podman exec` where molecule/run.sh chose
it), and playbook runs parsed as JSON.

A verifier imports this module after putting molecule/shared on sys.path:

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))
    import verify_lib

Playbook runs use molecule's own inventory directory (its host_vars and group_vars apply), ansible.cfg and roles
path (the verifier inherits molecule's provisioner environment), and the ansible.posix.json callback, so results
are parsed rather than grepped. Task names in the JSON carry the role prefix ("role : task"); lookups here match
the name without it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
import testinfra

# The roles run from the nodeforge.gpu collection: Ansible names their tasks "nodeforge.gpu.<role> : <task>".
COLLECTION_PREFIX = "nodeforge.gpu."


def node_name() -> str:
    """The scenario's container (molecule/shared/base.yml names it nodeforge-<scenario>)."""
    return f"nodeforge-{os.environ['MOLECULE_SCENARIO_NAME']}"


def node_host():
    """The scenario's node for testinfra, reached as molecule/run.sh chose (NODEFORGE_MOLECULE_CONNECTION): over SSH
    with the harness's key and known_hosts on the port create.yml recorded, through one master connection; or through
    `podman exec`. Never molecule's ansible backend, which pays a whole ansible run per command."""
    name = node_name()
    if os.environ.get("NODEFORGE_MOLECULE_CONNECTION") != "ssh":
        return testinfra.get_host(f"podman://{name}")
    keys = Path(os.environ["NODEFORGE_MOLECULE_SSH"])
    port = int((keys / f"{name}.port").read_text())
    return testinfra.get_host(
        f"ssh://root@127.0.0.1:{port}",
        ssh_identity_file=str(keys / "id_ed25519"),
        controlpath=str(keys / f"cm{port}"),  # short: ssh appends 17 characters, a socket path holds 107
        ssh_extra_args=(
            f"-o UserKnownHostsFile={keys / 'known_hosts'} -o StrictHostKeyChecking=yes -o HostKeyAlias={name} "
            "-o BatchMode=yes"
        ),
    )


@dataclass
class PlaybookRun:
    rc: int
    out: dict  # the ansible.posix.json callback's document
    stderr: str

    def tasks(self, name: str) -> list[dict]:
        """Every task (handlers too) whose name, without the role prefix, is `name`."""
        return [
            task
            for play in self.out["plays"]
            for task in play["tasks"]
            if task["task"]["name"].split(" : ")[-1] == name
        ]

    def results(self, name: str) -> list[dict]:
        """Every host's result of the tasks named `name`."""
        return [res for task in self.tasks(name) for res in task["hosts"].values()]

    def host_result(self, name: str, host: str | None = None) -> dict:
        """The one result of task `name` on `host` (default: the scenario's node); {} when it did not run there."""
        host = host or node_name()
        found = [task["hosts"][host] for task in self.tasks(name) if host in task["hosts"]]
        return found[-1] if found else {}

    def _names(self, key: str) -> list[str]:
        """Names as "role : task", the role without its collection (nodeforge.gpu.ofed reads as ofed)."""
        return [
            task["task"]["name"].removeprefix(COLLECTION_PREFIX)
            for play in self.out["plays"]
            for task in play["tasks"]
            for res in task["hosts"].values()
            if res.get(key) and not res.get("skipped")
        ]

    @property
    def failed(self) -> list[str]:
        return self._names("failed")

    @property
    def changed(self) -> list[str]:
        return self._names("changed")


def run_playbook(
    playbook: Path, extra_vars: dict | None = None, *, check: bool = False, timeout: int = 900
) -> PlaybookRun:
    """Run a scenario playbook (normally converge.yml) against molecule's inventory, with extra vars."""
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    inventory = str(Path(os.environ["MOLECULE_INVENTORY_FILE"]).parent)
    argv = [shutil.which("ansible-playbook") or "ansible-playbook", "-i", inventory, str(playbook)]
    argv += ["-e", json.dumps(extra_vars or {})] + (["--check", "--diff"] if check else [])
    proc = subprocess.run(
        argv, capture_output=True, text=True, env=env, cwd=playbook.parent, timeout=timeout, check=False
    )
    try:
        out = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"ansible-playbook rc={proc.returncode} printed no JSON:\n{proc.stdout}\n{proc.stderr}")
    return PlaybookRun(proc.returncode, out, proc.stderr)


def assert_apt_index_signed_by(node, keyring: str, source: str) -> None:
    """The InRelease apt fetched from `source` (host:port, as apt names its lists) verifies with `keyring` (armored)."""
    [inrelease] = [
        name
        for name in node.check_output("ls /var/lib/apt/lists").split()
        if name.startswith(source.replace("/", "_") + "_") and name.endswith("InRelease")
    ]
    dearmored = f"/tmp/{Path(keyring).stem}.gpg"
    node.run_expect([0], f"gpg --dearmor < {keyring} > {dearmored}")
    verify = node.run("gpgv --keyring %s /var/lib/apt/lists/%s", dearmored, inrelease)
    assert verify.rc == 0 and "Good signature" in verify.stderr, verify.stderr


# The NVIDIA Container Toolkit's four packages, named alike in NVIDIA's .deb and RPM repositories.
TOOLKIT_PACKAGES = (
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
)


def assert_driver_module_options(node) -> None:
    """The driver scenarios' nvidia_driver_module_options, written for the module the source installs (nvidia)."""
    options = [
        line
        for line in node.file("/etc/modprobe.d/nodeforge-nvidia-options.conf").content_string.splitlines()
        if line.startswith("options ")
    ]
    assert options == ["options nvidia NVreg_EnableStreamMemOPs=1 NVreg_RestrictProfilingToAdminUsers=0"]


def assert_reboot_recorded_for_this_boot(node, why: str = "no reboot requirement was recorded") -> None:
    """The nodeforge role's marker exists and names the boot the node is in now (a reboot meets it)."""
    marker = node.file("/var/lib/nodeforge/reboot-required")
    assert marker.exists, why
    boot_id = node.file("/proc/sys/kernel/random/boot_id").content_string.strip()
    assert marker.content_string.splitlines()[0] == boot_id


def installed_version(node, package: str) -> str:
    return node.check_output("dpkg-query --show --showformat='${Version}' %s", package)


def held(node) -> set[str]:
    return set(node.check_output("apt-mark showhold").split())


def containerd_dump(node) -> dict:
    """The configuration containerd itself assembles from config.toml and its imports."""
    return tomllib.loads(node.check_output("containerd config dump"))


def docker_info(node) -> dict:
    return json.loads(node.check_output("docker info --format '{{json .}}'"))


def can_raise_limits(node) -> bool:
    """Whether the container holds CAP_SYS_RESOURCE (bit 24), which raising a hard limit such as memlock needs."""
    status = node.file("/proc/1/status").content_string
    bounding = int(re.search(r"^CapBnd:\s*([0-9a-f]+)$", status, re.M).group(1), 16)
    return bool(bounding >> 24 & 1)


def assert_runs_with_unlimited_memlock(node, service: str, dropin: str) -> None:
    """The service's LimitMEMLOCK=infinity drop-in is read by systemd, and the running daemon started after it."""
    assert "[Service]\nLimitMEMLOCK=infinity\n" in node.file(dropin).content_string
    assert node.check_output("systemctl show --property=LimitMEMLOCK %s", service) == "LimitMEMLOCK=infinity"
    assert dropin in node.check_output("systemctl show --property=DropInPaths %s", service)
    assert node.service(service).is_running
    # The running daemon is one systemd started after the drop-in was written (containers inherit its limit).
    started = node.check_output("systemctl show --timestamp=unix --property=ExecMainStartTimestamp --value %s", service)
    assert int(started.lstrip("@")) >= int(node.check_output("stat --format=%%Y %s", dropin))
    # systemd gives it the limit where the container may raise a hard limit (CAP_SYS_RESOURCE); a host that lacks the
    # capability itself (a sandboxed development machine) cannot pass it on even to a privileged container.
    if can_raise_limits(node):
        pid = node.check_output("systemctl show --property=MainPID --value %s", service)
        limits = node.file(f"/proc/{pid}/limits").content_string
        assert re.search(r"^Max locked memory\s+unlimited\s+unlimited\s", limits, re.M), limits
