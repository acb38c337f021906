# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""`nodeforge k8s verify`'s judgements of a running cluster, the way the sources check one by hand (seed 001: the
device plugin pod Running, `nvidia.com/gpu: 2` allocatable, `Test PASSED` in cuda-vector-add's log; seed 004:
`nvidia.com/gpu: 8` and `rdma/shared_ib0..3: 100` allocatable per DGX-1, NCCL's `via NET/IB/0/GDRDMA` lines and its
bus bandwidth).

Pure functions over the Kubernetes API's objects as `kubectl get -o json` and kubernetes.core.k8s_info return them
(Node, Pod: plain mappings), pod logs as text, and the objects nodeforge renders (module_utils/k8s_objects.py). Each
returns check results in validate's form (acceptance.check_result: check, status, measured, expected, reason, unit),
so that verify's reports are validate's (table, JSON, JUnit, HTML). Objects of another shape than the API's never raise:
they fail their check, naming what was missing.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

from ansible_collections.nodeforge.gpu.plugins.module_utils import k8s_jobs, k8s_objects
from ansible_collections.nodeforge.gpu.plugins.module_utils.acceptance import (
    check_result,
    evaluate_nccl_busbw,
    evaluate_nccl_transport,
    not_applicable,
)

GPU = "nvidia.com/gpu"
VERIFY_LABEL = "nodeforge.io/verify"  # on the pods verify runs (and deletes), so that they can be found and removed
VECTOR_ADD_PASSED = "Test PASSED"  # NVIDIA's vectorAdd sample (seed 001: `oc logs cuda-vector-add`)


def _mapping(value: Any) -> Mapping:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list:
    return list(value) if isinstance(value, (list, tuple)) else []


def expected_resources(cluster: k8s_objects.Cluster) -> dict[str, dict[str, int | None]]:
    """Per GPU node (its Kubernetes name): {extended resource: how many the node must announce as allocatable}. GPUs:
    the profile's count (nodeforge_profile_overrides included), times the replicas with time-slicing or MPS (under
    nvidia.com/gpu.shared when renamed); None under a MIG strategy, whose count depends on the GPUs' MIG layout. RDMA:
    each resource of the RDMA shared device plugin whose devices the node's profile has, rdmaHcaMax of each."""
    strategy = cluster.get("k8s_gpu_device_plugin_mig_strategy")
    sharing = cluster.get("k8s_gpu_device_plugin_sharing")
    replicas = int(cluster.get("k8s_gpu_device_plugin_replicas")) if sharing != "none" else 1
    gpu_name = f"{GPU}.shared" if sharing != "none" and cluster.get("k8s_gpu_device_plugin_rename_by_default") else GPU
    groups: list[tuple[str, set[str]]] = []
    hca_max = int(cluster.get("k8s_rdma_shared_device_plugin_rdma_hca_max"))
    if k8s_objects.rdma_resources(cluster):
        for entry in k8s_objects.rdma_device_config(cluster)["configList"]:
            devices = entry.get("devices") or entry.get("selectors", {}).get("ifNames", [])
            groups.append((f"rdma/{entry['resourceName']}", set(devices)))
    found: dict[str, dict[str, int | None]] = {}
    for node in cluster.nodes:
        want: dict[str, int | None] = {}
        if node.gpu_count:
            want[gpu_name] = None if strategy != "none" else node.gpu_count * replicas
        netdevs = {str(h.get("netdev")) for h in node.hcas}
        for resource, devices in groups:
            if devices & netdevs:
                want[resource] = hca_max
        found[node.name] = want
    return found


def _quantity(value: Any) -> int | None:
    """An extended resource's quantity (the API writes it as a string of digits); None for anything else."""
    text = str(value).strip() if isinstance(value, (str, int)) and not isinstance(value, bool) else ""
    return int(text) if text.isdigit() else None


def node_ready(node: Mapping) -> bool | None:
    """The Node's Ready condition: True, False, or None when it reports none (Unknown: the kubelet stopped posting)."""
    for condition in _list(_mapping(node.get("status")).get("conditions")):
        if _mapping(condition).get("type") == "Ready":
            status = _mapping(condition).get("status")
            return True if status == "True" else False if status == "False" else None
    return None


def evaluate_node(node: Mapping | None, name: str, want: Mapping[str, int | None]) -> list[dict]:
    """The node is registered and Ready, and announces each expected extended resource as allocatable, in the
    expected number (a missing resource: its device plugin does not run there or found no device)."""
    if not isinstance(node, Mapping):
        return [check_result("node_ready", "fail", None, "Ready", f"the cluster has no Node named {name}")]
    ready = node_ready(node)
    reason = {True: "", False: "the Ready condition is False", None: "the Ready condition is Unknown or missing"}
    results = [
        check_result(
            "node_ready", "pass" if ready else "fail", "Ready" if ready else "NotReady", "Ready", reason[ready]
        )
    ]
    allocatable = _mapping(_mapping(node.get("status")).get("allocatable"))
    for resource, count in sorted(want.items()):
        check = f"allocatable[{resource}]"
        if count is None:
            results.append(not_applicable(check, "a MIG strategy is set: the count depends on the GPUs' MIG layout"))
            continue
        if resource not in allocatable:
            reason = f"{name} does not announce {resource}: its device plugin does not run there or found no device"
            results.append(check_result(check, "fail", None, count, reason))
            continue
        found = _quantity(allocatable[resource])
        if found is None:
            reason = f"allocatable {resource} is {allocatable[resource]!r}, not a whole number"
            results.append(check_result(check, "fail", None, count, reason))
            continue
        reason = "" if found == count else f"{found} allocatable, the profile and settings give {count}"
        results.append(check_result(check, "pass" if found == count else "fail", found, count, reason))
    return results


def _matches(labels: Mapping, selector: Mapping) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def pod_ready(pod: Mapping) -> bool:
    """The pod's Ready condition is True (the kubelet sets it only for a running pod whose containers are ready)."""
    return _condition(pod, "Ready") is not None


def _condition(obj: Mapping, kind: str) -> Mapping | None:
    """The object's condition of that type whose status is True (a pod's Ready, an MPIJob's Succeeded), or None."""
    for condition in _list(_mapping(obj.get("status")).get("conditions")):
        if _mapping(condition).get("type") == kind and _mapping(condition).get("status") == "True":
            return _mapping(condition)
    return None


def pod_trouble(pod: Mapping) -> str:
    """Why a pod is not ready, as `kubectl get pods` shows it: a container's waiting or terminated reason, else the
    pod's phase."""
    status = _mapping(pod.get("status"))
    for container in _list(status.get("containerStatuses")):
        state = _mapping(_mapping(container).get("state"))
        for kind in ("waiting", "terminated"):
            reason = _mapping(state.get(kind)).get("reason")
            if reason:
                return str(reason)
    return str(status.get("phase") or "no status")


def evaluate_workloads(
    objects: Iterable[Mapping], pods: Iterable[Mapping], nodes: Mapping[str, Mapping]
) -> dict[str, list[dict]]:
    """The rendered DaemonSets and Deployments run: on every node whose labels a DaemonSet's nodeSelector selects, one
    Ready pod of it (by its selector's labels, in its namespace); for a Deployment, its replicas Ready anywhere (under
    the key "cluster"). Returns {node name or "cluster": checks}."""
    pods = [_mapping(p) for p in pods]
    found: dict[str, list[dict]] = {}
    for obj in objects:
        kind = obj.get("kind")
        if kind not in ("DaemonSet", "Deployment"):
            continue
        meta = _mapping(obj.get("metadata"))
        namespace, name = meta.get("namespace"), meta.get("name")
        spec = _mapping(obj.get("spec"))
        selector = _mapping(_mapping(spec.get("selector")).get("matchLabels"))
        own = [
            p
            for p in pods
            if _mapping(p.get("metadata")).get("namespace") == namespace
            and _matches(_mapping(_mapping(p.get("metadata")).get("labels")), selector)
        ]
        if kind == "DaemonSet":
            node_selector = _mapping(_mapping(_mapping(spec.get("template")).get("spec")).get("nodeSelector"))
            for node_name, node in sorted(nodes.items()):
                labels = _mapping(_mapping(node.get("metadata")).get("labels"))
                if not _matches(labels, node_selector):
                    continue
                check = f"pod[{namespace}/{name}]"
                here = [p for p in own if _mapping(p.get("spec")).get("nodeName") == node_name]
                if any(pod_ready(p) for p in here):
                    result = check_result(check, "pass", "Ready", "Ready")
                elif here:
                    trouble = ", ".join(f"{_mapping(p.get('metadata')).get('name')} {pod_trouble(p)}" for p in here)
                    result = check_result(check, "fail", "NotReady", "Ready", f"not ready: {trouble}")
                else:
                    reason = (
                        f"no pod of DaemonSet {namespace}/{name} on {node_name} (selected by {dict(node_selector)})"
                    )
                    result = check_result(check, "fail", None, "Ready", reason)
                found.setdefault(node_name, []).append(result)
        else:
            want = int(spec.get("replicas", 1))
            ready = sum(1 for p in own if pod_ready(p))
            reason = "" if ready >= want else f"{ready} of {want} pods of Deployment {namespace}/{name} Ready"
            found.setdefault("cluster", []).append(
                check_result(
                    f"deployment[{namespace}/{name}]", "pass" if ready >= want else "fail", ready, want, reason
                )
            )
    return found


def evaluate_vector_add(log: object, node: str) -> dict:
    """cuda-vector-add's log on a node says `Test PASSED` (the sample prints `Test FAILED` and the wrong element
    otherwise)."""
    check = f"cuda_vector_add[{node}]"
    text = log if isinstance(log, str) else ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if VECTOR_ADD_PASSED in lines:
        return check_result(check, "pass", VECTOR_ADD_PASSED, VECTOR_ADD_PASSED)
    last = lines[-1] if lines else "(empty log)"
    return check_result(
        check, "fail", None, VECTOR_ADD_PASSED, f"no '{VECTOR_ADD_PASSED}' in the log; last line: {last}"
    )


def evaluate_nccl_job(log: object, mode: str, min_busbw_gbs: float | None) -> list[dict]:
    """An NCCL all-reduce job's launcher log (NCCL_DEBUG=INFO): the transport NCCL chose for the job's NCCL mode
    (k8s_jobs.NCCL_MODES: NET/IB with GDRDMA under ib+gdr, NET/IB under ib; under tcp there is no RDMA transport to
    check) and the bus bandwidth floor, judged as validate judges them on a node."""
    if mode == "tcp":
        transport = not_applicable("nccl_transport", "NCCL runs over TCP sockets: the cluster has no RDMA resources")
    else:
        transport = evaluate_nccl_transport(log, mode == "ib+gdr")
    return [transport, evaluate_nccl_busbw(log, min_busbw_gbs)]


def vector_add_pods(cluster: k8s_objects.Cluster, facts: Mapping[str, Any]) -> list[dict]:
    """One cuda-vector-add Pod per GPU node (`nodeforge k8s job cuda-vector-add`'s, facts as k8s_jobs.build takes
    them), bound to the node by spec.nodeName: the scheduler is bypassed, so a node whose device plugin announces no
    free GPU is named by the kubelet's refusal (OutOfnvidia.com/gpu) instead of the pod waiting for another node."""
    [template] = k8s_jobs.build("cuda-vector-add", facts)
    pods = []
    for node in sorted(cluster.nodes, key=lambda n: n.name):
        if not node.gpu_count:
            continue
        pod = copy.deepcopy(template)
        name = f"cuda-vector-add-{node.name}"
        if len(name) > 63:  # a readable name where it fits a DNS label; a digest of the node's name where not
            name = f"cuda-vector-add-{hashlib.sha256(node.name.encode()).hexdigest()[:12]}"
        pod["metadata"]["name"] = name.replace(".", "-")
        pod["metadata"]["labels"][VERIFY_LABEL] = "cuda-vector-add"
        pod["spec"]["nodeName"] = node.name
        pod["spec"]["restartPolicy"] = "Never"  # one run: a failure is the verdict, not a reason to try again
        pods.append(pod)
    return pods


def evaluate_vector_add_pod(pod: Mapping | None, log: object, node: str, refused: str | None = None) -> dict:
    """A verify run's cuda-vector-add pod on node: Succeeded with `Test PASSED` in its log passes; a pod the API server
    refused to create (refused: its message), one the kubelet refused (phase Failed with a reason such as
    OutOfnvidia.com/gpu), one that never ran to its end, or a log without the line fails, saying which."""
    check = f"cuda_vector_add[{node}]"
    if refused:
        return check_result(check, "fail", None, VECTOR_ADD_PASSED, f"the API server refused the pod: {refused}")
    status = _mapping(_mapping(pod).get("status"))
    phase = status.get("phase")
    if phase == "Failed" and status.get("reason"):
        message = f" ({status['message']})" if status.get("message") else ""
        reason = f"the kubelet refused the pod: {status['reason']}{message}"
        return check_result(check, "fail", None, VECTOR_ADD_PASSED, reason)
    if phase not in ("Succeeded", "Failed"):
        trouble = pod_trouble(_mapping(pod)) if isinstance(pod, Mapping) else "no such pod"
        reason = f"the pod did not finish while verify waited: {trouble}"
        return check_result(check, "fail", None, VECTOR_ADD_PASSED, reason)
    return evaluate_vector_add(log, node)


# ---- the NCCL all-reduce across the GPU nodes (an MPIJob of the MPI Operator) ----------------------------------------
NCCL_JOB = "nodeforge-verify-nccl"
NCCL_CHECK = "nccl_all_reduce"


def nccl_busbw_floor(cluster: k8s_objects.Cluster) -> float | None:
    """The bus bandwidth floor of the all-reduce: the lowest validate_nccl_min_busbw_gbs of the GPU nodes (the floor
    validate holds each node's own run to), None where no GPU node sets one."""
    floors = [
        float(node.variables["validate_nccl_min_busbw_gbs"])
        for node in cluster.nodes
        if node.gpu_count and node.variables.get("validate_nccl_min_busbw_gbs") is not None
    ]
    return min(floors) if floors else None


def nccl_job(cluster: k8s_objects.Cluster, facts: Mapping[str, Any]) -> tuple[list[dict], str]:
    """([the MPIJob verify runs], "") or ([], why it runs none). The MPIJob is `nodeforge k8s job nccl`'s
    (all_reduce_perf over every GPU of every GPU node, one worker a node, the NCCL mode of the cluster's RDMA
    resources; facts as k8s_jobs.build takes them) for one run: its launcher is not restarted (restartPolicy Never,
    backoffLimit 0: a failure is the verdict), the job stops at k8s_cluster_verify_timeout, and every pod carries
    VERIFY_LABEL."""
    if not cluster.get("k8s_mpi_operator_enabled"):
        return [], "the MPI Operator is not enabled (k8s_mpi_operator_enabled): no MPIJob can run"
    gpu_nodes = [node for node in cluster.nodes if node.gpu_count]
    if len(gpu_nodes) < 2:
        return [], f"{len(gpu_nodes)} GPU node(s): the all-reduce runs across two or more"
    [job] = k8s_jobs.build("nccl", {**facts, "nodes": len(gpu_nodes)})
    job["metadata"]["name"] = NCCL_JOB
    job["metadata"]["labels"][VERIFY_LABEL] = "nccl"
    job["spec"]["runPolicy"] = {
        # The launcher's pod, and its log, stay after it ended (only running workers are removed); verify deletes the
        # MPIJob, and with it its pods, once it has read the log.
        "cleanPodPolicy": "Running",
        "backoffLimit": 0,
        "activeDeadlineSeconds": int(cluster.get("k8s_cluster_verify_timeout")),
    }
    for role, replica in job["spec"]["mpiReplicaSpecs"].items():
        replica["template"]["metadata"]["labels"][VERIFY_LABEL] = "nccl"
        if role == "Launcher":
            replica["restartPolicy"] = "Never"
    return [job], ""


def evaluate_nccl_run(
    job: Mapping | None,
    pods: Iterable[Mapping],
    log: object,
    mode: str,
    min_busbw_gbs: float | None,
    refused: str | None = None,
) -> list[dict]:
    """A verify run's NCCL MPIJob, as the cluster returned it when verify stopped waiting, the pods it ran (launcher
    and workers) and the launcher's log: nccl_all_reduce passes when the MPI Operator set the job's Succeeded
    condition, and fails with its Failed condition's reason and message, with the API server's refusal, or, for a job
    that did not end in time, with each of its pods' state (a worker Pending for want of GPUs, an image not pulled).
    Then the log's transport and bus bandwidth (evaluate_nccl_job); without a log they fail, saying why."""
    pods = [_mapping(p) for p in pods]
    states = ", ".join(f"{_mapping(p.get('metadata')).get('name')} {pod_trouble(p)}" for p in pods) or "no pods"
    if refused:
        result = check_result(NCCL_CHECK, "fail", None, "Succeeded", f"the API server refused the MPIJob: {refused}")
    elif not isinstance(job, Mapping):
        result = check_result(NCCL_CHECK, "fail", None, "Succeeded", "the MPIJob was not found after it was created")
    elif _condition(job, "Succeeded"):
        result = check_result(NCCL_CHECK, "pass", "Succeeded", "Succeeded")
    elif failed := _condition(job, "Failed"):
        reason = f"the MPIJob failed: {failed.get('reason') or 'no reason'}: {failed.get('message') or 'no message'}"
        result = check_result(NCCL_CHECK, "fail", "Failed", "Succeeded", reason)
    else:
        reason = f"the MPIJob did not finish while verify waited: {states}"
        result = check_result(NCCL_CHECK, "fail", None, "Succeeded", reason)
    text = log if isinstance(log, str) else ""
    if text.strip():
        return [result, *evaluate_nccl_job(text, mode, min_busbw_gbs)]
    why = "the API server refused the MPIJob" if refused else f"its launcher wrote no log ({states})"
    judged = evaluate_nccl_job("", mode, min_busbw_gbs)
    return [result] + [
        c if c["status"] == "na" else check_result(c["check"], "fail", None, c["expected"], f"no NCCL log: {why}")
        for c in judged
    ]
