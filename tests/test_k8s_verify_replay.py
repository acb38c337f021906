"""`nodeforge k8s verify` end to end (CLI, ansible-runner, k8s.yml, kubernetes.core, action k8s_verify) against the
replayed API server of tests/k8s_api_replay.py, on the c4140-k8s sample: the cluster's Nodes announce what seed 004's
and seed 001's nodes announce (allocatable GPUs and RDMA resources), the pods of the rendered DaemonSets and
Deployments run as `kubectl get pods` shows them in seed 001, and the cuda-vector-add pods verify starts end as seed
001's did (its log verbatim). verify writes nothing but its own pods, and deletes them; with --no-jobs the server sees
GETs only.

Marked slow: each run is a playbook with kubernetes.core modules (about 30 s)."""

from __future__ import annotations

import copy
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from tests.k8s_api_replay import ApiServer
from tests.test_k8s_api_replay import api, nodeforge, overrides, rendered  # noqa: F401  (fixtures)

pytestmark = pytest.mark.slow

DATA = Path(__file__).parent / "data"
SEED_LOG = (DATA / "k8s_verify" / "cuda-vector-add-seed001.log").read_text()
# The NCCL MPIJob verify runs ends as the MPI Operator README's example did, its launcher logging seed 004's 16-GPU
# all-reduce across two DGX-1s (NCCL's NET/IB and GDRDMA lines, then the table: peak 5.7 GB/s).
MPIJOB_SUCCEEDED = yaml.safe_load(
    (DATA / "k8s_verify" / "mpijob-status-succeeded-mpi-operator-readme.yaml").read_text()
)
LAUNCHER_SUCCEEDED = {
    "phase": "Succeeded",
    "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted"}],
    "containerStatuses": [{"name": "launcher", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}],
}
NCCL_LOG = (DATA / "outputs" / "validate" / "nccl-all-reduce-perf-16x1-nccl-tests-format.txt").read_text()
# How a cuda-vector-add pod ends when its GPU computed the sum (the kubelet's status of a pod that exited 0).
SUCCEEDED = {
    "phase": "Succeeded",
    "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted"}],
    "containerStatuses": [{"name": "cuda-vector-add", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}],
}
# The c4140-k8s sample: two Dell C4140 (4x V100-SXM2, one EDR HCA netdev ib0).
NODES = ("c4140-01", "c4140-02")
ALLOCATABLE = {"cpu": "39500m", "memory": "394878856Ki", "pods": "110", "nvidia.com/gpu": "4", "rdma/shared_ib0": "100"}


@pytest.fixture(scope="module")
def objects(overrides, tmp_path_factory):  # noqa: F811
    return rendered(overrides, tmp_path_factory.mktemp("render-verify"))


def healthy(server: ApiServer, objects: list[dict]) -> None:
    """The cluster after `nodeforge k8s apply` and the device plugins' start: each GPU node Ready, labelled by
    nodeforge, announcing its GPUs and its HCA; one Ready pod of each DaemonSet per node, one of each Deployment."""
    labels = {o["metadata"]["name"]: o["metadata"]["labels"] for o in objects if o["kind"] == "Node"}
    for name in NODES:
        node = server.cluster.objects[f"/api/v1/nodes/{name}"]
        node["metadata"]["labels"].update(labels[name])
        node.setdefault("status", {})["allocatable"] = dict(ALLOCATABLE)
        node["status"]["conditions"] = [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]
    for workload in objects:
        if workload["kind"] not in ("DaemonSet", "Deployment"):
            continue
        hosts = NODES if workload["kind"] == "DaemonSet" else ("c4140-01",)
        for index, host in enumerate(hosts):
            namespace, name = workload["metadata"]["namespace"], workload["metadata"]["name"]
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{name}-{'s9ngg' if index == 0 else 'x7k2p'}",
                    "namespace": namespace,
                    "labels": dict(workload["spec"]["selector"]["matchLabels"]),
                },
                "spec": {"nodeName": host, "containers": [{"name": "main", "image": "x"}]},
                "status": {
                    "phase": "Running",
                    "conditions": [{"type": "Ready", "status": "True"}],
                    "containerStatuses": [{"name": "main", "ready": True, "restartCount": 0, "state": {"running": {}}}],
                },
            }
            server.cluster.objects[server.cluster.path_of(pod)] = pod


def verify(overrides, tmp_path, kubeconfig, *extra):  # noqa: F811
    done = nodeforge("verify", overrides, tmp_path, "--kubeconfig", str(kubeconfig), *extra)
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"no JSON report (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done, report


def test_verify_passes_a_healthy_cluster_and_removes_its_pods(overrides, tmp_path, api, objects, state_dir):  # noqa: F811
    server, kubeconfig, token = api()
    healthy(server, objects)
    server.cluster.pod_outcomes = {name: (SUCCEEDED, SEED_LOG) for name in NODES}
    server.cluster.mpijob_outcome = (MPIJOB_SUCCEEDED, LAUNCHER_SUCCEEDED, NCCL_LOG)
    junit = tmp_path / "verify.xml"
    floor = ("-e", json.dumps({"validate_nccl_min_busbw_gbs": 5.0}))
    done, report = verify(
        overrides, tmp_path, kubeconfig, "--junit", str(junit), "--html", str(tmp_path / "v.html"), *floor
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert report["status"] == "passed" and report["exit_code"] == 0
    assert set(report["hosts"]) == {*NODES, "cluster"}
    for name in NODES:
        checks = {c["check"]: c for c in report["hosts"][name]["checks"]}
        assert checks["allocatable[nvidia.com/gpu]"]["measured"] == 4
        assert checks["allocatable[rdma/shared_ib0]"]["measured"] == 100
        assert checks[f"cuda_vector_add[{name}]"]["measured"] == "Test PASSED"
        pods = [c for c in checks if c.startswith("pod[")]
        # The device plugin, the RDMA shared device plugin and dcgm-exporter (the sample enables monitoring).
        assert {p.split("/")[-1] for p in pods} == {
            "nvidia-device-plugin-daemonset]",
            "rdma-shared-dp-ds]",
            "dcgm-exporter]",
        }
        assert all(c["status"] == "pass" for c in checks.values())
    cluster = {c["check"]: c for c in report["hosts"]["cluster"]["checks"]}
    assert list(cluster) == ["deployment[mpi-operator/mpi-operator]", "nccl_all_reduce", "nccl_transport", "nccl_busbw"]
    assert cluster["nccl_transport"]["measured"] == "NET/IB with GDRDMA"
    assert (cluster["nccl_busbw"]["measured"], cluster["nccl_busbw"]["expected"]) == (5.7, 5.0)
    assert all(c["status"] == "pass" for c in cluster.values())
    # The MPIJob as verify applied it: k8s job nccl's for the two C4140s (4 GPUs each, ib+gdr), labelled, one run.
    [applied] = [r.body for r in server.requests if r.method == "PATCH" and "/mpijobs/" in r.path]
    assert applied["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 2
    assert applied["spec"]["slotsPerWorker"] == 4
    assert applied["spec"]["runPolicy"]["backoffLimit"] == 0
    # JUnit: one testcase per check, no failure.
    suites = ET.parse(junit).getroot()
    assert suites.get("name") == "nodeforge k8s verify"
    assert "<title>nodeforge k8s verify</title>" in (tmp_path / "v.html").read_text()
    assert "k8s verify passed: 3 node(s)" in " ".join(done.stderr.split())
    cases = suites.findall(".//testcase")
    assert len(cases) == sum(len(h["checks"]) for h in report["hosts"].values())
    assert not suites.findall(".//failure")
    # It wrote nothing but its own pods, one per GPU node in the first tenant's namespace, and its MPIJob, and
    # deleted each (the MPIJob's launcher pod went with it).
    pods = {f"/api/v1/namespaces/ml-team/pods/cuda-vector-add-{name}" for name in NODES}
    mpijob = "/apis/kubeflow.org/v2beta1/namespaces/ml-team/mpijobs/nodeforge-verify-nccl"
    assert {r.path for r in server.requests if r.method == "PATCH"} == {*pods, mpijob}
    assert {r.path for r in server.requests if r.method == "DELETE"} == {*pods, mpijob}
    assert {r.method for r in server.requests} == {"GET", "PATCH", "DELETE"}
    assert not {*pods, mpijob} & set(server.cluster.objects)
    assert not [p for p in server.cluster.objects if "/pods/nodeforge-verify-nccl-" in p]
    # The launcher's log was read by the labels verify gave it.
    [log] = [r for r in server.requests if r.path.endswith("/log") and "nodeforge-verify-nccl" in r.path]
    assert log.path.endswith("/pods/nodeforge-verify-nccl-launcher-x7k2p/log")
    assert token not in done.stdout + done.stderr


def test_verify_no_jobs_fails_a_node_short_of_a_gpu_and_a_crashing_exporter(
    overrides,  # noqa: F811
    tmp_path,
    api,  # noqa: F811
    objects,
    state_dir,
):
    server, kubeconfig, _ = api()
    healthy(server, objects)
    server.cluster.objects["/api/v1/nodes/c4140-02"]["status"]["allocatable"]["nvidia.com/gpu"] = "3"
    [exporter] = [
        p
        for path, p in server.cluster.objects.items()
        if "/pods/dcgm-exporter-" in path and p["spec"]["nodeName"] == "c4140-01"
    ]
    crashed = copy.deepcopy(exporter)
    crashed["status"]["conditions"][0]["status"] = "False"
    crashed["status"]["containerStatuses"][0]["state"] = {"waiting": {"reason": "CrashLoopBackOff"}}
    server.cluster.objects[server.cluster.path_of(exporter)] = crashed
    done, report = verify(overrides, tmp_path, kubeconfig, "--no-jobs")
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    assert {r.method for r in server.requests} == {"GET"}  # --no-jobs: read-only
    failed = {
        (host, c["check"]): c["reason"]
        for host, h in report["hosts"].items()
        for c in h["checks"]
        if c["status"] == "fail"
    }
    assert failed == {
        ("c4140-02", "allocatable[nvidia.com/gpu]"): "3 allocatable, the profile and settings give 4",
        ("c4140-01", "pod[gpu-monitoring/dcgm-exporter]"): f"not ready: {crashed['metadata']['name']} CrashLoopBackOff",
    }
    assert report["hosts"]["cluster"]["status"] == "passed"


def test_a_pod_the_api_server_refuses_fails_its_node_check_and_the_rest_is_still_judged(
    overrides,  # noqa: F811
    tmp_path,
    api,  # noqa: F811
    objects,
    state_dir,
):
    """A CI account whose RBAC denies creating pods and MPIJobs in the tenant namespace: each node's cuda_vector_add
    and the cluster's NCCL all-reduce fail with the API server's refusal; the node and workload checks are still made
    and pass."""
    denied = [
        {"verb": "patch", "group": "", "resource": "pods", "namespace": "ml-team"},
        {"verb": "patch", "group": "kubeflow.org", "resource": "mpijobs", "namespace": "ml-team"},
    ]
    server, kubeconfig, _ = api("ci-deployer", deny=denied)
    healthy(server, objects)
    server.cluster.pod_outcomes = {name: (SUCCEEDED, SEED_LOG) for name in NODES}
    done, report = verify(overrides, tmp_path, kubeconfig)
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    failed = {
        (h, c["check"]): c["reason"] for h, e in report["hosts"].items() for c in e["checks"] if c["status"] == "fail"
    }
    assert set(failed) == {(name, f"cuda_vector_add[{name}]") for name in NODES} | {
        ("cluster", "nccl_all_reduce"),
        ("cluster", "nccl_transport"),
    }
    assert failed[("cluster", "nccl_all_reduce")] == (
        'the API server refused the MPIJob: Forbidden: mpijobs.kubeflow.org "nodeforge-verify-nccl" is forbidden: User'
        ' "ci-deployer" cannot patch resource "mpijobs" in API group "kubeflow.org" in the namespace "ml-team"'
    )
    assert failed[("cluster", "nccl_transport")] == "no NCCL log: the API server refused the MPIJob"
    for name in NODES:
        reason = failed[(name, f"cuda_vector_add[{name}]")]
        assert reason == (
            f'the API server refused the pod: Forbidden: pods "cuda-vector-add-{name}" is forbidden: User "ci-deployer"'
            ' cannot patch resource "pods" in API group "" in the namespace "ml-team"'
        )
        assert report["hosts"][name]["counts"] == {"pass": 6, "fail": 1, "na": 0, "error": 0}
    assert not [r for r in server.requests if r.method == "DELETE"]  # nothing was created, nothing to delete


def test_without_the_mpi_operators_crd_the_all_reduce_fails_and_the_rest_is_judged(
    overrides,  # noqa: F811
    tmp_path,
    api,  # noqa: F811
    objects,
    state_dir,
):
    """A cluster where the MPI Operator is not applied yet (no kubeflow.org API): the all-reduce fails naming the
    missing kind, nothing is left to delete, and every other check is still made and passes."""
    server, kubeconfig, _ = api()
    del server.cluster.discovery["resources"]["kubeflow.org/v2beta1"]
    server.cluster.discovery["apis"]["groups"] = [
        g for g in server.cluster.discovery["apis"]["groups"] if g["name"] != "kubeflow.org"
    ]
    server.cluster.resources = {k: v for k, v in server.cluster.resources.items() if k[0] != "kubeflow.org/v2beta1"}
    healthy(server, [o for o in objects if o["kind"] != "Deployment"])
    server.cluster.pod_outcomes = {name: (SUCCEEDED, SEED_LOG) for name in NODES}
    done, report = verify(overrides, tmp_path, kubeconfig)
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    failed = {
        (h, c["check"]): c["reason"] for h, e in report["hosts"].items() for c in e["checks"] if c["status"] == "fail"
    }
    assert set(failed) == {
        ("cluster", "deployment[mpi-operator/mpi-operator]"),
        ("cluster", "nccl_all_reduce"),
        ("cluster", "nccl_transport"),
    }, failed
    assert failed[("cluster", "nccl_all_reduce")].startswith("the API server refused the MPIJob: ")
    assert "kubeflow.org/v2beta1.MPIJob" in failed[("cluster", "nccl_all_reduce")]
    assert all(report["hosts"][name]["status"] == "passed" for name in NODES)
    assert not [r for r in server.requests if "mpijobs" in r.path]
