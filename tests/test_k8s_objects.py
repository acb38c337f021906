"""The cluster layer's objects (module_utils/k8s_objects.py) and their offline strict validation (k8s_validate.py).

Golden comparisons with IBM Redbook REDP-5610 where it is the spec (the rdma-devices entries, the IPC_LOCK SCC's
capability fields, the tenants' ServiceAccount/Role/RoleBinding names and verbs), allowing the documented
modernisations; every rendered object is also validated with kubernetes-validate's own validate() (strict) or, for
custom resources, jsonschema against the CRD: probes independent of nodeforge's validator.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from nodeforge import content
from nodeforge.collection import k8s_validate, model

from ansible_collections.nodeforge.gpu.plugins.module_utils import k8s_objects  # isort: skip

UPSTREAM = Path(__file__).resolve().parents[2] / "shared" / "reference" / "upstream-manifests"
ROLES = content.roles_dir()

# IBM Redbook REDP-5610, 3.4.2 and 3.4.3 (repaired where the PDF text lost underscores): the objects it applies.
REDBOOK_RDMA = [{"resourceName": f"shared_ib{i}", "rdmaHcaMax": 100, "devices": [f"ib{i}"]} for i in range(4)]
REDBOOK_SCC = yaml.safe_load(
    """
allowHostDirVolumePlugin: false
allowHostIPC: false
allowHostNetwork: false
allowHostPID: false
allowHostPorts: false
allowPrivilegeEscalation: true
allowPrivilegedContainer: false
allowedCapabilities: null
defaultAddCapabilities: [IPC_LOCK]
fsGroup: {type: MustRunAs}
priority: null
readOnlyRootFilesystem: false
requiredDropCapabilities: [KILL, MKNOD, SETUID, SETGID]
runAsUser: {type: MustRunAsRange}
seLinuxContext: {type: MustRunAs}
supplementalGroups: {type: RunAsAny}
volumes: [configMap, downwardAPI, emptyDir, persistentVolumeClaim, projected, secret]
"""
)


def _file(role: str, *parts: str) -> list[dict]:
    return k8s_validate.load_documents((ROLES / role / "files" / Path(*parts)).read_text())


def cluster(distribution: str = "openshift", profile: str = "dgx-1", nodes: int = 2, **settings) -> k8s_objects.Cluster:
    control = {"nodeforge_k8s_distribution": distribution, "k8s_mpi_operator_tenants": ["ml-team"], **settings}
    hosts = {f"node-{i:02d}": {"nodeforge_profile": profile} for i in range(1, nodes + 1)}
    return k8s_objects.cluster_from(control, hosts)


def everything(c: k8s_objects.Cluster) -> list[dict]:
    [device_plugin] = _file("k8s_gpu_device_plugin", "upstream", "nvidia-device-plugin.yml")
    [runtime_class] = _file("k8s_gpu_device_plugin", "runtimeclass-nvidia.yaml")
    [daemonset] = _file("k8s_rdma_shared_device_plugin", "upstream", "daemonset.yaml")
    [configmap] = _file("k8s_rdma_shared_device_plugin", "upstream", "configmap.yaml")
    release = k8s_validate.load_documents((UPSTREAM / "mpi-operator-v0.8.0.yaml").read_text())
    return (
        k8s_objects.node_labels(c)
        + k8s_objects.gpu_device_plugin(c, device_plugin, runtime_class)
        + k8s_objects.rdma_shared_device_plugin(c, daemonset, configmap)
        + k8s_objects.mpi_operator(c, release)
    )


def by_kind(objects: list[dict], kind: str) -> list[dict]:
    return [obj for obj in objects if obj["kind"] == kind]


def _nullable(schema):
    """OpenAPI's `nullable: true` as JSON Schema says it (plain jsonschema ignores the keyword)."""
    if isinstance(schema, list):
        return [_nullable(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    result = {k: _nullable(v) for k, v in schema.items()}
    if result.get("nullable") and "type" in result:
        result["type"] = [result["type"], "null"]
    return result


def independent_problems(objects: list[dict], version: str = "1.33") -> list[str]:
    """kubernetes-validate's own validate() (strict) for built-in kinds, jsonschema against the CRD for the rest (the
    shipped ones, and those among the objects: a verified release manifest's)."""
    crds = {
        (crd["spec"]["group"], v["name"], crd["spec"]["names"]["kind"]): v["schema"]["openAPIV3Schema"]
        for crd in [obj for obj in objects if obj.get("kind") == "CustomResourceDefinition"]
        + k8s_validate.load_documents(
            (ROLES / "nodeforge" / "files" / "crds" / "mpijobs.kubeflow.org.yaml").read_text()
        )
        + k8s_validate.load_documents(
            (
                ROLES / "nodeforge" / "files" / "crds" / "securitycontextconstraints.security.openshift.io.yaml"
            ).read_text()
        )
        # The Prometheus Operator's, as pinned (role k8s_gpu_monitoring's ServiceMonitor and PrometheusRule).
        + [
            crd
            for name in ("servicemonitors", "prometheusrules")
            for crd in k8s_validate.load_documents(
                (UPSTREAM / "monitoring" / f"prometheus-operator-v0.93.0-{name}.crd.yaml").read_text()
            )
        ]
        for v in crd["spec"]["versions"]
    }
    problems = []
    for obj in objects:
        group, _, api = obj["apiVersion"].rpartition("/")
        schema = crds.get((group, api, obj["kind"]))
        try:
            if schema is None:
                kubernetes_validate.validate(obj, version, strict=True)
            else:
                # Not jsonschema.validate: it checks the schema first, and the Prometheus Operator's CRDs hold Go
                # regular expressions Python's re refuses (`^(?i)(abort|warn)?$`) in fields nodeforge leaves unset.
                strict = _nullable(schema)
                jsonschema.validators.validator_for(strict)(strict).validate(obj)
        except Exception as exc:
            problems.append(f"{obj['kind']} {obj['metadata']['name']}: {(str(exc).splitlines() or [repr(exc)])[0]}")
    return problems


@pytest.mark.parametrize(
    ("distribution", "profile"),
    [
        ("openshift", "dgx-1"),
        ("kubernetes", "dell-c4140"),
        ("kubernetes", "dgx-h100"),
        ("kubernetes", "vsphere-t4-vgpu"),
    ],
)
def test_every_object_of_each_reference_system_validates(distribution, profile):
    c = cluster(distribution, profile)
    objects = everything(c)
    assert k8s_validate.validate(objects, c.k8s_version, k8s_validate.shipped_crds()) == []
    assert independent_problems(objects) == []
    kinds = {obj["kind"] for obj in objects}
    assert {"Node", "DaemonSet", "ConfigMap", "Deployment", "CustomResourceDefinition", "Role", "RoleBinding"} <= kinds
    assert ("SecurityContextConstraints" in kinds) is (distribution == "openshift")


def test_rdma_devices_are_the_redbook_s_four_shared_ib_resources():
    [configmap] = [
        o for o in everything(cluster()) if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "rdma-devices"
    ]
    assert configmap["metadata"]["namespace"] == "kube-system"
    config = json.loads(configmap["data"]["config.json"])
    # Modernisation: resourcePrefix is explicit (the plugin's default, rdma); the Redbook's entries otherwise.
    assert [{k: v for k, v in e.items() if k != "resourcePrefix"} for e in config["configList"]] == REDBOOK_RDMA
    assert {e["resourcePrefix"] for e in config["configList"]} == {"rdma"}
    assert k8s_objects.rdma_resources(cluster()) == [f"rdma/shared_ib{i}" for i in range(4)]


def test_rdma_selectors_form_and_one_resource_for_all_ports():
    c = cluster(k8s_rdma_shared_device_plugin_form="selectors", k8s_rdma_shared_device_plugin_grouping="all")
    [entry] = k8s_objects.rdma_device_config(c)["configList"]
    assert entry["resourceName"] == "shared_hca"
    assert entry["selectors"] == {
        "vendors": ["15b3"],
        "deviceIDs": ["1013"],
        "ifNames": ["ib0", "ib1", "ib2", "ib3"],
        "linkTypes": ["infiniband"],
    }


def test_explicit_rdma_resources_name_known_netdevs_only():
    c = cluster(k8s_rdma_shared_device_plugin_resources=[{"name": "rails", "devices": ["ib0", "ib9"]}])
    with pytest.raises(k8s_objects.K8sConfigError, match=r"resources\[0\]\.devices: \['ib9'\].*ib0, ib1, ib2, ib3"):
        k8s_objects.rdma_device_config(c)


def test_the_tenant_scc_is_the_redbook_s_restricted_clone_per_namespace():
    objects = everything(cluster("openshift"))
    [scc] = by_kind(objects, "SecurityContextConstraints")
    # Modernisations: named per tenant namespace and granted through the Role's `use` verb, not a users list.
    assert scc["metadata"]["name"] == "nodeforge-mpi-ml-team"
    assert {k: v for k, v in scc.items() if k in REDBOOK_SCC} == REDBOOK_SCC
    assert scc["users"] == [] and scc["groups"] == []
    [role] = [r for r in by_kind(objects, "Role") if r["metadata"]["namespace"] == "ml-team"]
    [binding] = [r for r in by_kind(objects, "RoleBinding") if r["metadata"]["namespace"] == "ml-team"]
    [account] = [a for a in by_kind(objects, "ServiceAccount") if a["metadata"]["namespace"] == "ml-team"]
    assert role["metadata"]["name"] == binding["metadata"]["name"] == account["metadata"]["name"] == "mpi"
    [use] = [r for r in role["rules"] if r["apiGroups"] == ["security.openshift.io"]]
    assert use == {
        "apiGroups": ["security.openshift.io"],
        "resources": ["securitycontextconstraints"],
        "resourceNames": ["nodeforge-mpi-ml-team"],
        "verbs": ["use"],
    }
    # The Redbook's RoleBinding carried roleRef.namespace and userNames, which the API server never accepted.
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "mpi"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "mpi", "namespace": "ml-team"}]


def test_kubernetes_tenants_get_the_pod_security_level_that_admits_ipc_lock():
    objects = everything(cluster("kubernetes"))
    assert by_kind(objects, "SecurityContextConstraints") == []
    [namespace] = [n for n in by_kind(objects, "Namespace") if n["metadata"]["name"] == "ml-team"]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/warn"] == "baseline"


def test_device_plugin_runs_on_gpu_nodes_with_its_config_and_the_runtime_class():
    objects = everything(
        cluster(
            "kubernetes", "dgx-h100", k8s_gpu_device_plugin_sharing="time-slicing", k8s_gpu_device_plugin_replicas=4
        )
    )
    [daemonset] = [d for d in by_kind(objects, "DaemonSet") if d["metadata"]["name"].startswith("nvidia")]
    pod = daemonset["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert pod["priorityClassName"] == "system-node-critical"
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["containers"][0]["image"] == model.manifest()["kubernetes"]["k8s_device_plugin"]["image"]
    [config] = [c for c in by_kind(objects, "ConfigMap") if c["metadata"]["name"] == "nvidia-device-plugin-config"]
    assert yaml.safe_load(config["data"]["config.yaml"]) == {
        "version": "v1",
        "flags": {"migStrategy": "none"},
        "sharing": {
            "timeSlicing": {"renameByDefault": False, "resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}
        },
    }
    [runtime_class] = by_kind(objects, "RuntimeClass")
    assert runtime_class["handler"] == "nvidia"


def test_no_runtime_class_when_nvidia_is_every_node_s_default_runtime():
    hosts = {"n1": {"nodeforge_profile": "dgx-1", "nvidia_container_toolkit_set_as_default": True}}
    c = k8s_objects.cluster_from({}, hosts)
    objects = everything(c)
    assert by_kind(objects, "RuntimeClass") == []
    assert "runtimeClassName" not in by_kind(objects, "DaemonSet")[0]["spec"]["template"]["spec"]


def test_sharing_needs_replicas():
    with pytest.raises(k8s_objects.K8sConfigError, match="k8s_gpu_device_plugin_replicas must be at least 2"):
        k8s_objects.device_plugin_config(cluster(k8s_gpu_device_plugin_sharing="mps"))


def test_node_labels_name_profile_gpu_and_hcas():
    c = cluster("openshift", k8s_node_labels_extra={"openshift.com/gpu-accelerator": "true"})
    [first, _] = k8s_objects.node_labels(c)
    assert first == {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "node-01",
            "labels": {
                "nodeforge.io/profile": "dgx-1",
                "nvidia.com/gpu.present": "true",
                "nodeforge.io/gpu.model": "Tesla-V100-SXM2",
                "nodeforge.io/gpu.count": "8",
                "nodeforge.io/rdma": "true",
                "nodeforge.io/hca.count": "4",
                "openshift.com/gpu-accelerator": "true",
            },
        },
    }


def test_objects_dump_the_same_bytes_every_time():
    first = [k8s_objects.dump(o) for o in everything(cluster())]
    second = [k8s_objects.dump(o) for o in everything(cluster())]
    assert first == second
    assert all(yaml.safe_load(text) for text in first)


# ---- the validator refuses what the API server would, naming object and field ---------------------------------------
def _device_plugin() -> dict:
    return by_kind(everything(cluster("kubernetes")), "DaemonSet")[0]


def test_an_unknown_field_is_named():
    obj = _device_plugin()
    obj["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    [problem] = k8s_validate.validate([obj], "1.33", k8s_validate.shipped_crds())
    assert str(problem) == (
        "DaemonSet kube-system/nvidia-device-plugin-daemonset at spec.template.spec.containers[0]: "
        "unknown field(s) imagePullPolicyy (strict validation: no such field in the schema)"
    )


def test_a_missing_required_field_is_named():
    obj = _device_plugin()
    del obj["spec"]["selector"]
    [problem] = k8s_validate.validate([obj], "1.33", k8s_validate.shipped_crds())
    assert (problem.field, problem.message) == ("spec", "missing required field: 'selector'")


def test_a_bad_custom_resource_is_named():
    scc = copy.deepcopy(by_kind(everything(cluster("openshift")), "SecurityContextConstraints")[0])
    scc["runAsUser"] = {"typ": "MustRunAsRange"}
    scc["defaultAddCapabilities"] = "IPC_LOCK"
    problems = [str(p) for p in k8s_validate.validate([scc], "1.33", k8s_validate.shipped_crds())]
    assert any(
        "SecurityContextConstraints nodeforge-mpi-ml-team at defaultAddCapabilities: 'IPC_LOCK' is not of type" in p
        for p in problems
    ), problems
    assert any(
        p == "SecurityContextConstraints nodeforge-mpi-ml-team at runAsUser: unknown field(s) typ (strict validation: "
        "no such field in the schema)"
        for p in problems
    ), problems


def test_a_bad_label_and_an_unknown_kind_are_named():
    node = k8s_objects.node_labels(cluster(k8s_node_labels_extra={"team": "ml team!"}))[0]
    [problem] = k8s_validate.validate([node], "1.33", k8s_validate.shipped_crds())
    assert problem.obj == "Node node-01" and problem.field == "metadata.labels.team"
    strange = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    [problem] = k8s_validate.validate([strange], "1.33", k8s_validate.shipped_crds())
    assert "neither a built-in kind of Kubernetes 1.33 nor a custom resource" in problem.message


def test_kubeconfig_server_names_the_current_or_given_context():
    text = yaml.safe_dump(
        {
            "current-context": "a",
            "contexts": [{"name": "a", "context": {"cluster": "ca"}}, {"name": "b", "context": {"cluster": "cb"}}],
            "clusters": [
                {"name": "ca", "cluster": {"server": "https://a:6443"}},
                {"name": "cb", "cluster": {"server": "https://b:6443"}},
            ],
        }
    )
    assert k8s_objects.kubeconfig_server(text) == "https://a:6443"
    assert k8s_objects.kubeconfig_server(text, "b") == "https://b:6443"
    with pytest.raises(k8s_objects.K8sConfigError, match="no context 'c'"):
        k8s_objects.kubeconfig_server(text, "c")


@pytest.mark.parametrize(("given", "enabled"), [("false", False), ("no", False), ("true", True), ("yes", True)])
def test_a_boolean_given_as_text_is_the_boolean_it_means(given, enabled):
    """-e k8s_mpi_operator_enabled=false arrives as the text 'false', which Python reads as true: the settings are typed
    by their argument spec, so the MPI Operator's objects follow what the operator said."""
    c = cluster(k8s_mpi_operator_enabled=given, k8s_gpu_device_plugin_enabled=given)
    assert c.get("k8s_mpi_operator_enabled") is enabled
    assert bool(k8s_objects.mpi_operator(c, [])) is enabled
    [device_plugin] = _file("k8s_gpu_device_plugin", "upstream", "nvidia-device-plugin.yml")
    [runtime_class] = _file("k8s_gpu_device_plugin", "runtimeclass-nvidia.yaml")
    assert bool(k8s_objects.gpu_device_plugin(c, device_plugin, runtime_class)) is enabled


DAEMONSET = {"kind": "DaemonSet", "metadata": {"name": "plugin", "namespace": "kube-system"}}
CONFLICT = {
    "kind": "Status",
    "apiVersion": "v1",
    "status": "Failure",
    "message": 'Apply failed with 1 conflict: conflict with "kubectl-set" using apps/v1: .spec.template.spec'
    '.containers[name="ctr"].image',
    "reason": "Conflict",
    "code": 409,
}


def refused(item: dict, msg: str, reason: str = "") -> dict:
    return {"failed": True, "item": item, "msg": msg, **({"reason": reason} if reason else {})}


def test_refusals_name_each_refused_object_with_the_api_server_s_reason_and_a_hint():
    results = [
        {"changed": True, "item": {"kind": "Node", "metadata": {"name": "gpu-1"}}},
        refused(DAEMONSET, "Failed to apply object: " + json.dumps(CONFLICT, separators=(",", ":")), "Conflict"),
        refused({"kind": "Namespace", "metadata": {"name": "mpi"}}, "Failed to create object: timed out"),
    ]
    assert k8s_validate.refusals(results) == (
        'DaemonSet kube-system/plugin: Conflict: Apply failed with 1 conflict: conflict with "kubectl-set" using '
        'apps/v1: .spec.template.spec.containers[name="ctr"].image; Namespace mpi: timed out. '
        + k8s_validate.REFUSAL_HINTS["Conflict"]
    )


def test_refusals_never_show_a_secret_s_reply_unless_it_is_a_status():
    forbidden = {**CONFLICT, "reason": "Forbidden", "code": 403, "message": 'secrets "token" is forbidden: User "ci"'}
    secret = {"kind": "Secret", "metadata": {"name": "token", "namespace": "ci"}}
    assert k8s_validate.refusals([refused(secret, 'Failed to apply object: b\'{"data": {"token": "c2VjcmV0"}}\'')]) == (
        "Secret ci/token: no reason shown for a Secret."
    )
    status = "Failed to apply object: " + json.dumps(forbidden, separators=(",", ":"))
    assert k8s_validate.refusals([refused(secret, status, "Forbidden")]) == (
        'Secret ci/token: Forbidden: secrets "token" is forbidden: User "ci". '
        + k8s_validate.REFUSAL_HINTS["Forbidden"]
    )
    # A reply that only starts like a Status is shown as it came, and nothing failed is nothing refused.
    assert k8s_validate.refusals([refused(DAEMONSET, '{"kind":"Status", cut')]) == (
        'DaemonSet kube-system/plugin: {"kind":"Status", cut.'
    )
    assert k8s_validate.refusals([{"failed": False, "item": DAEMONSET}]) == ""


def test_refused_maps_each_refused_pod_by_name_to_the_module_s_message():
    """What k8s_cluster's verify waits without (the refused pods) and what action k8s_verify judges them by."""
    accepted = {"changed": True, "item": {"kind": "Pod", "metadata": {"name": "verify-a"}}}
    denied = refused({"kind": "Pod", "metadata": {"name": "verify-b"}}, 'pods "verify-b" is forbidden', "Forbidden")
    silent = {"failed": True, "item": {"kind": "Pod", "metadata": {"name": "verify-c"}}}
    assert k8s_validate.refused([accepted, denied, silent, {"failed": True, "msg": "no item"}, "junk"]) == {
        "verify-b": 'pods "verify-b" is forbidden',
        "verify-c": "refused",
    }
    assert k8s_validate.refused([accepted]) == {}
    assert k8s_validate.refused(None) == {}
