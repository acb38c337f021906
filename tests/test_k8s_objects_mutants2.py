# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The cluster layer's objects pinned down where the other k8s_objects tests leave room: the refusals of cluster_from
and of the RDMA shared device plugin's configuration word for word (an unknown hardware profile, an HCA without a
netdev, k8s_rdma_shared_device_plugin_resources naming no or unknown devices), the explicit resources rendered whole,
the DGX H100's netdevs in their numeric order (ibp24s0 before ibp154s0), no resource without HCAs, plain() turning the
values Ansible loads (tagged int, float, str subclasses) into data the YAML writer accepts, and dump() folding a line
past 120 characters."""

from __future__ import annotations

import pytest
from ansible.parsing.utils.yaml import from_yaml

from nodeforge import collection  # noqa: F401  (sets up the collection loader)

from ansible_collections.nodeforge.gpu.plugins.module_utils import k8s_objects  # isort: skip

# The DGX H100 profile's eight compute-fabric ports (profiles/dgx-h100), in the numeric order of their PCI bus.
DGX_H100_NETDEVS = ["ibp24s0", "ibp64s0", "ibp79s0", "ibp94s0", "ibp154s0", "ibp192s0", "ibp206s0", "ibp220s0"]


def cluster(hosts: dict[str, dict], **settings) -> k8s_objects.Cluster:
    return k8s_objects.cluster_from({"nodeforge_k8s_distribution": "kubernetes", **settings}, hosts)


def dgx_h100(**settings) -> k8s_objects.Cluster:
    return cluster({"gpu-01": {"nodeforge_profile": "dgx-h100"}}, **settings)


def refusal(call, *args) -> str:
    with pytest.raises(k8s_objects.K8sConfigError) as refused:
        call(*args)
    return str(refused.value)


# ---- cluster_from ----------------------------------------------------------------------------------------------------
def test_a_node_whose_profile_is_unknown_is_refused_naming_host_and_profile():
    hosts = {"gpu-02": {"nodeforge_profile": "dgx-h100"}, "gpu-01": {"nodeforge_profile": "dgx-h10"}}
    assert refusal(k8s_objects.cluster_from, {}, hosts) == (
        "host gpu-01: nodeforge_profile 'dgx-h10' is not a known hardware profile"
    )


# ---- RDMA shared device plugin: the ports ----------------------------------------------------------------------------
def test_an_hca_without_a_netdev_is_refused_naming_profile_and_hca():
    c = cluster(
        {
            "gpu-01": {
                "nodeforge_profile": "dgx-h100",
                "nodeforge_profile_overrides": {
                    "hcas": [
                        {"name": "mlx5_0", "pci_id": "15b3:1021", "link_layer": "InfiniBand", "netdev": "ibp24s0"},
                        {"name": "mlx5_3", "pci_id": "15b3:1021", "link_layer": "InfiniBand"},
                    ]
                },
            }
        }
    )
    assert refusal(k8s_objects.rdma_device_config, c) == (
        "profile dgx-h100: HCA mlx5_3 has no netdev name: the RDMA shared device plugin's configuration names the "
        "devices by it"
    )


def test_dgx_h100_ports_are_one_resource_each_in_the_numeric_order_of_their_netdevs():
    assert k8s_objects.rdma_device_config(dgx_h100()) == {
        "periodicUpdateInterval": 300,
        "configList": [
            {"resourceName": f"shared_{netdev}", "resourcePrefix": "rdma", "rdmaHcaMax": 100, "devices": [netdev]}
            for netdev in DGX_H100_NETDEVS
        ],
    }
    assert k8s_objects.rdma_resources(dgx_h100()) == [f"rdma/shared_{netdev}" for netdev in DGX_H100_NETDEVS]


@pytest.mark.parametrize("grouping", ["per_hca", "all"])
def test_nodes_without_hcas_get_no_rdma_resource_in_either_grouping(grouping):
    c = cluster(
        {"gpu-01": {"nodeforge_profile": "dgx-h100", "nodeforge_profile_overrides": {"hcas": []}}},
        k8s_rdma_shared_device_plugin_grouping=grouping,
    )
    assert k8s_objects.rdma_device_config(c) == {"periodicUpdateInterval": 300, "configList": []}


# ---- RDMA shared device plugin: k8s_rdma_shared_device_plugin_resources ----------------------------------------------
RAILS = [
    {"name": "rails_numa1", "devices": ["ibp206s0", "ibp154s0"]},
    {"name": "rail_0", "devices": ["ibp24s0"]},
]


def test_explicit_resources_group_the_named_netdevs_in_the_given_order():
    assert k8s_objects.rdma_device_config(dgx_h100(k8s_rdma_shared_device_plugin_resources=RAILS)) == {
        "periodicUpdateInterval": 300,
        "configList": [
            {
                "resourceName": "rails_numa1",
                "resourcePrefix": "rdma",
                "rdmaHcaMax": 100,
                "devices": ["ibp206s0", "ibp154s0"],
            },
            {"resourceName": "rail_0", "resourcePrefix": "rdma", "rdmaHcaMax": 100, "devices": ["ibp24s0"]},
        ],
    }


def test_explicit_resources_in_the_selectors_form():
    c = dgx_h100(k8s_rdma_shared_device_plugin_resources=RAILS, k8s_rdma_shared_device_plugin_form="selectors")
    assert k8s_objects.rdma_device_config(c)["configList"] == [
        {
            "resourceName": "rails_numa1",
            "resourcePrefix": "rdma",
            "rdmaHcaMax": 100,
            "selectors": {
                "vendors": ["15b3"],
                "deviceIDs": ["1021"],
                "ifNames": ["ibp206s0", "ibp154s0"],
                "linkTypes": ["infiniband"],
            },
        },
        {
            "resourceName": "rail_0",
            "resourcePrefix": "rdma",
            "rdmaHcaMax": 100,
            "selectors": {
                "vendors": ["15b3"],
                "deviceIDs": ["1021"],
                "ifNames": ["ibp24s0"],
                "linkTypes": ["infiniband"],
            },
        },
    ]


EXPECTED_NETDEVS = "(expected netdev names of the profiles' HCAs: " + ", ".join(DGX_H100_NETDEVS) + ")"


@pytest.mark.parametrize(
    ("resources", "message"),
    [
        pytest.param(
            [RAILS[1], {"name": "rails"}],
            f"k8s_rdma_shared_device_plugin_resources[1].devices: none given {EXPECTED_NETDEVS}",
            id="no-devices-key",
        ),
        pytest.param(
            [{"name": "rails", "devices": []}],
            f"k8s_rdma_shared_device_plugin_resources[0].devices: none given {EXPECTED_NETDEVS}",
            id="empty-devices",
        ),
        pytest.param(
            [{"name": "rails", "devices": ["ibp24s0", "ib0", "mlx5_0"]}],
            f"k8s_rdma_shared_device_plugin_resources[0].devices: ['ib0', 'mlx5_0'] {EXPECTED_NETDEVS}",
            id="unknown-devices",
        ),
    ],
)
def test_explicit_resources_naming_no_or_unknown_devices_are_refused_word_for_word(resources, message):
    assert refusal(k8s_objects.rdma_device_config, dgx_h100(k8s_rdma_shared_device_plugin_resources=resources)) == (
        message
    )


def test_explicit_resources_on_nodes_without_hcas_are_refused_saying_none_is_expected():
    c = cluster(
        {"gpu-01": {"nodeforge_profile": "dgx-h100", "nodeforge_profile_overrides": {"hcas": []}}},
        k8s_rdma_shared_device_plugin_resources=[{"name": "rails", "devices": ["ibp24s0"]}],
    )
    assert refusal(k8s_objects.rdma_device_config, c) == (
        "k8s_rdma_shared_device_plugin_resources[0].devices: ['ibp24s0'] "
        "(expected netdev names of the profiles' HCAs: none)"
    )


# ---- plain() and dump() ----------------------------------------------------------------------------------------------
# An object as Ansible hands it to the action k8s_render: loaded from a vars file, every value tagged with its origin
# (ansible-core's int, float, str, list and dict subclasses), which the YAML writer refuses.
TAGGED = """\
kind: ConfigMap
apiVersion: v1
metadata:
  name: nccl-tuning
  namespace: ml-team
data:
  NCCL_IB_HCA: mlx5_0,mlx5_3
spec:
  replicas: 2
  scale: 0.5
  ports: [8080, 2.5, true, null]
  enabled: false
"""


def test_plain_makes_ansible_loaded_values_writable_as_yaml():
    loaded = from_yaml(TAGGED, file_name="/srv/inventory/group_vars/k8s_control.yml")
    replicas = loaded["spec"]["replicas"]
    assert isinstance(replicas, int)  # an int subclass from ansible-core 2.19 on (tagged), a plain int before
    assert k8s_objects.dump(k8s_objects.plain(loaded)) == (
        "apiVersion: v1\n"
        "kind: ConfigMap\n"
        "metadata:\n"
        "  name: nccl-tuning\n"
        "  namespace: ml-team\n"
        "data:\n"
        "  NCCL_IB_HCA: mlx5_0,mlx5_3\n"
        "spec:\n"
        "  replicas: 2\n"
        "  scale: 0.5\n"
        "  ports:\n"
        "  - 8080\n"
        "  - 2.5\n"
        "  - true\n"
        "  - null\n"
        "  enabled: false\n"
    )


def test_dump_folds_a_line_longer_than_120_characters_at_the_next_space():
    description = (
        "cloned from restricted, adds IPC_LOCK for MPI jobs in the namespace of the team ml-climate and its runners"
    )
    obj = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"annotations": {"kubernetes.io/description": description}},
    }
    assert k8s_objects.dump(obj) == (
        "apiVersion: v1\n"
        "kind: Namespace\n"
        "metadata:\n"
        "  annotations:\n"
        "    kubernetes.io/description: cloned from restricted, adds IPC_LOCK for MPI jobs in the namespace of the "
        "team ml-climate\n"
        "      and its runners\n"
    )
