# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The test jobs `nodeforge k8s job KIND` writes for a tenant namespace: the sources' acceptance checks of a GPU
cluster, as objects a tenant can apply. Pure functions of the cluster facts the CLI reads from the inventory.

- cuda-vector-add: one GPU, "Test PASSED" in the log (seed 001: the device plugin hands out GPUs).
- ib-write-bw: RDMA write bandwidth between two GPU nodes, 65536-byte messages, at least 11,000 MB/s per EDR port
  (seed 004, 4.1: the HCAs, the RDMA shared device plugin and IPC_LOCK work from a tenant's pod).
- nccl: NCCL all_reduce_perf over every GPU of every node, one MPI rank per GPU (seed 004, 4.4), in the NCCL mode
  asked for (tcp, ib, ib+gdr: the environment seed 004 4.3 switches between; seed 002 compares TCP with RDMA).
- mpijob: the same MPIJob with a placeholder training command, for a tenant to edit (seed 004, 4.3 and 4.5).

The MPIJobs are kubeflow.org/v2beta1 (the MPI Operator nodeforge installs): the launcher reaches the workers over
SSH, and the operator starts `/usr/sbin/sshd -De` in a worker container that has no command of its own. The default
nccl-tests image is built for that (Open MPI, NCCL, nccl-tests, sshd) and runs as root: on OpenShift the tenant's SCC
(restricted plus IPC_LOCK) does not admit root, so a tenant there needs an image whose sshd runs as the pod's user
(the MPI Operator's examples/v2beta1/pi shows how) and spec.sshAuthMountPath set to that user's ~/.ssh.

The pods ask for IPC_LOCK themselves on both distributions: what admits it is the tenant's SCC on OpenShift and the
tenant namespace's Pod Security level on Kubernetes (module_utils/k8s_objects.mpi_tenants), not these objects.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

from ansible_collections.nodeforge.gpu.plugins.module_utils import k8s_objects

KINDS = ("cuda-vector-add", "ib-write-bw", "nccl", "mpijob")
NCCL_MODES = ("tcp", "ib", "ib+gdr")
DISTRIBUTIONS = ("kubernetes", "openshift")

# Public images, each overridable in the inventory (the CLI passes them in cluster["images"]).
DEFAULT_IMAGES = {
    # NVIDIA's CUDA vectorAdd sample: prints "Test PASSED" and exits 0 when the GPU computed the sum.
    "cuda_vector_add": "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0",
    # perftest (ib_write_bw) on rdma-core, the image NVIDIA's GPU Operator and Network Operator docs test RDMA with.
    "perftest": "docker.io/mellanox/cuda-perftest:latest",
    # The MPI Operator's nccl-tests image (examples/v2beta1/nccl-tests): Open MPI, NCCL, nccl-tests and the sshd a
    # v2beta1 worker needs. NGC's framework images carry NCCL but neither nccl-tests nor an SSH server.
    "nccl_tests": "docker.io/mpioperator/nccl-tests:latest",
}
# Where the nccl_tests image has all_reduce_perf (an image given instead must have it there, or the command edited).
ALL_REDUCE_PERF = "/opt/nccl_tests/build/all_reduce_perf"
# The training command the mpijob template runs until a tenant puts theirs in its place.
PLACEHOLDER_TRAINING_COMMAND = ["python3", "/workspace/train.py"]

# ib_write_bw's default TCP port for the out-of-band exchange before the RDMA transfer; given explicitly on both sides
# so that the headless Service names the same port.
PERFTEST_PORT = 18515
PERFTEST_MESSAGE_BYTES = 65536  # seed 004 4.1: #bytes 65536, 11,000 MB/s or more per EDR port
CLIENT_ATTEMPTS = 30  # the client retries while the server pod starts (10 s apart)

# The NCCL environment per mode, as seed 004 4.3 switches between them: NCCL_IB_DISABLE=1 keeps NCCL on TCP sockets;
# NCCL_NET_GDR_LEVEL=0 (LOC) never uses GPUDirect RDMA; 1 (PIX) uses it where the GPU and the HCA share a PCIe
# switch, as on the DGX systems of the seed (on other topologies NCCL then falls back to staging through host memory:
# the log's "via NET/IB/0/GDRDMA" lines tell which). NCCL_DEBUG=INFO puts the transport NCCL chose in the log.
NCCL_ENV = {
    "tcp": {"NCCL_IB_DISABLE": "1", "NCCL_NET_GDR_LEVEL": "0"},
    "ib": {"NCCL_IB_DISABLE": "0", "NCCL_NET_GDR_LEVEL": "0"},
    "ib+gdr": {"NCCL_IB_DISABLE": "0", "NCCL_NET_GDR_LEVEL": "1"},
}
NCCL_DEBUG = "INFO"

GPU_RESOURCE = "nvidia.com/gpu"
MANAGED_BY = {"app.kubernetes.io/managed-by": "nodeforge"}
NAME_LABEL = "app.kubernetes.io/name"
ROLE_LABEL = "nodeforge.io/role"
EXPECT_ANNOTATION = "nodeforge.io/expect"
HOSTNAME_TOPOLOGY = "kubernetes.io/hostname"
# GPU nodes are often tainted so that only pods that ask for GPUs land there; the test pods tolerate it.
GPU_TOLERATION = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
# A container that asks for no GPU but runs a CUDA image (NVIDIA_VISIBLE_DEVICES=all in the image) would get every GPU
# of the node from the nvidia runtime, outside the scheduler's accounting: void gives it none.
NO_GPUS_ENV = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
# An extended resource: a domain-qualified name (rdma/shared_ib0, nvidia.com/hostdev).
_EXTENDED_RESOURCE = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


# ---- the cluster facts -----------------------------------------------------------------------------------------------
def _int_at_least(cluster: Mapping[str, Any], key: str, minimum: int) -> int:
    value = cluster.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"cluster[{key!r}] must be an integer of at least {minimum}, not {value!r}")
    return value


def _facts(kind: str, cluster: Mapping[str, Any]) -> dict[str, Any]:
    """The cluster facts a job is built from, checked: every problem names the cluster key and what was expected."""
    if kind not in KINDS:
        raise ValueError(f"unknown job kind {kind!r}: one of {', '.join(KINDS)}")
    if not isinstance(cluster, Mapping):
        raise ValueError(f"the cluster facts must be a mapping, not {type(cluster).__name__}")
    distribution = cluster.get("distribution")
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"cluster['distribution'] must be one of {', '.join(DISTRIBUTIONS)}, not {distribution!r}")
    namespace = cluster.get("namespace")
    if not isinstance(namespace, str) or not _DNS_LABEL.fullmatch(namespace):
        raise ValueError(f"cluster['namespace'] must be a namespace name (a DNS label), not {namespace!r}")
    service_account = cluster.get("service_account")
    if kind != "cuda-vector-add" and (
        not isinstance(service_account, str) or not _DNS_SUBDOMAIN.fullmatch(service_account)
    ):
        raise ValueError(
            f"cluster['service_account'] must name the tenant's ServiceAccount that may add IPC_LOCK (a {kind} job "
            f"runs under it), not {service_account!r}"
        )
    rdma = cluster.get("rdma_resources") or []
    if isinstance(rdma, str) or not isinstance(rdma, list | tuple):
        raise ValueError(f"cluster['rdma_resources'] must be a list of extended resource names, not {rdma!r}")
    for resource in rdma:
        if not isinstance(resource, str) or not _EXTENDED_RESOURCE.fullmatch(resource):
            raise ValueError(
                f"cluster['rdma_resources']: {resource!r} is not an extended resource name (like rdma/shared_ib0)"
            )
    node_selector = cluster.get("node_selector") or {}
    if not isinstance(node_selector, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in node_selector.items()
    ):
        raise ValueError(f"cluster['node_selector'] must map label names to string values, not {node_selector!r}")
    images = cluster.get("images") or {}
    if not isinstance(images, Mapping):
        raise ValueError(f"cluster['images'] must be a mapping, not {images!r}")
    images = {key: image for key, image in images.items() if image not in (None, "")}  # unset: the default
    unknown = sorted(set(images) - set(DEFAULT_IMAGES))
    if unknown:
        raise ValueError(
            f"cluster['images']: unknown key(s) {', '.join(map(str, unknown))} (known: {', '.join(DEFAULT_IMAGES)})"
        )
    for key, image in images.items():
        if not isinstance(image, str) or not image or image != image.strip():
            raise ValueError(f"cluster['images'][{key!r}] must be an image reference, not {image!r}")
    mode = nccl_mode(cluster)
    if mode not in NCCL_MODES:
        raise ValueError(f"cluster['nccl_mode'] must be one of {', '.join(NCCL_MODES)}, not {mode!r}")
    if mode != "tcp" and not rdma and kind in ("nccl", "mpijob"):
        raise ValueError(
            f"cluster['nccl_mode'] is {mode!r} but cluster['rdma_resources'] is empty: NCCL over InfiniBand needs the "
            "RDMA resources of the RDMA shared device plugin (or use nccl_mode 'tcp')"
        )
    return {
        "distribution": distribution,
        "namespace": namespace,
        "service_account": service_account,
        "gpus_per_node": _int_at_least(cluster, "gpus_per_node", 1),
        "nodes": _int_at_least(cluster, "nodes", 1),
        "rdma_resources": sorted(set(rdma)),
        "node_selector": dict(sorted(node_selector.items())),
        "images": {**DEFAULT_IMAGES, **images},
        "nccl_mode": mode,
    }


def nccl_mode(cluster: Mapping[str, Any]) -> Any:
    """The NCCL mode of a job: cluster['nccl_mode'] when given, else ib+gdr where the cluster has RDMA resources and
    tcp where it has none."""
    return cluster.get("nccl_mode") or ("ib+gdr" if cluster.get("rdma_resources") else "tcp")


# ---- pieces ----------------------------------------------------------------------------------------------------------
def _metadata(name: str, namespace: str, app: str, annotations: Mapping[str, str] | None = None) -> dict:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": {**MANAGED_BY, NAME_LABEL: app}}
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


def _pod_labels(app: str, role: str) -> dict[str, str]:
    return {**MANAGED_BY, NAME_LABEL: app, ROLE_LABEL: role}


def _placement(facts: Mapping[str, Any]) -> dict:
    """On the GPU nodes, tolerating their GPU taint."""
    spec: dict[str, Any] = {"tolerations": [dict(GPU_TOLERATION)]}
    if facts["node_selector"]:
        spec["nodeSelector"] = dict(facts["node_selector"])
    return spec


def _one_per_node(selector: Mapping[str, str]) -> dict:
    """Required pod anti-affinity: no two pods matching `selector` on one node."""
    return {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": dict(selector)}, "topologyKey": HOSTNAME_TOPOLOGY}
            ]
        }
    }


def _rdma_limits(facts: Mapping[str, Any]) -> dict[str, int]:
    """Every RDMA resource at 1: a container may ask for at most one of each (seed 004 3.4.2); asking for all of them
    gives it every HCA port."""
    return {resource: 1 for resource in facts["rdma_resources"]}


def _ipc_lock() -> dict:
    """RDMA registers (locks) memory: IPC_LOCK (seed 004 3.4.3)."""
    return {"capabilities": {"add": ["IPC_LOCK"]}}


# ---- cuda-vector-add -------------------------------------------------------------------------------------------------
def _cuda_vector_add(facts: Mapping[str, Any]) -> list[dict]:
    name = "cuda-vector-add"
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": _metadata(
                name, facts["namespace"], name, {EXPECT_ANNOTATION: "'Test PASSED' in the log, the pod Completed"}
            ),
            "spec": {
                "restartPolicy": "OnFailure",
                **_placement(facts),
                "containers": [
                    {
                        "name": name,
                        "image": facts["images"]["cuda_vector_add"],
                        "resources": {"limits": {GPU_RESOURCE: 1}},
                    }
                ],
            },
        }
    ]


# ---- ib-write-bw -----------------------------------------------------------------------------------------------------
def _perftest_job(facts: Mapping[str, Any], role: str, command: list[str], expect: str | None) -> dict:
    app = "ib-write-bw"
    container: dict[str, Any] = {
        "name": role,
        "image": facts["images"]["perftest"],
        "command": command,
        "env": [dict(NO_GPUS_ENV)],
        "securityContext": _ipc_lock(),
        "resources": {"limits": _rdma_limits(facts)},
    }
    if role == "server":
        container["ports"] = [{"name": "perftest", "containerPort": PERFTEST_PORT, "protocol": "TCP"}]
    pod_spec = {
        "restartPolicy": "OnFailure",
        "serviceAccountName": facts["service_account"],
        **_placement(facts),
        # The server and the client on two different nodes: the test is of the fabric between them.
        "affinity": _one_per_node({NAME_LABEL: app}),
        "containers": [container],
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _metadata(
            f"{app}-{role}", facts["namespace"], app, {EXPECT_ANNOTATION: expect} if expect else None
        ),
        "spec": {
            "backoffLimit": 4,
            # The server waits for its client forever otherwise.
            "activeDeadlineSeconds": 900,
            "template": {"metadata": {"labels": _pod_labels(app, role)}, "spec": pod_spec},
        },
    }


def _ib_write_bw(facts: Mapping[str, Any]) -> list[dict]:
    if not facts["rdma_resources"]:
        raise ValueError(
            "ib-write-bw needs the RDMA resources of the RDMA shared device plugin (cluster['rdma_resources'], "
            "like rdma/shared_ib0): the cluster has none, so there is no HCA to test"
        )
    if facts["nodes"] < 2:
        raise ValueError(f"ib-write-bw runs between two GPU nodes: cluster['nodes'] is {facts['nodes']}")
    server_name = "ib-write-bw-server"  # the headless Service: the client's name for the server pod
    perftest = ["ib_write_bw", "-s", str(PERFTEST_MESSAGE_BYTES), "-F", "-p", str(PERFTEST_PORT)]
    client_script = (
        f"for attempt in $(seq 1 {CLIENT_ATTEMPTS}); do\n"
        f"  {' '.join(perftest)} {server_name} && exit 0\n"
        '  echo "attempt $attempt: no answer from the server yet, again in 10 s" >&2\n'
        "  sleep 10\n"
        "done\n"
        "exit 1\n"
    )
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(server_name, facts["namespace"], "ib-write-bw"),
        "spec": {
            "clusterIP": "None",
            # The name resolves as soon as the server pod has an address, before it is Ready.
            "publishNotReadyAddresses": True,
            "selector": {NAME_LABEL: "ib-write-bw", ROLE_LABEL: "server"},
            "ports": [{"name": "perftest", "port": PERFTEST_PORT, "targetPort": PERFTEST_PORT, "protocol": "TCP"}],
        },
    }
    expect = (
        f"BW average of at least 11000 MB/sec for {PERFTEST_MESSAGE_BYTES}-byte messages on an EDR (100 Gb/s) port, "
        "in proportion on other link rates; tests the first HCA the pod sees (add -d mlx5_N for another)"
    )
    return [
        service,
        _perftest_job(facts, "server", perftest, None),
        _perftest_job(facts, "client", ["/bin/sh", "-c", client_script], expect),
    ]


# ---- nccl and mpijob: MPIJob v2beta1 ---------------------------------------------------------------------------------
def _mpijob(
    facts: Mapping[str, Any], name: str, program: list[str], run_policy: Mapping[str, Any], expect: str
) -> dict:
    mode = facts["nccl_mode"]
    gpus = facts["gpus_per_node"]
    ranks = facts["nodes"] * gpus
    nccl_env = {"NCCL_DEBUG": NCCL_DEBUG, **NCCL_ENV[mode]}
    image = facts["images"]["nccl_tests"]
    mpirun = ["mpirun", "-np", str(ranks), "-bind-to", "none", "-map-by", "slot"]
    # Open MPI starts the ranks over SSH, whose sessions do not inherit the container's environment: -x forwards the
    # launcher's value of each variable to every rank.
    for variable in [*nccl_env, "LD_LIBRARY_PATH", "PATH"]:
        mpirun += ["-x", variable]
    # MPI's own messages on TCP (ob1, no openib): the collective traffic is NCCL's.
    mpirun += ["-mca", "pml", "ob1", "-mca", "btl", "^openib"]
    launcher_env = [{"name": key, "value": value} for key, value in nccl_env.items()]
    # The nccl_tests image runs as root; Open MPI refuses to without these.
    launcher_env += [
        {"name": "OMPI_ALLOW_RUN_AS_ROOT", "value": "1"},
        {"name": "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "value": "1"},
        dict(NO_GPUS_ENV),
    ]
    rdma = mode != "tcp"
    worker_container: dict[str, Any] = {
        "name": "worker",
        "image": image,
        # No command: the operator starts /usr/sbin/sshd -De for the launcher to reach.
        "resources": {"limits": {GPU_RESOURCE: gpus, **(_rdma_limits(facts) if rdma else {})}},
        # NCCL's shared-memory transport between the GPUs of a node needs more than the runtime's 64 MiB /dev/shm.
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }
    if rdma:
        worker_container["securityContext"] = _ipc_lock()
    worker_labels = _pod_labels(name, "worker")
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": _metadata(name, facts["namespace"], name, {EXPECT_ANNOTATION: expect}),
        "spec": {
            "slotsPerWorker": gpus,
            "mpiImplementation": "OpenMPI",
            # The launcher's mpirun starts when every worker's sshd is up, not before (and fails).
            "launcherCreationPolicy": "WaitForWorkersReady",
            "runPolicy": dict(run_policy),
            "mpiReplicaSpecs": {
                "Launcher": {
                    "replicas": 1,
                    "restartPolicy": "OnFailure",
                    "template": {
                        "metadata": {"labels": _pod_labels(name, "launcher")},
                        "spec": {
                            "serviceAccountName": facts["service_account"],
                            "containers": [
                                {
                                    "name": "launcher",
                                    "image": image,
                                    "command": [*mpirun, *program],
                                    "env": launcher_env,
                                }
                            ],
                        },
                    },
                },
                "Worker": {
                    "replicas": facts["nodes"],
                    "restartPolicy": "OnFailure",
                    "template": {
                        "metadata": {"labels": worker_labels},
                        "spec": {
                            "serviceAccountName": facts["service_account"],
                            **_placement(facts),
                            # One worker a node, with all of its GPUs: the ranks of a node talk over NVLink/PCIe.
                            "affinity": _one_per_node({NAME_LABEL: name, ROLE_LABEL: "worker"}),
                            "containers": [worker_container],
                            "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
                        },
                    },
                },
            },
        },
    }


def _nccl(facts: Mapping[str, Any]) -> list[dict]:
    # One rank per GPU (-g 1), nodes x GPUs ranks: the seed's 8 to 256 MiB scan, doubling the size each step.
    program = [ALL_REDUCE_PERF, "-b", "8", "-e", "256M", "-f", "2", "-g", "1"]
    expect = {
        "tcp": "all_reduce_perf's table with '# Out of bounds values : 0 OK'; NCCL INFO NET/Socket lines",
        "ib": "'# Out of bounds values : 0 OK'; NCCL INFO NET/IB lines, via NET/IB without GDRDMA",
        "ib+gdr": "'# Out of bounds values : 0 OK'; NCCL INFO 'via NET/IB/<n>/GDRDMA' lines; 2-digit us latencies for "
        "small sizes on EDR",
    }[facts["nccl_mode"]]
    run_policy = {"cleanPodPolicy": "Running", "activeDeadlineSeconds": 1800, "backoffLimit": 3}
    return [_mpijob(facts, "nccl-tests", program, run_policy, expect)]


def _training(facts: Mapping[str, Any]) -> list[dict]:
    expect = (
        "a template: put the training image in both containers and its command in place of "
        f"{' '.join(PLACEHOLDER_TRAINING_COMMAND)} at the end of the Launcher's command (mpirun's options stay)"
    )
    return [_mpijob(facts, "mpi-training", list(PLACEHOLDER_TRAINING_COMMAND), {"cleanPodPolicy": "Running"}, expect)]


def cluster_facts(
    cluster: Any, namespace: str | None = None, nodes: int | None = None, nccl_mode: str | None = None
) -> dict:
    """What build needs to know of a k8s_objects.Cluster (the keys _facts reads): the tenant namespace (the first of
    k8s_mpi_operator_tenants unless given), its ServiceAccount, GPUs per node, nodes, RDMA resources, the GPU nodes'
    selector. The same for `nodeforge k8s job` and `nodeforge k8s verify`."""
    tenants = cluster.get("k8s_mpi_operator_tenants") or []
    gpus = [n.gpu_count for n in cluster.nodes if n.gpu_count]
    return {
        "distribution": cluster.distribution,
        "namespace": namespace or (tenants[0] if tenants else "default"),
        "service_account": cluster.get("k8s_mpi_operator_service_account"),
        "gpus_per_node": min(gpus) if gpus else 1,
        "nodes": nodes or len(cluster.nodes),
        "rdma_resources": k8s_objects.rdma_resources(cluster),
        "node_selector": dict(cluster.get("k8s_gpu_device_plugin_node_selector") or {k8s_objects.GPU_PRESENT: "true"}),
        "nccl_mode": nccl_mode,
    }


_BUILDERS = {"cuda-vector-add": _cuda_vector_add, "ib-write-bw": _ib_write_bw, "nccl": _nccl, "mpijob": _training}


def build(kind: str, cluster: Mapping[str, Any]) -> list[dict]:
    """The objects of the test job `kind` (one of KINDS) for `cluster`, in the order to apply them.

    `cluster` keys: distribution (kubernetes|openshift), namespace, service_account, gpus_per_node, nodes,
    rdma_resources (may be empty), node_selector, images (cuda_vector_add, perftest, nccl_tests; DEFAULT_IMAGES for
    those not given), nccl_mode (tcp|ib|ib+gdr; ib+gdr where there are RDMA resources, else tcp). A fact that cannot
    make the job raises ValueError naming it. The same facts give the same objects."""
    facts = _facts(kind, cluster)
    return copy.deepcopy(_BUILDERS[kind](facts))
