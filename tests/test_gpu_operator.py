"""GPU Operator mode (k8s_objects.gpu_operator_values and the node labels): the chart values say what nodeforge left
to the operator, from the nodes' own variables; contradictions are refused naming the node."""

from __future__ import annotations

import json

import pytest

from nodeforge.collection import k8s_validate
from tests.test_k8s_objects import independent_problems
from tests.test_k8s_render import k8s, read_rendered
from tests.test_k8s_render import upstream_url as upstream_url  # the loopback fixture

from ansible_collections.nodeforge.gpu.plugins.module_utils import k8s_objects  # isort: skip


def cluster(nodes: dict[str, dict], **settings) -> k8s_objects.Cluster:
    hosts = {name: {"nodeforge_profile": "dgx-h100", **variables} for name, variables in nodes.items()}
    return k8s_objects.cluster_from({"nodeforge_k8s_distribution": "kubernetes", **settings}, hosts)


MIXED = {
    "gpu-01": {"nvidia_driver_source": "operator", "gpudirect_rdma_module": "nvidia-peermem"},
    "gpu-02": {"nvidia_driver_source": "operator", "gpudirect_rdma_gdrcopy": True},
    "gpu-03": {"nvidia_driver_source": "cuda_repo"},
}


def labels(c: k8s_objects.Cluster) -> dict[str, dict]:
    return {obj["metadata"]["name"]: obj["metadata"]["labels"] for obj in k8s_objects.node_labels(c)}


def test_not_used_means_no_values_and_no_deploy_labels():
    c = cluster(MIXED)
    assert k8s_objects.gpu_operator_values(c) == {}
    assert all(k8s_objects.DEPLOY_DRIVER not in found for found in labels(c).values())


def test_mixed_cluster_driver_container_only_where_asked():
    c = cluster(MIXED, k8s_gpu_operator_enabled=True, k8s_gpu_device_plugin_mig_strategy="single")
    values = k8s_objects.gpu_operator_values(c)
    assert values == {
        "driver": {"enabled": True, "rdma": {"enabled": True, "useHostMofed": True}},
        "toolkit": {"enabled": False},
        "devicePlugin": {"enabled": False},
        "mig": {"strategy": "single"},
        "gdrcopy": {"enabled": True},
    }
    found = labels(c)
    # The host-driver node is kept out of the driver container's DaemonSet; the others are left to it.
    assert found["gpu-03"][k8s_objects.DEPLOY_DRIVER] == "false"
    assert k8s_objects.DEPLOY_DRIVER not in found["gpu-01"]
    assert k8s_objects.DEPLOY_DRIVER not in found["gpu-02"]
    # The labelled Node objects stay valid for the API server.
    assert k8s_validate.validate(k8s_objects.node_labels(c), "1.33", k8s_validate.CrdSchemas([])) == []


def test_host_drivers_everywhere_turn_the_driver_container_off():
    """The reference's GPU Operator with host drivers: driver.enabled=false, toolkit.enabled=false; no labels needed."""
    c = cluster({"gpu-01": {}, "gpu-02": {"nvidia_driver_source": "distro"}}, k8s_gpu_operator_enabled=True)
    values = k8s_objects.gpu_operator_values(c)
    assert values["driver"] == {"enabled": False}
    assert values["toolkit"] == {"enabled": False}
    assert values["gdrcopy"] == {"enabled": False}
    assert all(k8s_objects.DEPLOY_DRIVER not in found for found in labels(c).values())


def test_device_plugin_from_the_operator_when_nodeforge_s_is_off():
    c = cluster(MIXED, k8s_gpu_operator_enabled=True, k8s_gpu_device_plugin_enabled=False)
    assert k8s_objects.gpu_operator_values(c)["devicePlugin"] == {"enabled": True}


def test_driver_version_and_site_values_are_merged():
    nodes = {name: {**variables, "nvidia_driver_version": "580.95.05"} for name, variables in MIXED.items()}
    own = {"driver": {"repository": "registry.example.com/nvidia", "rdma": {"useHostMofed": False}}}
    values = k8s_objects.gpu_operator_values(cluster(nodes, k8s_gpu_operator_enabled=True, k8s_gpu_operator_values=own))
    assert values["driver"] == {
        "enabled": True,
        "version": "580.95.05",
        "repository": "registry.example.com/nvidia",
        "rdma": {"enabled": True, "useHostMofed": False},
    }


def test_driver_containers_must_agree_on_the_version():
    nodes = {
        "gpu-01": {"nvidia_driver_source": "operator", "nvidia_driver_version": "580.95.05"},
        "gpu-02": {"nvidia_driver_source": "operator", "nvidia_driver_version": "570.172.08"},
    }
    with pytest.raises(k8s_objects.K8sConfigError, match=r"different nvidia_driver_version values \(570.172.08, 580"):
        k8s_objects.gpu_operator_values(cluster(nodes, k8s_gpu_operator_enabled=True))


@pytest.mark.parametrize(
    ("own", "expected"),
    [
        ({"driver": {"enabled": True}}, r"driver.enabled: true, and this node has a host driver .* \(node gpu-03\)"),
        ({"driver": {"enabled": False}}, r"driver.enabled: false, and this node's nvidia_driver_source is operator"),
        ({"toolkit": {"enabled": True}}, r"toolkit.enabled: true"),
        ({"devicePlugin": {"enabled": True}}, r"devicePlugin.enabled: true with k8s_gpu_device_plugin_enabled true"),
    ],
)
def test_contradicting_site_values_are_refused(own, expected):
    c = cluster(MIXED, k8s_gpu_operator_enabled=True, k8s_gpu_operator_values=own)
    with pytest.raises(k8s_objects.K8sConfigError, match=r"k8s_gpu_operator_values contradicts .*" + expected):
        k8s_objects.gpu_operator_values(c)


@pytest.mark.slow
def test_render_writes_the_values_and_labels_of_a_mixed_cluster(tmp_path, upstream_url):
    """`nodeforge k8s render` of the DGX H100 sample with one node on the driver container: gpu-operator-values.yaml
    next to the objects (not in the kustomization), the host-driver node labelled, the helm command announced."""
    operator_mode = tmp_path / "operator.yml"
    operator_mode.write_text(
        "all:\n  vars:\n    k8s_gpu_operator_enabled: true\n"
        "  children:\n    gpu_nodes:\n      hosts:\n        dgxh100-01:\n          nvidia_driver_source: operator\n"
    )
    run = k8s("render", tmp_path, upstream_url, "dgx-h100-k8s", "-i", str(operator_mode))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    rendered = read_rendered(tmp_path / "out")
    values = rendered.pop("gpu-operator-values.yaml")
    assert values["driver"] == {"enabled": True, "rdma": {"enabled": True, "useHostMofed": True}}
    assert values["toolkit"] == {"enabled": False}
    assert values["devicePlugin"] == {"enabled": False}
    kustomization = rendered.pop("kustomization.yaml")
    assert sorted(kustomization["resources"]) == sorted(rendered)
    nodes = {obj["metadata"]["name"]: obj["metadata"]["labels"] for obj in rendered.values() if obj["kind"] == "Node"}
    assert nodes["dgxh100-02"][k8s_objects.DEPLOY_DRIVER] == "false"
    assert k8s_objects.DEPLOY_DRIVER not in nodes["dgxh100-01"]
    assert independent_problems(list(rendered.values())) == []
    notices = " ".join(notice["text"] for notice in json.loads(run.stdout)["notices"])
    assert "helm install gpu-operator nvidia/gpu-operator --version v26.7.0" in " ".join(notices.split())
