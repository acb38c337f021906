"""`nodeforge k8s verify`'s judgements (module_utils/k8s_verify.py) on the outputs the sources record: a passing and a
failing case for each check. The Node and Pod objects are the API's shape with the seeds' values
(tests/data/k8s_verify/README.md says which lines); the logs are recorded ones."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from nodeforge.collection import k8s_validate
from tests.conftest import REPO
from tests.test_k8s_objects import cluster, everything

from ansible_collections.nodeforge.gpu.plugins.module_utils import k8s_jobs, k8s_objects, k8s_verify  # isort: skip

DATA = REPO / "tests" / "data" / "k8s_verify"
OUTPUTS = REPO / "tests" / "data" / "outputs" / "validate"


def node(name: str, allocatable: dict, ready: str = "True", labels: dict | None = None) -> dict:
    """A Node as the API returns it (v1): metadata, status.allocatable (quantities as strings), conditions."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "status": {
            "allocatable": {"cpu": "79500m", "memory": "527700888Ki", "pods": "250", **allocatable},
            "conditions": [
                {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory"},
                {"type": "Ready", "status": ready, "reason": "KubeletReady" if ready == "True" else "KubeletNotReady"},
            ],
        },
    }


# Seed 004, lines 709-712 and 779-786: what each DGX-1 worker announces with the SRO and the RDMA shared device plugin.
DGX1 = {"nvidia.com/gpu": "8", **{f"rdma/shared_ib{i}": "100" for i in range(4)}}


def pod(name: str, namespace: str, labels: dict, node_name: str, ready: bool = True, waiting: str = "") -> dict:
    state = {"waiting": {"reason": waiting}} if waiting else {"running": {"startedAt": "2018-07-12T12:29:38Z"}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"nodeName": node_name},
        "status": {
            "phase": "Running" if ready or waiting == "CrashLoopBackOff" else "Pending",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "containerStatuses": [{"name": "c", "ready": ready, "state": state}],
        },
    }


def redbook_cluster(**settings) -> k8s_objects.Cluster:
    """Seed 004's two DGX-1 workers, the RDMA resources per HCA as the Redbook names them (shared_ib0..3, devices
    form, rdmaHcaMax 100)."""
    return cluster(
        "openshift",
        "dgx-1",
        k8s_rdma_shared_device_plugin_form="devices",
        k8s_rdma_shared_device_plugin_grouping="per_hca",
        k8s_rdma_shared_device_plugin_resource_prefix="shared_",
        **settings,
    )


def statuses(results: list[dict]) -> dict:
    return {r["check"]: r["status"] for r in results}


def test_the_redbooks_dgx1_announces_what_its_profile_and_the_rdma_config_give():
    c = redbook_cluster()
    want = k8s_verify.expected_resources(c)
    assert want["node-01"] == {"nvidia.com/gpu": 8, **{f"rdma/shared_ib{i}": 100 for i in range(4)}}
    results = k8s_verify.evaluate_node(node("node-01", DGX1), "node-01", want["node-01"])
    assert statuses(results) == {
        "node_ready": "pass",
        "allocatable[nvidia.com/gpu]": "pass",
        **{f"allocatable[rdma/shared_ib{i}]": "pass" for i in range(4)},
    }
    gpus = next(r for r in results if r["check"] == "allocatable[nvidia.com/gpu]")
    assert (gpus["measured"], gpus["expected"]) == (8, 8)


def test_a_node_short_of_gpus_or_rdma_ports_or_not_ready_fails_naming_what():
    want = k8s_verify.expected_resources(redbook_cluster())["node-01"]
    short = {**DGX1, "nvidia.com/gpu": "7"}
    del short["rdma/shared_ib3"]
    results = {r["check"]: r for r in k8s_verify.evaluate_node(node("node-01", short, "Unknown"), "node-01", want)}
    assert results["node_ready"]["status"] == "fail" and "Unknown" in results["node_ready"]["reason"]
    assert results["allocatable[nvidia.com/gpu]"]["status"] == "fail"
    assert results["allocatable[nvidia.com/gpu]"]["reason"] == "7 allocatable, the profile and settings give 8"
    assert results["allocatable[rdma/shared_ib3]"]["status"] == "fail"
    assert "does not announce rdma/shared_ib3" in results["allocatable[rdma/shared_ib3]"]["reason"]
    assert results["allocatable[rdma/shared_ib0]"]["status"] == "pass"
    # More than the profile holds is wrong too (a sharing setting the inventory does not know of, a wrong profile).
    more = k8s_verify.evaluate_node(node("node-01", {**DGX1, "nvidia.com/gpu": "16"}), "node-01", want)
    too_many = next(r for r in more if "gpu" in r["check"])
    assert (too_many["status"], too_many["reason"]) == ("fail", "16 allocatable, the profile and settings give 8")
    # A node the cluster does not know, and a quantity that is not a whole number.
    [missing] = k8s_verify.evaluate_node(None, "node-09", want)
    assert (missing["status"], missing["reason"]) == ("fail", "the cluster has no Node named node-09")
    odd = k8s_verify.evaluate_node(node("node-01", {**DGX1, "nvidia.com/gpu": "8k"}), "node-01", want)
    assert "'8k', not a whole number" in next(r for r in odd if "gpu" in r["check"])["reason"]


def test_seed_001s_two_gpu_node_passes_with_its_count_and_sharing_multiplies_it():
    nodes = {"gpu-node": {"nodeforge_profile": "dgx-1", "nodeforge_profile_overrides": {"gpu": {"count": 2}}}}
    c = k8s_objects.cluster_from({"nodeforge_k8s_distribution": "openshift"}, nodes)
    want = k8s_verify.expected_resources(c)["gpu-node"]
    assert want["nvidia.com/gpu"] == 2
    # Seed 001 lines 583-589: `Allocatable: nvidia.com/gpu: 2`.
    checks = k8s_verify.evaluate_node(node("gpu-node", {"nvidia.com/gpu": "2"}), "gpu-node", {"nvidia.com/gpu": 2})
    assert statuses(checks)["allocatable[nvidia.com/gpu]"] == "pass"
    shared = k8s_objects.cluster_from(
        {"k8s_gpu_device_plugin_sharing": "time-slicing", "k8s_gpu_device_plugin_replicas": 4}, nodes
    )
    assert k8s_verify.expected_resources(shared)["gpu-node"]["nvidia.com/gpu"] == 8
    renamed = k8s_objects.cluster_from(
        {
            "k8s_gpu_device_plugin_sharing": "mps",
            "k8s_gpu_device_plugin_replicas": 3,
            "k8s_gpu_device_plugin_rename_by_default": True,
        },
        nodes,
    )
    assert k8s_verify.expected_resources(renamed)["gpu-node"] == {
        "nvidia.com/gpu.shared": 6,
        **{f"rdma/shared_ib{i}": 100 for i in range(4)},
    }
    mig = k8s_objects.cluster_from({"k8s_gpu_device_plugin_mig_strategy": "single"}, nodes)
    [gpu] = [
        r
        for r in k8s_verify.evaluate_node(
            node("gpu-node", {}), "gpu-node", k8s_verify.expected_resources(mig)["gpu-node"]
        )
        if "gpu" in r["check"]
    ]
    assert gpu["status"] == "na" and "MIG" in gpu["reason"]


def test_rdma_resources_follow_the_grouping_and_the_devices_each_node_has():
    assert k8s_verify.expected_resources(cluster("kubernetes", "vsphere-t4-vgpu"))["node-01"] == {
        "nvidia.com/gpu": 1,
        "rdma/shared_ens224": 100,
    }
    one = cluster(
        "kubernetes",
        "dgx-1",
        k8s_rdma_shared_device_plugin_grouping="all",
        k8s_rdma_shared_device_plugin_rdma_hca_max=16,
    )
    assert k8s_verify.expected_resources(one)["node-02"] == {"nvidia.com/gpu": 8, "rdma/shared_hca": 16}
    # Explicit resources: a node has those whose devices its profile has (a mixed cluster: two DGX-1 and a Supermicro).
    nodes = {"dgx-01": {"nodeforge_profile": "dgx-1"}, "smc-01": {"nodeforge_profile": "supermicro-4029gp-tvrt"}}
    explicit = k8s_objects.cluster_from(
        {
            "k8s_rdma_shared_device_plugin_resources": [
                {"name": "ib_all", "devices": ["ib0", "ib1", "ib2", "ib3"]},
                {"name": "roce", "devices": ["ens1f0np0", "ens2f0np0"]},
            ]
        },
        nodes,
    )
    want = k8s_verify.expected_resources(explicit)
    assert want == {
        "dgx-01": {"nvidia.com/gpu": 8, "rdma/ib_all": 100},
        "smc-01": {"nvidia.com/gpu": 8, "rdma/roce": 100},
    }
    off = k8s_verify.expected_resources(redbook_cluster(k8s_rdma_shared_device_plugin_enabled=False))["node-01"]
    assert off == {"nvidia.com/gpu": 8}


def _rendered(c: k8s_objects.Cluster) -> list[dict]:
    return everything(c)


def _live_nodes(c: k8s_objects.Cluster) -> dict:
    """The GPU nodes as the API returns them, carrying the labels nodeforge's Node objects give them."""
    labelled = {o["metadata"]["name"]: o["metadata"]["labels"] for o in k8s_objects.node_labels(c)}
    return {name: node(name, DGX1, labels=labels) for name, labels in labelled.items()}


def test_every_rendered_daemonset_runs_a_ready_pod_on_every_node_it_selects():
    c = redbook_cluster()
    objects = _rendered(c)
    nodes = _live_nodes(c)
    [device_plugin] = [
        o for o in objects if o["kind"] == "DaemonSet" and "nvidia-device-plugin" in o["metadata"]["name"]
    ]
    [rdma] = [o for o in objects if o["kind"] == "DaemonSet" and "rdma" in o["metadata"]["name"]]
    pods = []
    for name in nodes:
        # Seed 001 lines 560-563: nvidia-device-plugin-daemonset-s9ngg, 1/1 Running (one per node here).
        for prefix, daemonset in (("nvidia-device-plugin-daemonset", device_plugin), ("rdma-shared-dp-ds", rdma)):
            meta, selector = daemonset["metadata"], daemonset["spec"]["selector"]["matchLabels"]
            pods.append(pod(f"{prefix}-{name[-2:]}", meta["namespace"], selector, name))
    operator = [o for o in objects if o["kind"] == "Deployment"]
    for deployment in operator:
        pods.append(
            pod(
                "mpi-operator-5f8d7c9b7-x2x7q",
                deployment["metadata"]["namespace"],
                deployment["spec"]["selector"]["matchLabels"],
                "master-0",
            )
        )
    found = k8s_verify.evaluate_workloads(objects, pods, nodes)
    device_check = f"pod[{device_plugin['metadata']['namespace']}/{device_plugin['metadata']['name']}]"
    for name in nodes:
        assert statuses(found[name]) == {
            device_check: "pass",
            f"pod[{rdma['metadata']['namespace']}/{rdma['metadata']['name']}]": "pass",
        }
    assert [r["status"] for r in found["cluster"]] == ["pass"] * len(operator) and operator

    # node-02's device plugin crash-loops, node-01's RDMA plugin pod is gone, the operator has no Ready pod.
    broken = copy.deepcopy(pods)
    for p in broken:
        if p["metadata"]["name"] == "nvidia-device-plugin-daemonset-02":
            p["status"]["conditions"][0]["status"] = "False"
            p["status"]["containerStatuses"][0]["state"] = {"waiting": {"reason": "CrashLoopBackOff"}}
        if p["metadata"]["name"].startswith("mpi-operator"):
            p["status"]["conditions"][0]["status"] = "False"
    broken = [p for p in broken if p["metadata"]["name"] != "rdma-shared-dp-ds-01"]
    found = k8s_verify.evaluate_workloads(objects, broken, nodes)
    by = {n: {r["check"]: r for r in rs} for n, rs in found.items()}
    assert by["node-02"][device_check]["status"] == "fail"
    assert by["node-02"][device_check]["reason"] == "not ready: nvidia-device-plugin-daemonset-02 CrashLoopBackOff"
    rdma_check = f"pod[{rdma['metadata']['namespace']}/{rdma['metadata']['name']}]"
    assert (
        by["node-01"][rdma_check]["status"] == "fail" and "no pod of DaemonSet" in by["node-01"][rdma_check]["reason"]
    )
    assert by["node-01"][device_check]["status"] == "pass"
    assert [r["status"] for r in found["cluster"]] == ["fail"] * len(operator)
    assert found["cluster"][0]["reason"].startswith("0 of 1 pods of Deployment")


def test_a_daemonset_is_not_expected_on_nodes_its_selector_leaves_out():
    c = redbook_cluster()
    nodes = _live_nodes(c)
    nodes["cpu-01"] = node("cpu-01", {})  # no nvidia.com/gpu.present label: no device plugin there
    found = k8s_verify.evaluate_workloads(_rendered(c), [], nodes)
    assert "cpu-01" not in found
    assert all(r["status"] == "fail" for r in found["node-01"])


def test_the_vector_add_log_of_seed_001_passes_and_a_busy_gpu_fails():
    passed = k8s_verify.evaluate_vector_add((DATA / "cuda-vector-add-seed001.log").read_text(), "gpu-node")
    assert (passed["check"], passed["status"]) == ("cuda_vector_add[gpu-node]", "pass")
    failed = k8s_verify.evaluate_vector_add((DATA / "cuda-vector-add-busy-gpu-operator-2842.log").read_text(), "n")
    assert failed["status"] == "fail"
    assert failed["reason"].endswith(
        "last line: Failed to allocate device vector A (error code CUDA-capable device(s) is/are busy or unavailable)!"
    )
    assert k8s_verify.evaluate_vector_add("", "n")["reason"].endswith("(empty log)")
    assert k8s_verify.evaluate_vector_add(None, "n")["status"] == "fail"


def test_the_redbooks_nccl_log_passes_with_gdrdma_and_its_table_is_judged_against_the_floor():
    """Seed 004's 16-GPU all_reduce_perf (peak 5.7 GB/s out of place) after its NCCL INFO lines (NET/IB, GDRDMA)."""
    log = (OUTPUTS / "nccl-all-reduce-perf-16x1-nccl-tests-format.txt").read_text()
    transport, busbw = k8s_verify.evaluate_nccl_job(log, "ib+gdr", min_busbw_gbs=5.0)
    assert transport["status"] == "pass" and transport["measured"] == "NET/IB with GDRDMA"
    assert (busbw["status"], busbw["measured"]) == ("pass", 5.7)
    _, high = k8s_verify.evaluate_nccl_job(log, "ib+gdr", min_busbw_gbs=5.8)
    assert high["status"] == "fail" and high["reason"].startswith("peak 5.7 GB/s")
    tcp = "nccl-test-mpi-worker-0:30:30 [0] NCCL INFO NET/Socket : Using [0]eth0:10.128.7.148<0>\n"
    socket, unset = k8s_verify.evaluate_nccl_job(tcp, "ib", min_busbw_gbs=None)
    assert socket["status"] == "fail" and "not InfiniBand" in socket["reason"]
    assert unset["status"] == "na"
    # Seed 004 line 2544 alone: NCCL found the HCAs, no ring went through GPUDirect RDMA.
    no_gdr = (OUTPUTS / "nccl-log-redbook-004.txt").read_text().splitlines()[0]
    assert k8s_verify.evaluate_nccl_job(no_gdr, "ib", None)[0]["status"] == "pass"
    without = k8s_verify.evaluate_nccl_job(no_gdr, "ib+gdr", None)[0]
    assert without["status"] == "fail" and "without GPUDirect RDMA" in without["reason"]
    # Under tcp (a cluster without RDMA resources) there is no RDMA transport to check; the floor still holds.
    na, floor = k8s_verify.evaluate_nccl_job(log, "tcp", 5.8)
    assert na["status"] == "na" and floor["status"] == "fail"


@pytest.mark.parametrize("junk", [None, 3, "text", [1, 2], {"status": "x"}, {"status": {"conditions": "no"}}])
def test_objects_of_another_shape_fail_their_checks_and_never_raise(junk):
    results = k8s_verify.evaluate_node(junk, "n", {"nvidia.com/gpu": 1})
    assert {r["status"] for r in results} == {"fail"}
    assert k8s_verify.evaluate_workloads([{"kind": "DaemonSet", "metadata": junk}], [junk], {"n": node("n", {})})


def _vector_add_facts(c: k8s_objects.Cluster) -> dict:
    facts = {"distribution": c.distribution, "namespace": "ml-team", "gpus_per_node": 1, "nodes": len(c.nodes)}
    return {**facts, "node_selector": {"nvidia.com/gpu.present": "true"}}


def test_verify_runs_one_vector_add_pod_bound_to_each_gpu_node():
    nodes = {
        "node-01": {"nodeforge_profile": "dgx-1"},
        "gpu-" + "x" * 60 + ".example.com": {"nodeforge_profile": "dgx-h100"},
        "controller": {"nodeforge_profile": "lab"},  # no GPU: no pod
    }
    c = k8s_objects.cluster_from({"nodeforge_k8s_distribution": "kubernetes"}, nodes)
    pods = k8s_verify.vector_add_pods(c, _vector_add_facts(c))
    assert k8s_validate.validate(pods, c.k8s_version, k8s_validate.shipped_crds()) == []
    assert [p["spec"]["nodeName"] for p in pods] == sorted(n for n in nodes if n != "controller")
    long, short = pods
    assert short["metadata"]["name"] == "cuda-vector-add-node-01"
    assert len(long["metadata"]["name"]) <= 63 and long["metadata"]["name"].startswith("cuda-vector-add-")
    assert long["metadata"]["name"] != short["metadata"]["name"]
    [template] = k8s_jobs.build("cuda-vector-add", _vector_add_facts(c))
    for pod in pods:
        assert pod["metadata"]["labels"][k8s_verify.VERIFY_LABEL] == "cuda-vector-add"
        assert pod["spec"]["restartPolicy"] == "Never"
        assert pod["spec"]["containers"] == template["spec"]["containers"]  # the image and its 1 GPU, as k8s job has
        assert pod["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 1}


def _finished(phase: str, **status) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "status": {"phase": phase, **status}}


def test_a_vector_add_pod_is_judged_by_how_it_ended_and_by_its_log():
    seed = (DATA / "cuda-vector-add-seed001.log").read_text()
    busy = (DATA / "cuda-vector-add-busy-gpu-operator-2842.log").read_text()
    passed = k8s_verify.evaluate_vector_add_pod(_finished("Succeeded"), seed, "node-01")
    assert (passed["check"], passed["status"]) == ("cuda_vector_add[node-01]", "pass")
    # The kubelet's refusal of a pod bound to a node without a free GPU (its reason and message as it writes them).
    refused = _finished(
        "Failed",
        reason="OutOfnvidia.com/gpu",
        message="Pod Node didn't have enough resource: nvidia.com/gpu, requested: 1, used: 0, capacity: 0",
    )
    result = k8s_verify.evaluate_vector_add_pod(refused, "", "node-02")
    assert result["status"] == "fail"
    assert result["reason"].startswith("the kubelet refused the pod: OutOfnvidia.com/gpu (Pod Node didn't have")
    failed = k8s_verify.evaluate_vector_add_pod(_finished("Failed"), busy, "node-02")
    assert failed["status"] == "fail" and "busy or unavailable" in failed["reason"]
    pulling = _finished("Pending", containerStatuses=[{"state": {"waiting": {"reason": "ImagePullBackOff"}}}])
    stuck = k8s_verify.evaluate_vector_add_pod(pulling, "", "node-02")
    assert stuck["reason"] == "the pod did not finish while verify waited: ImagePullBackOff"
    forbidden = k8s_verify.evaluate_vector_add_pod(None, "", "node-02", 'pods "cuda-vector-add-node-02" is forbidden')
    assert forbidden["reason"] == 'the API server refused the pod: pods "cuda-vector-add-node-02" is forbidden'
    gone = k8s_verify.evaluate_vector_add_pod(None, "", "node-02")
    assert gone["reason"] == "the pod did not finish while verify waited: no such pod"
    # A Succeeded pod whose log lacks the line (another image) still fails.
    assert k8s_verify.evaluate_vector_add_pod(_finished("Succeeded"), "Done\n", "n")["status"] == "fail"


def _nccl_job(c: k8s_objects.Cluster) -> dict:
    [job], why = k8s_verify.nccl_job(c, k8s_jobs.cluster_facts(c))
    assert why == ""
    return job


def test_verify_runs_one_nccl_all_reduce_across_the_gpu_nodes_once_and_labelled():
    c = redbook_cluster(validate_nccl_min_busbw_gbs=None)
    job = _nccl_job(c)
    assert k8s_validate.validate([job], c.k8s_version, k8s_validate.shipped_crds()) == []
    [template] = k8s_jobs.build("nccl", k8s_jobs.cluster_facts(c))
    assert (job["metadata"]["name"], job["metadata"]["namespace"]) == ("nodeforge-verify-nccl", "ml-team")
    # k8s job nccl's MPIJob: 2 DGX-1 workers of 8 GPUs and every RDMA resource, 16 ranks, NCCL over IB with GDRDMA.
    for key in ("slotsPerWorker", "mpiImplementation", "launcherCreationPolicy"):
        assert job["spec"][key] == template["spec"][key]
    worker = job["spec"]["mpiReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 2
    assert worker["template"]["spec"] == template["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]
    assert launcher["template"]["spec"]["containers"][0]["command"][:3] == ["mpirun", "-np", "16"]
    env = {e["name"]: e["value"] for e in launcher["template"]["spec"]["containers"][0]["env"]}
    assert (env["NCCL_IB_DISABLE"], env["NCCL_NET_GDR_LEVEL"], env["NCCL_DEBUG"]) == ("0", "1", "INFO")
    # One run: no launcher restart, no retry, stopped where verify stops waiting; every pod findable by its label.
    assert launcher["restartPolicy"] == "Never"
    assert job["spec"]["runPolicy"] == {"cleanPodPolicy": "Running", "backoffLimit": 0, "activeDeadlineSeconds": 300}
    for replica in (launcher, worker):
        assert replica["template"]["metadata"]["labels"][k8s_verify.VERIFY_LABEL] == "nccl"
    assert launcher["template"]["metadata"]["labels"]["nodeforge.io/role"] == "launcher"
    longer = _nccl_job(redbook_cluster(k8s_cluster_verify_timeout=900))
    assert longer["spec"]["runPolicy"]["activeDeadlineSeconds"] == 900


def test_no_nccl_job_without_the_mpi_operator_or_a_second_gpu_node():
    for c, why in [
        (redbook_cluster(k8s_mpi_operator_enabled=False), "the MPI Operator is not enabled"),
        (cluster("openshift", "dgx-1", nodes=1), "1 GPU node(s): the all-reduce runs across two or more"),
    ]:
        jobs, reason = k8s_verify.nccl_job(c, k8s_jobs.cluster_facts(c))
        assert jobs == [] and reason.startswith(why)


def test_the_bus_bandwidth_floor_is_the_lowest_any_gpu_node_sets():
    assert k8s_verify.nccl_busbw_floor(redbook_cluster()) is None
    nodes = {
        "node-01": {"nodeforge_profile": "dgx-1", "validate_nccl_min_busbw_gbs": 40},
        "node-02": {"nodeforge_profile": "dgx-1", "validate_nccl_min_busbw_gbs": "5.5"},
        "node-03": {"nodeforge_profile": "dgx-1"},
    }
    assert k8s_verify.nccl_busbw_floor(k8s_objects.cluster_from({}, nodes)) == 5.5


def _mpijob(status_file: str | None) -> dict:
    job = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": "nodeforge-verify-nccl"}}
    if status_file:
        job["status"] = yaml.safe_load((DATA / status_file).read_text())
    return job


NCCL_16X1 = OUTPUTS / "nccl-all-reduce-perf-16x1-nccl-tests-format.txt"


def test_a_succeeded_nccl_job_passes_when_its_log_shows_gdrdma_and_the_floor():
    log = NCCL_16X1.read_text()
    job = _mpijob("mpijob-status-succeeded-mpi-operator-readme.yaml")
    results = k8s_verify.evaluate_nccl_run(job, [], log, "ib+gdr", 5.0)
    assert [(r["check"], r["status"]) for r in results] == [
        ("nccl_all_reduce", "pass"),
        ("nccl_transport", "pass"),
        ("nccl_busbw", "pass"),
    ]
    # The same run under a floor it does not reach, and over sockets when GDRDMA was expected.
    assert statuses(k8s_verify.evaluate_nccl_run(job, [], log, "ib+gdr", 6.0))["nccl_busbw"] == "fail"
    socket = "nccl-test-mpi-worker-0:30:30 [0] NCCL INFO NET/Socket : Using [0]eth0:10.128.7.148<0>\n"
    tcp_run = socket + "\n".join(log.splitlines()[2:])  # its table after a NET/Socket line, not its NET/IB lines
    transport = k8s_verify.evaluate_nccl_run(job, [], tcp_run, "ib+gdr", None)[1]
    assert transport["status"] == "fail" and transport["reason"].startswith("NCCL used NET/Socket")


def test_a_failed_nccl_job_fails_with_the_operators_reason_and_its_log_is_still_read():
    job = _mpijob("mpijob-status-failed-backoff-limit.yaml")
    launcher = _finished("Failed", containerStatuses=[{"state": {"terminated": {"exitCode": 1, "reason": "Error"}}}])
    failed, transport, busbw = k8s_verify.evaluate_nccl_run(job, [launcher], "", "ib+gdr", 5.0)
    assert (failed["status"], failed["measured"]) == ("fail", "Failed")
    assert failed["reason"] == (
        "the MPIJob failed: BackoffLimitExceeded/: Job has reached the specified backoff limit: "
    )
    assert transport["status"] == busbw["status"] == "fail"
    assert transport["reason"] == "no NCCL log: its launcher wrote no log (p Error)"
    # A launcher that failed after NCCL's INFO lines: the transport is still judged from what it wrote.
    cut = "\n".join(NCCL_16X1.read_text().splitlines()[:2])
    _, transport, busbw = k8s_verify.evaluate_nccl_run(job, [launcher], cut, "ib+gdr", 5.0)
    assert transport["status"] == "pass" and busbw["status"] == "fail"


def test_an_nccl_job_that_never_ends_or_is_refused_fails_saying_so():
    pending = {
        "metadata": {"name": "nodeforge-verify-nccl-worker-1"},
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"}]},
    }
    started = _mpijob(None) | {"status": {"conditions": [{"type": "Created", "status": "True"}]}}
    [stuck, *_] = k8s_verify.evaluate_nccl_run(started, [pending], "", "ib", None)
    assert stuck["reason"] == "the MPIJob did not finish while verify waited: nodeforge-verify-nccl-worker-1 Pending"
    # A Failed condition whose status is False is no verdict yet.
    unsure = _mpijob(None) | {"status": {"conditions": [{"type": "Failed", "status": "False"}]}}
    assert k8s_verify.evaluate_nccl_run(unsure, [], "", "ib", None)[0]["reason"].endswith("waited: no pods")
    forbidden = 'mpijobs.kubeflow.org "nodeforge-verify-nccl" is forbidden'
    refused = k8s_verify.evaluate_nccl_run(None, [], "", "tcp", 5.0, forbidden)
    assert [(r["check"], r["status"]) for r in refused] == [
        ("nccl_all_reduce", "fail"),
        ("nccl_transport", "na"),
        ("nccl_busbw", "fail"),
    ]
    assert refused[0]["reason"] == f"the API server refused the MPIJob: {forbidden}"
    assert refused[2]["reason"] == "no NCCL log: the API server refused the MPIJob"
    assert k8s_verify.evaluate_nccl_run(None, [], "", "ib", None)[0]["reason"].endswith(
        "not found after it was created"
    )


@pytest.mark.parametrize("junk", [None, 3, "text", [1], {"status": "x"}, {"status": {"conditions": [None, 4]}}])
def test_nccl_objects_of_another_shape_fail_and_never_raise(junk):
    results = k8s_verify.evaluate_nccl_run(junk, [junk], junk, "ib+gdr", 5.0)
    assert results[0]["status"] == "fail"


def test_a_refusal_reads_as_the_api_servers_reason_and_message():
    status = json.dumps(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "message": 'pods "p" is forbidden',
            "reason": "Forbidden",
        },
        separators=(",", ":"),
    )
    assert k8s_validate.refusal(f"Failed to apply object: {status}") == 'Forbidden: pods "p" is forbidden'
    # Not a Status (a connection error): the module's words as they are.
    assert k8s_validate.refusal("Failed to apply object: Connection refused") == "Connection refused"
    assert k8s_validate.refusal(None) == ""
