"""Each server profile against the reference system it models (tests/data/profile_sources.yml: the seed's lines, or the
vendor's guide): GPU model, count and memory; HCA model, PCI ID, count, link layer and rate. A profile that drifts
from its source (seed 001's Supermicro node once had one 100 Gb/s ConnectX-5 where the seed lists four 25 GbE ports)
fails here, naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
PROFILES = REPO / "collections/ansible_collections/nodeforge/gpu/roles/nodeforge/files/profiles"
SOURCES = yaml.safe_load((Path(__file__).parent / "data" / "profile_sources.yml").read_text())
# Profiles of machines nodeforge makes for itself, with no reference system.
OWN = {"lab", "lab-vm"}


def load(name: str) -> dict:
    return yaml.safe_load((PROFILES / f"{name}.yml").read_text())


def squeezed(text: str) -> str:
    """A model name compared without spaces, dashes or case: "V100 SXM2" is "Tesla V100-SXM2"'s."""
    return "".join(c for c in text.lower() if c.isalnum())


def test_every_server_profile_has_its_source():
    assert {p.stem for p in PROFILES.glob("*.yml")} - OWN == set(SOURCES)


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_the_profile_s_gpus_are_its_source_s(name):
    source, gpu = SOURCES[name]["gpu"], load(name)["gpu"]
    assert gpu["count"] == source["count"] == load(name)["expected"]["gpus"], (name, source["cite"])
    assert squeezed(source["model"]) in squeezed(gpu["model"]), (name, gpu["model"], source["cite"])
    assert source["memory_gb"] in gpu["memory_gb"], (name, gpu["memory_gb"], source["cite"])
    # nvidia-smi's name of the GPU is what validate matches: it must name the same model.
    assert squeezed(source["model"]) in squeezed(gpu["smi_name"]) or gpu.get("vgpu"), (name, gpu["smi_name"])
    assert bool(gpu.get("vgpu")) == bool(source.get("vgpu")), name


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_the_profile_s_hcas_are_its_source_s(name):
    source, profile = SOURCES[name]["hcas"], load(name)
    hcas = profile["hcas"]
    if "count" in source:
        assert len(hcas) == source["count"] == profile["expected"]["hcas"], (name, source["cite"])
    for hca in hcas:
        where = (name, hca["name"], source["cite"])
        assert hca["link_layer"] == source["link_layer"], where
        assert hca["rate_gbps"] == source["rate_gbps"], where
        if "model" in source:
            assert hca["model"] == source["model"], where
        if "pci_id" in source:
            assert hca["pci_id"] == source["pci_id"], where
    # One RDMA device per port: the names are distinct.
    assert len({hca["name"] for hca in hcas}) == len(hcas), name
