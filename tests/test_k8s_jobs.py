# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The test jobs of `nodeforge k8s job` and the MPIJob converter of `nodeforge k8s convert-mpijob`: every object
validates strictly (Kubernetes 1.33 schemas, the shipped MPIJob v2beta1 CRD), and carries what the sources' tests
need (GPUs, every RDMA resource at 1, IPC_LOCK, ranks and slots, the NCCL mode's environment)."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml

from nodeforge import collection  # noqa: F401  (sets up the collection loader)
from nodeforge.collection import k8s_validate

from ansible_collections.nodeforge.gpu.plugins.module_utils import k8s_jobs, mpijob_convert  # isort: skip

K8S_VERSION = "1.33"
SEED_MPIJOBS = sorted((Path(__file__).parent / "data" / "seed_mpijobs").glob("*.yaml"))
RDMA = [f"rdma/shared_ib{i}" for i in range(4)]
OPENSHIFT = {
    "distribution": "openshift",
    "namespace": "ml-team",
    "service_account": "mpi",
    "gpus_per_node": 8,
    "nodes": 2,
    "rdma_resources": RDMA,
    "node_selector": {"nvidia.com/gpu.present": "true"},
    "images": {},
}
KUBERNETES = {
    "distribution": "kubernetes",
    "namespace": "research",
    "service_account": "mpi",
    "gpus_per_node": 4,
    "nodes": 3,
    "rdma_resources": [],
    "node_selector": {"nvidia.com/gpu.present": "true"},
}


def problems(objects: list[dict]) -> list[str]:
    return [str(p) for p in k8s_validate.validate(objects, K8S_VERSION, k8s_validate.shipped_crds())]


def cluster(base: dict, **changes) -> dict:
    return {**copy.deepcopy(base), **changes}


def env(container: dict) -> dict[str, str]:
    return {item["name"]: item["value"] for item in container.get("env", [])}


def launcher(mpijob: dict) -> dict:
    return mpijob["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]


def worker_pod(mpijob: dict) -> dict:
    return mpijob["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]


def option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def forwarded(command: list[str]) -> list[str]:
    """The variables mpirun forwards to the ranks (-x NAME)."""
    return [command[i + 1] for i, word in enumerate(command) if word == "-x"]


# ---- every kind validates --------------------------------------------------------------------------------------------
JOBS = [pytest.param(OPENSHIFT, kind, id=f"openshift-{kind}") for kind in k8s_jobs.KINDS] + [
    pytest.param(KUBERNETES, kind, id=f"kubernetes-{kind}") for kind in k8s_jobs.KINDS if kind != "ib-write-bw"
]


@pytest.mark.parametrize(("facts", "kind"), JOBS)
def test_every_job_validates_strictly(facts, kind):
    objects = k8s_jobs.build(kind, facts)
    assert objects
    assert problems(objects) == []
    for obj in objects:
        assert obj["metadata"]["namespace"] == facts["namespace"]
        assert obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "nodeforge"


@pytest.mark.parametrize(("facts", "kind"), JOBS)
def test_jobs_are_deterministic(facts, kind):
    first = k8s_jobs.build(kind, facts)
    assert k8s_jobs.build(kind, copy.deepcopy(facts)) == first
    shuffled = cluster(facts, rdma_resources=list(reversed(facts["rdma_resources"])))
    assert k8s_jobs.build(kind, shuffled) == first
    first[0]["metadata"]["name"] = "changed"
    assert k8s_jobs.build(kind, facts)[0]["metadata"]["name"] != "changed"  # no shared state between calls


def test_a_built_object_with_an_unknown_field_is_a_problem():
    """The strict validation applies to what the builders make: a field no schema has is reported by name."""
    [pod] = k8s_jobs.build("cuda-vector-add", OPENSHIFT)
    pod["spec"]["containers"][0]["gpus"] = 1
    [mpijob] = k8s_jobs.build("nccl", OPENSHIFT)
    mpijob["spec"]["slotsPerNode"] = 8
    found = k8s_validate.validate([pod, mpijob], K8S_VERSION, k8s_validate.shipped_crds())
    assert [(p.obj, p.field, p.message.split(" (")[0]) for p in found] == [
        ("Pod ml-team/cuda-vector-add", "spec.containers[0]", "unknown field(s) gpus"),
        ("MPIJob ml-team/nccl-tests", "spec", "unknown field(s) slotsPerNode"),
    ]


# ---- cuda-vector-add -------------------------------------------------------------------------------------------------
def test_cuda_vector_add_is_a_pod_asking_for_one_gpu():
    [pod] = k8s_jobs.build("cuda-vector-add", OPENSHIFT)
    assert (pod["apiVersion"], pod["kind"]) == ("v1", "Pod")
    spec = pod["spec"]
    assert spec["restartPolicy"] == "OnFailure"
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    [container] = spec["containers"]
    assert container["resources"] == {"limits": {"nvidia.com/gpu": 1}}
    assert container["image"] == k8s_jobs.DEFAULT_IMAGES["cuda_vector_add"]
    assert "Test PASSED" in pod["metadata"]["annotations"]["nodeforge.io/expect"]


def test_images_are_overridable_and_unknown_image_keys_refused():
    [pod] = k8s_jobs.build("cuda-vector-add", cluster(OPENSHIFT, images={"cuda_vector_add": "registry.lab/vadd:1"}))
    assert pod["spec"]["containers"][0]["image"] == "registry.lab/vadd:1"
    [mpijob] = k8s_jobs.build("nccl", cluster(OPENSHIFT, images={"nccl_tests": "registry.lab/nccl:2"}))
    assert {launcher(mpijob)["image"], worker_pod(mpijob)["containers"][0]["image"]} == {"registry.lab/nccl:2"}
    [pod] = k8s_jobs.build("cuda-vector-add", cluster(OPENSHIFT, images={"cuda_vector_add": None}))
    assert pod["spec"]["containers"][0]["image"] == k8s_jobs.DEFAULT_IMAGES["cuda_vector_add"]
    with pytest.raises(ValueError, match="nccl-tests"):
        k8s_jobs.build("nccl", cluster(OPENSHIFT, images={"nccl-tests": "x"}))


# ---- ib-write-bw -----------------------------------------------------------------------------------------------------
def test_ib_write_bw_runs_server_and_client_on_different_nodes_with_every_rdma_resource():
    service, server, client = k8s_jobs.build("ib-write-bw", OPENSHIFT)
    assert (service["kind"], server["kind"], client["kind"]) == ("Service", "Job", "Job")
    assert service["spec"]["clusterIP"] == "None"
    for job in (server, client):
        pod = job["spec"]["template"]
        [container] = pod["spec"]["containers"]
        assert container["resources"]["limits"] == dict.fromkeys(RDMA, 1)
        assert container["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
        assert "nvidia.com/gpu" not in container["resources"]["limits"]
        assert env(container)["NVIDIA_VISIBLE_DEVICES"] == "void"
        assert pod["spec"]["serviceAccountName"] == "mpi"
        assert pod["spec"]["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
        # Required anti-affinity on the hostname against a label both pods carry: never on one node.
        [term] = pod["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert term["topologyKey"] == "kubernetes.io/hostname"
        other = client if job is server else server
        for labels in (pod["metadata"]["labels"], other["spec"]["template"]["metadata"]["labels"]):
            assert term["labelSelector"]["matchLabels"].items() <= labels.items()
    # The Service selects the server pod, not the client, and the client connects to its name.
    selector = service["spec"]["selector"].items()
    assert selector <= server["spec"]["template"]["metadata"]["labels"].items()
    assert not selector <= client["spec"]["template"]["metadata"]["labels"].items()
    server_command = server["spec"]["template"]["spec"]["containers"][0]["command"]
    assert server_command[:3] == ["ib_write_bw", "-s", "65536"]
    client_script = client["spec"]["template"]["spec"]["containers"][0]["command"][-1]
    assert f"{' '.join(server_command)} {service['metadata']['name']}" in client_script
    assert option(server_command, "-p") == str(service["spec"]["ports"][0]["port"])
    assert "11000 MB/sec" in client["metadata"]["annotations"]["nodeforge.io/expect"]


def test_ib_write_bw_without_rdma_resources_is_refused():
    with pytest.raises(ValueError, match=r"RDMA resources.*rdma_resources"):
        k8s_jobs.build("ib-write-bw", KUBERNETES)


def test_ib_write_bw_needs_two_nodes():
    with pytest.raises(ValueError, match=r"two GPU nodes.*nodes'\] is 1"):
        k8s_jobs.build("ib-write-bw", cluster(OPENSHIFT, nodes=1))


# ---- nccl and mpijob -------------------------------------------------------------------------------------------------
def test_nccl_is_an_mpijob_with_a_rank_per_gpu():
    [mpijob] = k8s_jobs.build("nccl", OPENSHIFT)
    assert (mpijob["apiVersion"], mpijob["kind"]) == ("kubeflow.org/v2beta1", "MPIJob")
    spec = mpijob["spec"]
    assert spec["slotsPerWorker"] == 8
    assert spec["mpiImplementation"] == "OpenMPI"
    assert spec["mpiReplicaSpecs"]["Launcher"]["replicas"] == 1
    assert spec["mpiReplicaSpecs"]["Worker"]["replicas"] == 2
    command = launcher(mpijob)["command"]
    assert command[0] == "mpirun"
    assert option(command, "-np") == "16"
    program = command[command.index(k8s_jobs.ALL_REDUCE_PERF) :]
    assert program == [k8s_jobs.ALL_REDUCE_PERF, "-b", "8", "-e", "256M", "-f", "2", "-g", "1"]
    assert "resources" not in launcher(mpijob)  # the launcher asks for no GPU
    pod = worker_pod(mpijob)
    [container] = pod["containers"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 8, **dict.fromkeys(RDMA, 1)}
    assert container["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
    assert "command" not in container  # the operator starts sshd
    assert pod["serviceAccountName"] == "mpi"
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"name": "dshm", "emptyDir": {"medium": "Memory"}} in pod["volumes"]
    [term] = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert (
        term["labelSelector"]["matchLabels"].items()
        <= spec["mpiReplicaSpecs"]["Worker"]["template"]["metadata"]["labels"].items()
    )


@pytest.mark.parametrize(
    ("mode", "ib_disable", "gdr_level"), [("tcp", "1", "0"), ("ib", "0", "0"), ("ib+gdr", "0", "1")]
)
@pytest.mark.parametrize("kind", ["nccl", "mpijob"])
def test_nccl_environment_per_mode(kind, mode, ib_disable, gdr_level):
    [mpijob] = k8s_jobs.build(kind, cluster(OPENSHIFT, nccl_mode=mode))
    assert problems([mpijob]) == []
    variables = env(launcher(mpijob))
    assert variables["NCCL_IB_DISABLE"] == ib_disable
    assert variables["NCCL_NET_GDR_LEVEL"] == gdr_level
    assert variables["NCCL_DEBUG"] == "INFO"
    # Forwarded to every rank: SSH sessions do not inherit the launcher container's environment.
    assert {"NCCL_IB_DISABLE", "NCCL_NET_GDR_LEVEL", "NCCL_DEBUG"} <= set(forwarded(launcher(mpijob)["command"]))
    [container] = worker_pod(mpijob)["containers"]
    rdma_asked = {r for r in container["resources"]["limits"] if r.startswith("rdma/")}
    if mode == "tcp":
        assert rdma_asked == set()
        assert "securityContext" not in container
    else:
        assert rdma_asked == set(RDMA)
        assert container["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]


def test_nccl_mode_defaults_to_gpudirect_with_rdma_and_tcp_without():
    [with_rdma] = k8s_jobs.build("nccl", OPENSHIFT)
    [without] = k8s_jobs.build("nccl", KUBERNETES)
    assert env(launcher(with_rdma))["NCCL_NET_GDR_LEVEL"] == "1"
    assert env(launcher(without))["NCCL_IB_DISABLE"] == "1"
    assert option(launcher(without)["command"], "-np") == "12"  # 3 nodes x 4 GPUs
    assert without["spec"]["slotsPerWorker"] == 4
    assert worker_pod(without)["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 4}


@pytest.mark.parametrize("mode", ["ib", "ib+gdr"])
def test_nccl_over_infiniband_without_rdma_resources_is_refused(mode):
    with pytest.raises(ValueError, match="rdma_resources"):
        k8s_jobs.build("nccl", cluster(KUBERNETES, nccl_mode=mode))


def test_mpijob_template_has_the_nccl_job_resources_and_a_placeholder_command():
    [template] = k8s_jobs.build("mpijob", OPENSHIFT)
    [nccl] = k8s_jobs.build("nccl", OPENSHIFT)
    assert launcher(template)["command"][-2:] == k8s_jobs.PLACEHOLDER_TRAINING_COMMAND
    assert option(launcher(template)["command"], "-np") == "16"
    assert template["spec"]["slotsPerWorker"] == nccl["spec"]["slotsPerWorker"] == 8
    assert worker_pod(template)["containers"][0]["resources"] == worker_pod(nccl)["containers"][0]["resources"]
    assert "/workspace/train.py" in template["metadata"]["annotations"]["nodeforge.io/expect"]


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"distribution": "rke"}, "distribution"),
        ({"namespace": "ML_Team"}, "namespace"),
        ({"service_account": ""}, "service_account"),
        ({"gpus_per_node": 0}, "gpus_per_node"),
        ({"nodes": True}, "nodes"),
        ({"rdma_resources": ["shared_ib0"]}, "rdma_resources"),
        ({"rdma_resources": "rdma/shared_ib0"}, "rdma_resources"),
        ({"node_selector": {"gpu": True}}, "node_selector"),
        ({"nccl_mode": "roce"}, "nccl_mode"),
    ],
)
def test_bad_cluster_facts_are_refused_by_name(changes, named):
    with pytest.raises(ValueError, match=named):
        k8s_jobs.build("nccl", cluster(OPENSHIFT, **changes))


def test_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="unknown job kind 'hpl'"):
        k8s_jobs.build("hpl", OPENSHIFT)


# ---- convert-mpijob: the seeds' v1alpha2 MPIJobs ---------------------------------------------------------------------
def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def test_every_seed_mpijob_is_here():
    """Seeds 002 (line 299) and 004 (every `apiVersion: kubeflow.org/v1alpha2`, vlalpha2 included)."""
    assert [p.name for p in SEED_MPIJOBS] == [
        "002_88959cd34c019ac0-299.yaml",
        *(f"004_42a9d4e1431d3e7c-{line}.yaml" for line in (1452, 1991, 2092, 2558, 2735, 2844, 2971)),
    ]


@pytest.mark.parametrize("path", SEED_MPIJOBS, ids=lambda p: p.stem)
def test_seed_mpijob_converts_to_a_valid_v2beta1_mpijob(path):
    old = load(path)
    before = copy.deepcopy(old)
    new, notes = mpijob_convert.convert(old)
    assert old == before  # the input is not changed
    assert problems([new]) == []
    assert new["apiVersion"] == "kubeflow.org/v2beta1"
    assert new["metadata"] == old["metadata"]
    assert new["spec"]["mpiImplementation"] == "OpenMPI"
    assert new["spec"]["slotsPerWorker"] == old["spec"]["slotsPerWorker"]
    assert new["spec"]["runPolicy"]["cleanPodPolicy"] == old["spec"]["cleanPodPolicy"]
    assert "cleanPodPolicy" not in new["spec"]
    for replica_type in ("Launcher", "Worker"):
        old_replica = old["spec"]["mpiReplicaSpecs"][replica_type]
        new_replica = new["spec"]["mpiReplicaSpecs"][replica_type]
        assert new_replica["replicas"] == old_replica["replicas"]
        assert new_replica["template"] == old_replica["template"]  # commands, resources, volumes: as they were
        assert new_replica["restartPolicy"] == "OnFailure"
    worker = new["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert worker["resources"]["limits"]["nvidia.com/gpu"] >= 1
    assert launcher(new)["command"][0] == "mpirun"
    assert notes[0] == "apiVersion: kubeflow.org/v1alpha2 -> kubeflow.org/v2beta1"
    assert any(n.startswith("spec.cleanPodPolicy -> spec.runPolicy.cleanPodPolicy") for n in notes)
    assert any(n.startswith("spec.mpiImplementation: set to OpenMPI") for n in notes)
    assert any("sshd" in n for n in notes)


def test_seed_mpijob_rdma_workers_keep_every_rdma_resource_and_ipc_lock():
    new, notes = mpijob_convert.convert(load(SEED_MPIJOBS[2]))  # 004 line 1991: one worker with 8 GPUs
    worker = new["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert worker["resources"]["limits"] == {"nvidia.com/gpu": 8, **dict.fromkeys(RDMA, 1)}
    assert worker["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
    assert any("uid 1075481000" in n and "sshAuthMountPath" in n for n in notes)


def test_a_converted_mpijob_with_an_unknown_field_is_a_problem_naming_it():
    """The converter's output is checked by the strict CRD validation: an extra field anywhere is named."""
    new, _ = mpijob_convert.convert(load(SEED_MPIJOBS[0]))
    new["spec"]["cleanPodPolicy"] = "Running"  # where v1alpha2 had it
    new["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["gpus"] = 1
    found = k8s_validate.validate([new], K8S_VERSION, k8s_validate.shipped_crds())
    named = {p.field: p.message for p in found}
    assert "cleanPodPolicy" in named["spec"]
    assert "gpus" in named["spec.mpiReplicaSpecs.Worker.template.spec.containers[0]"]
    assert all(str(p).startswith("MPIJob tensorflow-benchmarks") for p in found)


# ---- convert-mpijob: what moves, what is refused ---------------------------------------------------------------------
def minimal(api_version: str = "kubeflow.org/v1alpha2", **spec) -> dict:
    container = {"name": "main", "image": "registry.lab/train:1"}
    return {
        "apiVersion": api_version,
        "kind": "MPIJob",
        "metadata": {"name": "job", "namespace": "ml-team"},
        "spec": {
            "mpiReplicaSpecs": {
                "Launcher": {
                    "replicas": 1,
                    "template": {"spec": {"containers": [{**container, "command": ["mpirun", "-np", "4", "a.out"]}]}},
                },
                "Worker": {
                    "replicas": 2,
                    "template": {
                        "spec": {"containers": [{**container, "resources": {"limits": {"nvidia.com/gpu": 2}}}]}
                    },
                },
            },
            **spec,
        },
    }


def test_run_policy_fields_move_into_run_policy():
    new, notes = mpijob_convert.convert(
        minimal(backoffLimit=2, activeDeadlineSeconds=3600, ttlSecondsAfterFinished=600, cleanPodPolicy="All")
    )
    assert problems([new]) == []
    assert new["spec"]["runPolicy"] == {
        "cleanPodPolicy": "All",
        "backoffLimit": 2,
        "activeDeadlineSeconds": 3600,
        "ttlSecondsAfterFinished": 600,
    }
    for field in ("backoffLimit", "activeDeadlineSeconds", "ttlSecondsAfterFinished", "cleanPodPolicy"):
        assert field not in new["spec"]
        assert any(n.startswith(f"spec.{field} -> spec.runPolicy.{field}") for n in notes)


def test_defaults_that_changed_are_written_out():
    new, notes = mpijob_convert.convert(minimal())
    assert new["spec"]["runPolicy"] == {"cleanPodPolicy": "None"}
    assert new["spec"]["slotsPerWorker"] == 1
    assert any(n.startswith("spec.runPolicy.cleanPodPolicy: set to None") for n in notes)
    assert any(n.startswith("spec.slotsPerWorker: set to 1") for n in notes)


def test_mpi_distribution_becomes_mpi_implementation():
    new, notes = mpijob_convert.convert(minimal(mpiDistribution="intel_mpi"))
    assert new["spec"]["mpiImplementation"] == "Intel"
    assert "spec.mpiDistribution (intel_mpi) -> spec.mpiImplementation (Intel)" in notes
    with pytest.raises(ValueError, match=re.escape("spec.mpiDistribution")):
        mpijob_convert.convert(minimal(mpiDistribution="mvapich"))


def test_main_container_is_dropped_when_it_is_the_first_and_refused_otherwise():
    new, notes = mpijob_convert.convert(minimal(mainContainer="main"))
    assert "mainContainer" not in new["spec"]
    assert any(n.startswith("spec.mainContainer: dropped") for n in notes)
    with pytest.raises(ValueError, match=re.escape("spec.mainContainer")):
        mpijob_convert.convert(minimal(mainContainer="sidecar"))


def test_server_metadata_and_status_are_dropped_with_a_note():
    old = minimal()
    old["metadata"].update(uid="1234", resourceVersion="99", creationTimestamp="2020-07-06T12:00:00Z")
    old["metadata"]["annotations"] = {"kubectl.kubernetes.io/last-applied-configuration": "{}", "team": "adas"}
    old["status"] = {"launcherStatus": "Succeeded"}
    new, notes = mpijob_convert.convert(old)
    assert new["metadata"] == {"name": "job", "namespace": "ml-team", "annotations": {"team": "adas"}}
    assert "status" not in new
    assert {
        "metadata.uid: dropped (the API server sets it)",
        "status: dropped (the operator writes it; a manifest has none)",
    } <= set(notes)


def test_restart_policies_v2beta1_refuses_are_mapped_or_refused():
    old = minimal()
    old["spec"]["mpiReplicaSpecs"]["Worker"]["restartPolicy"] = "Always"
    new, notes = mpijob_convert.convert(old)
    assert new["spec"]["mpiReplicaSpecs"]["Worker"]["restartPolicy"] == "OnFailure"
    assert any(n.startswith("spec.mpiReplicaSpecs.Worker.restartPolicy: Always -> OnFailure") for n in notes)
    old["spec"]["mpiReplicaSpecs"]["Launcher"]["restartPolicy"] = "ExitCode"
    with pytest.raises(ValueError, match=re.escape("Launcher.restartPolicy")):
        mpijob_convert.convert(old)


def test_more_ranks_than_slots_is_noted():
    old = minimal()
    old["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"][2] = "16"
    _, notes = mpijob_convert.convert(old)
    assert any("mpirun -np 16 but the hostfile has 2 slots" in n for n in notes)


def test_v1_mpijob_with_run_policy_converts():
    new, notes = mpijob_convert.convert(minimal("kubeflow.org/v1", slotsPerWorker=2, runPolicy={"backoffLimit": 1}))
    assert problems([new]) == []
    assert new["spec"]["runPolicy"] == {"backoffLimit": 1, "cleanPodPolicy": "None"}
    assert new["spec"]["mpiReplicaSpecs"]["Worker"]["restartPolicy"] == "Never"
    assert notes[0] == "apiVersion: kubeflow.org/v1 -> kubeflow.org/v2beta1"


def test_v2beta1_mpijob_comes_back_unchanged():
    [mpijob] = k8s_jobs.build("nccl", OPENSHIFT)
    new, notes = mpijob_convert.convert(mpijob)
    assert new == mpijob
    assert notes == ["apiVersion: already kubeflow.org/v2beta1, nothing to convert"]


def v1alpha1(**spec) -> dict:
    return {
        "apiVersion": "kubeflow.org/v1alpha1",
        "kind": "MPIJob",
        "metadata": {"name": "tf-benchmarks"},
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "tensorflow-benchmarks",
                            "image": "mpioperator/tensorflow-benchmarks:latest",
                            "command": ["mpirun", "python", "tf_cnn_benchmarks.py"],
                        }
                    ]
                }
            },
            **spec,
        },
    }


def test_v1alpha1_gpus_become_workers_with_their_share():
    new, notes = mpijob_convert.convert(v1alpha1(gpus=16, gpusPerNode=8, backoffLimit=3))
    assert problems([new]) == []
    specs = new["spec"]["mpiReplicaSpecs"]
    assert specs["Worker"]["replicas"] == 2
    worker = specs["Worker"]["template"]["spec"]["containers"][0]
    assert worker["resources"]["limits"] == {"nvidia.com/gpu": 8}
    assert "command" not in worker  # v1alpha1 ran `sleep` there; v2beta1 starts sshd
    launcher_container = specs["Launcher"]["template"]["spec"]["containers"][0]
    assert launcher_container["command"] == ["mpirun", "python", "tf_cnn_benchmarks.py"]
    assert "resources" not in launcher_container
    assert new["spec"]["slotsPerWorker"] == 8
    assert new["spec"]["runPolicy"] == {"cleanPodPolicy": "None", "backoffLimit": 3}
    assert any(n.startswith("spec.gpus (16) and 8 per node -> spec.mpiReplicaSpecs.Worker.replicas (2)") for n in notes)


def test_v1alpha1_replicas_and_refusals():
    new, _ = mpijob_convert.convert(v1alpha1(replicas=4))
    assert new["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 4
    assert problems([new]) == []
    with pytest.raises(ValueError, match=re.escape("spec.gpusPerNode")):
        mpijob_convert.convert(v1alpha1(gpus=16))
    with pytest.raises(ValueError, match=re.escape("spec.gpus: 12 is not a multiple of 8")):
        mpijob_convert.convert(v1alpha1(gpus=12, gpusPerNode=8))
    with pytest.raises(ValueError, match=re.escape("spec.replicas and spec.gpus")):
        mpijob_convert.convert(v1alpha1(gpus=8, gpusPerNode=8, replicas=1))


@pytest.mark.parametrize(
    ("break_it", "named"),
    [
        (lambda d: d["spec"].pop("mpiReplicaSpecs"), "spec.mpiReplicaSpecs"),
        (lambda d: d.update(kind="TFJob"), "kind"),
        (lambda d: d.update(apiVersion="kubeflow.org/v3"), "apiVersion"),
        (lambda d: d.pop("spec"), "spec"),
        (lambda d: d["spec"].update(gpus=8), "spec.gpus"),
        (lambda d: d["spec"].update(launcherOnMaster=True), "launcherOnMaster"),
        (lambda d: d["spec"]["mpiReplicaSpecs"].pop("Launcher"), "spec.mpiReplicaSpecs.Launcher"),
        (lambda d: d["spec"]["mpiReplicaSpecs"].update(PS={}), "PS"),
        (lambda d: d["spec"]["mpiReplicaSpecs"]["Launcher"].update(replicas=2), "Launcher.replicas"),
        (lambda d: d["spec"]["mpiReplicaSpecs"]["Worker"].pop("replicas"), "Worker.replicas"),
        (lambda d: d["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"].pop("containers"), "Worker.template"),
        (lambda d: d["spec"].update(cleanPodPolicy="Running", runPolicy={"cleanPodPolicy": "All"}), "cleanPodPolicy"),
        (lambda d: d["spec"].update(cleanPodPolicy="Sometimes"), "cleanPodPolicy"),
        (lambda d: d["spec"].update(slotsPerWorker="8"), "spec.slotsPerWorker"),
        (lambda d: d["metadata"].update(ownerReferences=[]), "metadata.ownerReferences"),
        (lambda d: d["metadata"].update(name="a" * 60), "metadata.name"),
        (lambda d: d.update(extra=1), "extra"),
    ],
)
def test_unconvertible_input_is_refused_naming_the_field(break_it, named):
    old = minimal()
    break_it(old)
    with pytest.raises(ValueError, match=re.escape(named)):
        mpijob_convert.convert(old)


def test_a_mapping_is_needed():
    with pytest.raises(ValueError, match="mapping"):
        mpijob_convert.convert(["kind: MPIJob"])  # type: ignore[arg-type]


# ---- convert-mpijob: the file, read as hostile input -----------------------------------------------------------------
def job_text(**spec) -> str:
    return yaml.safe_dump(minimal(**spec), sort_keys=False)


def alias_bomb(levels: int = 8, width: int = 9) -> str:
    """A billion-laughs MPIJob: an annotation whose nested aliases expand to width**levels copies of LAUGH, from a
    few hundred bytes. Its line `l6:` is the first whose expansion passes MAX_NODES (597,871 values)."""
    lines = ["apiVersion: kubeflow.org/v1alpha2", "kind: MPIJob", "metadata:", "  name: job", "  annotations:"]
    lines.append("    l0: &l0 LAUGH")
    lines += [f"    l{n}: &l{n} [{','.join([f'*l{n - 1}'] * width)}]" for n in range(1, levels + 1)]
    return "\n".join(lines) + "\n" + yaml.safe_dump({"spec": minimal()["spec"]})


def line_of(text: str, start: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if line.startswith(start))


def test_load_numbers_the_documents_and_gives_their_lines():
    text = "---\n# nothing\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n---\n" + job_text()
    documents = mpijob_convert.load(text.encode(), "jobs.yaml")
    assert [(number, line, doc["kind"]) for number, line, doc in documents] == [
        (2, 4, "ConfigMap"),
        (3, 8, "MPIJob"),
    ]


SHARED = """\
apiVersion: kubeflow.org/v1alpha2
kind: MPIJob
metadata: {name: job}
spec:
  mpiReplicaSpecs:
    Launcher:
      template:
        spec:
          containers:
          - <<: &base {name: main, image: "registry.lab/train:1"}
            command: [mpirun, -np, "2", a.out]
            env: &env [{name: NCCL_DEBUG, value: INFO}]
    Worker:
      replicas: 2
      template:
        spec:
          containers:
          - <<: *base
            env: *env
"""


def test_load_keeps_anchors_that_share_a_container():
    """Aliases are counted as they expand, not banned: a job that shares its container through them converts."""
    [(number, line, doc)] = mpijob_convert.load(SHARED.encode(), "shared.yaml")
    assert (number, line) == (1, 1)
    new, _ = mpijob_convert.convert(doc)
    assert problems([new]) == []
    worker = new["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert worker == {"name": "main", "image": "registry.lab/train:1", "env": [{"name": "NCCL_DEBUG", "value": "INFO"}]}


NESTED = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: deep}\ndata:\n  a: " + "[" * 150 + "]" * 150 + "\n"
HOSTILE = [
    pytest.param(
        b"kind: MPIJob\n# caf\xe9\n\xff\xfe",
        r"job\.yaml, line 2: not UTF-8 text \(byte 0xe9 at offset 18\)",
        id="binary",
    ),
    pytest.param(
        b"kind: MPIJob\nname: a\x00b\n", r"job\.yaml, line 2: character U\+0000 is not allowed in YAML", id="nul"
    ),
    pytest.param(b"", r"no MPIJob found in job\.yaml: it holds no YAML document", id="empty"),
    pytest.param(b"---\n", r"no MPIJob found in job\.yaml: it holds no YAML document", id="only-a-separator"),
    pytest.param(
        b"---\n# cut\n---\n...\n", r"no MPIJob found in job\.yaml: it holds no YAML document", id="empty-documents"
    ),
    pytest.param(
        b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n",
        r"no MPIJob found in job\.yaml: its 1 document\(s\) hold 'ConfigMap'",
        id="no-mpijob",
    ),
    pytest.param(b"kind: MPIJob\nspec: [a\nb: c\n", r"job\.yaml, line 3, column 2: not YAML: ", id="not-yaml"),
    pytest.param(
        b"kind: MPIJob\nspec: !!float fast\n",
        r"job\.yaml, document 1 \(line 1\): a value YAML cannot build",
        id="bad-tag",
    ),
    pytest.param(NESTED.encode(), r"job\.yaml, line 5: nested deeper than 100 levels, refused", id="deep"),
    pytest.param(
        b"kind: MPIJob\nx: " + b"[" * 3000 + b"]" * 3000,
        r"job\.yaml, line 2, column \d+: not YAML",
        id="deeper-than-libyaml",
    ),
    pytest.param(
        b"kind: MPIJob\nmetadata:\n  loop: &a [*a]\n",
        r"job\.yaml, line 3: a YAML alias inside the value it names",
        id="cycle",
    ),
    # line 12 is l6: l5 expands to 66,430 values, under MAX_NODES; l6 to 597,871
    pytest.param(
        alias_bomb().encode(), r"job\.yaml, line 12: more than 100000 values once its YAML aliases", id="alias-bomb"
    ),
    pytest.param(
        b"# padding\n" * (mpijob_convert.MAX_BYTES // 10) + job_text().encode(),
        r"job\.yaml: larger than 3 MiB, refused",
        id="too-large",
    ),
]


@pytest.mark.timeout(60)  # the alias bomb took 31 s and 3.4 GB before it was counted: a regression fails here
@pytest.mark.parametrize(("data", "message"), HOSTILE)
def test_load_refuses_hostile_input_naming_the_file_and_line(data, message):
    with pytest.raises(ValueError, match=message) as refused:
        mpijob_convert.load(data, "job.yaml")
    assert "LAUGH" not in str(refused.value) and len(str(refused.value)) < 300


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("data", "message"),
    [
        (alias_bomb().encode(), r"job\.yaml, line 12: more than 100000 values"),
        (NESTED.encode(), r"job\.yaml, line 5: nested deeper than 100 levels"),
        (b"kind: MPIJob\nx: " + b"[" * 3000 + b"]" * 3000, r"job\.yaml: nested too deeply to read"),
    ],
    ids=["alias-bomb", "deep", "deeper-than-python-recurses"],
)
def test_load_refuses_them_without_libyaml_too(monkeypatch, data, message):
    """PyYAML without libyaml (a pip build without the C extension) composes in Python, a frame a level."""
    monkeypatch.delattr(yaml, "CSafeLoader", raising=False)
    with pytest.raises(ValueError, match=message):
        mpijob_convert.load(data, "job.yaml")


def test_load_reads_a_file_at_the_size_limit():
    text = job_text()
    data = text.encode() + b"#" * (mpijob_convert.MAX_BYTES - len(text.encode()))
    assert len(data) == mpijob_convert.MAX_BYTES
    [(_, _, doc)] = mpijob_convert.load(data, "job.yaml")
    assert doc == minimal()


@pytest.mark.parametrize(
    "replica",
    [pytest.param(None, id="no-key"), pytest.param("empty", id="key-without-value")],
)
def test_a_job_without_its_worker_is_refused_naming_it(replica):
    """A file cut short loses the Worker first: the launcher's mpirun -np would have no host, so it is refused."""
    old = minimal()
    if replica is None:
        del old["spec"]["mpiReplicaSpecs"]["Worker"]
    else:
        old["spec"]["mpiReplicaSpecs"]["Worker"] = None
    with pytest.raises(ValueError, match=re.escape("spec.mpiReplicaSpecs.Worker: missing, the Worker replica spec")):
        mpijob_convert.convert(old)


def test_annotations_and_labels_that_are_not_strings_are_refused_by_key_without_their_value():
    old = minimal()
    old["metadata"]["annotations"] = {"team": "adas", "laughs": [["LAUGH"] * 50] * 50}
    with pytest.raises(ValueError, match=r"^metadata\.annotations\.laughs: a list, not a string \(quote it\)$"):
        mpijob_convert.convert(old)
    old["metadata"]["annotations"] = {"team": "adas"}
    old["metadata"]["labels"] = {"enabled": True}
    with pytest.raises(ValueError, match=r"^metadata\.labels\.enabled: a bool, not a string"):
        mpijob_convert.convert(old)


def test_a_value_in_a_message_is_quoted_short():
    with pytest.raises(ValueError, match=r"spec\.slotsPerWorker: ") as refused:
        mpijob_convert.convert(minimal(slotsPerWorker=[["LAUGH" * 100] * 100] * 100))
    assert len(str(refused.value)) < 200


# ---- convert-mpijob: mpirun's -np against the slots ------------------------------------------------------------------
def with_launcher(old: dict, **command) -> dict:
    container = old["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    container.pop("command")
    container.update(command)
    return old


NP_FORMS = {
    "-np N": lambda n: {"command": ["mpirun", "-np", str(n), "a.out"]},
    "--np=N": lambda n: {"command": ["mpirun", "--allow-run-as-root", f"--np={n}", "a.out"]},
    "-np=N": lambda n: {"command": ["mpirun", f"-np={n}", "a.out"]},
    "--np N": lambda n: {"command": ["mpirun", "--np", str(n), "a.out"]},
    "-n N": lambda n: {"command": ["mpirun", "-n", str(n), "a.out"]},
    "bash -c": lambda n: {"command": ["bash", "-c", f"cd /w && mpirun --allow-run-as-root -np {n} python t.py -n 99"]},
    "sh -c, script in args": lambda n: {"command": ["/bin/sh", "-c"], "args": [f"exec mpirun -n {n} a.out"]},
    "sh in command, -c in args": lambda n: {"command": ["sh"], "args": ["-c", f"mpirun --np {n} a.out; echo done"]},
    "bash -lc": lambda n: {"command": ["/bin/bash", "-lc", f"mpirun --np={n} a.out"]},
    "bash -o pipefail -c": lambda n: {"command": ["bash", "-o", "pipefail", "-c", f"mpirun -np {n} a | tee log"]},
    "args only (mpirun the entrypoint)": lambda n: {"args": ["-np", str(n), "a.out"]},
}


@pytest.mark.parametrize("form", NP_FORMS)
@pytest.mark.parametrize(
    ("slots_per_worker", "ranks", "noted"), [(1, 2, False), (1, 3, True), (4, 8, False), (4, 9, True)]
)
def test_np_in_every_form_is_checked_against_the_slots(form, slots_per_worker, ranks, noted):
    """2 workers x slotsPerWorker: -np at the slots is fine, one more is noted."""
    new, notes = mpijob_convert.convert(
        with_launcher(minimal(slotsPerWorker=slots_per_worker), **NP_FORMS[form](ranks))
    )
    slots = 2 * slots_per_worker
    note = (
        f"spec.mpiReplicaSpecs.Launcher: mpirun -np {ranks} but the hostfile has {slots} slots "
        f"(2 workers x slotsPerWorker {slots_per_worker}): mpirun will refuse to start"
    )
    assert [n for n in notes if "mpirun -np" in n] == ([note] if noted else [])
    assert problems([new]) == []


@pytest.mark.parametrize(
    "command",
    [
        {"command": ["bash", "-c", "python train.py -n 99"]},  # no mpirun in the script: -n is train.py's
        {"command": ["mpirun", "-np", "$NP", "a.out"]},  # mpirun's to resolve
        {"command": ["bash", "-c", "mpirun -np 'unbalanced"]},
        {"command": ["sh", "-c"]},
    ],
    ids=["script-without-mpirun", "variable", "unbalanced-quote", "no-script"],
)
def test_np_that_is_not_a_number_of_mpirun_is_not_noted(command):
    _, notes = mpijob_convert.convert(with_launcher(minimal(), **command))
    assert not [n for n in notes if "mpirun -np" in n]
