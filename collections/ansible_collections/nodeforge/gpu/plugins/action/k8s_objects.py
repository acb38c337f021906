# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Compute one component's Kubernetes objects from the inventory, on the controller."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.nodeforge.gpu.plugins.module_utils import (
    k8s_images,
    k8s_jobs,
    k8s_monitoring,
    k8s_objects,
    k8s_scale,
    k8s_validate,
    k8s_verify,
    model,
)

DOCUMENTATION = r"""
module: k8s_objects
short_description: The Kubernetes objects of one nodeforge cluster component, computed from the inventory
description:
  - Computes the objects of the component (module_utils/k8s_objects.py) from the k8s_control host's variables (the
    k8s_* settings, C(nodeforge_k8s_distribution), the manifest overrides C(nodeforge_manifest_overrides) and
    C(nodeforge_manifest_overrides_<suffix>)) and each C(gpu_nodes) host's hardware profile, Node name and default
    runtime. The same function serves C(nodeforge k8s job).
  - Where C(k8s_cluster_image_mirror) is set, every image of the objects is taken from the site's registry by the
    digest it maps (module_utils/k8s_images.py), and an object whose image it does not map is refused, naming it.
  - Reads the upstream files it builds on from the controller (the role's files, the verified release manifest).
  - Runs on the controller and contacts no node and no API server.
author: nodeforge
options:
  component:
    description: The component.
    type: str
    required: true
    choices: [node_labels, gpu_device_plugin, rdma_shared_device_plugin, mpi_operator, gpu_operator, gpu_monitoring,
              scale_csi, scale_csi_secrets, pins, verify_jobs, verify_nccl]
  files:
    description: Paths on the controller of the upstream objects the component builds on (per component).
    type: dict
    default: {}
attributes:
  check_mode:
    support: full
"""

RETURN = r"""
objects:
  description: The component's objects, in the order they were computed.
  type: list
  returned: always
pins:
  description: The version manifest's kubernetes section (the manifest overrides merged).
  type: dict
  returned: always
values:
  description: The GPU Operator's Helm values (component gpu_operator; empty otherwise).
  type: dict
  returned: always
extra_files:
  description: >-
    Files render writes beside the objects (component gpu_monitoring: the alert rules as a Prometheus rules file when
    no Prometheus Operator runs; empty otherwise).
  type: dict
  returned: always
rdma_resources:
  description: The extended resources the RDMA shared device plugin announces (rdma/shared_ib0, ...).
  type: list
  returned: always
"""


def _read(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        return k8s_validate.load_documents(handle.read())


def control_variables(templar: Any, task_vars: dict) -> dict:
    """The k8s_control host's variables the cluster layer reads (k8s_*, nodeforge_k8s_*, the manifest overrides)."""
    names = [name for name in model.all_vars() if name.startswith(("k8s_", "nodeforge_k8s_"))]
    names += model.manifest_override_names(task_vars)
    return {name: templar.template(task_vars[name]) for name in names if name in task_vars}


def cluster_of(task_vars: dict, control: dict) -> k8s_objects.Cluster:
    """The Cluster of the play's inventory, as the k8s_control host sees it (control: its control_variables), also
    action k8s_verify's."""
    hostvars = task_vars.get("hostvars", {})
    nodes = {}
    for host in task_vars.get("groups", {}).get(model.WORKER_GROUP, []):
        variables = hostvars[host]
        nodes[host] = {name: variables.get(name) for name in k8s_objects.NODE_VARIABLES if name in variables}
    return k8s_objects.cluster_from(control, nodes)


def mirrored(cluster: k8s_objects.Cluster, component: str, objects: list[dict], values: dict) -> list[dict]:
    """The component's objects with every image taken from the site's registry (k8s_cluster_image_mirror; unchanged
    when it is empty); K8sConfigError for an image it does not map, and for the GPU Operator's chart values beside it
    (values: the chart's images are not the objects', and nodeforge mirror does not copy them)."""
    mapping = k8s_images.mirror_map(cluster.get(k8s_images.VARIABLE))
    if mapping and values:
        found, expected = k8s_objects.GPU_OPERATOR_UNMIRRORED
        raise k8s_objects.K8sConfigError(f"{k8s_images.VARIABLE}: found {found}; expected {expected}")
    return k8s_images.mirrored(objects, mapping, component)


class ActionModule(ActionBase):
    _requires_connection = False
    TRANSFERS_FILES = False

    def run(self, tmp: Any = None, task_vars: dict | None = None) -> dict:
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = self._task.args
        component = args.get("component")
        files = args.get("files") or {}
        hostvars = task_vars.get("hostvars", {})
        control = control_variables(self._templar, task_vars)
        values: dict = {}
        extra_files: dict = {}
        try:
            cluster = cluster_of(task_vars, control)
            if component == "node_labels":
                objects = k8s_objects.node_labels(cluster) if cluster.get("k8s_node_labels_enabled") else []
            elif component == "gpu_device_plugin":
                [upstream] = _read(files["upstream"])
                [runtime_class] = _read(files["runtime_class"])
                objects = k8s_objects.gpu_device_plugin(cluster, upstream, runtime_class)
            elif component == "rdma_shared_device_plugin":
                [daemonset] = _read(files["daemonset"])
                [configmap] = _read(files["configmap"])
                objects = k8s_objects.rdma_shared_device_plugin(cluster, daemonset, configmap)
            elif component == "pins":
                objects = []
            elif component == "verify_jobs":
                # nodeforge k8s verify's cuda-vector-add pods, one per GPU node, in the first tenant's namespace.
                objects = k8s_verify.vector_add_pods(cluster, k8s_jobs.cluster_facts(cluster))
            elif component == "verify_nccl":
                # nodeforge k8s verify's NCCL all-reduce across the GPU nodes; none where it cannot run (its check
                # says why: action k8s_verify).
                objects, _ = k8s_verify.nccl_job(cluster, k8s_jobs.cluster_facts(cluster))
            elif component == "gpu_operator":
                objects = []
                values = k8s_objects.gpu_operator_values(cluster, k8s_monitoring.operator_values(cluster))
            elif component == "gpu_monitoring":
                upstream = _read(files["upstream"])
                [service_monitor] = _read(files["service_monitor"])
                with open(files["counters"], encoding="utf-8") as handle:
                    pinned = handle.read()
                objects = k8s_monitoring.gpu_monitoring(cluster, upstream, service_monitor, pinned)
                rules = k8s_monitoring.rules_file(cluster)
                extra_files = {k8s_monitoring.RULES_FILE: rules} if rules else {}
            elif component == "mpi_operator":
                objects = k8s_objects.mpi_operator(cluster, _read(files["release"]) if files.get("release") else [])
            elif component in ("scale_csi", "scale_csi_secrets"):
                # The node label the Scale client hosts get from role scale_client (wherever the inventory sets it).
                clients = task_vars.get("groups", {}).get(k8s_scale.CLIENT_GROUP, [])
                labels = [hostvars[h].get(k8s_scale.CLIENT_LABEL) for h in clients]
                labels.append(task_vars.get(k8s_scale.CLIENT_LABEL))
                scale = k8s_scale.settings(control, self._templar.template([v for v in labels if v is not None]))
                release = _read(files["release"]) if files.get("release") else []
                if component == "scale_csi":
                    names = [hostvars[h].get("k8s_node_labels_node_name") or h for h in clients]
                    nodes = [str(n) for n in self._templar.template(names)]
                    objects = k8s_scale.scale_csi(cluster, scale, release, nodes=nodes)
                else:
                    # GUI credentials: this result is never shown (the role's task is no_log as well).
                    objects = k8s_scale.gui_secrets(scale, k8s_scale.namespace_of(release) if release else "")
                    result["_ansible_no_log"] = True
            else:
                raise AnsibleActionFail(f"unknown component {component!r}")
            objects = mirrored(cluster, component, objects, values)
            resources = k8s_objects.rdma_resources(cluster)
        except k8s_objects.K8sConfigError as exc:
            raise AnsibleActionFail(f"{task_vars.get('inventory_hostname')}: {exc}") from exc
        except (KeyError, ValueError, OSError) as exc:
            raise AnsibleActionFail(f"{component}: cannot read its upstream objects: {exc}") from exc
        result.update(
            changed=False,
            objects=objects,
            values=values,
            extra_files=extra_files,
            rdma_resources=resources,
            pins=cluster.manifest["kubernetes"],
        )
        return result
