"""ansible-core 2.19 fails a conditional whose result is not a boolean, and `-e name=false` hands a role the string
'false' (argument_specs validate it, they do not convert it). The preflight role is run here for real, as
`ansible-playbook nodeforge.gpu.preflight` runs it (the validation play first), on this machine over a local
connection in check mode (preflight only reads: probes, df, apt-cache as nobody), with its booleans given as strings
on the command line. ANSIBLE_ALLOW_BROKEN_CONDITIONALS=false makes the versions before 2.19 that know the option
as strict as 2.19.

A string 'false' must mean false: before the fix, `when: preflight_fail_on_error` failed the run on 2.19 (and
before 2.19 a truthy 'false' failed it too), and `preflight_enforce_pci and (...)` enforced the PCI counts that
'false' turned off. The last test renders nvidia_container_toolkit's own templates and vars with string booleans,
where a truthy 'false' made nvidia the CRI-O default runtime, kept sslverify on and the memlock drop-ins.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nodeforge import content

pytestmark = pytest.mark.slow

# Disk and PCI expectations this machine meets or misses by construction, whatever its disks and devices: no free
# space is required unless a test asks for more, and the lab profile is made to expect one NVIDIA GPU (it has none).
MEETS_DISK = '{"preflight_min_free_gb": {"/": 0}}'
MISSES_DISK = '{"preflight_min_free_gb": {"/": 100000000}}'
EXPECTS_A_GPU = '{"nodeforge_profile_overrides": {"expected": {"gpus": 1}}}'


# The preflight role alone, for variables the validation play refuses from -e (nodeforge_in_container is the nodeforge
# role's finding, not an inventory setting; overriding it makes the container branches independent of this machine).
ROLE_ONLY = """\
- name: Preflight checks (the role alone)
  hosts: gpu_nodes
  gather_facts: true
  gather_subset: [min, virtual]
  roles:
    - role: nodeforge.gpu.preflight
"""


def preflight(
    tmp_path: Path, *extra_vars: str, playbook: str = "nodeforge.gpu.preflight"
) -> tuple[subprocess.CompletedProcess, dict]:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n  children:\n    gpu_nodes:\n      hosts:\n        n1:\n      vars:\n"
        f"        ansible_connection: local\n        ansible_python_interpreter: {sys.executable}\n"
        f"        nodeforge_profile: lab\n        nodeforge_state_dir: {tmp_path}/state\n"
    )
    return ansible_playbook(inventory, playbook, "--check", *extra_vars)


def ansible_playbook(inventory: Path, playbook: str, *options: str) -> tuple[subprocess.CompletedProcess, dict]:
    """options: ansible-playbook's; each one that is not an option (no leading -) is an extra var (-e)."""
    env = {
        **os.environ,
        "ANSIBLE_COLLECTIONS_PATH": str(content.collections_dir()),
        "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
        "ANSIBLE_ALLOW_BROKEN_CONDITIONALS": "false",
    }
    args = [a for option in options for a in ((option,) if option.startswith("-") else ("-e", option))]
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory), *args, playbook]
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    return run, json.loads(run.stdout)


def results_of(report: dict, task_name: str) -> list[dict]:
    return [
        task["hosts"]["n1"]
        for play in report["plays"]
        for task in play["tasks"]
        if task["task"]["name"].endswith(task_name)
    ]


def result_of(report: dict, task_name: str) -> dict:
    [found] = results_of(report, task_name)
    return found


def test_string_false_reports_the_unmet_expectations_without_failing(tmp_path):
    run, report = preflight(tmp_path, "preflight_fail_on_error=false", MISSES_DISK)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr
    # The assert passes, and its message is the warning.
    warned = result_of(report, "Assert that every preflight expectation is met")
    assert not warned.get("skipped") and not warned.get("failed")
    assert warned["msg"][0].startswith("preflight on n1: ") and warned["msg"][0].endswith(" not failing")
    assert any(line.startswith("n1: free space on / is ") for line in warned["msg"][1:])
    assert report["stats"]["n1"]["failures"] == 0


def test_string_true_fails_the_node_with_every_unmet_expectation(tmp_path):
    run, report = preflight(tmp_path, "preflight_fail_on_error=true", MISSES_DISK)
    assert run.returncode == 2, run.stdout[-3000:] + run.stderr
    failed = result_of(report, "Assert that every preflight expectation is met")
    assert failed["failed"] is True
    assert failed["msg"][0].startswith("preflight failed on n1: ")
    assert any(line.startswith("n1: free space on / is ") for line in failed["msg"][1:])


@pytest.mark.parametrize(
    ("in_container", "enforce_pci", "enforce_in_containers", "enforced"),
    [
        ("true", "true", "false", False),  # a container's PCI bus is the host's: counted, not enforced
        ("true", "false", "true", False),  # 'false' turns enforcement off, wherever
        ("false", "false", "false", False),
        ("true", "true", "true", True),
    ],
)
def test_string_booleans_decide_whether_the_pci_counts_are_enforced(
    tmp_path, in_container, enforce_pci, enforce_in_containers, enforced
):
    (tmp_path / "play.yml").write_text(ROLE_ONLY)
    run, report = preflight(
        tmp_path,
        "preflight_fail_on_error=false",
        f"nodeforge_in_container={in_container}",
        f"preflight_enforce_pci={enforce_pci}",
        f"preflight_enforce_pci_in_containers={enforce_in_containers}",
        MEETS_DISK,
        EXPECTS_A_GPU,
        playbook=str(tmp_path / "play.yml"),
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr
    found = result_of(report, "Report the preflight result")["preflight_result"]
    assert found["pci_enforced"] is enforced
    assert found["in_container"] is (in_container == "true")
    gpu_count_unmet = [m for m in found["unmet"] if m.startswith("expected exactly 1 NVIDIA GPUs")]
    assert len(gpu_count_unmet) == (1 if enforced else 0), found["unmet"]


# The role's own defaults, vars and templates, rendered on the controller (nothing runs on a node).
TOOLKIT_RENDER = """\
- name: Render nvidia_container_toolkit's files and derived variables
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Load the role's defaults and vars
      ansible.builtin.include_vars:
        file: "{{ item }}"
      loop: ["{{ toolkit_role }}/defaults/main.yml", "{{ toolkit_role }}/vars/main.yml"]

    - name: Show what the role would write
      ansible.builtin.debug:
        msg:
          crio: "{{ lookup('ansible.builtin.template', toolkit_role ~ '/templates/crio-nvidia.toml.j2') }}"
          repo: "{{ lookup('ansible.builtin.template', toolkit_role ~ '/templates/nvidia-container-toolkit.repo.j2') }}"
          memlock_services: "{{ __nvidia_container_toolkit_memlock_services }}"
      vars:
        __nvidia_container_toolkit_repo_url: https://nvidia.github.io/libnvidia-container/stable/rpm/$basearch
        __nvidia_container_toolkit_rpm_key: /etc/pki/rpm-gpg/nvidia-container-toolkit.asc
"""


@pytest.mark.parametrize("value", ["false", "true"])
def test_string_booleans_in_the_container_toolkit_files(tmp_path, value):
    (tmp_path / "play.yml").write_text(TOOLKIT_RENDER)
    (tmp_path / "hosts.yml").write_text(
        f"all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
        f"      ansible_python_interpreter: {sys.executable}\n"
    )
    role = content.roles_dir() / "nvidia_container_toolkit"
    run, report = ansible_playbook(
        tmp_path / "hosts.yml",
        str(tmp_path / "play.yml"),
        f"toolkit_role={role}",
        f"nvidia_container_toolkit_set_as_default={value}",
        f"nvidia_container_toolkit_validate_certs={value}",
        f"nvidia_container_toolkit_memlock={value}",
        '{"nvidia_container_toolkit_runtimes": ["containerd", "crio", "docker"]}',
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr
    [shown] = [
        task["hosts"]["localhost"]["msg"]
        for play in report["plays"]
        for task in play["tasks"]
        if task["task"]["name"] == "Show what the role would write"
    ]
    on = value == "true"
    assert ('default_runtime = "nvidia"' in shown["crio"]) is on
    assert f"sslverify={int(on)}" in shown["repo"].splitlines()
    assert shown["memlock_services"] == (["containerd", "crio", "docker"] if on else [])
