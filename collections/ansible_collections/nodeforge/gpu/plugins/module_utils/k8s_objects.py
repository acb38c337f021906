# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The Kubernetes objects of the cluster layer, computed from the inventory, the hardware profiles and the version
manifest: one list of objects that `nodeforge k8s render` writes, `apply` applies and `diff` compares (one code
path). Pure functions of plain data, unit-tested; the roles reach them through the action nodeforge.gpu.k8s_objects.

Modernisations of the sources' objects, each on purpose: names and namespaces are the sources' (rdma-devices,
shared_ib0.., mpi), the MPI tenants' SCC is named per namespace (the Redbook's scc-for-mpi was one SCC for every
tenant, with users listed in it) and bound through its Role's `use` verb only; fields the API server never accepted
(RoleBinding.roleRef.namespace, RoleBinding.userNames) are left out.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml
from ansible_collections.nodeforge.gpu.plugins.module_utils import model

MANAGED_BY = {"app.kubernetes.io/managed-by": "nodeforge"}
LABEL_PREFIX = "nodeforge.io/"
GPU_PRESENT = "nvidia.com/gpu.present"
RDMA_PRESENT = LABEL_PREFIX + "rdma"
DEVICE_PLUGINS_DIR = "/var/lib/kubelet/device-plugins"
DEPLOY_DRIVER = "nvidia.com/gpu.deploy.driver"


class K8sConfigError(ValueError):
    """A setting that cannot make valid objects: the message names the variable and what was expected."""


@dataclass(frozen=True)
class Node:
    """A GPU node as the cluster layer sees it: its Kubernetes name, its hardware profile and the host variables that
    matter to the cluster (driver source, whether nvidia is the default runtime)."""

    name: str
    profile: Mapping[str, Any]
    variables: Mapping[str, Any] = field(default_factory=dict)

    @property
    def gpu_count(self) -> int:
        return int((self.profile.get("gpu") or {}).get("count") or 0)

    @property
    def hcas(self) -> list[Mapping[str, Any]]:
        return list(self.profile.get("hcas") or [])


@dataclass(frozen=True)
class Cluster:
    """Everything the objects are computed from: the k8s_* settings (role defaults applied), the version manifest
    (overrides merged) and the GPU nodes."""

    distribution: str
    k8s_version: str
    settings: Mapping[str, Any]
    manifest: Mapping[str, Any]
    nodes: list[Node]

    @property
    def openshift(self) -> bool:
        return self.distribution == "openshift"

    def get(self, name: str) -> Any:
        return self.settings[name]


def label_value(text: Any) -> str:
    """A label value from free text (a GPU model such as 'Tesla V100-SXM2'): invalid characters become '-', at most
    63 characters, alphanumeric at both ends."""
    value = re.sub(r"[^A-Za-z0-9_.-]+", "-", str(text))[:63]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", value)


def meta(name: str, namespace: str | None = None, labels: Mapping[str, str] | None = None) -> dict:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    meta["labels"] = {**(labels or {}), **MANAGED_BY}
    return meta


# The roles whose variables make up a Cluster's settings (each role's own k8s_<role>_* variables, see their
# meta/argument_specs.yml), and the cross-role nodeforge_k8s_* ones.
K8S_ROLES = (
    "k8s_node_labels",
    "k8s_gpu_device_plugin",
    "k8s_rdma_shared_device_plugin",
    "k8s_mpi_operator",
    "k8s_gpu_operator",
    "k8s_gpu_monitoring",
    "k8s_cluster",
)
# What the cluster layer reads of each GPU node's variables (the node roles' settings that change objects).
NODE_VARIABLES = (
    "nodeforge_profile",
    "nodeforge_profile_overrides",
    "k8s_node_labels_node_name",
    "nvidia_container_toolkit_set_as_default",
    "nvidia_driver_source",
    "nvidia_driver_version",
    "gpudirect_rdma_module",
    "gpudirect_rdma_gdrcopy",
    "validate_nccl_min_busbw_gbs",
)


def plain(value: Any) -> Any:
    """Plain Python data (Ansible's templated strings are str subclasses that YAML and JSON writers refuse)."""
    if isinstance(value, Mapping):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, str):
        return str.__str__(value)  # an exact str, also from a str subclass whose __str__ returns itself
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return value


def _effective(name: str, variables: Mapping[str, Any]) -> Any:
    """The inventory's value, typed as its argument spec says (model.typed), else the role default of the variable's
    argument spec (empty counts as unset)."""
    value = plain(variables.get(name))
    return model.all_vars()[name].default if model.is_empty(value) else model.typed(name, value)


def cluster_from(control: Mapping[str, Any], nodes: Mapping[str, Mapping[str, Any]]) -> Cluster:
    """The Cluster of an inventory: the k8s_control host's variables (settings, the manifest overrides) and
    each GPU node's (profile, Node name, default runtime), as Ansible resolved them. The same for the roles (the
    action nodeforge.gpu.k8s_objects) and the CLI (nodeforge k8s job)."""
    settings = {
        name: _effective(name, control)
        for name, spec in model.all_vars().items()
        if spec.role in K8S_ROLES or name.startswith("nodeforge_k8s_")
    }
    overrides = {name: plain(control[name]) for name in model.manifest_override_names(control)}
    for name, found, expected in model.manifest_override_problems(overrides):
        raise K8sConfigError(f"{name}: found {found}; expected {expected}")
    manifest = model.manifest_with_overrides(overrides)
    found = []
    for host in sorted(nodes):
        variables = nodes[host]
        profile_name = variables.get("nodeforge_profile")
        profile = model.host_profile(variables)
        if profile is None:
            raise K8sConfigError(f"host {host}: nodeforge_profile {profile_name!r} is not a known hardware profile")
        name = _effective("k8s_node_labels_node_name", variables) or host
        found.append(
            Node(str(name), profile, {v: _effective(v, variables) for v in NODE_VARIABLES if v in model.all_vars()})
        )
    return Cluster(
        str(settings["nodeforge_k8s_distribution"]), str(settings["nodeforge_k8s_version"]), settings, manifest, found
    )


# ---- node labels -----------------------------------------------------------------------------------------------------
def node_labels(cluster: Cluster) -> list[dict]:
    """One Node object per GPU node carrying only nodeforge's labels (server-side apply owns just these fields): the
    profile, GPU model and count, HCA count, and the selectors the device plugins use, plus k8s_node_labels_extra
    (e.g. seed 001's openshift.com/gpu-accelerator=true)."""
    extra = {str(k): str(v) for k, v in (cluster.get("k8s_node_labels_extra") or {}).items()}
    objects = []
    for node in sorted(cluster.nodes, key=lambda n: n.name):
        labels = {LABEL_PREFIX + "profile": label_value(node.profile.get("name", ""))}
        if node.gpu_count:
            labels[GPU_PRESENT] = "true"
            labels[LABEL_PREFIX + "gpu.model"] = label_value((node.profile.get("gpu") or {}).get("model", ""))
            labels[LABEL_PREFIX + "gpu.count"] = str(node.gpu_count)
        if node.hcas:
            labels[RDMA_PRESENT] = "true"
            labels[LABEL_PREFIX + "hca.count"] = str(len(node.hcas))
        if driver_container_in_use(cluster) and not driver_container(node):
            # The GPU Operator deploys its driver container on every GPU node but those labelled so.
            labels[DEPLOY_DRIVER] = "false"
        labels.update(extra)
        objects.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node.name, "labels": labels}})
    return objects


# ---- NVIDIA device plugin --------------------------------------------------------------------------------------------
def openshift_privileged(name: str, namespace: str) -> list[dict]:
    """On OpenShift a hostPath / privileged DaemonSet needs an SCC that allows it: its own ServiceAccount, allowed
    to `use` the privileged SCC through a Role and RoleBinding."""
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(name, namespace)},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": meta(f"{name}-privileged-scc", namespace),
            "rules": [
                {
                    "apiGroups": ["security.openshift.io"],
                    "resources": ["securitycontextconstraints"],
                    "resourceNames": ["privileged"],
                    "verbs": ["use"],
                }
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": meta(f"{name}-privileged-scc", namespace),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": f"{name}-privileged-scc"},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        },
    ]


def device_plugin_config(cluster: Cluster) -> dict:
    """The device plugin's config file (version v1): flags.migStrategy and, when sharing is on, time-slicing or MPS
    replicas of nvidia.com/gpu."""
    sharing = cluster.get("k8s_gpu_device_plugin_sharing")
    replicas = int(cluster.get("k8s_gpu_device_plugin_replicas"))
    strategy = cluster.get("k8s_gpu_device_plugin_mig_strategy")
    if sharing != "none" and replicas < 2:
        raise K8sConfigError(
            f"k8s_gpu_device_plugin_sharing is {sharing}: k8s_gpu_device_plugin_replicas must be at least 2 "
            f"(found {replicas})"
        )
    if sharing == "mps" and strategy == "mixed":
        raise K8sConfigError("k8s_gpu_device_plugin_sharing mps cannot be combined with migStrategy mixed")
    config: dict[str, Any] = {"version": "v1", "flags": {"migStrategy": strategy}}
    if sharing != "none":
        key = "timeSlicing" if sharing == "time-slicing" else "mps"
        resource = {"name": "nvidia.com/gpu", "replicas": replicas}
        config["sharing"] = {
            key: {
                "renameByDefault": bool(cluster.get("k8s_gpu_device_plugin_rename_by_default")),
                "resources": [resource],
            }
        }
    return config


def needs_runtime_class(cluster: Cluster) -> bool:
    """The RuntimeClass nvidia is needed when nvidia is not the default runtime on some GPU node."""
    return any(not n.variables.get("nvidia_container_toolkit_set_as_default", False) for n in cluster.nodes)


def gpu_device_plugin(cluster: Cluster, upstream: Mapping[str, Any], runtime_class: Mapping[str, Any]) -> list[dict]:
    """The NVIDIA device plugin: the upstream static DaemonSet (v0.20.0 deployments/static/nvidia-device-plugin.yml)
    with the manifest's image, on GPU nodes only, reading its config from a ConfigMap; the RuntimeClass nvidia (the
    toolkit role's object) when the toolkit is not the default runtime, which the plugin's own pods then use."""
    if not cluster.get("k8s_gpu_device_plugin_enabled"):
        return []
    namespace = cluster.get("k8s_gpu_device_plugin_namespace")
    pin = cluster.manifest["kubernetes"]["k8s_device_plugin"]
    config_name = "nvidia-device-plugin-config"
    objects: list[dict] = []
    with_class = needs_runtime_class(cluster)
    if with_class:
        objects.append(copy.deepcopy(dict(runtime_class)))
    objects.append(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": meta(config_name, namespace),
            "data": {"config.yaml": yaml.safe_dump(device_plugin_config(cluster), sort_keys=True)},
        }
    )
    daemonset = copy.deepcopy(dict(upstream))
    daemonset["metadata"]["namespace"] = namespace
    daemonset["metadata"]["labels"] = {**daemonset["metadata"].get("labels", {}), **MANAGED_BY}
    pod = daemonset["spec"]["template"]["spec"]
    pod["nodeSelector"] = dict(cluster.get("k8s_gpu_device_plugin_node_selector") or {GPU_PRESENT: "true"})
    if with_class:
        pod["runtimeClassName"] = runtime_class["metadata"]["name"]
    [container] = pod["containers"]
    container["image"] = pin["image"]
    container["env"] = [{"name": "CONFIG_FILE", "value": "/config/config.yaml"}]
    container["volumeMounts"].append({"name": "config", "mountPath": "/config", "readOnly": True})
    pod["volumes"].append({"name": "config", "configMap": {"name": config_name}})
    if cluster.openshift:
        objects += openshift_privileged("nvidia-device-plugin", namespace)
        pod["serviceAccountName"] = "nvidia-device-plugin"
    objects.append(daemonset)
    return objects


# ---- RDMA shared device plugin ---------------------------------------------------------------------------------------
def _hca_ports(cluster: Cluster) -> list[Mapping[str, Any]]:
    """Every distinct HCA port (by netdev) of the GPU nodes' profiles, in netdev order."""
    ports: dict[str, Mapping[str, Any]] = {}
    for node in cluster.nodes:
        for hca in node.hcas:
            netdev = hca.get("netdev")
            if not netdev:
                raise K8sConfigError(
                    f"profile {node.profile.get('name')}: HCA {hca.get('name')} has no netdev name: the RDMA shared "
                    "device plugin's configuration names the devices by it"
                )
            ports.setdefault(str(netdev), hca)
    return [
        ports[name]
        for name in sorted(ports, key=lambda n: [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", n)])
    ]


def _selectors(hcas: list[Mapping[str, Any]]) -> dict:
    vendors = sorted({str(h.get("pci_id", "15b3:")).split(":")[0] for h in hcas})
    devices = sorted({pci_id.split(":")[1] for pci_id in (str(h.get("pci_id")) for h in hcas) if ":" in pci_id})
    links = sorted({"infiniband" if str(h.get("link_layer")).lower() == "infiniband" else "ether" for h in hcas})
    selectors: dict[str, Any] = {"vendors": vendors}
    if devices:
        selectors["deviceIDs"] = devices
    selectors["ifNames"] = [str(h["netdev"]) for h in hcas]
    selectors["linkTypes"] = links
    return selectors


def rdma_device_config(cluster: Cluster) -> dict:
    """The rdma-devices config.json: one resource per HCA port (shared_ib0..) or one for all of them, in the Redbook's
    `devices` form or the plugin's `selectors` form, rdmaHcaMax from the inventory."""
    ports = _hca_ports(cluster)
    explicit = cluster.get("k8s_rdma_shared_device_plugin_resources") or []
    hca_max = int(cluster.get("k8s_rdma_shared_device_plugin_rdma_hca_max"))
    form = cluster.get("k8s_rdma_shared_device_plugin_form")
    prefix = cluster.get("k8s_rdma_shared_device_plugin_resource_prefix")
    if explicit:
        by_netdev = {str(p["netdev"]): p for p in ports}
        groups = []
        for index, resource in enumerate(explicit):
            unknown = [d for d in resource.get("devices", []) if d not in by_netdev]
            if unknown or not resource.get("devices"):
                raise K8sConfigError(
                    f"k8s_rdma_shared_device_plugin_resources[{index}].devices: {unknown or 'none given'} "
                    f"(expected netdev names of the profiles' HCAs: {', '.join(by_netdev) or 'none'})"
                )
            groups.append((resource["name"], [by_netdev[d] for d in resource["devices"]]))
    elif cluster.get("k8s_rdma_shared_device_plugin_grouping") == "per_hca":
        groups = [(f"{prefix}{p['netdev']}", [p]) for p in ports]
    else:
        groups = [(f"{prefix}hca", ports)] if ports else []
    entries = []
    for name, hcas in groups:
        entry: dict[str, Any] = {"resourceName": name, "resourcePrefix": "rdma", "rdmaHcaMax": hca_max}
        if form == "devices":
            entry["devices"] = [str(h["netdev"]) for h in hcas]
        else:
            entry["selectors"] = _selectors(hcas)
        entries.append(entry)
    return {
        "periodicUpdateInterval": int(cluster.get("k8s_rdma_shared_device_plugin_periodic_update_interval")),
        "configList": entries,
    }


def rdma_resources(cluster: Cluster) -> list[str]:
    """The extended resources the plugin announces (rdma/shared_ib0, ...): what jobs ask for, at most 1 each."""
    if not cluster.get("k8s_rdma_shared_device_plugin_enabled") or not _hca_ports(cluster):
        return []
    return [f"rdma/{e['resourceName']}" for e in rdma_device_config(cluster)["configList"]]


def rdma_shared_device_plugin(
    cluster: Cluster, upstream_daemonset: Mapping[str, Any], upstream_configmap: Mapping[str, Any]
) -> list[dict]:
    """The RDMA shared device plugin v1.5.3: its ConfigMap rdma-devices generated from the profiles' HCAs and the
    upstream DaemonSet with the manifest's pinned image, on the nodes that have HCAs."""
    if not cluster.get("k8s_rdma_shared_device_plugin_enabled") or not _hca_ports(cluster):
        return []
    namespace = cluster.get("k8s_rdma_shared_device_plugin_namespace")
    pin = cluster.manifest["kubernetes"]["rdma_shared_dev_plugin"]
    configmap = copy.deepcopy(dict(upstream_configmap))
    configmap["metadata"] = meta(configmap["metadata"]["name"], namespace)
    configmap["data"] = {"config.json": json.dumps(rdma_device_config(cluster), indent=2, sort_keys=False) + "\n"}
    daemonset = copy.deepcopy(dict(upstream_daemonset))
    daemonset["metadata"]["namespace"] = namespace
    daemonset["metadata"]["labels"] = {**daemonset["metadata"].get("labels", {}), **MANAGED_BY}
    pod = daemonset["spec"]["template"]["spec"]
    pod["nodeSelector"] = dict(cluster.get("k8s_rdma_shared_device_plugin_node_selector") or {RDMA_PRESENT: "true"})
    [container] = pod["containers"]
    container["image"] = pin["image"]
    objects = [configmap]
    if cluster.openshift:
        objects += openshift_privileged("rdma-shared-device-plugin", namespace)
        pod["serviceAccountName"] = "rdma-shared-device-plugin"
    return [*objects, daemonset]


# ---- MPI Operator and the tenants' IPC_LOCK access -------------------------------------------------------------------
# The OpenShift "restricted" SCC the Redbook cloned, with IPC_LOCK added by default (seed 004, 3.4.3).
_RESTRICTED_SCC = {
    "allowHostDirVolumePlugin": False,
    "allowHostIPC": False,
    "allowHostNetwork": False,
    "allowHostPID": False,
    "allowHostPorts": False,
    "allowPrivilegeEscalation": True,
    "allowPrivilegedContainer": False,
    "allowedCapabilities": None,
    "defaultAddCapabilities": ["IPC_LOCK"],
    "fsGroup": {"type": "MustRunAs"},
    "groups": [],
    "priority": None,
    "readOnlyRootFilesystem": False,
    "requiredDropCapabilities": ["KILL", "MKNOD", "SETUID", "SETGID"],
    "runAsUser": {"type": "MustRunAsRange"},
    "seLinuxContext": {"type": "MustRunAs"},
    "supplementalGroups": {"type": "RunAsAny"},
    "users": [],
    "volumes": ["configMap", "downwardAPI", "emptyDir", "persistentVolumeClaim", "projected", "secret"],
}


def tenant_scc_name(namespace: str) -> str:
    return f"nodeforge-mpi-{namespace}"


def mpi_tenants(cluster: Cluster) -> list[dict]:
    """Per tenant namespace: the namespace (on Kubernetes with the Pod Security level that admits IPC_LOCK, which
    baseline does not), the ServiceAccount, a Role to run MPIJobs (and, on OpenShift, to `use` the tenant's SCC) and
    its RoleBinding; on OpenShift the SCC cloned from restricted with defaultAddCapabilities [IPC_LOCK]."""
    service_account = cluster.get("k8s_mpi_operator_service_account")
    objects: list[dict] = []
    for namespace in cluster.get("k8s_mpi_operator_tenants") or []:
        ns_labels: dict[str, str] = {}
        if not cluster.openshift:
            # IPC_LOCK is not among the capabilities the baseline Pod Security Standard allows: privileged admits it;
            # warn/audit keep baseline so that everything else a tenant's pod asks for beyond it is still reported.
            ns_labels = {
                "pod-security.kubernetes.io/enforce": "privileged",
                "pod-security.kubernetes.io/warn": "baseline",
                "pod-security.kubernetes.io/audit": "baseline",
            }
        objects.append({"apiVersion": "v1", "kind": "Namespace", "metadata": meta(namespace, labels=ns_labels)})
        objects.append({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(service_account, namespace)})
        rules = [
            {
                "apiGroups": ["kubeflow.org"],
                "resources": ["mpijobs"],
                "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
            },
            {"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list", "watch"]},
        ]
        if cluster.openshift:
            scc = {
                "apiVersion": "security.openshift.io/v1",
                "kind": "SecurityContextConstraints",
                "metadata": {
                    **meta(tenant_scc_name(namespace)),
                    "annotations": {
                        "kubernetes.io/description": f"cloned from restricted, adds IPC_LOCK for MPI jobs in "
                        f"{namespace}"
                    },
                },
                **copy.deepcopy(_RESTRICTED_SCC),
            }
            objects.append(scc)
            rules.append(
                {
                    "apiGroups": ["security.openshift.io"],
                    "resources": ["securitycontextconstraints"],
                    "resourceNames": [tenant_scc_name(namespace)],
                    "verbs": ["use"],
                }
            )
        objects.append(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": meta(service_account, namespace),
                "rules": rules,
            }
        )
        objects.append(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": meta(service_account, namespace),
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": service_account},
                "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}],
            }
        )
    return objects


def mpi_operator(cluster: Cluster, release: list[Mapping[str, Any]]) -> list[dict]:
    """The pinned MPI Operator release manifest's objects as released (verified by sha256 before this), then the
    tenants' objects."""
    if not cluster.get("k8s_mpi_operator_enabled"):
        return []
    return [copy.deepcopy(dict(obj)) for obj in release] + mpi_tenants(cluster)


# ---- NVIDIA GPU Operator ---------------------------------------------------------------------------------------------
def driver_container(node: Node) -> bool:
    """Whether the GPU Operator's driver container provides the node's driver (nvidia_driver_source operator)."""
    return node.variables.get("nvidia_driver_source") == "operator"


def driver_container_in_use(cluster: Cluster) -> bool:
    return bool(cluster.get("k8s_gpu_operator_enabled")) and any(driver_container(n) for n in cluster.nodes)


def gpu_operator_conflicts(values: Mapping[str, Any], driver_source: str, device_plugin: bool) -> list[tuple[str, str]]:
    """What the site's own GPU Operator values (k8s_gpu_operator_values) contradict of what nodeforge installs on a
    node (its nvidia_driver_source; the toolkit, always; nodeforge's device plugin when enabled): (found, expected)
    pairs, for nodeforge check and for the values builder alike."""

    def enabled(section: str) -> Any:
        found = values.get(section)
        return found.get("enabled") if isinstance(found, Mapping) else None

    conflicts = []
    driver = enabled("driver")
    if driver is False and driver_source == "operator":
        conflicts.append(
            (
                "driver.enabled: false, and this node's nvidia_driver_source is operator",
                "driver.enabled left to nodeforge (true while a node's driver comes from the driver container): "
                "with it off, nothing would install this node's driver",
            )
        )
    if driver is True and driver_source != "operator":
        conflicts.append(
            (
                f"driver.enabled: true, and this node has a host driver (nvidia_driver_source {driver_source})",
                "driver.enabled left to nodeforge: it enables the driver container only where nvidia_driver_source "
                f"is operator and labels host-driver nodes {DEPLOY_DRIVER}=false",
            )
        )
    if enabled("toolkit") is True:
        conflicts.append(
            (
                "toolkit.enabled: true",
                "false: nodeforge installs the NVIDIA Container Toolkit on every GPU node (role "
                "nvidia_container_toolkit), and a second one would reconfigure the container runtime",
            )
        )
    if enabled("devicePlugin") is True and device_plugin:
        conflicts.append(
            (
                "devicePlugin.enabled: true with k8s_gpu_device_plugin_enabled true",
                "one device plugin for nvidia.com/gpu: devicePlugin.enabled false, or k8s_gpu_device_plugin_enabled "
                "false",
            )
        )
    return conflicts


# The site's registry (k8s_cluster_image_mirror, module_utils/k8s_images.py) beside the GPU Operator: (found, expected),
# for nodeforge check and render alike. The operator's images are named by its Helm chart, not by objects nodeforge
# renders, so neither nodeforge mirror nor the map reaches them.
GPU_OPERATOR_UNMIRRORED = (
    "images taken from the site's registry with k8s_gpu_operator_enabled true: the GPU Operator's images come from "
    "its Helm chart, which nodeforge mirror does not copy, and the chart values nodeforge writes pull them upstream",
    "k8s_gpu_operator_enabled false on a cluster that pulls from the site's registry, the operator installed as "
    "NVIDIA's air-gapped install of it describes (the images copied by hand and the chart's image repositories set "
    "to the site's registry); or k8s_cluster_image_mirror empty",
)


def gpu_operator_values(cluster: Cluster, monitoring: Mapping[str, Any] | None = None) -> dict:
    """Helm values of NVIDIA's gpu-operator chart (the manifest's version) for what nodeforge installed on the
    hosts: the driver container only for nodes whose nvidia_driver_source is operator (host-driver nodes carry
    nvidia.com/gpu.deploy.driver=false, see node_labels), with nvidia-peermem (driver.rdma) and GDRCopy where the
    nodes want them and the host's RDMA stack (useHostMofed: nodeforge's ofed role installs it on every GPU node);
    never the toolkit (nodeforge's role installs it, its root pointed at the driver container's); the device
    plugin only when nodeforge's own is off; monitoring: what role k8s_gpu_monitoring needs of its exporter
    (k8s_monitoring.operator_values). k8s_gpu_operator_values is merged over that (e.g. a private registry), and
    refused where it contradicts it. Empty when the GPU Operator is not used."""
    if not cluster.get("k8s_gpu_operator_enabled"):
        return {}
    own = plain(cluster.get("k8s_gpu_operator_values") or {})
    device_plugin = bool(cluster.get("k8s_gpu_device_plugin_enabled"))
    problems = []
    for node in sorted(cluster.nodes, key=lambda n: n.name):
        source = str(node.variables.get("nvidia_driver_source") or "") or "unset: cuda_repo, or grid on vGPU guests"
        problems += [f"{found} (node {node.name})" for found, _ in gpu_operator_conflicts(own, source, device_plugin)]
    if problems:
        raise K8sConfigError(
            "k8s_gpu_operator_values contradicts what nodeforge installs on the nodes: " + "; ".join(problems)
        )
    on_container = [n for n in cluster.nodes if driver_container(n)]
    driver: dict[str, Any] = {"enabled": bool(on_container)}
    if on_container:
        versions = sorted({str(n.variables.get("nvidia_driver_version") or "") for n in on_container} - {""})
        if len(versions) > 1:
            raise K8sConfigError(
                "nodes whose nvidia_driver_source is operator ask for different nvidia_driver_version values "
                f"({', '.join(versions)}); the GPU Operator's driver.version is one version for all of them"
            )
        if versions:
            driver["version"] = versions[0]
        peermem = any(n.variables.get("gpudirect_rdma_module") == "nvidia-peermem" for n in on_container)
        driver["rdma"] = {"enabled": peermem, "useHostMofed": peermem}
    values: dict[str, Any] = {
        "driver": driver,
        "toolkit": {"enabled": False},
        "devicePlugin": {"enabled": not device_plugin},
        "mig": {"strategy": cluster.get("k8s_gpu_device_plugin_mig_strategy")},
        "gdrcopy": {"enabled": any(bool(n.variables.get("gpudirect_rdma_gdrcopy")) for n in on_container)},
    }
    return model.deep_merge(model.deep_merge(values, dict(monitoring or {})), own)


# ---- writing ---------------------------------------------------------------------------------------------------------
def file_name(obj: Mapping[str, Any]) -> str:
    """A stable, unique file name per object: kind, namespace, name."""
    meta = obj["metadata"]
    parts = [obj["kind"], meta.get("namespace"), meta["name"]]  # a cluster-scoped object has no namespace part
    return "-".join(re.sub(r"[^a-z0-9.-]+", "-", p.lower()) for p in parts if p) + ".yaml"


def dump(obj: Mapping[str, Any]) -> str:
    """One object as YAML: block style, keys in a fixed order (apiVersion, kind, metadata first), no aliases."""

    class _Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:
            return True

    def _str(dumper: yaml.SafeDumper, data: str) -> yaml.Node:
        style = "|" if "\n" in data else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)

    _Dumper.add_representer(str, _str)
    head = {key: obj[key] for key in ("apiVersion", "kind", "metadata") if key in obj}
    rest = {key: obj[key] for key in sorted(obj) if key not in head}
    return yaml.dump({**head, **rest}, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=120)


def kustomization(names: list[str]) -> str:
    return dump({"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": names})


def kubeconfig_server(text: str, context: str = "", path: str = "") -> str:
    """The API server URL a kubeconfig points at, for its current-context or the context named (what a message about
    a server that does not answer must name). A kubeconfig holds credentials: an error names the file (path) and the
    line, never what is written there."""
    name = f"the kubeconfig {path}" if path else "the kubeconfig"
    try:
        config = yaml.safe_load(text if isinstance(text, str) else "")
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "position unknown"
        raise K8sConfigError(f"{name} is not valid YAML ({where}: {exc.problem or exc.context})") from None
    except yaml.YAMLError:
        raise K8sConfigError(f"{name} is not valid YAML") from None
    config = config or {}
    if not isinstance(config, dict):
        raise K8sConfigError(f"{name} is not a mapping (apiVersion, kind, clusters, contexts, users)")
    wanted = context or config.get("current-context") or ""
    contexts = {c.get("name"): c.get("context") or {} for c in _entries(config, "contexts")}
    clusters = {c.get("name"): c.get("cluster") or {} for c in _entries(config, "clusters")}
    if wanted not in contexts:
        raise K8sConfigError(f"{name} has no context {wanted!r} (contexts: {', '.join(map(str, contexts))})")
    cluster = contexts[wanted].get("cluster") if isinstance(contexts[wanted], dict) else None
    server = clusters[cluster].get("server") if isinstance(clusters.get(cluster), dict) else None
    if not server:
        raise K8sConfigError(f"{name}'s context {wanted!r} names cluster {cluster!r}, which has no server")
    return str(server)


def _entries(config: dict, key: str) -> list[dict]:
    entries = config.get(key) or []
    return [entry for entry in entries if isinstance(entry, dict)] if isinstance(entries, list) else []
