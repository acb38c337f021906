# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Judge a running cluster against what the inventory says it should run (nodeforge k8s verify), on the controller."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.nodeforge.gpu.plugins.action.k8s_objects import cluster_of, control_variables
from ansible_collections.nodeforge.gpu.plugins.module_utils import k8s_jobs, k8s_objects, k8s_validate, k8s_verify
from ansible_collections.nodeforge.gpu.plugins.module_utils.acceptance import not_applicable

DOCUMENTATION = r"""
module: k8s_verify
short_description: Judge the cluster's Nodes and Pods against the inventory (nodeforge k8s verify)
description:
  - For each GPU node of the inventory (its Kubernetes Node name), whether the cluster has it Ready and announces the
    extended resources its hardware profile and the device plugins' settings give (nvidia.com/gpu, each RDMA shared
    device plugin resource; module_utils/k8s_verify.py); whether every rendered DaemonSet has a Ready pod on each
    node its nodeSelector selects, and every rendered Deployment its replicas Ready (under C(cluster)).
  - Returns the checks as the fact C(k8s_verify_results), a mapping of each node name (and C(cluster)) to its checks in
    validate's check form, and one line per failed check as C(msg). Never fails on a failed check; nodeforge k8s
    verify turns them into its report and exit code.
  - Runs on the controller; reads only what it is given (the objects kubernetes.core.k8s_info returned).
author: nodeforge
options:
  objects:
    description: The rendered objects (k8s_cluster's validated list).
    type: list
    elements: dict
    required: true
  nodes:
    description: The cluster's Node objects.
    type: list
    elements: dict
    required: true
  pods:
    description: The Pods of the rendered workloads' namespaces.
    type: list
    elements: dict
    required: true
  jobs:
    description: The acceptance pods verify ran (component verify_jobs of nodeforge.gpu.k8s_objects), each judged.
    type: list
    elements: dict
    default: []
  job_pods:
    description: Those pods as the cluster returned them once they finished (or verify stopped waiting).
    type: list
    elements: dict
    default: []
  job_logs:
    description: Their logs, a mapping of pod name to log text.
    type: dict
    default: {}
  job_errors:
    description: The pods the API server refused to create, a mapping of pod name to its message.
    type: dict
    default: {}
  nccl:
    description:
      - The NCCL all-reduce verify ran across the GPU nodes (component verify_nccl of nodeforge.gpu.k8s_objects), judged
        under C(cluster); omitted when verify ran no jobs. Keys C(job) (the MPIJob as the cluster returned it when
        verify stopped waiting, or null), C(pods) (its pods), C(log) (its launcher's log), C(refused) (the API server's
        message when it refused the MPIJob, else empty).
    type: dict
attributes:
  check_mode:
    support: full
"""


class ActionModule(ActionBase):
    _requires_connection = False
    TRANSFERS_FILES = False

    def run(self, tmp: Any = None, task_vars: dict | None = None) -> dict:
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = self._task.args
        for name in ("objects", "nodes", "pods"):
            if not isinstance(args.get(name), list):
                raise AnsibleActionFail(f"k8s_verify: {name} must be a list of Kubernetes objects")
        try:
            cluster = cluster_of(task_vars, control_variables(self._templar, task_vars))
        except k8s_objects.K8sConfigError as exc:
            raise AnsibleActionFail(f"{task_vars.get('inventory_hostname')}: {exc}") from exc
        objects = k8s_objects.plain(args["objects"])
        live = {}
        for obj in k8s_objects.plain(args["nodes"]):
            name = (obj.get("metadata") or {}).get("name") if isinstance(obj, dict) else None
            if name:
                live[str(name)] = obj
        found: dict[str, list[dict]] = {}
        for name, want in k8s_verify.expected_resources(cluster).items():
            found[name] = k8s_verify.evaluate_node(live.get(name), name, want)
        gpu_nodes = {name: live[name] for name in found if name in live}
        for name, checks in k8s_verify.evaluate_workloads(objects, k8s_objects.plain(args["pods"]), gpu_nodes).items():
            found.setdefault(name, []).extend(checks)
        finished = {}
        for obj in k8s_objects.plain(args.get("job_pods") or []):
            if isinstance(obj, dict) and isinstance(obj.get("metadata"), dict):
                finished[obj["metadata"].get("name")] = obj
        logs = k8s_objects.plain(args.get("job_logs") or {})
        errors = k8s_objects.plain(args.get("job_errors") or {})
        for job in k8s_objects.plain(args.get("jobs") or []):
            name, node = job["metadata"]["name"], job["spec"]["nodeName"]
            refused = k8s_validate.refusal(errors[name]) if errors.get(name) else None
            judged = k8s_verify.evaluate_vector_add_pod(finished.get(name), logs.get(name), node, refused)
            found.setdefault(node, []).append(judged)
        nccl = k8s_objects.plain(args.get("nccl"))
        if isinstance(nccl, dict):
            found.setdefault("cluster", []).extend(self._nccl(cluster, nccl))
        failed = [
            f"{name}: {c['check']}: {c['reason'] or 'expected ' + str(c['expected'])}"
            for name, checks in sorted(found.items())
            for c in checks
            if c["status"] == "fail"
        ]
        result.update(
            changed=False,
            ansible_facts={"k8s_verify_results": found},
            msg=failed or [f"{sum(len(c) for c in found.values())} checks passed or do not apply"],
        )
        return result

    @staticmethod
    def _nccl(cluster: k8s_objects.Cluster, nccl: dict) -> list[dict]:
        facts = k8s_jobs.cluster_facts(cluster)
        jobs, why = k8s_verify.nccl_job(cluster, facts)
        if not jobs:
            return [not_applicable(k8s_verify.NCCL_CHECK, why)]
        pods = [p for p in nccl.get("pods") or [] if isinstance(p, dict)]
        return k8s_verify.evaluate_nccl_run(
            nccl.get("job"),
            pods,
            nccl.get("log"),
            k8s_jobs.nccl_mode(facts),
            k8s_verify.nccl_busbw_floor(cluster),
            k8s_validate.refusal(nccl["refused"]) if nccl.get("refused") else None,
        )
