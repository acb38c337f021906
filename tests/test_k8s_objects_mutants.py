# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The cluster layer's objects pinned down where test_k8s_objects.py and test_gpu_operator.py look at parts: the RDMA
plugin's selectors for HCAs a profile describes partly (no PCI ID, no link layer, Ethernet), and the GPU Operator
values' refusal word for word."""

from __future__ import annotations

import pytest

from nodeforge import collection  # noqa: F401  (sets up the collection loader)

from ansible_collections.nodeforge.gpu.plugins.module_utils import k8s_objects  # isort: skip


def cluster(hosts: dict[str, dict], **settings) -> k8s_objects.Cluster:
    return k8s_objects.cluster_from({"nodeforge_k8s_distribution": "kubernetes", **settings}, hosts)


def with_hcas(*hcas: dict) -> dict:
    return {"nodeforge_profile": "dgx-h100", "nodeforge_profile_overrides": {"hcas": list(hcas)}}


SELECTORS = {"k8s_rdma_shared_device_plugin_form": "selectors", "k8s_rdma_shared_device_plugin_grouping": "all"}


def test_rdma_selectors_of_hcas_described_partly():
    """An HCA without pci_id is a Mellanox one (15b3) of no device ID; one without a link layer is Ethernet."""
    c = cluster(
        {
            "gpu-01": with_hcas(
                {"name": "mlx5_0", "netdev": "ib0"},
                {"name": "mlx5_1", "pci_id": "15b3:1021", "link_layer": "InfiniBand", "netdev": "ib1"},
                {"name": "e810", "pci_id": "8086", "link_layer": "Ethernet", "netdev": "eth2"},
            )
        },
        **SELECTORS,
    )
    assert k8s_objects.rdma_device_config(c)["configList"] == [
        {
            "resourceName": "shared_hca",
            "resourcePrefix": "rdma",
            "rdmaHcaMax": 100,
            "selectors": {
                "vendors": ["15b3", "8086"],
                "deviceIDs": ["1021"],
                "ifNames": ["eth2", "ib0", "ib1"],
                "linkTypes": ["ether", "infiniband"],
            },
        }
    ]


@pytest.mark.parametrize(
    ("hca", "selectors"),
    [
        pytest.param(
            {"name": "mlx5_0", "netdev": "ib0"},
            {"vendors": ["15b3"], "ifNames": ["ib0"], "linkTypes": ["ether"]},
            id="nothing-but-a-netdev",
        ),
        pytest.param(
            {"name": "pvrdma0", "pci_id": "15ad:0820", "link_layer": "ethernet", "netdev": "ens224"},
            {"vendors": ["15ad"], "deviceIDs": ["0820"], "ifNames": ["ens224"], "linkTypes": ["ether"]},
            id="roce",
        ),
        pytest.param(
            {"name": "mlx5_0", "pci_id": "15b3:1017", "link_layer": "INFINIBAND", "netdev": "ib0"},
            {"vendors": ["15b3"], "deviceIDs": ["1017"], "ifNames": ["ib0"], "linkTypes": ["infiniband"]},
            id="infiniband-any-case",
        ),
    ],
)
def test_rdma_selectors_per_hca(hca, selectors):
    c = cluster({"gpu-01": with_hcas(hca)}, **SELECTORS)
    [entry] = k8s_objects.rdma_device_config(c)["configList"]
    assert entry["selectors"] == selectors


def test_gpu_operator_values_refusal_names_every_node_and_an_unset_driver_source():
    c = cluster(
        {
            "gpu-02": {"nodeforge_profile": "dgx-h100"},
            "gpu-01": {"nodeforge_profile": "dgx-h100", "nvidia_driver_source": "cuda_repo"},
        },
        k8s_gpu_operator_enabled=True,
        k8s_gpu_operator_values={"driver": {"enabled": True}},
    )
    with pytest.raises(k8s_objects.K8sConfigError) as refused:
        k8s_objects.gpu_operator_values(c)
    assert str(refused.value) == (
        "k8s_gpu_operator_values contradicts what nodeforge installs on the nodes: "
        "driver.enabled: true, and this node has a host driver (nvidia_driver_source cuda_repo) (node gpu-01); "
        "driver.enabled: true, and this node has a host driver (nvidia_driver_source unset: cuda_repo, or grid on "
        "vGPU guests) (node gpu-02)"
    )


TOOLKIT = (
    "toolkit.enabled: true",
    "false: nodeforge installs the NVIDIA Container Toolkit on every GPU node (role nvidia_container_toolkit), and a "
    "second one would reconfigure the container runtime",
)
DEVICE_PLUGIN = (
    "devicePlugin.enabled: true with k8s_gpu_device_plugin_enabled true",
    "one device plugin for nvidia.com/gpu: devicePlugin.enabled false, or k8s_gpu_device_plugin_enabled false",
)
DRIVER_OFF = (
    "driver.enabled: false, and this node's nvidia_driver_source is operator",
    "driver.enabled left to nodeforge (true while a node's driver comes from the driver container): with it off, "
    "nothing would install this node's driver",
)
DRIVER_ON = (
    "driver.enabled: true, and this node has a host driver (nvidia_driver_source cuda_repo)",
    "driver.enabled left to nodeforge: it enables the driver container only where nvidia_driver_source is operator "
    "and labels host-driver nodes nvidia.com/gpu.deploy.driver=false",
)
EVERYTHING_ON = {"driver": {"enabled": True}, "toolkit": {"enabled": True}, "devicePlugin": {"enabled": True}}


@pytest.mark.parametrize(
    ("values", "source", "device_plugin", "conflicts"),
    [
        pytest.param(EVERYTHING_ON, "operator", True, [TOOLKIT, DEVICE_PLUGIN], id="driver-container-node"),
        pytest.param(EVERYTHING_ON, "cuda_repo", False, [DRIVER_ON, TOOLKIT], id="host-driver-node"),
        pytest.param({"driver": {"enabled": False}}, "operator", False, [DRIVER_OFF], id="driver-off"),
        pytest.param({"driver": {"enabled": False}}, "cuda_repo", True, [], id="driver-off-on-a-host-driver-node"),
    ],
)
def test_gpu_operator_conflicts_say_what_was_found_and_what_is_expected(values, source, device_plugin, conflicts):
    assert k8s_objects.gpu_operator_conflicts(values, source, device_plugin) == conflicts


# ---- kubeconfig_server: its refusals name the file and the line, never its content ---------------------------------
TWO_CONTEXTS = "contexts: [{name: a, context: {cluster: ca}}, {name: b}]\n"


@pytest.mark.parametrize(
    ("text", "path", "message"),
    [
        pytest.param(None, "", "the kubeconfig has no context '' (contexts: )", id="no-text"),
        pytest.param(
            "clusters: [{server: https://a:6443\nusers: []\n",
            "/root/.kube/config",
            "the kubeconfig /root/.kube/config is not valid YAML (line 2, column 6: expected ',' or '}', but got ':')",
            id="not-yaml",
        ),
        pytest.param(
            "clusters: [a\nusers: []\n",
            "",
            "the kubeconfig is not valid YAML (line 2, column 6: expected ',' or ']', but got ':')",
            id="not-yaml-without-a-path",
        ),
        pytest.param("users: \x00\n", "/k", "the kubeconfig /k is not valid YAML", id="binary"),
        pytest.param("[a]\n", "/k", "the kubeconfig /k is not a mapping (apiVersion, kind, clusters, contexts, users)"),
        pytest.param(TWO_CONTEXTS, "", "the kubeconfig has no context '' (contexts: a, b)", id="no-current-context"),
        pytest.param(
            "current-context: a\ncontexts: 5\n",
            "",
            "the kubeconfig has no context 'a' (contexts: )",
            id="contexts-a-number",
        ),
        pytest.param(
            "current-context: a\ncontexts: [{name: a, context: ca}]\n",
            "/k",
            "the kubeconfig /k's context 'a' names cluster None, which has no server",
            id="context-not-a-mapping",
        ),
        pytest.param(
            "current-context: a\ncontexts: [{name: a, context: {cluster: ca}}]\n"
            "clusters: [{name: ca, cluster: 'https://a:6443'}]\n",
            "",
            "the kubeconfig's context 'a' names cluster 'ca', which has no server",
            id="cluster-not-a-mapping",
        ),
    ],
)
def test_kubeconfig_server_refusals(text, path, message):
    with pytest.raises(k8s_objects.K8sConfigError) as refused:
        k8s_objects.kubeconfig_server(text, path=path)
    assert str(refused.value) == message


def test_kubeconfig_server_without_a_path_names_the_kubeconfig():
    with pytest.raises(k8s_objects.K8sConfigError) as refused:
        k8s_objects.kubeconfig_server(TWO_CONTEXTS, "c")
    assert str(refused.value) == "the kubeconfig has no context 'c' (contexts: a, b)"


def test_kubeconfig_server_names_the_file_for_a_yaml_error_without_a_position(monkeypatch):
    def refuse(text):
        raise k8s_objects.yaml.MarkedYAMLError(problem="found character that cannot start any token")

    monkeypatch.setattr(k8s_objects.yaml, "safe_load", refuse)
    with pytest.raises(k8s_objects.K8sConfigError) as refused:
        k8s_objects.kubeconfig_server("server: x", path="/root/.kube/config")
    assert str(refused.value) == (
        "the kubeconfig /root/.kube/config is not valid YAML (position unknown: found character that cannot start "
        "any token)"
    )


# ---- the device plugins' grant of the privileged SCC on OpenShift ---------------------------------------------------


@pytest.mark.parametrize("daemonset_name", ["nvidia-device-plugin-daemonset", "rdma-shared-dp-ds"])
def test_each_privileged_daemonset_s_account_may_use_the_privileged_scc(daemonset_name):
    """OpenShift admits a privileged pod when its ServiceAccount may `use` an SCC that allows it (what `oc adm policy
    add-scc-to-user privileged -z ACCOUNT` grants): the DaemonSet runs as its own account, bound to a Role with that
    one rule, the binding's roleRef naming that Role."""
    from tests.test_k8s_objects import by_kind, cluster, everything

    objects = everything(cluster("openshift"))
    [daemonset] = [d for d in by_kind(objects, "DaemonSet") if d["metadata"]["name"] == daemonset_name]
    namespace = daemonset["metadata"]["namespace"]
    account = daemonset["spec"]["template"]["spec"]["serviceAccountName"]
    owned = [o for o in objects if o["metadata"].get("name", "").startswith(account)]
    managed = {"app.kubernetes.io/managed-by": "nodeforge"}
    assert by_kind(owned, "ServiceAccount") == [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": account, "namespace": namespace, "labels": managed},
        }
    ]
    [role] = by_kind(owned, "Role")
    [binding] = by_kind(owned, "RoleBinding")
    assert role["apiVersion"] == binding["apiVersion"] == "rbac.authorization.k8s.io/v1"
    grant = {"name": f"{account}-privileged-scc", "namespace": namespace, "labels": managed}
    assert role["metadata"] == binding["metadata"] == grant
    assert role["rules"] == [
        {
            "apiGroups": ["security.openshift.io"],
            "resources": ["securitycontextconstraints"],
            "resourceNames": ["privileged"],
            "verbs": ["use"],
        }
    ]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": grant["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]


# ---- the files `nodeforge k8s render` writes -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "name"),
    [
        ({"kind": "DaemonSet", "metadata": {"name": "nvidia-device-plugin-daemonset", "namespace": "kube-system"}},
         "daemonset-kube-system-nvidia-device-plugin-daemonset.yaml"),
        # Cluster-scoped: no namespace part, not an empty one.
        ({"kind": "ClusterRoleBinding", "metadata": {"name": "mpi-operator"}}, "clusterrolebinding-mpi-operator.yaml"),
        ({"kind": "RuntimeClass", "metadata": {"name": "nvidia", "namespace": ""}}, "runtimeclass-nvidia.yaml"),
        # Characters a file name should not carry become one hyphen each run; dots stay.
        ({"kind": "CustomResourceDefinition", "metadata": {"name": "mpijobs.kubeflow.org"}},
         "customresourcedefinition-mpijobs.kubeflow.org.yaml"),
        ({"kind": "ClusterRole", "metadata": {"name": "system:openshift:scc:privileged"}},
         "clusterrole-system-openshift-scc-privileged.yaml"),
        ({"kind": "Node", "metadata": {"name": "DGX_01  A"}}, "node-dgx-01-a.yaml"),
    ],
)  # fmt: skip
def test_file_name_is_kind_namespace_and_name_in_lower_case(obj, name):
    assert k8s_objects.file_name(obj) == name


def test_kustomization_lists_the_written_files_for_kubectl_apply_k():
    assert k8s_objects.kustomization(["node-a.yaml", "runtimeclass-nvidia.yaml"]) == (
        "apiVersion: kustomize.config.k8s.io/v1beta1\n"
        "kind: Kustomization\n"
        "resources:\n"
        "- node-a.yaml\n"
        "- runtimeclass-nvidia.yaml\n"
    )


def test_dump_writes_the_head_first_the_rest_sorted_scripts_as_blocks_and_no_anchors():
    """What `k8s render` writes: apiVersion, kind and metadata first, then the other keys in order; a multi-line string
    as a literal block; a list two places share written out twice (no &anchor / *alias for kubectl to trip on); a
    long line kept whole up to 120 characters."""
    shared = ["IPC_LOCK"]
    long_value = "cloned from restricted, adds IPC_LOCK for MPI jobs in the namespace of the research team"
    obj = {
        "spec": {"script": "set -e\nmpirun -np 16 ./all_reduce_perf\n", "add": shared, "keep": shared},
        "metadata": {"name": "job", "annotations": {"note": long_value}},
        "data": {"z": "1", "a": "2"},
        "kind": "ConfigMap",
        "apiVersion": "v1",
    }
    assert k8s_objects.dump(obj) == (
        "apiVersion: v1\n"
        "kind: ConfigMap\n"
        "metadata:\n"
        "  name: job\n"
        "  annotations:\n"
        f"    note: {long_value}\n"
        "data:\n"
        "  z: '1'\n"
        "  a: '2'\n"
        "spec:\n"
        "  script: |\n"
        "    set -e\n"
        "    mpirun -np 16 ./all_reduce_perf\n"
        "  add:\n"
        "  - IPC_LOCK\n"
        "  keep:\n"
        "  - IPC_LOCK\n"
    )
