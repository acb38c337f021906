"""`nodeforge check`: every class of bad inventory is rejected with a message naming the culprit.

Every case that reads messages() runs twice: through the CLI (`nodeforge check --json`) and through
`ansible-playbook` on the validation play that opens every nodeforge.gpu playbook (tests/playbooks/validated.yml),
where a refused inventory must never reach the node play that follows. Same inventory, same messages.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from nodeforge import checks, content, specs
from nodeforge.cli import main
from nodeforge.collection import model
from tests.conftest import ANSIBLE_CORE, PLAYBOOKS, REPO

SAMPLES = sorted(p.parent for p in (REPO / "inventories").glob("*/hosts.yml"))


def write_inventory(tmp_path: Path, group_vars: dict | None = None, hosts: dict | None = None, **files: str) -> Path:
    hosts = hosts if hosts is not None else {"node-01": None, "node-02": None}
    tmp_path.mkdir(parents=True, exist_ok=True)
    inventory = {"all": {"children": {"gpu_nodes": {"hosts": hosts}}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "group_vars").mkdir(exist_ok=True)
    (tmp_path / "group_vars" / "gpu_nodes.yml").write_text(
        yaml.safe_dump({"nodeforge_profile": "dgx-1", **(group_vars or {})})
    )
    for rel, text in files.items():
        path = tmp_path / rel.replace("__", "/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return tmp_path


ENTRY = {"mode": "cli"}
NODE_TASK = "Stand for a node task"


def pytest_generate_tests(metafunc):
    if "messages" in metafunc.function.__code__.co_names:
        metafunc.fixturenames.append("entry")
        modes = ["cli", pytest.param("ansible-playbook", marks=pytest.mark.slow)]
        metafunc.parametrize("entry", modes)


@pytest.fixture(autouse=True)
def entry_mode(request):
    callspec = getattr(request.node, "callspec", None)
    ENTRY["mode"] = callspec.params.get("entry", "cli") if callspec else "cli"


def _line(problem: dict) -> str:
    parts = [problem["where"], problem["scope"], problem["variable"]]
    return ": ".join(p for p in parts if p) + f": found {problem['found']}; expected {problem['expected']}"


def _ansible_error(stderr: str) -> str:
    """ansible-playbook's own refusal of a file it cannot load, in check's words (file:line, YAML syntax error)."""
    where = re.search(r"The error appears to be in '([^']+)': line (\d+)", stderr)
    stderr = "\n".join(line for line in stderr.splitlines() if "does not support Ansible version" not in line)
    text = "YAML syntax error" if "Syntax Error while loading YAML" in stderr else stderr.strip()
    return f"{where[1]}:{where[2]}: {text}" if where else text


def _args(path: Path | list[Path], extravars: dict | None, vault_password_file: Path | None) -> list[str]:
    """-i (repeated for several sources), -e and --vault-password-file: the same for the CLI and ansible-playbook."""
    args = [arg for p in (path if isinstance(path, list) else [path]) for arg in ("-i", str(p))]
    args += ["-e", json.dumps(extravars)] if extravars else []
    return args + (["--vault-password-file", str(vault_password_file)] if vault_password_file else [])


def _via_cli(path: Path | list[Path], extravars: dict | None, vault_password_file: Path | None = None) -> list[str]:
    result = CliRunner().invoke(main, ["check", "--json", *_args(path, extravars, vault_password_file)])
    payload = json.loads(result.stdout)
    assert result.exit_code == (1 if payload["problems"] else 0), result.output
    return [_line(p) for p in payload["problems"]]


def _via_ansible_playbook(
    path: Path | list[Path], extravars: dict | None, vault_password_file: Path | None = None
) -> list[str]:
    env = {
        **os.environ,
        "ANSIBLE_COLLECTIONS_PATH": str(content.collections_dir()),
        "ANSIBLE_STDOUT_CALLBACK": "json",
        "ANSIBLE_NOCOLOR": "1",
    }
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), str(PLAYBOOKS / "validated.yml")]
    run = subprocess.run(cmd + _args(path, extravars, vault_password_file), env=env, capture_output=True, text=True)
    if not run.stdout.strip():  # refused by ansible-playbook itself, before any play
        assert run.returncode != 0
        return [_ansible_error(run.stderr)]
    plays = json.loads(run.stdout)["plays"]
    [validation] = [t for t in plays[0]["tasks"] if t["task"]["name"].startswith("Check the inventory")]
    [result] = validation["hosts"].values()
    problems = [_line(p) for p in result["problems"]]
    node_tasks = [t for play in plays for t in play["tasks"] if t["task"]["name"] == NODE_TASK]
    if problems:
        assert run.returncode != 0 and not node_tasks, "a refused inventory reached the node play"
    else:
        assert run.returncode == 0 and node_tasks, run.stdout[-2000:]
    return problems


def messages(
    path: Path | list[Path], extravars: dict | None = None, vault_password_file: Path | None = None
) -> list[str]:
    if ENTRY["mode"] == "ansible-playbook":
        return _via_ansible_playbook(path, extravars, vault_password_file)
    return _via_cli(path, extravars, vault_password_file)


@pytest.mark.parametrize("sample", SAMPLES, ids=[p.name for p in SAMPLES])
def test_sample_inventories_are_valid(sample):
    found = messages(sample)
    if sample.name == "vsphere-t4":
        # NVIDIA ships the GRID guest driver only through its Licensing Portal: until the operator names a local
        # copy, check refuses the vGPU guests, and says how to fix it.
        [problem] = found
        assert "nvidia_driver.grid lacks version, package" in problem
    else:
        assert found == []


def test_samples_cover_the_reference_systems():
    assert {p.name for p in SAMPLES} >= {"dgx1-openshift", "c4140-k8s", "vsphere-t4", "lab"}


def test_good_inventory_has_no_problems(tmp_path):
    assert messages(write_inventory(tmp_path, {"nodeforge_reboot_policy": "if_needed"})) == []


def test_yaml_syntax_error_names_file_and_line(tmp_path):
    inv = write_inventory(tmp_path, host_vars__node_01_yml="")
    (inv / "host_vars" / "node-01.yml").write_text("a: 1\nb: [unclosed\n")
    [problem] = messages(inv)
    if ENTRY["mode"] == "ansible-playbook" and ANSIBLE_CORE >= (2, 19):
        # ansible-playbook 2.19 and newer refuse the file before the validation play, and name neither file nor
        # line (docs/ansible-settings.md, "Upstream reports"); `nodeforge check` does.
        assert problem.startswith("[ERROR]: YAML parsing failed: While parsing a flow sequence"), problem
        return
    assert "host_vars/node-01.yml:3" in problem or "host_vars/node-01.yml:2" in problem
    assert "YAML syntax error" in problem


def test_a_yaml_typo_in_the_hosts_file_is_one_problem_at_its_line(tmp_path):
    """Named by file and line (not the directory), said as YAML says it, without the consequence ("no hosts in group
    gpu_nodes") as a second problem. `nodeforge check` only: ansible-playbook warns and runs on no host."""
    inv = write_inventory(tmp_path, hosts={"node-01": {"ansible_host": "10.0.0.1"}, "node-02": None})
    hosts = inv / "hosts.yml"
    hosts.write_text(hosts.read_text().replace("ansible_host: 10.0.0.1", "ansible_host: [10.0.0.1"))
    lines = hosts.read_text().splitlines()
    opened = next(n for n, line in enumerate(lines, 1) if "[10.0.0.1" in line)
    [problem] = _via_cli(inv, None)
    assert problem.startswith(f"{hosts}:{opened + 1}: found YAML syntax error at column "), problem
    assert f"(while parsing a flow sequence at line {opened})" in problem and "no hosts in group" not in problem


def test_an_extra_vars_file_with_a_yaml_typo_is_named_by_line(tmp_path):
    (tmp_path / "overrides.yml").write_text("nodeforge_manifest_overrides:\n  ofed: [1\nnext: 2\n")
    result = CliRunner().invoke(main, ["check", "-i", str(write_inventory(tmp_path / "inv")), "-e",
                                       f"@{tmp_path / 'overrides.yml'}"])  # fmt: skip
    assert result.exit_code == 4
    assert f"{tmp_path / 'overrides.yml'}:3: YAML syntax error at column " in " ".join(result.output.split())


def test_unknown_variable_with_our_prefix_suggests_the_right_one(tmp_path):
    [problem] = messages(write_inventory(tmp_path, {"nodeforge_reboot_polcy": "never"}))
    assert "group_vars/gpu_nodes.yml: group gpu_nodes: nodeforge_reboot_polcy" in problem
    assert "did you mean nodeforge_reboot_policy?" in problem


def test_misspelt_prefix_is_caught_too(tmp_path):
    [problem] = messages(write_inventory(tmp_path, {"nodefroge_reboot_policy": "never"}))
    assert "did you mean nodeforge_reboot_policy?" in problem


def test_foreign_variables_are_left_alone(tmp_path):
    assert messages(write_inventory(tmp_path, {"site_ntp_server": "ntp.example", "ansible_user": "root"})) == []


def test_type_violation(tmp_path):
    [problem] = messages(write_inventory(tmp_path, {"nodeforge_manifest_overrides": ["not", "a", "dict"]}))
    assert "nodeforge_manifest_overrides" in problem
    assert "(list)" in problem and "expected type dict" in problem


def test_choice_violation(tmp_path):
    [problem] = messages(write_inventory(tmp_path, {"nodeforge_reboot_policy": "sometimes"}))
    assert "nodeforge_reboot_policy: found 'sometimes'; expected one of never, if_needed" in problem


def test_unknown_profile_lists_the_known_ones(tmp_path):
    [problem] = messages(write_inventory(tmp_path, hosts={"node-01": {"nodeforge_profile": "dgx1"}}))
    assert "hosts.yml: host node-01: nodeforge_profile: found unknown profile 'dgx1'" in problem
    for name in content.profiles():
        assert name in problem
    assert "did you mean 'dgx-1'?" in problem


def test_missing_profile(tmp_path):
    inv = write_inventory(tmp_path)
    (inv / "group_vars" / "gpu_nodes.yml").write_text("nodeforge_reboot_policy: never\n")
    [problem] = messages(inv)
    assert "hosts node-01, node-02: nodeforge_profile: found nothing; expected a hardware profile" in problem


def test_no_workers(tmp_path):
    (tmp_path / "hosts.yml").write_text("all:\n  hosts:\n    lonely:\n")
    [problem] = messages(tmp_path)
    assert "no hosts in group gpu_nodes" in problem


def test_open_modules_on_volta(tmp_path):
    [problem] = messages(write_inventory(tmp_path, {"nvidia_driver_flavor": "open"}))
    assert "group_vars/gpu_nodes.yml: group gpu_nodes, for hosts node-01, node-02: nvidia_driver_flavor" in problem
    assert "'open' on profile dgx-1 (volta)" in problem


def test_open_modules_fine_on_hopper(tmp_path):
    assert messages(write_inventory(tmp_path, {"nodeforge_profile": "dgx-h100", "nvidia_driver_flavor": "open"})) == []


def test_branch_newer_than_580_on_volta(tmp_path):
    [problem] = messages(write_inventory(tmp_path, hosts={"node-01": {"nvidia_driver_branch": "595"}}))
    assert "hosts.yml: host node-01: nvidia_driver_branch: found 595 on profile dgx-1 (volta)" in problem
    assert "580 or older" in problem


def test_profile_default_branch_is_used(tmp_path):
    # dgx-h100 defaults to R595; on a Volta override of the profile the rule still uses effective values.
    assert messages(write_inventory(tmp_path, {"nodeforge_profile": "dgx-h100"})) == []


def test_nv_peer_mem_with_modern_driver(tmp_path):
    inv = write_inventory(
        tmp_path, {"gpudirect_rdma_module": "nv_peer_mem", "gpudirect_rdma_nv_peer_mem_checksum": "sha256:" + "0" * 64}
    )
    [problem] = messages(inv)
    assert "gpudirect_rdma_module: found nv_peer_mem with driver branch 580" in problem


def test_driver_version_outside_branch(tmp_path):
    [problem] = messages(write_inventory(tmp_path, {"nvidia_driver_version": "595.91.07"}))
    assert "nvidia_driver_version: found 595.91.07 with nvidia_driver_branch 580" in problem


def test_driver_source_the_os_cannot_use(tmp_path):
    [problem] = messages(write_inventory(tmp_path, {"nodeforge_os": "rhel9", "nvidia_driver_source": "distro"}))
    assert "nvidia_driver_source: found 'distro' on nodeforge_os rhel9" in problem
    assert "cuda_repo" in problem


def test_extra_vars_are_checked(tmp_path):
    [problem] = messages(write_inventory(tmp_path), {"nodeforge_reboot_policy": "maybe"})
    assert problem.startswith("command line (-e): all hosts: nodeforge_reboot_policy")


def test_all_problems_reported_at_once(tmp_path):
    inv = write_inventory(
        tmp_path,
        {"nodeforge_reboot_policy": "x", "nodeforge_profle": "dgx-1", "nvidia_driver_flavor": "open"},
        hosts={"node-01": {"nodeforge_profile": "nope"}, "node-02": None},
    )
    found = messages(inv)
    assert len(found) == 4, found


def test_templated_values_are_not_type_checked(tmp_path):
    assert messages(write_inventory(tmp_path, {"nodeforge_reboot_policy": "{{ site_policy }}"})) == []


def test_profile_choices_match_the_profile_files():
    spec = specs.role_specs()["nodeforge"].options["nodeforge_profile"]
    assert sorted(spec.choices) == sorted(content.profiles())


@pytest.mark.parametrize("role", sorted(specs.role_specs()))
def test_argument_spec_defaults_match_role_defaults(role):
    defaults_file = content.roles_dir() / role / "defaults" / "main.yml"
    defaults = yaml.safe_load(defaults_file.read_text()) or {}
    options = specs.role_specs()[role].options
    for name, value in defaults.items():
        assert name in options, f"{role}: {name} is in defaults/main.yml but not in meta/argument_specs.yml"
        assert options[name].default == value, f"{role}: {name} default differs between defaults and specs"
    for name, var in options.items():
        if not var.required:
            assert name in defaults, f"{role}: {name} has no default in defaults/main.yml"


def test_ofed_mode_the_os_cannot_use_follows_manifest_overrides(tmp_path):
    # The 2026 manifest lets every supported OS use every OFED mode; a site whose mirror lacks MLNX_OFED for
    # Debian says so through nodeforge_manifest_overrides, which check applies exactly as the roles do.
    inv = write_inventory(
        tmp_path,
        {
            "nodeforge_os": "debian12",
            "ofed_mode": "mlnx_ofed",
            "nodeforge_manifest_overrides": {
                "os_support": {"ofed_mode": {"mlnx_ofed": ["rhel8", "rhel9"]}},
                "ofed": {"mlnx_ofed": {"checksum": "sha256:" + "2" * 64}},
            },
        },
    )
    [problem] = messages(inv)
    assert "ofed_mode: found 'mlnx_ofed' on nodeforge_os debian12" in problem
    assert "doca, inbox" in problem


def test_distro_source_with_a_branch_the_distribution_lacks(tmp_path):
    inv = write_inventory(tmp_path, {"nodeforge_os": "debian12", "nvidia_driver_source": "distro"})
    [problem] = messages(inv)
    assert "nvidia_driver_branch: found 580 with nvidia_driver_source distro on nodeforge_os debian12" in problem
    assert "535" in problem


def test_distro_source_with_the_shipped_branch_is_fine(tmp_path):
    inv = write_inventory(
        tmp_path, {"nodeforge_os": "debian12", "nvidia_driver_source": "distro", "nvidia_driver_branch": "535"}
    )
    assert messages(inv) == []


def test_nv_peer_mem_needs_a_verified_tarball(tmp_path):
    # The manifest names the upstream tarball but no checksum: nothing unverified is ever built.
    inv = write_inventory(tmp_path, {"gpudirect_rdma_module": "nv_peer_mem", "nvidia_driver_branch": "450"})
    [problem] = messages(inv)
    assert "gpudirect_rdma_nv_peer_mem_checksum: found no checksum for the nv_peer_mem tarball" in problem
    inv = write_inventory(
        tmp_path,
        {
            "gpudirect_rdma_module": "nv_peer_mem",
            "nvidia_driver_branch": "450",
            "gpudirect_rdma_nv_peer_mem_checksum": "sha256:" + "0" * 64,
        },
    )
    assert messages(inv) == []


def test_gdrcopy_checksum_from_manifest_overrides(tmp_path):
    [problem] = messages(write_inventory(tmp_path, {"gpudirect_rdma_gdrcopy": True}))
    assert "gpudirect_rdma_gdrcopy_checksum" in problem
    overrides = {"gpudirect_rdma": {"gdrcopy": {"checksum": "sha256:" + "1" * 64}}}
    inv = write_inventory(tmp_path, {"gpudirect_rdma_gdrcopy": True, "nodeforge_manifest_overrides": overrides})
    assert messages(inv) == []


def test_mlnx_ofed_needs_a_verified_tarball(tmp_path):
    # The 2026 manifest's MLNX_OFED URL pattern is unconfirmed and has no checksum: mlnxofedinstall never runs
    # from an unverified tarball.
    [problem] = messages(write_inventory(tmp_path, {"ofed_mode": "mlnx_ofed"}))
    assert (
        "gpu_nodes.yml: group gpu_nodes, for hosts node-01, node-02: ofed_mlnx_ofed_checksum: found no checksum"
        in problem
    )
    assert "the mlnx_ofed tarball (ofed_mode: mlnx_ofed, from " in problem
    assert "ofed.mlnx_ofed.checksum in nodeforge_manifest_overrides" in problem
    verified = {"ofed_mode": "mlnx_ofed", "ofed_mlnx_ofed_checksum": "sha256:" + "3" * 64}
    assert messages(write_inventory(tmp_path, verified)) == []


def test_mlnx_ofed_as_the_manifest_default_mode_needs_a_checksum_too(tmp_path):
    overrides = {"ofed": {"mode": "mlnx_ofed", "mlnx_ofed": {"url": ""}}}
    found = messages(write_inventory(tmp_path, {"nodeforge_manifest_overrides": overrides}))
    assert len(found) == 2, found
    assert all("(nodeforge_manifest_overrides ofed.mode)" in p for p in found), found
    assert {p.split(": found")[0].rsplit(": ", 1)[-1] for p in found} == {
        "ofed_mlnx_ofed_url",
        "ofed_mlnx_ofed_checksum",
    }


def test_doca_and_inbox_need_no_tarball(tmp_path):
    for mode in ("doca", "inbox"):
        assert messages(write_inventory(tmp_path, {"ofed_mode": mode})) == []


def test_selinux_disabled_needs_the_opt_in(tmp_path):
    inv = write_inventory(tmp_path, hosts={"node-01": {"selinux_modules_state": "disabled"}, "node-02": None})
    [problem] = messages(inv)
    assert "hosts.yml: host node-01: selinux_modules_state: found disabled (turns SELinux off" in problem
    assert "selinux_modules_allow_disabled: true" in problem
    opted_in = {"selinux_modules_state": "disabled", "selinux_modules_allow_disabled": True}
    assert messages(write_inventory(tmp_path, hosts={"node-01": opted_in, "node-02": None})) == []
    # The opt-in as text (-e selinux_modules_allow_disabled=true) is the boolean it means; "false" as text is no opt-in.
    inv = write_inventory(tmp_path, hosts={"node-01": {"selinux_modules_state": "disabled"}, "node-02": None})
    assert messages(inv, extravars={"selinux_modules_allow_disabled": "true"}) == []
    assert len(messages(inv, extravars={"selinux_modules_allow_disabled": "false"})) == 1
    for state in ("enforcing", "permissive"):
        assert messages(write_inventory(tmp_path, {"selinux_modules_state": state})) == []


def test_vgpu_guest_needs_the_grid_driver_in_the_manifest(tmp_path):
    [problem] = messages(write_inventory(tmp_path, {"nodeforge_profile": "vsphere-t4-vgpu"}))
    assert "profile vsphere-t4-vgpu (vGPU guest: source grid)" in problem
    assert "nvidia_driver.grid lacks version, package, deb|rpm.url" in problem
    # A URL with no checksum was accepted (http:// too): the package installs without a signed repository, so its
    # sha256/sha512 is required; md5 and sha1 are refused.
    grid = {"version": "580.95.05", "package": "nvidia-linux-grid-580", "deb": {"url": "http://mirror/g.deb"}}
    site = {"nodeforge_profile": "vsphere-t4-vgpu", "nodeforge_os": "ubuntu22.04"}
    inv = write_inventory(tmp_path, {**site, "nodeforge_manifest_overrides": {"nvidia_driver": {"grid": grid}}})
    [problem] = messages(inv)
    assert "nvidia_driver.grid lacks deb.checksum" in problem
    grid["deb"]["checksum"] = "md5:" + "0" * 32
    inv = write_inventory(tmp_path, {**site, "nodeforge_manifest_overrides": {"nvidia_driver": {"grid": grid}}})
    [problem] = messages(inv)
    assert "nvidia_driver.grid.deb.checksum: found 'md5:000" in problem and "md5 and sha1 are refused" in problem
    grid["deb"]["checksum"] = "sha256:" + "a" * 64
    inv = write_inventory(tmp_path, {**site, "nodeforge_manifest_overrides": {"nvidia_driver": {"grid": grid}}})
    assert messages(inv) == []
    # The same manifest on a Rocky node: no rpm to install.
    inv = write_inventory(
        tmp_path,
        {
            "nodeforge_profile": "vsphere-t4-vgpu",
            "nodeforge_os": "rocky9",
            "nodeforge_manifest_overrides": {"nvidia_driver": {"grid": grid}},
        },
    )
    [problem] = messages(inv)
    assert "lacks rpm.url" in problem


BAD_OVERRIDES = [
    ({"nvidia_driver": None}, "nodeforge_manifest_overrides.nvidia_driver: found None (null); expected a mapping"),
    ({"ofed": [1]}, "nodeforge_manifest_overrides.ofed: found [1] (list); expected a mapping"),
    ({"nvidia_driver": "x"}, "nodeforge_manifest_overrides.nvidia_driver: found 'x' (str); expected a mapping"),
    ({"nvidia_driver": {"branches": [1]}}, "nodeforge_manifest_overrides.nvidia_driver.branches: found [1] (list)"),
    ({"gpudirect_rdma": {"gdrcopy": "x"}}, "nodeforge_manifest_overrides.gpudirect_rdma.gdrcopy: found 'x' (str)"),
    (
        {"nvidia_container_toolkit": {"packages": "x"}},
        "nvidia_container_toolkit.packages: found 'x' (str); expected a list",
    ),
    (
        {"nvidia_drvier": {}},
        "nodeforge_manifest_overrides.nvidia_drvier: found {} (dict); expected one of the manifest",
    ),
    ({"nvidia_driver": {"grid": {"verison": "580.95.05"}}}, "grid.verison: found '580.95.05' (str); expected one of"),
]


@pytest.mark.parametrize(("overrides", "expected"), BAD_OVERRIDES, ids=[str(o) for o, _ in BAD_OVERRIDES])
def test_manifest_overrides_that_do_not_fit_the_manifest(tmp_path, overrides, expected):
    """Named errors, never a traceback (a list where the manifest has a mapping crashed the rules)."""
    [problem] = messages(write_inventory(tmp_path, {"nodeforge_manifest_overrides": overrides}))
    assert expected in problem


def test_manifest_overrides_that_fit(tmp_path):
    """New table entries (a branch, a distribution), single values, and an empty (null) overrides variable."""
    overrides = {
        "nvidia_driver": {"branches": {"620": {"version": "620.10.01"}}, "distro_branches": {"debian13": ["580"]}},
        "ofed": {"mode": "inbox"},
    }
    assert messages(write_inventory(tmp_path / "a", {"nodeforge_manifest_overrides": overrides})) == []
    assert messages(write_inventory(tmp_path / "b", {"nodeforge_manifest_overrides": None})) == []


def test_type_errors_name_plain_types(tmp_path):
    [problem] = messages(write_inventory(tmp_path, {"nodeforge_manifest_overrides": "x"}))
    assert problem.endswith("nodeforge_manifest_overrides: found 'x' (str); expected type dict"), problem


HOSTILE = [
    # check accepted these; the role refused the branch only at run time and wrote the others into files.
    (
        {"nvidia_driver_branch": "535; touch /tmp/x"},
        "nvidia_driver_branch: found '535; touch /tmp/x'; expected a driver branch",
    ),
    (
        {"nvidia_driver_branch": "535\n"},
        "nvidia_driver_branch: found '535\\n'; expected a value without control characters",
    ),
    (
        {"nvidia_driver_module_options": {"NVreg_EnableMSI": "1\ninstall nvidia /bin/sh -c 'id > /tmp/x'"}},
        'nvidia_driver_module_options.NVreg_EnableMSI: found "1\\ninstall nvidia',
    ),
    (
        {"nvidia_driver_module_options": {"NVreg_EnableMSI": "1 NVreg_Other=2"}},
        "nvidia_driver_module_options.NVreg_EnableMSI: found '1 NVreg_Other=2'; expected a parameter value without",
    ),
    (
        {"nvidia_container_toolkit_repo_url": "http://mirror/x /\ndeb [trusted=yes] http://evil/ /"},
        "nvidia_container_toolkit_repo_url: found 'http://mirror/x /\\ndeb [trusted=yes] http://evil/ /'",
    ),
    ({"nvidia_container_toolkit_repo_url": "http://mirror/x [trusted=yes]"}, "expected an http(s):// or file:// URL"),
    (
        {"nvidia_driver_grid_client_token": "abc\ndef"},
        "nvidia_driver_grid_client_token: found ********; expected a value",
    ),
    ({"nvidia_driver_dkms_kernels": ["6.1.0-28-amd64", "6.1 x"]}, "nvidia_driver_dkms_kernels[1]: found '6.1 x'"),
    ({"ofed_memlock_users": ["*\n* soft core unlimited"]}, "ofed_memlock_users[0]: found '*\\n* soft core unlimited'"),
    ({"selinux_modules_booleans": {"a\nb": True}}, "selinux_modules_booleans.'a\\nb': found the key 'a\\nb'"),
    # The role refused these only at run time (limits.d line "* hard nofile 0 memlock ..."; a unit name with a space).
    (
        {"ofed_memlock_users": ["*", "* hard nofile 0"]},
        "ofed_memlock_users[1]: found '* hard nofile 0'; expected a limits.conf domain",
    ),
    (
        {"ofed_memlock_services": ["containerd", "crio x"]},
        "ofed_memlock_services[1]: found 'crio x'; expected a systemd",
    ),
    (
        {"nodeforge_manifest_overrides": {"nvidia_container_toolkit": {"deb_url": "http://x/ y"}}},
        "nodeforge_manifest_overrides.nvidia_container_toolkit.deb_url: found 'http://x/ y'; expected an http(s)",
    ),
]


# Ids of the variable's name and the case's number: the values themselves (newlines, brackets, quotes) make ids that
# pytest cannot always find again when they are given back on its command line (mutmut does).
@pytest.mark.parametrize(
    ("group_vars", "expected"), HOSTILE, ids=[f"{i}-{next(iter(g))}" for i, (g, _) in enumerate(HOSTILE)]
)
def test_values_unsafe_in_config_files_are_refused(tmp_path, group_vars, expected):
    [problem] = messages(write_inventory(tmp_path, group_vars))
    assert expected in problem, problem
    assert "abc" not in problem  # the no_log token is never shown


def test_values_safe_in_config_files_pass(tmp_path):
    group_vars = {
        "nvidia_driver_module_options": {
            "NVreg_EnableMSI": 1,
            "NVreg_RegistryDwords": "RMUseSwI2c=0x01;RMI2cSpeed=100",
        },
        "nvidia_container_toolkit_repo_url": "https://mirror.example/libnvidia-container/stable/deb/$(ARCH)",
        "nvidia_driver_dkms_kernels": ["6.1.0-28-amd64", "5.14.0-427.13.1.el9_4.x86_64"],
        "ofed_memlock_users": ["*", "@rdma", "root"],
        "ofed_memlock_services": ["containerd", "crio", "docker"],
    }
    assert messages(write_inventory(tmp_path, group_vars)) == []


@pytest.mark.parametrize(
    "checksum", ["md5:" + "0" * 32, "sha1:" + "0" * 40, "sha256:abc", "0" * 64, "sha256:" + "0" * 64 + "\n"]
)
def test_only_sha256_or_sha512_vouch_for_a_tarball(tmp_path, checksum):
    """md5/sha1 checksums passed check silently (and the role verified with them)."""
    group_vars = {"gpudirect_rdma_gdrcopy": True, "gpudirect_rdma_gdrcopy_checksum": checksum}
    [problem] = messages(write_inventory(tmp_path, group_vars))
    assert "gpudirect_rdma_gdrcopy_checksum: found" in problem
    assert "sha256:<64 hex digits> or sha512:<128 hex digits>" in problem or "control characters" in problem


def test_templated_values_are_left_to_the_node(tmp_path):
    inv = write_inventory(tmp_path, {"nvidia_driver_version": "{{ site_driver_version }}"})
    assert messages(inv) == []


def test_lab_inventory_is_the_sample_with_its_own_nodes(tmp_path, monkeypatch):
    """`lab up` writes inventories/lab/hosts.yml's settings for its nodes: they pass check, resolve to Debian's 535."""
    from nodeforge import lab

    monkeypatch.setenv("NODEFORGE_STATE_DIR", str(tmp_path))
    path = lab.write_inventory("t", ["nodeforge-t-1"], mirror=False)
    written = yaml.safe_load(path.read_text())["all"]["children"]["gpu_nodes"]
    assert list(written["hosts"]) == ["nodeforge-t-1"]
    # Without a mirror the nodes use NVIDIA's repository: the manifest's URLs, no loopback override left behind.
    assert "nodeforge_manifest_overrides" not in written["vars"]
    assert messages(path) == []
    variables, origins = checks.load([str(path)]).host_variables("nodeforge-t-1")
    host = model.HostModel("nodeforge-t-1", variables, origins)
    assert host.get("nvidia_driver_branch") == model.Value("535", f"{path}: group gpu_nodes", True)
    assert host.driver_source().value == "distro"

    # With a mirror: the sample's settings, plus the mirror key's fingerprint pinned (the role checks it).
    fingerprint = "E6DCF6362A8B771973439F0372CADD94640FFE7D"
    with_mirror = yaml.safe_load(lab.write_inventory("t", ["nodeforge-t-1"], True, [fingerprint]).read_text())
    written_group = with_mirror["all"]["children"]["gpu_nodes"]
    overrides = written_group["vars"]["nodeforge_manifest_overrides"]
    # One key signs the whole mirror: pinned for the toolkit's key, cuda-keyring's keyring, the CUDA RPM key and
    # DOCA's key.
    assert overrides["nvidia_container_toolkit"].pop("key_fingerprints") == [fingerprint]
    assert overrides["nvidia_driver"]["cuda_repo"].pop("keyring_fingerprints") == [fingerprint]
    assert overrides["nvidia_driver"]["cuda_repo"].pop("key_fingerprints_rpm") == [fingerprint]
    assert overrides["ofed"]["doca"].pop("key_fingerprints") == [fingerprint]
    sample = yaml.safe_load((REPO / "inventories" / "lab" / "hosts.yml").read_text())
    assert written_group["vars"] == sample["all"]["children"]["gpu_nodes"]["vars"]
    # A Debian 12 lab has no OS groups.
    assert "children" not in written_group


def test_mixed_lab_inventory_puts_each_node_in_its_os_group(tmp_path, monkeypatch):
    """`lab up --os debian12,debian13,rocky9,ubuntu24.04,ubuntu22.04`: each node not on Debian 12 in its OS's group,
    whose vars (the sample's) resolve per node: Debian 13's branch 550, Canonical's server packages (distro) on Ubuntu
    22.04, NVIDIA's CUDA repository on Rocky, RHEL and Ubuntu 24.04."""
    from nodeforge import lab

    monkeypatch.setenv("NODEFORGE_STATE_DIR", str(tmp_path))
    listed = lab.parse_oses("debian12,debian13,rocky9,ubuntu24.04,ubuntu22.04,rhel9")
    oses = dict(zip([f"nodeforge-t-{i}" for i in range(1, 7)], listed, strict=True))
    path = lab.write_inventory("t", list(oses), True, ["E6DCF6362A8B771973439F0372CADD94640FFE7D"], oses=oses)
    written = yaml.safe_load(path.read_text())["all"]["children"]["gpu_nodes"]
    assert {group: list(data["hosts"]) for group, data in written["children"].items()} == {
        "lab_debian13": ["nodeforge-t-2"],
        "lab_ubuntu2204": ["nodeforge-t-5"],
        "lab_ubuntu2404": ["nodeforge-t-4"],
        "lab_rocky9": ["nodeforge-t-3"],
        "lab_rhel9": ["nodeforge-t-6"],
    }
    assert messages(path) == []
    inventory = checks.load([str(path)])
    resolved = {}
    for host in oses:
        variables, origins = inventory.host_variables(host)
        node = model.HostModel(host, variables, origins)
        resolved[host] = (node.driver_source().value, node.get("nvidia_driver_branch").value)
    assert resolved == {
        "nodeforge-t-1": ("distro", "535"),
        "nodeforge-t-2": ("distro", "550"),
        "nodeforge-t-3": ("cuda_repo", "580"),
        "nodeforge-t-4": ("cuda_repo", "580"),
        "nodeforge-t-5": ("distro", "580"),
        "nodeforge-t-6": ("cuda_repo", "580"),
    }
    # Two Debian 13 nodes: one group, both in it; a lab of Debian 12 nodes writes no groups at all.
    two = lab.inventory(["a", "b"], oses={"a": "debian13", "b": "debian13"})["all"]["children"]["gpu_nodes"]
    assert list(two["children"]) == ["lab_debian13"] and list(two["children"]["lab_debian13"]["hosts"]) == ["a", "b"]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("", "(unknown: none given)"),
        ("debian12,sles15", "(unknown: 'sles15')"),
        ("debian12, rhel10 ,centos7", "(unknown: 'rhel10', 'centos7')"),
    ],
)
def test_lab_os_list_names_what_it_cannot_run(value, problem):
    from nodeforge import lab

    with pytest.raises(lab.LabError) as error:
        lab.parse_oses(value)
    assert str(error.value).startswith(
        f"--os {value!r}: expected a comma-separated list of "
        "debian12, debian13, rocky8, rocky9, rhel8, rhel9, ubuntu22.04, ubuntu24.04 "
    )
    assert str(error.value).endswith(problem)
    assert lab.parse_oses(" rocky9,debian12 ") == ["rocky9", "debian12"]


def test_lab_mirror_layout_is_checked(tmp_path):
    from nodeforge import lab

    with pytest.raises(lab.LabError) as missing:
        lab.check_mirror(tmp_path)
    assert str(missing.value).endswith("missing for debian12: gpgkey, stable/deb/amd64/InRelease")
    with pytest.raises(lab.LabError, match="missing for debian12: the directory itself"):
        lab.check_mirror(tmp_path / "nowhere")
    built = subprocess.run(
        [sys.executable, str(REPO / "tools" / "lab_mirror.py"), str(tmp_path / "mirror")],
        capture_output=True,
        text=True,
        check=True,
    )
    lab.check_mirror(Path(built.stdout.strip()), lab.LAB_OSES)
    # A mirror without Ubuntu's archive serves every node but an Ubuntu one.
    shutil.rmtree(tmp_path / "mirror" / "ubuntu" / "dists" / "jammy-updates")
    lab.check_mirror(tmp_path / "mirror", ["debian12", "ubuntu24.04", "rocky9"])
    with pytest.raises(lab.LabError) as ubuntu:
        lab.check_mirror(tmp_path / "mirror", ["ubuntu22.04"])
    assert str(ubuntu.value).endswith("missing for ubuntu22.04: ubuntu/dists/jammy-updates/InRelease")
    # A mirror without the EL repositories serves the Debian nodes, not a Rocky node.
    shutil.rmtree(tmp_path / "mirror" / "rocky")
    lab.check_mirror(tmp_path / "mirror", ["debian12", "debian13", "ubuntu24.04"])
    with pytest.raises(lab.LabError) as el:
        lab.check_mirror(tmp_path / "mirror", ["debian12", "rocky9"])
    assert str(el.value).endswith(
        "missing for debian12, rocky9: rocky/9/BaseOS/x86_64/os/repodata/repomd.xml, "
        "rocky/9/AppStream/x86_64/os/repodata/repomd.xml"
    )
    assert (tmp_path / "mirror" / "gpgkey").read_text().startswith("-----BEGIN PGP PUBLIC KEY BLOCK-----")
    # The mirror key's fingerprint, as gpg prints it, is what lab up pins.
    listing = subprocess.run(
        ["gpg", "--batch", "--show-keys", "--with-colons", str(tmp_path / "mirror" / "gpgkey")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert [f"fpr:::::::::{f}:" in listing for f in lab.mirror_fingerprints(tmp_path / "mirror")] == [True]
    (tmp_path / "mirror" / "gpgkey").write_text("<html>not a key</html>")
    with pytest.raises(lab.LabError, match="gpgkey is not an armored OpenPGP public key"):
        lab.mirror_fingerprints(tmp_path / "mirror")


# ---- inventories as sites write them: INI, vault, group priority, several files or sources ---------------------

INI = """\
[gpu_nodes]
node-01
node-02

[gpu_nodes:vars]
nodeforge_profile=dgx-1
{extra}
"""


def _without_paths(found: list[str], *paths: Path) -> list[str]:
    for path in paths:
        found = [m.replace(str(path), "<file>") for m in found]
    return found


def test_ini_inventory_gets_the_verdicts_of_its_yaml_twin(tmp_path):
    ini = tmp_path / "ini"
    ini.mkdir()
    (ini / "hosts").write_text(INI.format(extra="nvidia_driver_flavor=open"))
    yaml_twin = write_inventory(tmp_path / "yaml", {"nvidia_driver_flavor": "open"})
    from_ini = messages(ini)
    assert len(from_ini) == 1 and "'open' on profile dgx-1 (volta)" in from_ini[0]
    assert f"{ini / 'hosts'}: group gpu_nodes, for hosts node-01, node-02: nvidia_driver_flavor" in from_ini[0]
    assert _without_paths(from_ini, ini / "hosts") == _without_paths(
        messages(yaml_twin), yaml_twin / "group_vars" / "gpu_nodes.yml"
    )
    (ini / "hosts").write_text(INI.format(extra="nodeforge_reboot_policy=if_needed"))
    assert messages(ini) == []


def _encrypt(secret: str, password: str, indent: str = "  ") -> str:
    """A !vault block, its lines indented by `indent` (deeper than the key it is the value of)."""
    from ansible.parsing.vault import VaultLib, VaultSecret

    blob = VaultLib([("default", VaultSecret(password.encode()))]).encrypt(secret).decode()
    return "!vault |\n" + textwrap.indent(blob, indent)


def test_vault_encrypted_values_are_decrypted_and_checked(tmp_path):
    password = tmp_path / "vault-pass"
    password.write_text("s3cret-pw\n")
    inv = write_inventory(tmp_path / "inv")
    group_vars = inv / "group_vars" / "gpu_nodes.yml"
    group_vars.write_text(f"nodeforge_profile: dgx-1\nnvidia_driver_flavor: {_encrypt('open', 's3cret-pw')}\n")
    [problem] = messages(inv, vault_password_file=password)
    assert f"{group_vars}: group gpu_nodes, for hosts node-01, node-02: nvidia_driver_flavor" in problem
    # Checked as decrypted, shown masked: whatever its name, a vaulted value is a secret.
    assert "found ******** on profile dgx-1 (volta); expected proprietary: NVIDIA's open kernel modules" in problem
    token = _encrypt("eyJ-the-licence-token", "s3cret-pw")
    group_vars.write_text(f"nodeforge_profile: dgx-1\nnvidia_driver_grid_client_token: {token}\n")
    assert messages(inv, vault_password_file=password) == []


@pytest.mark.slow
@pytest.mark.parametrize(
    ("role", "variable", "text"),
    [
        ("nvidia_driver", "nvidia_driver_grid_client_token", "nvidia_driver_grid_client_token: {secret}\n"),
        (
            "k8s_scale_csi",
            "k8s_scale_csi_gui_secrets",
            "k8s_scale_csi_gui_secrets:\n  - name: csisecret-local\n    username: csiadmin\n    password: {secret}\n",
        ),
    ],
)
def test_secrets_in_a_vault_pass_the_role_s_own_argument_validation(tmp_path, role, variable, text):
    """The roles' argument specs, as Ansible validates them when the role starts, accept vault-encrypted secrets
    (a no_log option would refuse them: "Unknown parameter type: AnsibleVaultEncryptedUnicode")."""
    password = tmp_path / "vault-pass"
    password.write_text("s3cret-pw\n")
    # The vault block's lines indented deeper than either key (top level, or password in a list entry).
    secret = _encrypt("pa55-w0rd", "s3cret-pw").replace("\n", "\n    ")
    (tmp_path / "vars.yml").write_text(text.format(secret=secret))
    # The role's own argument spec on a role that does nothing else: Ansible validates the play's variables, as
    # they are (vault-encrypted), before the role's first task.
    standin = tmp_path / "roles" / role
    (standin / "meta").mkdir(parents=True)
    (standin / "tasks").mkdir()
    (standin / "meta" / "argument_specs.yml").write_text(
        (REPO / "roles" / role / "meta" / "argument_specs.yml").read_text()
    )
    (standin / "tasks" / "main.yml").write_text("- ansible.builtin.debug:\n    msg: validated\n")
    (tmp_path / "play.yml").write_text(
        f"- hosts: localhost\n  gather_facts: false\n  vars_files: [vars.yml]\n  roles: [{role}]\n"
    )
    proc = subprocess.run(
        [str(REPO / ".venv" / "bin" / "ansible-playbook"), "--vault-password-file", str(password), "play.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "pa55-w0rd" not in proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("variable", "value", "found"),
    [
        # A repository URL with its credentials, vaulted as a whole, with a space the URL pattern refuses.
        ("nvidia_container_toolkit_repo_url", "https://ops:Hunter2-pw@mirror.example/nvidia ctk",
         "nvidia_container_toolkit_repo_url: found ********; expected"),
        # Vaulted inside a structure: the override's URL, shown with its place in the structure.
        ("nodeforge_manifest_overrides", {"nvidia_container_toolkit": {"deb_url": "http://ops:Hunter2-pw@m/ y"}},
         "nodeforge_manifest_overrides.nvidia_container_toolkit.deb_url: found ********; expected"),
        # A choice: the value is named by no "did you mean" either.
        ("ofed_mode", "Hunter2-pw-mode", "ofed_mode: found ********; expected one of"),
        # Too long to be shown whole: masked, not cut.
        ("nvidia_container_toolkit_repo_url", "https://ops:Hunter2-pw@" + "m" * 90 + "/ x",
         "nvidia_container_toolkit_repo_url: found ********; expected"),
    ],
)  # fmt: skip
def test_a_vaulted_value_is_never_shown_whatever_its_name(tmp_path, variable, value, found):
    password = tmp_path / "vault-pass"
    password.write_text("s3cret-pw\n")
    inv = write_inventory(tmp_path / "inv")
    group_vars = inv / "group_vars" / "gpu_nodes.yml"
    if isinstance(value, str):
        text = f"{variable}: {_encrypt(value, 's3cret-pw')}\n"
    else:
        url = _encrypt(value["nvidia_container_toolkit"]["deb_url"], "s3cret-pw", indent=" " * 6)
        text = f"{variable}:\n  nvidia_container_toolkit:\n    deb_url: {url}\n"
    group_vars.write_text("nodeforge_profile: dgx-1\n" + text)
    [problem] = messages(inv, vault_password_file=password)
    assert found in problem and "Hunter2" not in problem, problem


def test_vault_value_without_the_password(tmp_path):
    inv = write_inventory(tmp_path)
    group_vars = inv / "group_vars" / "gpu_nodes.yml"
    group_vars.write_text(f"nodeforge_profile: dgx-1\nnvidia_driver_flavor: {_encrypt('open', 'pw')}\n")
    [problem] = messages(inv)
    assert (
        f"{group_vars}: group gpu_nodes: nvidia_driver_flavor: found a vault-encrypted value that cannot be" in problem
    )
    assert "--vault-password-file" in problem


def test_no_log_values_are_never_shown(tmp_path):
    inv = write_inventory(tmp_path, {"nvidia_driver_grid_client_token": ["eyJ-the-licence-token"]})
    [problem] = messages(inv)
    assert "nvidia_driver_grid_client_token: found ******** (list); expected type str" in problem
    assert "eyJ" not in problem


PRIORITY_YAML = {
    "all": {
        "children": {
            "gpu_nodes": {
                "hosts": {"node-01": None},
                "vars": {"nodeforge_profile": "dgx-1"},
                "children": {
                    "a_site": {"hosts": {"node-01": None}, "vars": {"nvidia_driver_flavor": "open"}},
                    "b_site": {"hosts": {"node-01": None}, "vars": {"nvidia_driver_flavor": "proprietary"}},
                },
            }
        }
    }
}

PRIORITY_INI = """\
[gpu_nodes]
node-01

[gpu_nodes:vars]
nodeforge_profile=dgx-1

[a_site]
node-01

[a_site:vars]
nvidia_driver_flavor=open
{priority}

[b_site]
node-01

[b_site:vars]
nvidia_driver_flavor=proprietary

[gpu_nodes:children]
a_site
b_site
"""


@pytest.mark.parametrize("form", ["yaml", "ini"])
def test_group_priority_decides_as_ansible_does(tmp_path, form):
    def inventory(priority: bool) -> Path:
        directory = tmp_path / f"{form}-{priority}"
        directory.mkdir()
        if form == "yaml":
            data = json.loads(json.dumps(PRIORITY_YAML))
            if priority:
                data["all"]["children"]["gpu_nodes"]["children"]["a_site"]["vars"]["ansible_group_priority"] = 10
            (directory / "hosts.yml").write_text(yaml.safe_dump(data))
        else:
            (directory / "hosts").write_text(
                PRIORITY_INI.format(priority="ansible_group_priority=10" if priority else "")
            )
        return directory

    # Same depth, same priority: the later group by name (b_site) wins, and proprietary is fine on Volta.
    assert messages(inventory(False)) == []
    # a_site with the higher priority wins: open modules on Volta, named where a_site sets it.
    [problem] = messages(inventory(True))
    assert "group a_site, for host node-01: nvidia_driver_flavor: found 'open' on profile dgx-1 (volta)" in problem


def test_every_file_of_an_inventory_directory_is_read(tmp_path):
    inv = write_inventory(tmp_path)
    (inv / "zz-site.yml").write_text(
        yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {"node-02": {"nvidia_driver_branch": "595"}}}}}})
    )
    [problem] = messages(inv)
    assert f"{inv / 'zz-site.yml'}: host node-02: nvidia_driver_branch: found 595 on profile dgx-1 (volta)" in problem


def test_repeated_inventory_sources_are_all_read(tmp_path):
    inv = write_inventory(tmp_path / "base")
    overlay = tmp_path / "overlay.yml"
    overlay.write_text(yaml.safe_dump({"gpu_nodes": {"hosts": {"node-01": {"nodeforge_reboot_policy": "sometimes"}}}}))
    [problem] = messages([inv, overlay])
    assert f"{overlay}: host node-01: nodeforge_reboot_policy: found 'sometimes'" in problem
    assert messages([inv]) == []


def test_extra_vars_with_quoted_spaces(tmp_path):
    from nodeforge.cli import Inputs

    _, extravars = Inputs(inventory=(str(write_inventory(tmp_path)),), extra_vars=('site="x y" n=1',)).read()
    assert extravars == {"site": "x y", "n": "1"}
    result = CliRunner().invoke(
        main, ["check", "-i", str(write_inventory(tmp_path)), "-e", 'nodeforge_reboot_policy="if needed"']
    )
    assert result.exit_code == 1
    assert "command line (-e): all hosts: nodeforge_reboot_policy: found 'if needed'" in result.output


def test_a_file_that_is_not_utf8_is_a_named_problem(tmp_path):
    """A stray byte in group_vars crashed check with a UnicodeEncodeError; now a problem naming file and line."""
    inv = write_inventory(tmp_path)
    gv = inv / "group_vars" / "gpu_nodes.yml"
    gv.write_bytes(gv.read_bytes() + b"nvidia_driver_branch: '5\xff35'\n")
    result = CliRunner().invoke(main, ["check", "--json", "-i", str(inv)])
    assert result.exit_code == 1, result.output
    [problem] = json.loads(result.stdout)["problems"]
    assert problem["where"] == str(gv)
    assert problem["found"] == "bytes that are not UTF-8 text (line 2: byte 0xff)"


@pytest.mark.slow
def test_disabled_verification_is_warned_not_refused(tmp_path):
    """`*_validate_certs: false` passed check silently: now a warning (CLI, --json, and the validation play's
    [WARNING] lines), and the inventory is still valid."""
    unpinned = {"nvidia_driver": {"cuda_repo": {"keyring_fingerprints": []}}}
    inv = write_inventory(
        tmp_path, {"ofed_validate_certs": False, "nodeforge_profile": "dgx-1", "nodeforge_manifest_overrides": unpinned}
    )
    result = CliRunner().invoke(main, ["check", "--json", "-i", str(inv)])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["status"] == "valid" and payload["problems"] == []
    [certs] = [w for w in payload["warnings"] if w["variable"] == "ofed_validate_certs"]
    assert certs["where"] == str(inv / "group_vars" / "gpu_nodes.yml")
    assert certs["found"].startswith("false: TLS certificates are not validated")
    # cuda-keyring with neither a checksum nor a pinned key: the CUDA repository's trust anchor rests on HTTPS alone.
    assert [w for w in payload["warnings"] if w["where"] == "version manifest nvidia_driver.cuda_repo.keyring_checksum"]
    text = " ".join(CliRunner().invoke(main, ["check", "-i", str(inv)]).output.split())
    assert "warning: " in text and "ofed_validate_certs: found false" in text and "is valid" in text

    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(content.collections_dir()), "ANSIBLE_NOCOLOR": "1"}
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), str(PLAYBOOKS / "validated.yml"), "-i", str(inv)]
    run = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    output = " ".join((run.stdout + run.stderr).split())
    assert "[WARNING]: nodeforge check:" in output and "ofed_validate_certs: found false" in output
    assert NODE_TASK in run.stdout


def test_reboot_batch_only_from_the_command_line(tmp_path):
    """The reboot play reads nodeforge_reboot_batch before any host (serial): in the inventory it would be ignored."""
    [problem] = messages(write_inventory(tmp_path, {"nodeforge_reboot_batch": "25%"}))
    assert "gpu_nodes.yml: group gpu_nodes: nodeforge_reboot_batch: found '25%' set in the inventory" in problem
    assert messages(write_inventory(tmp_path), {"nodeforge_reboot_batch": "25%"}) == []
    [bad] = messages(write_inventory(tmp_path), {"nodeforge_reboot_batch": "0"})
    assert "command line (-e): all hosts: nodeforge_reboot_batch: found '0'; expected a number of nodes" in bad


def test_reboot_policy_always_is_gone(tmp_path):
    """always rebooted every node on every run, all at once, even when nothing changed."""
    [problem] = messages(write_inventory(tmp_path, {"nodeforge_reboot_policy": "always"}))
    assert "nodeforge_reboot_policy: found 'always'; expected one of never, if_needed" in problem


MIRRORED = "registry.site.example/library/busybox@sha256:" + "d" * 64


@pytest.mark.parametrize(
    ("group_vars", "expected"),
    [
        (
            {"k8s_gpu_device_plugin_sharing": "time-slicing"},
            "k8s_gpu_device_plugin_replicas: found 1 with k8s_gpu_device_plugin_sharing time-slicing; "
            "expected at least 2",
        ),
        (
            {
                "k8s_gpu_device_plugin_sharing": "mps",
                "k8s_gpu_device_plugin_replicas": 4,
                "k8s_gpu_device_plugin_mig_strategy": "mixed",
            },
            "k8s_gpu_device_plugin_mig_strategy: found mixed with k8s_gpu_device_plugin_sharing mps",
        ),
        (
            {"k8s_rdma_shared_device_plugin_resources": [{"name": "rails", "devices": ["ib0", "eth9"]}]},
            "k8s_rdma_shared_device_plugin_resources[0]: found {'devices': ['ib0', 'eth9'], 'name': 'rails'}; "
            "expected {name: <resource name>, devices: [<netdevs>]} with netdevs of profile dgx-1's HCAs: "
            "ib0, ib1, ib2",
        ),
        ({"nodeforge_k8s_version": "1.20"}, "nodeforge_k8s_version: found '1.20'; expected a Kubernetes version"),
        ({"nodeforge_k8s_distribution": "rancher"}, "nodeforge_k8s_distribution: found 'rancher'"),
        ({"k8s_gpu_device_plugin_mig_strategy": "all"}, "k8s_gpu_device_plugin_mig_strategy: found 'all'"),
        # GPU Operator mode (nvidia_driver_source operator) and the contradictions of its values.
        (
            {"nvidia_driver_source": "operator"},
            "nvidia_driver_source: found operator with k8s_gpu_operator_enabled false; expected "
            "k8s_gpu_operator_enabled: true",
        ),
        (
            {"nvidia_driver_source": "operator", "k8s_gpu_operator_enabled": True, "nodeforge_os": "debian12"},
            "nvidia_driver_source: found 'operator' on nodeforge_os debian12",
        ),
        (
            {"k8s_gpu_operator_enabled": True, "k8s_gpu_operator_values": {"driver": {"enabled": True}}},
            "k8s_gpu_operator_values: found driver.enabled: true, and this node has a host driver "
            "(nvidia_driver_source cuda_repo)",
        ),
        (
            {
                "nvidia_driver_source": "operator",
                "k8s_gpu_operator_enabled": True,
                "k8s_gpu_operator_values": {"driver": {"enabled": False}},
            },
            "k8s_gpu_operator_values: found driver.enabled: false, and this node's nvidia_driver_source is operator",
        ),
        (
            {"k8s_gpu_operator_enabled": True, "k8s_gpu_operator_values": {"toolkit": {"enabled": True}}},
            "k8s_gpu_operator_values: found toolkit.enabled: true; expected false: nodeforge installs",
        ),
        (
            {"k8s_gpu_operator_enabled": True, "k8s_gpu_operator_values": {"devicePlugin": {"enabled": True}}},
            "k8s_gpu_operator_values: found devicePlugin.enabled: true with k8s_gpu_device_plugin_enabled true",
        ),
        (
            {
                "nvidia_driver_source": "operator",
                "k8s_gpu_operator_enabled": True,
                "nodeforge_profile": "vsphere-t4-vgpu",
            },
            "nvidia_driver_source: found operator on the vGPU guest profile vsphere-t4-vgpu",
        ),
        # The site's registry (k8s_cluster_image_mirror): each entry as render reads it (k8s_images.mirror_map).
        (
            {"k8s_cluster_image_mirror": ["busybox"]},
            "k8s_cluster_image_mirror: found ['busybox'] (list); expected type dict",
        ),
        (
            {"k8s_cluster_image_mirror": {"busybox": "registry.site.example/library/busybox:1"}},
            "for hosts node-01, node-02: k8s_cluster_image_mirror['busybox']: found "
            "'registry.site.example/library/busybox:1' names no digest; expected registry/path@sha256:<hex>",
        ),
        (
            {"k8s_cluster_image_mirror": {"Busybox": MIRRORED}},
            "k8s_cluster_image_mirror['Busybox']: found 'Busybox' is not an image reference",
        ),
        (
            {"k8s_gpu_operator_enabled": True, "k8s_cluster_image_mirror": {"busybox": MIRRORED}},
            "k8s_cluster_image_mirror: found images taken from the site's registry with k8s_gpu_operator_enabled true"
            ": the GPU Operator's images come from its Helm chart",
        ),
    ],
)
def test_cluster_settings_are_checked(tmp_path, group_vars, expected):
    [problem] = messages(write_inventory(tmp_path, group_vars))
    assert expected in problem, problem


def test_cluster_settings_that_fit_pass(tmp_path):
    group_vars = {
        "nodeforge_k8s_distribution": "openshift",
        "nodeforge_k8s_version": "1.33",
        "k8s_gpu_device_plugin_sharing": "time-slicing",
        "k8s_gpu_device_plugin_replicas": 4,
        "k8s_rdma_shared_device_plugin_resources": [{"name": "rails", "devices": ["ib0", "ib1"]}],
        "k8s_mpi_operator_tenants": ["ml-team"],
        "k8s_cluster_image_mirror": {"busybox": MIRRORED, "nvcr.io/nvidia/k8s-device-plugin:v0.20.0": MIRRORED},
    }
    assert messages(write_inventory(tmp_path, group_vars)) == []


def test_gpu_operator_mode_that_fits_passes(tmp_path):
    """Driver container nodes with the GPU Operator on, the site's registry in its values; nv_peer_mem refused."""
    group_vars = {
        "nvidia_driver_source": "operator",
        "nodeforge_os": "ubuntu22.04",
        "k8s_gpu_operator_enabled": True,
        "k8s_gpu_operator_values": {"driver": {"repository": "registry.example.com/nvidia"}},
    }
    assert messages(write_inventory(tmp_path, group_vars)) == []
    found = messages(write_inventory(tmp_path / "peer", {**group_vars, "gpudirect_rdma_module": "nv_peer_mem"}))
    assert any("gpudirect_rdma_module: found nv_peer_mem with nvidia_driver_source operator" in p for p in found), found


def scale_clients_inventory(tmp_path: Path, scale_vars: dict) -> Path:
    """node-01 a GPU worker and a Scale client, storage-gw a Scale client only (checked all the same)."""
    write_inventory(tmp_path, hosts={"node-01": None})
    groups = {"gpu_nodes": {"hosts": {"node-01": None}}, "scale_clients": {"hosts": {"node-01": None, "gw": None}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": groups}}))
    (tmp_path / "group_vars" / "scale_clients.yml").write_text(
        yaml.safe_dump({"nodeforge_profile": "dgx-1", "scale_client_node_class": "dgx", **scale_vars})
    )
    return tmp_path


@pytest.mark.parametrize(
    ("scale_vars", "expected"),
    [
        (
            {"scale_client_config": {"dgx": {"verbsRdma": "enable", "verbsPorts": "mlx5_0/1 mlx5_4/1"}}},
            "group_vars/scale_clients.yml: group scale_clients, for hosts gw, node-01: scale_client_config.dgx."
            "verbsPorts: found 'mlx5_0/1 mlx5_4/1' naming mlx5_4; expected ports of profile dgx-1's HCAs: mlx5_0, "
            "mlx5_1, mlx5_2, mlx5_3",
        ),
        (
            {"scale_client_config": {"dgx": {"pagepool": "lots"}}},
            "scale_client_config.dgx.pagepool: found 'lots'; expected a number with an optional K, M, G, T or P suffix",
        ),
        (
            {"scale_client_node_label": "scale"},
            "scale_client_node_label: found 'scale'; expected a Kubernetes node label key=value, e.g. scale=true",
        ),
        (
            {"scale_client_restart_policy": "always"},
            "scale_client_restart_policy: found 'always'; expected one of never, when_needed",
        ),
    ],
)
def test_scale_client_settings_are_checked(tmp_path, scale_vars, expected):
    [problem] = messages(scale_clients_inventory(tmp_path, scale_vars))
    assert expected in problem, problem


def test_the_redbook_s_scale_client_settings_pass(tmp_path):
    config = {
        "dgx": {
            "pagepool": "128G",
            "workerThreads": 1024,
            "ignorePrefetchLUNCount": True,
            "maxFilesToCache": "1M",
            "maxStatCache": "1M",
            "subnets": "10.10.11.0/ess3000.bda.scale.ibm.com;SpectrumScale.ocp4.scale.ibm.com",
            "verbsRdma": "enable",
            "verbsRdmaSend": True,
            "verbsPorts": ["mlx5_0/1", "mlx5_1/1", "mlx5_2/1", "mlx5_3/1"],
        },
        "common": {"maxMBpS": 20000, "enforceFilesetQuotaOnRoot": True, "controlSetxattrImmutableSELinux": True},
    }
    assert messages(scale_clients_inventory(tmp_path, {"scale_client_config": config})) == []


def test_validate_thresholds_are_checked(tmp_path):
    found = messages(
        write_inventory(
            tmp_path,
            {
                "validate_rdma_min_bw_mbs": 20000,
                "validate_rdma_fraction": 1.5,
                "validate_nccl_max_latency_us": 0,
                "validate_ib_write_bw_attempts": 0,
            },
        )
    )
    assert len(found) == 4, found
    [floor] = [p for p in found if "validate_rdma_min_bw_mbs" in p]
    assert "group_vars/gpu_nodes.yml: group gpu_nodes, for hosts node-01, node-02: validate_rdma_min_bw_mbs" in floor
    assert "found 20000 MB/s on profile dgx-1 (HCAs at 100 Gb/s: at most 12500 MB/s)" in floor
    assert (
        "validate_rdma_fraction: found 1.5; expected a fraction of the HCAs' line rate above 0 and at most 1"
        in " ".join(found)
    )
    assert "validate_nccl_max_latency_us: found 0; expected a number above 0 (microseconds)" in " ".join(found)
    attempts = "validate_ib_write_bw_attempts: found 0; expected a number above 0 (runs of ib_write_bw per HCA)"
    assert attempts in " ".join(found)


def test_validate_threshold_types_are_checked(tmp_path):
    [problem] = messages(write_inventory(tmp_path, {"validate_nccl_min_busbw_gbs": "fast"}))
    assert "validate_nccl_min_busbw_gbs: found 'fast' (str); expected type float" in problem


def test_validate_thresholds_that_fit_pass(tmp_path):
    # The Redbook's floor (11,000 perftest MB/sec = 11534.3 MB/s) on EDR, per group.
    assert (
        messages(write_inventory(tmp_path, {"validate_rdma_min_bw_mbs": 11534.3, "validate_rdma_fraction": 0.8})) == []
    )


def test_validate_rdma_peer_names_another_worker(tmp_path):
    hosts = {"node-01": {"validate_rdma_peer": "node-09"}, "node-02": {"validate_rdma_peer": "node-02"}}
    found = messages(write_inventory(tmp_path, hosts=hosts))
    assert sorted(p.removeprefix(f"{tmp_path}/") for p in found) == [
        "hosts.yml: host node-01: validate_rdma_peer: found 'node-09', not a host of group gpu_nodes; expected a host"
        " of gpu_nodes for ib_write_bw to measure against (unset: consecutive gpu_nodes pair up)",
        "hosts.yml: host node-02: validate_rdma_peer: found 'node-02', the host itself; expected another host of"
        " gpu_nodes",
    ]
    hosts = {"node-01": {"validate_rdma_peer": "node-02"}, "node-02": None}
    assert messages(write_inventory(tmp_path / "ok", hosts=hosts)) == []


def test_profile_overrides_reach_the_rules_that_read_the_profile(tmp_path):
    # dgx-1's HCAs run at 100 Gb/s EDR (12,500 MB/s line rate): a 20,000 MB/s floor is impossible there, and possible
    # on a node whose overrides say its HCA runs at 200 Gb/s.
    floor = {"validate_rdma_min_bw_mbs": 20000}
    [problem] = messages(write_inventory(tmp_path, floor))
    assert "20000 MB/s on profile dgx-1 (HCAs at 100 Gb/s: at most 12500 MB/s)" in problem
    hdr = {"hcas": [{"name": "mlx5_0", "link_layer": "InfiniBand", "rate_gbps": 200}]}
    assert messages(write_inventory(tmp_path, {**floor, "nodeforge_profile_overrides": hdr})) == []


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (
            {"expected": {"gpu": 1}},
            "nodeforge_profile_overrides.expected.gpu: found 1 (int); expected one of the hardware profiles' keys "
            "here: gpus, hcas",
        ),
        ({"hcas": "mlx5_0"}, "nodeforge_profile_overrides.hcas: found 'mlx5_0' (str); expected a list"),
        ({"gpu": 4}, "nodeforge_profile_overrides.gpu: found 4 (int); expected a mapping"),
    ],
    ids=["unknown-key", "list-as-string", "mapping-as-number"],
)
def test_profile_overrides_must_fit_the_profiles(tmp_path, overrides, expected):
    [problem] = messages(write_inventory(tmp_path, {"nodeforge_profile_overrides": overrides}))
    assert "group_vars/gpu_nodes.yml" in problem and expected in problem, problem
    if "gpu" in overrides.get("expected", {}):
        assert "(did you mean gpus?)" in problem


def test_validation_action_reads_the_cli_verdict(tmp_path):
    """The validation play's wait for the CLI (runner.run_playbook's gate): no gate, a written verdict, a CLI that
    ended without one, a CLI that never answers."""
    from ansible_collections.nodeforge.gpu.plugins.action.validate_inventory import cli_verdict

    verdict = tmp_path / "verdict"
    gate = {"NODEFORGE_CHECK_GATE": str(verdict), "NODEFORGE_CHECK_GATE_PID": str(os.getpid())}
    assert cli_verdict({}) is None
    assert cli_verdict(gate, timeout_s=0.05) == "no verdict from the nodeforge CLI in 0 s"
    gone = subprocess.Popen(["true"])
    gone.wait()
    dead = {**gate, "NODEFORGE_CHECK_GATE_PID": str(gone.pid)}
    assert cli_verdict(dead) == f"the nodeforge CLI (pid {gone.pid}) ended without a verdict"
    verdict.write_text("refuse\n")
    assert cli_verdict(dead) == "refuse"
    verdict.write_text("pass")
    assert cli_verdict(gate) == "pass"


@pytest.mark.parametrize(
    ("group_vars", "expected"),
    [
        ({"nvidia_container_toolkit_runtimes": "containerd, crio"},
         "nvidia_container_toolkit_runtimes: found 'containerd, crio' (text); expected a list, written as a YAML list: "
         "[containerd, crio] (on the command line: -e '{\"nvidia_container_toolkit_runtimes\": [\"containerd\", "
         "\"crio\"]}')"),
        ({"ofed_ipoib_interfaces": "ib0"},
         "ofed_ipoib_interfaces: found 'ib0' (text); expected a list of mappings, written as a YAML list"),
    ],
)  # fmt: skip
def test_a_list_written_as_text_is_one_problem_saying_how_to_write_it(tmp_path, group_vars, expected):
    """Ansible's argument validation would split the text at commas, the role would loop over its characters: one
    problem, no "did you mean 'crio'?" and no Python type names."""
    [problem] = messages(write_inventory(tmp_path, group_vars))
    assert problem.endswith(expected), problem
    assert "did you mean" not in problem and "of type" not in problem


def test_problems_print_as_written_brackets_included(tmp_path):
    """The human output prints each problem's text as it is (rich would take "[containerd, crio]" for markup and
    drop it)."""
    inv = write_inventory(tmp_path, {"nvidia_container_toolkit_runtimes": "containerd, crio"})
    result = CliRunner().invoke(main, ["check", "-i", str(inv)])
    assert result.exit_code == 1
    assert "expected a list, written as a YAML list: [containerd, crio]" in " ".join(result.output.split())


def test_a_default_s_origin_stays_whole_in_the_json_where():
    """The GRID problem of the vSphere sample is set by the profile's default ("profile vsphere-t4-vgpu (vGPU guest:
    source grid)"): its colon inside the brackets splits nothing into the scope."""
    result = CliRunner().invoke(main, ["check", "--json", "-i", str(REPO / "inventories" / "vsphere-t4")])
    [problem] = json.loads(result.stdout)["problems"]
    assert problem["where"] == "profile vsphere-t4-vgpu (vGPU guest: source grid)"
    assert problem["scope"] == "hosts vgpu-vm-01, vgpu-vm-02"


def test_a_group_named_almost_like_nodeforge_s_is_a_problem_naming_its_line(tmp_path):
    inv = write_inventory(tmp_path)
    hosts = inv / "hosts.yml"
    hosts.write_text(hosts.read_text().rstrip("\n") + "\n    gpu_nodez:\n      hosts:\n        node-03: null\n")
    line = hosts.read_text().splitlines().index("    gpu_nodez:") + 1
    [problem] = messages(inv)
    assert problem == (
        f"{hosts}:{line}: group gpu_nodez: found group gpu_nodez (host node-03), which no nodeforge play targets; "
        "expected group gpu_nodes (did you mean gpu_nodes?)"
    )
    # Other groups of a site's inventory (Kubespray's, its own) are none of nodeforge's business.
    hosts.write_text(hosts.read_text().replace("gpu_nodez", "kube_node"))
    assert messages(inv) == []


def test_a_host_in_no_group_and_a_placeholder_address_are_warned_by_line(tmp_path):
    inv = write_inventory(tmp_path, hosts={"node-01": {"ansible_host": "192.0.2.11"}, "node-02": None})
    hosts = inv / "hosts.yml"
    hosts.write_text(hosts.read_text() + "  hosts:\n    stray-01:\n      ansible_host: 10.1.1.9\n")
    text = hosts.read_text().splitlines()
    result = CliRunner().invoke(main, ["check", "--json", "-i", str(inv)])
    assert result.exit_code == 0, result.output
    warnings = {(w["where"], w["scope"], w["variable"], w["found"]) for w in json.loads(result.stdout)["warnings"]}
    assert (f"{hosts}:{text.index('    stray-01:') + 1}", "host stray-01", "",
            "a host in no group: no nodeforge verb acts on it") in warnings  # fmt: skip
    assert (f"{hosts}:{text.index('          ansible_host: 192.0.2.11') + 1}", "host node-01", "ansible_host",
            "192.0.2.11, an address reserved for documentation (RFC 5737, RFC 3849)") in warnings  # fmt: skip
    assert not [w for w in warnings if w[1] in ("host node-02", "host stray-01") and w[2] == "ansible_host"]
