# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The cluster layer's rendered objects pinned down whole, where test_k8s_objects.py looks at parts: the NVIDIA device
plugin's config file exactly as its ConfigMap carries it (time-slicing or MPS replicas, MIG strategy) and the settings
it refuses word for word, its DaemonSet (CONFIG_FILE, the read-only config mount, the OpenShift ServiceAccount, the
upstream's labels kept), the RDMA shared device plugin's ConfigMap text and DaemonSet, the MPI tenants' Namespace Pod
Security levels, Roles and restricted-clone SCC, the Node labels (label_value's sanitising, profiles that name no model)
and when the RuntimeClass nvidia is needed; and that rendering neither changes nor shares the upstream manifests and
constants it starts from (render twice, compare the inputs before and after)."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from nodeforge import collection  # noqa: F401  (sets up the collection loader)
from nodeforge.collection import k8s_validate, model
from tests.test_k8s_objects import REDBOOK_SCC, UPSTREAM, _file, by_kind, cluster, everything, independent_problems

from ansible_collections.nodeforge.gpu.plugins.module_utils import k8s_objects  # isort: skip

MANAGED = {"app.kubernetes.io/managed-by": "nodeforge"}
# The images the version manifest pins (the upstream files name others, or none).
DEVICE_PLUGIN_IMAGE = model.manifest()["kubernetes"]["k8s_device_plugin"]["image"]
RDMA_IMAGE = model.manifest()["kubernetes"]["rdma_shared_dev_plugin"]["image"]


def device_plugin_upstream() -> tuple[dict, dict]:
    [daemonset] = _file("k8s_gpu_device_plugin", "upstream", "nvidia-device-plugin.yml")
    [runtime_class] = _file("k8s_gpu_device_plugin", "runtimeclass-nvidia.yaml")
    return daemonset, runtime_class


def rdma_upstream() -> tuple[dict, dict]:
    [daemonset] = _file("k8s_rdma_shared_device_plugin", "upstream", "daemonset.yaml")
    [configmap] = _file("k8s_rdma_shared_device_plugin", "upstream", "configmap.yaml")
    return daemonset, configmap


def mpi_release() -> list[dict]:
    return k8s_validate.load_documents((UPSTREAM / "mpi-operator-v0.8.0.yaml").read_text())


def containers(value) -> list:
    """Every dict and list inside a value (the value itself included)."""
    if isinstance(value, dict):
        return [value, *(c for v in value.values() for c in containers(v))]
    if isinstance(value, list):
        return [value, *(c for v in value for c in containers(v))]
    return []


def shared(rendered, given) -> list:
    """The dicts and lists a rendered object shares with what it was rendered from (a later change to one would
    change the other)."""
    ids = {id(c) for c in containers(given)}
    return [c for c in containers(rendered) if id(c) in ids]


def node(name: str, profile: dict, **variables) -> k8s_objects.Node:
    return k8s_objects.Node(name, profile, variables)


# ---- the device plugin's config file ---------------------------------------------------------------------------------
def plugin_config_map(c: k8s_objects.Cluster) -> dict:
    [configmap] = [o for o in k8s_objects.gpu_device_plugin(c, *device_plugin_upstream()) if o["kind"] == "ConfigMap"]
    return configmap


def test_no_sharing_is_a_config_of_the_mig_strategy_only():
    c = cluster("kubernetes", "dgx-h100", 1)
    assert k8s_objects.device_plugin_config(c) == {"version": "v1", "flags": {"migStrategy": "none"}}
    assert plugin_config_map(c) == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "nvidia-device-plugin-config", "namespace": "kube-system", "labels": MANAGED},
        "data": {"config.yaml": "flags:\n  migStrategy: none\nversion: v1\n"},
    }


def test_time_slicing_with_two_replicas_renders_the_sorted_config_file():
    c = cluster(
        "kubernetes", "dgx-h100", 1, k8s_gpu_device_plugin_sharing="time-slicing", k8s_gpu_device_plugin_replicas=2
    )
    assert plugin_config_map(c)["data"] == {
        "config.yaml": "flags:\n"
        "  migStrategy: none\n"
        "sharing:\n"
        "  timeSlicing:\n"
        "    renameByDefault: false\n"
        "    resources:\n"
        "    - name: nvidia.com/gpu\n"
        "      replicas: 2\n"
        "version: v1\n"
    }


def test_mps_sharing_is_the_mps_key_with_its_replicas_and_rename():
    c = cluster(
        "kubernetes",
        "dgx-h100",
        1,
        k8s_gpu_device_plugin_sharing="mps",
        k8s_gpu_device_plugin_replicas=3,
        k8s_gpu_device_plugin_mig_strategy="single",
        k8s_gpu_device_plugin_rename_by_default=True,
    )
    assert k8s_objects.device_plugin_config(c) == {
        "version": "v1",
        "flags": {"migStrategy": "single"},
        "sharing": {"mps": {"renameByDefault": True, "resources": [{"name": "nvidia.com/gpu", "replicas": 3}]}},
    }
    assert plugin_config_map(c)["data"]["config.yaml"] == (
        "flags:\n"
        "  migStrategy: single\n"
        "sharing:\n"
        "  mps:\n"
        "    renameByDefault: true\n"
        "    resources:\n"
        "    - name: nvidia.com/gpu\n"
        "      replicas: 3\n"
        "version: v1\n"
    )


@pytest.mark.parametrize(
    ("sharing", "strategy", "expected"),
    [
        pytest.param("none", "mixed", {"version": "v1", "flags": {"migStrategy": "mixed"}}, id="mixed-without-sharing"),
        pytest.param(
            "time-slicing",
            "mixed",
            {
                "version": "v1",
                "flags": {"migStrategy": "mixed"},
                "sharing": {
                    "timeSlicing": {"renameByDefault": False, "resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}
                },
            },
            id="time-slicing-with-mixed",
        ),
        pytest.param(
            "mps",
            "none",
            {
                "version": "v1",
                "flags": {"migStrategy": "none"},
                "sharing": {
                    "mps": {"renameByDefault": False, "resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}
                },
            },
            id="mps-without-mig",
        ),
    ],
)
def test_mig_strategy_and_sharing_combinations_that_are_accepted(sharing, strategy, expected):
    c = cluster(
        "kubernetes",
        "dgx-h100",
        1,
        k8s_gpu_device_plugin_sharing=sharing,
        k8s_gpu_device_plugin_replicas=2,
        k8s_gpu_device_plugin_mig_strategy=strategy,
    )
    assert k8s_objects.device_plugin_config(c) == expected


def test_mps_with_mig_strategy_mixed_is_refused_word_for_word():
    c = cluster(
        "kubernetes",
        "dgx-h100",
        1,
        k8s_gpu_device_plugin_sharing="mps",
        k8s_gpu_device_plugin_replicas=2,
        k8s_gpu_device_plugin_mig_strategy="mixed",
    )
    with pytest.raises(k8s_objects.K8sConfigError) as refused:
        k8s_objects.device_plugin_config(c)
    assert str(refused.value) == "k8s_gpu_device_plugin_sharing mps cannot be combined with migStrategy mixed"


@pytest.mark.parametrize("sharing", ["time-slicing", "mps"])
def test_sharing_with_one_replica_is_refused_word_for_word(sharing):
    c = cluster("kubernetes", "dgx-h100", 1, k8s_gpu_device_plugin_sharing=sharing, k8s_gpu_device_plugin_replicas=1)
    with pytest.raises(k8s_objects.K8sConfigError) as refused:
        k8s_objects.device_plugin_config(c)
    assert str(refused.value) == (
        f"k8s_gpu_device_plugin_sharing is {sharing}: k8s_gpu_device_plugin_replicas must be at least 2 (found 1)"
    )


# ---- the device plugin's DaemonSet -----------------------------------------------------------------------------------
def device_plugin_daemonset(**pod) -> dict:
    """The upstream static DaemonSet as nodeforge renders it (pod: what the distribution adds to the pod spec)."""
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "nvidia-device-plugin-daemonset", "namespace": "kube-system", "labels": MANAGED},
        "spec": {
            "selector": {"matchLabels": {"name": "nvidia-device-plugin-ds"}},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {
                "metadata": {"labels": {"name": "nvidia-device-plugin-ds"}},
                "spec": {
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                    "priorityClassName": "system-node-critical",
                    "containers": [
                        {
                            "image": DEVICE_PLUGIN_IMAGE,
                            "name": "nvidia-device-plugin-ctr",
                            "env": [{"name": "CONFIG_FILE", "value": "/config/config.yaml"}],
                            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                            "volumeMounts": [
                                {"name": "kubelet-device-plugins-dir", "mountPath": "/var/lib/kubelet/device-plugins"},
                                {"name": "config", "mountPath": "/config", "readOnly": True},
                            ],
                        }
                    ],
                    "volumes": [
                        {
                            "name": "kubelet-device-plugins-dir",
                            "hostPath": {"path": "/var/lib/kubelet/device-plugins", "type": "Directory"},
                        },
                        {"name": "config", "configMap": {"name": "nvidia-device-plugin-config"}},
                    ],
                    "nodeSelector": {"nvidia.com/gpu.present": "true"},
                    **pod,
                },
            },
        },
    }


def test_kubernetes_device_plugin_objects_whole():
    objects = k8s_objects.gpu_device_plugin(cluster("kubernetes", "dgx-h100", 1), *device_plugin_upstream())
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("RuntimeClass", "nvidia"),
        ("ConfigMap", "nvidia-device-plugin-config"),
        ("DaemonSet", "nvidia-device-plugin-daemonset"),
    ]
    assert objects[0] == {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": "nvidia", "labels": MANAGED},
        "handler": "nvidia",
    }
    assert objects[2] == device_plugin_daemonset(runtimeClassName="nvidia")
    assert independent_problems(objects) == []


def test_openshift_device_plugin_runs_as_its_own_service_account_after_the_config():
    objects = k8s_objects.gpu_device_plugin(cluster("openshift", "dgx-1", 1), *device_plugin_upstream())
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("RuntimeClass", "nvidia"),
        ("ConfigMap", "nvidia-device-plugin-config"),
        ("ServiceAccount", "nvidia-device-plugin"),
        ("Role", "nvidia-device-plugin-privileged-scc"),
        ("RoleBinding", "nvidia-device-plugin-privileged-scc"),
        ("DaemonSet", "nvidia-device-plugin-daemonset"),
    ]
    assert objects[-1] == device_plugin_daemonset(runtimeClassName="nvidia", serviceAccountName="nvidia-device-plugin")
    assert independent_problems(objects) == []


def test_device_plugin_keeps_the_upstream_s_labels_and_adds_managed_by():
    upstream, runtime_class = device_plugin_upstream()
    upstream["metadata"]["labels"] = {"app.kubernetes.io/name": "nvidia-device-plugin"}
    [daemonset] = by_kind(k8s_objects.gpu_device_plugin(cluster("kubernetes"), upstream, runtime_class), "DaemonSet")
    assert daemonset["metadata"] == {
        "name": "nvidia-device-plugin-daemonset",
        "namespace": "kube-system",
        "labels": {"app.kubernetes.io/name": "nvidia-device-plugin", **MANAGED},
    }


def test_device_plugin_rendering_neither_changes_nor_shares_its_inputs():
    upstream, runtime_class = device_plugin_upstream()
    before = copy.deepcopy((upstream, runtime_class))
    c = cluster("openshift", k8s_gpu_device_plugin_namespace="gpu-plugins")
    first = k8s_objects.gpu_device_plugin(c, upstream, runtime_class)
    assert (upstream, runtime_class) == before
    assert shared(first, [upstream, runtime_class]) == []
    assert by_kind(first, "DaemonSet")[0]["metadata"]["namespace"] == "gpu-plugins"
    assert k8s_objects.gpu_device_plugin(c, upstream, runtime_class) == first


# ---- RuntimeClass decisions ------------------------------------------------------------------------------------------
GPU_PROFILE = {"name": "site-a100", "gpu": {"model": "A100", "count": 4}}


@pytest.mark.parametrize(
    ("variables", "needed"),
    [
        pytest.param([{}], True, id="runtime-unknown"),
        pytest.param([{"nvidia_container_toolkit_set_as_default": True}], False, id="nvidia-default"),
        pytest.param([{"nvidia_container_toolkit_set_as_default": False}], True, id="nvidia-not-default"),
        pytest.param([{"nvidia_container_toolkit_set_as_default": True}, {}], True, id="one-node-of-unknown-runtime"),
    ],
)
def test_the_runtime_class_is_needed_unless_nvidia_is_every_node_s_default(variables, needed):
    nodes = [node(f"gpu-{i}", GPU_PROFILE, **v) for i, v in enumerate(variables)]
    c = dataclasses.replace(cluster("kubernetes"), nodes=nodes)
    assert k8s_objects.needs_runtime_class(c) is needed
    kinds = [o["kind"] for o in k8s_objects.gpu_device_plugin(c, *device_plugin_upstream())]
    assert kinds == (["RuntimeClass"] if needed else []) + ["ConfigMap", "DaemonSet"]


# ---- node labels -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("Tesla V100-SXM2", "Tesla-V100-SXM2"),
        ("(A100 80GB)", "A100-80GB"),
        ("-._abc_.-", "abc"),
        ("x" * 70, "x" * 63),
        ("x" * 64, "x" * 63),
        ("a" * 62 + "-b", "a" * 62),
        (8, "8"),
    ],
)
def test_label_value_sanitises_free_text(text, value):
    assert k8s_objects.label_value(text) == value


def test_a_profile_that_names_neither_itself_nor_its_gpu_model_gets_empty_label_values():
    c = dataclasses.replace(cluster("kubernetes"), nodes=[node("gpu-1", {"gpu": {"count": 2}})])
    assert k8s_objects.node_labels(c) == [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": "gpu-1",
                "labels": {
                    "nodeforge.io/profile": "",
                    "nvidia.com/gpu.present": "true",
                    "nodeforge.io/gpu.model": "",
                    "nodeforge.io/gpu.count": "2",
                },
            },
        }
    ]
    assert independent_problems(k8s_objects.node_labels(c)) == []


# ---- RDMA shared device plugin ---------------------------------------------------------------------------------------
RDMA_CONFIG_JSON = """{
  "periodicUpdateInterval": 300,
  "configList": [
    {
      "resourceName": "shared_ib0",
      "resourcePrefix": "rdma",
      "rdmaHcaMax": 100,
      "devices": [
        "ib0"
      ]
    },
    {
      "resourceName": "shared_ib1",
      "resourcePrefix": "rdma",
      "rdmaHcaMax": 100,
      "devices": [
        "ib1"
      ]
    },
    {
      "resourceName": "shared_ib2",
      "resourcePrefix": "rdma",
      "rdmaHcaMax": 100,
      "devices": [
        "ib2"
      ]
    },
    {
      "resourceName": "shared_ib3",
      "resourcePrefix": "rdma",
      "rdmaHcaMax": 100,
      "devices": [
        "ib3"
      ]
    }
  ]
}
"""


def rdma_daemonset(**pod) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "rdma-shared-dp-ds", "namespace": "kube-system", "labels": MANAGED},
        "spec": {
            "selector": {"matchLabels": {"name": "rdma-shared-dp-ds"}},
            "template": {
                "metadata": {"labels": {"name": "rdma-shared-dp-ds"}},
                "spec": {
                    "hostNetwork": True,
                    "priorityClassName": "system-node-critical",
                    "containers": [
                        {
                            "image": RDMA_IMAGE,
                            "name": "k8s-rdma-shared-dp-ds",
                            "imagePullPolicy": "IfNotPresent",
                            "securityContext": {"privileged": True},
                            "volumeMounts": [
                                {
                                    "name": "device-plugin",
                                    "mountPath": "/var/lib/kubelet/device-plugins",
                                    "readOnly": False,
                                },
                                {
                                    "name": "plugins-registry",
                                    "mountPath": "/var/lib/kubelet/plugins_registry",
                                    "readOnly": False,
                                },
                                {"name": "config", "mountPath": "/k8s-rdma-shared-dev-plugin"},
                                {"name": "devs", "mountPath": "/dev/"},
                            ],
                        }
                    ],
                    "volumes": [
                        {"name": "device-plugin", "hostPath": {"path": "/var/lib/kubelet/device-plugins"}},
                        {"name": "plugins-registry", "hostPath": {"path": "/var/lib/kubelet/plugins_registry"}},
                        {
                            "name": "config",
                            "configMap": {
                                "name": "rdma-devices",
                                "items": [{"key": "config.json", "path": "config.json"}],
                            },
                        },
                        {"name": "devs", "hostPath": {"path": "/dev/"}},
                    ],
                    "nodeSelector": {"nodeforge.io/rdma": "true"},
                    **pod,
                },
            },
        },
    }


RDMA_CONFIGMAP = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "rdma-devices", "namespace": "kube-system", "labels": MANAGED},
    "data": {"config.json": RDMA_CONFIG_JSON},
}


def test_kubernetes_rdma_plugin_objects_whole_with_the_config_json_text():
    objects = k8s_objects.rdma_shared_device_plugin(cluster("kubernetes", "dgx-1", 1), *rdma_upstream())
    assert objects == [RDMA_CONFIGMAP, rdma_daemonset()]
    assert independent_problems(objects) == []


def test_openshift_rdma_plugin_runs_as_its_own_service_account():
    objects = k8s_objects.rdma_shared_device_plugin(cluster("openshift", "dgx-1", 1), *rdma_upstream())
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("ConfigMap", "rdma-devices"),
        ("ServiceAccount", "rdma-shared-device-plugin"),
        ("Role", "rdma-shared-device-plugin-privileged-scc"),
        ("RoleBinding", "rdma-shared-device-plugin-privileged-scc"),
        ("DaemonSet", "rdma-shared-dp-ds"),
    ]
    assert objects[0] == RDMA_CONFIGMAP
    assert objects[-1] == rdma_daemonset(serviceAccountName="rdma-shared-device-plugin")
    assert independent_problems(objects) == []


def test_rdma_plugin_keeps_the_upstream_s_labels_and_adds_managed_by():
    daemonset, configmap = rdma_upstream()
    daemonset["metadata"]["labels"] = {"app": "rdma-shared-dp"}
    objects = k8s_objects.rdma_shared_device_plugin(cluster("kubernetes", "dgx-1", 1), daemonset, configmap)
    assert by_kind(objects, "DaemonSet")[0]["metadata"] == {
        "name": "rdma-shared-dp-ds",
        "namespace": "kube-system",
        "labels": {"app": "rdma-shared-dp", **MANAGED},
    }


def test_rdma_plugin_rendering_neither_changes_nor_shares_its_inputs():
    daemonset, configmap = rdma_upstream()
    configmap["binaryData"] = {"extra": "AA=="}  # whatever else the upstream ConfigMap carries is copied, not shared
    before = copy.deepcopy((daemonset, configmap))
    c = cluster("openshift", "dgx-1", 1, k8s_rdma_shared_device_plugin_namespace="rdma")
    first = k8s_objects.rdma_shared_device_plugin(c, daemonset, configmap)
    assert (daemonset, configmap) == before
    assert shared(first, [daemonset, configmap]) == []
    assert first[0]["binaryData"] == {"extra": "AA=="}
    assert [o["metadata"]["namespace"] for o in first] == ["rdma"] * 5
    assert k8s_objects.rdma_shared_device_plugin(c, daemonset, configmap) == first


def test_no_rdma_plugin_when_disabled_or_without_hcas():
    with_hcas = cluster("kubernetes", "dgx-1", 1, k8s_rdma_shared_device_plugin_enabled=False)
    assert k8s_objects.rdma_shared_device_plugin(with_hcas, *rdma_upstream()) == []
    without = k8s_objects.cluster_from(
        {"nodeforge_k8s_distribution": "kubernetes"},
        {"gpu-01": {"nodeforge_profile": "dgx-1", "nodeforge_profile_overrides": {"hcas": []}}},
    )
    assert without.get("k8s_rdma_shared_device_plugin_enabled") is True
    assert k8s_objects.rdma_shared_device_plugin(without, *rdma_upstream()) == []


# ---- MPI Operator and tenants ----------------------------------------------------------------------------------------
MPIJOB_RULES = [
    {
        "apiGroups": ["kubeflow.org"],
        "resources": ["mpijobs"],
        "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
    },
    {"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list", "watch"]},
]


def tenant_binding(namespace: str) -> dict:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "mpi", "namespace": namespace, "labels": MANAGED},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "mpi"},
        "subjects": [{"kind": "ServiceAccount", "name": "mpi", "namespace": namespace}],
    }


def tenant_account(namespace: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": "mpi", "namespace": namespace, "labels": MANAGED},
    }


def test_kubernetes_tenants_whole():
    objects = k8s_objects.mpi_tenants(cluster("kubernetes", k8s_mpi_operator_tenants=["ml-team", "cv"]))
    expected = []
    for namespace in ("ml-team", "cv"):
        expected += [
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {
                    "name": namespace,
                    "labels": {
                        "pod-security.kubernetes.io/enforce": "privileged",
                        "pod-security.kubernetes.io/warn": "baseline",
                        "pod-security.kubernetes.io/audit": "baseline",
                        **MANAGED,
                    },
                },
            },
            tenant_account(namespace),
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": "mpi", "namespace": namespace, "labels": MANAGED},
                "rules": MPIJOB_RULES,
            },
            tenant_binding(namespace),
        ]
    assert objects == expected
    assert independent_problems(objects) == []


def tenant_scc(namespace: str) -> dict:
    return {
        "apiVersion": "security.openshift.io/v1",
        "kind": "SecurityContextConstraints",
        "metadata": {
            "name": f"nodeforge-mpi-{namespace}",
            "labels": MANAGED,
            "annotations": {
                "kubernetes.io/description": f"cloned from restricted, adds IPC_LOCK for MPI jobs in {namespace}"
            },
        },
        # The Redbook's SCC (seed 004, 3.4.3) as tests/test_k8s_objects.py writes it down, granted to no one directly.
        **REDBOOK_SCC,
        "groups": [],
        "users": [],
    }


def test_openshift_tenants_whole_with_their_restricted_clone_scc():
    objects = k8s_objects.mpi_tenants(cluster("openshift", k8s_mpi_operator_tenants=["ml-team"]))
    assert objects == [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml-team", "labels": MANAGED}},
        tenant_account("ml-team"),
        tenant_scc("ml-team"),
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "mpi", "namespace": "ml-team", "labels": MANAGED},
            "rules": [
                *MPIJOB_RULES,
                {
                    "apiGroups": ["security.openshift.io"],
                    "resources": ["securitycontextconstraints"],
                    "resourceNames": ["nodeforge-mpi-ml-team"],
                    "verbs": ["use"],
                },
            ],
        },
        tenant_binding("ml-team"),
    ]
    assert independent_problems(objects) == []


def test_one_tenant_s_scc_is_not_another_s_nor_the_next_render_s():
    """Each SCC is its own copy of the restricted clone: changing one (as a site's later patch would) changes neither
    the other tenants' nor what the next render produces."""
    c = cluster("openshift", k8s_mpi_operator_tenants=["ml-team", "cv"])
    first, second = by_kind(k8s_objects.mpi_tenants(c), "SecurityContextConstraints")
    assert shared(first, second) == []
    first["defaultAddCapabilities"].append("NET_ADMIN")
    first["fsGroup"]["type"] = "RunAsAny"
    first["volumes"].append("hostPath")
    assert second == tenant_scc("cv")
    assert by_kind(k8s_objects.mpi_tenants(c), "SecurityContextConstraints") == [
        tenant_scc("ml-team"),
        tenant_scc("cv"),
    ]


def test_mpi_operator_is_the_release_as_released_then_the_tenants():
    release = mpi_release()
    before = copy.deepcopy(release)
    c = cluster("kubernetes")
    objects = k8s_objects.mpi_operator(c, release)
    assert objects == before + k8s_objects.mpi_tenants(c)
    assert release == before
    assert shared(objects, release) == []
    assert k8s_objects.mpi_operator(cluster("kubernetes", k8s_mpi_operator_enabled=False), release) == []


def test_everything_rendered_for_openshift_validates_and_shares_nothing_across_renders():
    c = cluster("openshift")
    first, second = everything(c), everything(c)
    assert first == second
    assert shared(first, second) == []
    assert independent_problems(first) == []
