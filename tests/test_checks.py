"""`nodeforge check`: every class of bad inventory is rejected with a message naming the culprit."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml

from nodeforge import content, specs
from nodeforge.checks import check_inventory
from tests.conftest import REPO

SAMPLES = sorted(p.parent for p in (REPO / "inventories").glob("*/hosts.yml"))


def write_inventory(tmp_path: Path, group_vars: dict | None = None, hosts: dict | None = None, **files: str) -> Path:
    hosts = hosts if hosts is not None else {"node-01": None, "node-02": None}
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


def messages(path: Path, extravars: dict | None = None) -> list[str]:
    return [str(p) for p in check_inventory(path, extravars)]


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
    assert "host_vars/node-01.yml:3" in problem or "host_vars/node-01.yml:2" in problem
    assert "YAML syntax error" in problem


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
    assert "nodeforge_reboot_policy: found 'sometimes'; expected one of never, if_needed, always" in problem


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
    for state in ("enforcing", "permissive"):
        assert messages(write_inventory(tmp_path, {"selinux_modules_state": state})) == []


def test_vgpu_guest_needs_the_grid_driver_in_the_manifest(tmp_path):
    [problem] = messages(write_inventory(tmp_path, {"nodeforge_profile": "vsphere-t4-vgpu"}))
    assert "profile vsphere-t4-vgpu (vGPU guest: source grid)" in problem
    assert "nvidia_driver.grid lacks version, package, deb|rpm.url" in problem
    grid = {"version": "580.95.05", "package": "nvidia-linux-grid-580", "deb": {"url": "http://mirror/g.deb"}}
    inv = write_inventory(
        tmp_path,
        {
            "nodeforge_profile": "vsphere-t4-vgpu",
            "nodeforge_os": "ubuntu22.04",
            "nodeforge_manifest_overrides": {"nvidia_driver": {"grid": grid}},
        },
    )
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


def test_templated_values_are_left_to_the_node(tmp_path):
    inv = write_inventory(tmp_path, {"nvidia_driver_version": "{{ site_driver_version }}"})
    assert messages(inv) == []


def test_lab_sample_inventory_is_what_lab_up_writes():
    from nodeforge import lab

    sample = yaml.safe_load((REPO / "inventories" / "lab" / "hosts.yml").read_text())
    assert sample == lab.inventory(["nodeforge-lab-1", "nodeforge-lab-2"])
