"""The sample inventories (inventories/*, the labs' aside) as a new user finds them: `nodeforge check` accepts each
one, the vGPU sample refused only for the GRID driver location it cannot know; what each sample configures, read
through the configuration model (module_utils/model.py HostModel, settings.py); the hardware profiles' HCAs."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from nodeforge import checks, scaffold
from nodeforge.collection import model, settings
from tests.conftest import REPO

NODEFORGE = str(Path(sys.executable).parent / "nodeforge")
# The labs' inventories are written by `nodeforge lab up` (--vm), not by init.
SAMPLES = sorted(p.parent for p in (REPO / "inventories").glob("*/hosts.yml") if p.parent.name not in ("lab", "lab-vm"))
VGPU_SAMPLE = "vsphere-t4"


def check_json(inventory: Path) -> tuple[int, dict]:
    """`nodeforge check -i INVENTORY --json`, run as a user runs it."""
    run = subprocess.run([NODEFORGE, "check", "-i", str(inventory), "--json"], capture_output=True, text=True)
    return run.returncode, json.loads(run.stdout)


def host_model(sample: str, host: str | None = None) -> model.HostModel:
    """A host of a sample as the check sees it: the variables Ansible resolves, in the configuration model."""
    view = checks.load(REPO / "inventories" / sample)
    host = host or view.hosts_of(model.WORKER_GROUP)[0]
    variables, origins = view.host_variables(host)
    return model.HostModel(host, checks.plain(variables), origins)


def test_the_samples_are_the_generated_ones():
    assert {p.name for p in SAMPLES} == set(scaffold.SAMPLES)


@pytest.mark.parametrize("sample", SAMPLES, ids=[p.name for p in SAMPLES])
def test_check_accepts_every_sample(sample):
    code, payload = check_json(sample)
    if sample.name == VGPU_SAMPLE:
        # Refused for the GRID guest driver only: NVIDIA ships it through its Licensing Portal, so the sample carries
        # an empty, marked placeholder that check must not let pass.
        assert code == 1 and payload["status"] == "invalid"
        [problem] = payload["problems"]
        assert problem["variable"] == scaffold.GRID_VARIABLE
        assert "nvidia_driver.grid lacks version, package, deb.url" in problem["found"]
    else:
        assert (code, payload["status"], payload["problems"]) == (0, "valid", [])


def test_the_vgpu_sample_is_valid_once_the_grid_placeholder_is_filled_in(tmp_path):
    sample = tmp_path / VGPU_SAMPLE
    shutil.copytree(REPO / "inventories" / VGPU_SAMPLE, sample)
    all_yml = sample / "group_vars" / "all.yml"
    text = all_yml.read_text()
    placeholders = re.findall(r'^ +(\w+): ""  # FILL IN', text, flags=re.MULTILINE)
    assert placeholders == ["version", "package", "url", "checksum"]
    filled = {
        "version": '"580.95.05"',
        "package": "nvidia-linux-grid-580",
        "url": "http://mirror.example/nvidia-linux-grid-580_580.95.05_amd64.deb",
        "checksum": "sha256:" + "a" * 64,
    }
    for key, value in filled.items():
        text = re.sub(rf'^( +{key}): ""  # FILL IN.*$', rf"\1: {value}", text, count=1, flags=re.MULTILINE)
    all_yml.write_text(text)
    assert "FILL IN:" not in text
    code, payload = check_json(sample)
    assert (code, payload["status"], payload["problems"]) == (0, "valid", [])
    # Half filled in still refused, naming what is left.
    all_yml.write_text(text.replace("sha256:" + "a" * 64, ""))
    code, payload = check_json(sample)
    [problem] = payload["problems"]
    assert code == 1 and problem["variable"] == scaffold.GRID_VARIABLE and "lacks deb.checksum" in problem["found"]


def test_dgx1_openshift_configures_crio_for_openshift():
    m = host_model("dgx1-openshift")
    assert m.get("nodeforge_k8s_distribution").value == "openshift"
    assert str(m.get("nodeforge_k8s_version").value) == "1.33"
    runtimes = m.get("nvidia_container_toolkit_runtimes")
    assert runtimes.value == ["crio"] and runtimes.explicit
    assert "group_vars/gpu_nodes.yml" in runtimes.origin
    # CRI-O gets the memlock drop-in too (the Redbook's cri-o fix).
    assert "crio" in m.get("ofed_memlock_services").value


@pytest.mark.parametrize("sample", ["c4140-k8s", "vsphere-t4", "dgx-h100-k8s"])
def test_the_kubernetes_samples_say_kubernetes_and_keep_containerd(sample):
    m = host_model(sample)
    distribution = m.get("nodeforge_k8s_distribution")
    assert distribution.value == "kubernetes" and distribution.explicit
    assert m.get("nvidia_container_toolkit_runtimes").value == ["containerd"]


def test_vsphere_t4_resolves_ofed_to_inbox():
    m = host_model(VGPU_SAMPLE)
    mode = m.get("ofed_mode")
    assert (mode.value, mode.origin, mode.explicit) == ("inbox", "profile vsphere-t4-vgpu (default)", False)
    # What the ofed role resolves on a node without an RDMA stack: the distribution's rdma-core, no DOCA version.
    resolved = settings.ofed(m, {"os_id": "ubuntu22.04", "installed_stack": "none"})
    assert (resolved["__ofed_mode"], resolved["__ofed_version"]) == ("inbox", "")
    # The inbox ib_core has no peer-memory API: the sample does not ask for nvidia-peermem.
    assert m.get("gpudirect_rdma_module").value == "none"
    # And inbox is a mode the sample's OS can use.
    assert "ubuntu22.04" in model.manifest()["os_support"]["ofed_mode"]["inbox"]


def test_the_other_samples_keep_the_manifest_ofed_mode():
    for sample in ("dgx1-openshift", "c4140-k8s", "dgx-h100-k8s"):
        assert host_model(sample).get("ofed_mode").value == model.manifest()["ofed"]["mode"]


# ---- the hardware profiles' HCAs ----------------------------------------------------------------------------------
NETDEV = re.compile(r"[a-z][a-z0-9]{0,14}")  # a Linux interface name (IFNAMSIZ 16, with the NUL)
PROFILES = sorted(model.profiles())


@pytest.mark.parametrize("name", PROFILES)
def test_every_hca_names_its_netdev(name):
    profile = model.profiles()[name]
    hcas = profile["hcas"]
    assert len(hcas) == profile["expected"]["hcas"]
    for hca in hcas:
        assert set(hca) == {"name", "model", "pci_id", "link_layer", "rate_gbps", "numa_node", "netdev"}, hca
        assert NETDEV.fullmatch(hca["netdev"]), hca
        assert hca["link_layer"] in ("InfiniBand", "Ethernet")
        if hca["link_layer"] == "InfiniBand":
            assert hca["netdev"].startswith("ib"), hca  # IPoIB: ib0.. or systemd's ibp<bus>s<slot>
    for key in ("name", "netdev"):
        assert len({h[key] for h in hcas}) == len(hcas), f"{name}: duplicate HCA {key}"


def test_hca_netdevs_of_the_documented_systems():
    netdevs = {name: {h["name"]: h["netdev"] for h in p["hcas"]} for name, p in model.profiles().items()}
    # IBM Redbook REDP-5610: the RDMA shared device plugin's shared_ib0..3 are ib0..ib3 of mlx5_0..3.
    assert netdevs["dgx-1"] == {f"mlx5_{i}": f"ib{i}" for i in range(4)}
    # NVIDIA DGX H100 User Guide, Network Modules table: the compute ports' default netdev and RDMA device names.
    assert netdevs["dgx-h100"] == {
        "mlx5_0": "ibp24s0",
        "mlx5_3": "ibp64s0",
        "mlx5_4": "ibp79s0",
        "mlx5_5": "ibp94s0",
        "mlx5_6": "ibp154s0",
        "mlx5_9": "ibp192s0",
        "mlx5_10": "ibp206s0",
        "mlx5_11": "ibp220s0",
    }
    assert netdevs["dell-c4140"] == {"mlx5_0": "ib0"}


def test_ethernet_netdevs_are_marked_as_defaults():
    """Nothing documents an Ethernet (RoCE) port's name: each such profile says its netdev is a default."""
    for name, profile in model.profiles().items():
        if any(h["link_layer"] == "Ethernet" for h in profile["hcas"]):
            path = Path(model.roles_dir()) / "nodeforge" / "files" / "profiles" / f"{name}.yml"
            assert "netdev: a default" in path.read_text(), name


def test_profiles_are_plain_yaml_mappings_the_loader_reads():
    directory = Path(model.roles_dir()) / "nodeforge" / "files" / "profiles"
    for path in sorted(directory.glob("*.yml")):
        data = yaml.safe_load(path.read_text())
        assert data["name"] == path.stem and model.profiles()[path.stem] == data
