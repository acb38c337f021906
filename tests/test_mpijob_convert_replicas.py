# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""`nodeforge k8s convert-mpijob` on the kubeflow.org/v1alpha2 and v1 path, pinned down word for word: the whole
v2beta1 job and every note for the replica specs (replicas, restart policies, the launcher's service account), the
run policy merged from the old top-level fields, the refusals of each replica spec and run policy field it cannot
convert, the worker hostname's DNS-label limit, the SSH notes (a worker's own command, its image, a non-root user),
where mpirun's -np is looked for in nested shells, and load()'s exact limits (MAX_DEPTH levels, MAX_NODES values, a
value that contains itself)."""

from __future__ import annotations

import copy
import shlex

import pytest

from nodeforge import collection  # noqa: F401  (sets up the collection loader)

from ansible_collections.nodeforge.gpu.plugins.module_utils import mpijob_convert  # isort: skip

IMAGE = "registry.lab/ml/horovod:0.28.1"
MPIRUN = ["mpirun", "-np", "16", "-bind-to", "none", "-x", "NCCL_DEBUG=INFO", "python", "train.py"]
GPUS = {"limits": {"nvidia.com/gpu": 4}}

CLEAN_V1ALPHA2 = (
    "spec.runPolicy.cleanPodPolicy: set to None, v1alpha2's default (v2beta1's CRD documents Running: the workers "
    "would be deleted when the launcher ends)"
)
OPENMPI_V1ALPHA2 = "spec.mpiImplementation: set to OpenMPI (v1alpha2 ran Open MPI's mpirun; v2beta1 asks which)"
LAUNCHER_RESTART_V1ALPHA2 = (
    "spec.mpiReplicaSpecs.Launcher.restartPolicy: set to OnFailure (as the v1alpha2 operator ran the launcher Job)"
)
WORKER_RESTART_V1ALPHA2 = (
    "spec.mpiReplicaSpecs.Worker.restartPolicy: set to OnFailure (the v1alpha2 operator's worker StatefulSet "
    "restarted them)"
)
KEPT_4 = "spec.mpiReplicaSpecs: kept, templates unchanged: Launcher (1 replica), Worker (4 replicas)"
SSH = (
    "spec.mpiReplicaSpecs.Worker: v2beta1 reaches the workers over SSH, not kubectl exec: the operator starts "
    "/usr/sbin/sshd -De in container 'worker', so its image (registry.lab/ml/horovod:0.28.1) needs an SSH server, "
    "and the Launcher's image an SSH client"
)
OWN_COMMAND = (
    "spec.mpiReplicaSpecs.Worker: container 'worker' has its own command: in v2beta1 it must run an SSH server, the "
    "launcher reaches the workers over SSH (not kubectl exec)"
)


def launcher_container(**fields) -> dict:
    return {"name": "launcher", "image": IMAGE, "command": MPIRUN, **fields}


def worker_container(**fields) -> dict:
    return {"name": "worker", "image": IMAGE, "resources": GPUS, **fields}


def mpijob(
    version: str = "v1alpha2",
    *,
    name: str = "resnet50-horovod",
    workers: int = 4,
    launcher: dict | None = None,
    worker: dict | None = None,
    **spec,
) -> dict:
    """An MPIJob of the MPI Operator's v1alpha2 (or v1): 4 workers of 4 GPUs, a slot a GPU, mpirun -np 16."""
    launcher_pod = {"containers": [launcher_container() if launcher is None else launcher]}
    worker_pod = {"containers": [worker_container() if worker is None else worker]}
    return {
        "apiVersion": f"kubeflow.org/{version}",
        "kind": "MPIJob",
        "metadata": {"name": name, "namespace": "ml-team"},
        "spec": {
            "slotsPerWorker": 4,
            **spec,
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": {"spec": launcher_pod}},
                "Worker": {"replicas": workers, "template": {"spec": worker_pod}},
            },
        },
    }


def replicas(job: dict) -> dict:
    return job["spec"]["mpiReplicaSpecs"]


def converted(old: dict) -> tuple[dict, list[str]]:
    before = copy.deepcopy(old)
    new, notes = mpijob_convert.convert(old)
    assert old == before  # the operator's job is read, never changed
    return new, notes


def refused(old: dict) -> str:
    with pytest.raises(ValueError) as refusal:
        mpijob_convert.convert(old)
    return str(refusal.value)


# ---- whole jobs ------------------------------------------------------------------------------------------------------
def test_v1alpha2_job_with_its_top_level_run_policy_and_restart_policies_converts_whole():
    old = mpijob(cleanPodPolicy="Running", backoffLimit=3, ttlSecondsAfterFinished=600)
    old["spec"]["mpiReplicaSpecs"]["Launcher"]["restartPolicy"] = "Never"
    old["spec"]["mpiReplicaSpecs"]["Worker"]["restartPolicy"] = "Always"
    new, notes = converted(old)
    assert new == {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": "resnet50-horovod", "namespace": "ml-team"},
        "spec": {
            "slotsPerWorker": 4,
            "runPolicy": {"cleanPodPolicy": "Running", "backoffLimit": 3, "ttlSecondsAfterFinished": 600},
            "mpiImplementation": "OpenMPI",
            "mpiReplicaSpecs": {
                "Launcher": {
                    "replicas": 1,
                    "restartPolicy": "Never",
                    "template": {"spec": {"containers": [launcher_container()]}},
                },
                "Worker": {
                    "replicas": 4,
                    "restartPolicy": "OnFailure",
                    "template": {"spec": {"containers": [worker_container()]}},
                },
            },
        },
    }
    assert notes == [
        "apiVersion: kubeflow.org/v1alpha2 -> kubeflow.org/v2beta1",
        "spec.slotsPerWorker: kept (4)",
        "spec.cleanPodPolicy -> spec.runPolicy.cleanPodPolicy (Running)",
        "spec.backoffLimit -> spec.runPolicy.backoffLimit (3)",
        "spec.ttlSecondsAfterFinished -> spec.runPolicy.ttlSecondsAfterFinished (600)",
        OPENMPI_V1ALPHA2,
        "spec.mpiReplicaSpecs.Worker.restartPolicy: Always -> OnFailure (v2beta1 accepts Never or OnFailure)",
        KEPT_4,
        SSH,
    ]


def test_v1alpha2_defaults_are_written_out_with_a_note_each():
    """No cleanPodPolicy, no restart policies, no Launcher replicas: what the v1alpha2 operator did, spelled out."""
    old = mpijob(workers=1)
    del old["spec"]["mpiReplicaSpecs"]["Launcher"]["replicas"]
    new, notes = converted(old)
    assert new["spec"]["runPolicy"] == {"cleanPodPolicy": "None"}
    assert {t: (r["replicas"], r["restartPolicy"]) for t, r in replicas(new).items()} == {
        "Launcher": (1, "OnFailure"),
        "Worker": (1, "OnFailure"),
    }
    assert notes == [
        "apiVersion: kubeflow.org/v1alpha2 -> kubeflow.org/v2beta1",
        "spec.slotsPerWorker: kept (4)",
        CLEAN_V1ALPHA2,
        OPENMPI_V1ALPHA2,
        "spec.mpiReplicaSpecs.Launcher.replicas: set to 1 (v2beta1 wants it spelled out; there is one launcher)",
        LAUNCHER_RESTART_V1ALPHA2,
        WORKER_RESTART_V1ALPHA2,
        "spec.mpiReplicaSpecs: kept, templates unchanged: Launcher (1 replica), Worker (1 replica)",
        SSH,
        "spec.mpiReplicaSpecs.Launcher: mpirun -np 16 but the hostfile has 4 slots (1 workers x slotsPerWorker 4): "
        "mpirun will refuse to start",
    ]


def test_v1_job_merges_its_run_policy_with_a_top_level_field_and_defaults_the_workers_to_never():
    """v1 kept a runPolicy of its own; a field still at the top (activeDeadlineSeconds) joins it. A zero is a valid
    backoffLimit (no retry) and ttlSecondsAfterFinished (delete at once). v1's workers default to Never."""
    run_policy = {
        "cleanPodPolicy": "Running",
        "backoffLimit": 0,
        "ttlSecondsAfterFinished": 0,
        "schedulingPolicy": {"minAvailable": 5, "queue": "gpu-a100"},
    }
    old = mpijob("v1", runPolicy=run_policy, activeDeadlineSeconds=86400)
    old["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["serviceAccountName"] = "mpi-launcher"
    new, notes = converted(old)
    assert new["spec"] == {
        "slotsPerWorker": 4,
        "runPolicy": {
            "cleanPodPolicy": "Running",
            "backoffLimit": 0,
            "ttlSecondsAfterFinished": 0,
            "schedulingPolicy": {"minAvailable": 5, "queue": "gpu-a100"},
            "activeDeadlineSeconds": 86400,
        },
        "mpiImplementation": "OpenMPI",
        "mpiReplicaSpecs": {
            "Launcher": {
                "replicas": 1,
                "restartPolicy": "OnFailure",
                "template": {"spec": {"containers": [launcher_container()], "serviceAccountName": "mpi-launcher"}},
            },
            "Worker": {
                "replicas": 4,
                "restartPolicy": "Never",
                "template": {"spec": {"containers": [worker_container()]}},
            },
        },
    }
    assert notes == [
        "apiVersion: kubeflow.org/v1 -> kubeflow.org/v2beta1",
        "spec.slotsPerWorker: kept (4)",
        "spec.runPolicy: kept (backoffLimit, cleanPodPolicy, schedulingPolicy, ttlSecondsAfterFinished)",
        "spec.activeDeadlineSeconds -> spec.runPolicy.activeDeadlineSeconds (86400)",
        "spec.mpiImplementation: set to OpenMPI (v1 ran Open MPI's mpirun; v2beta1 asks which)",
        "spec.mpiReplicaSpecs.Launcher.restartPolicy: set to OnFailure (as the v1 operator ran the launcher Job)",
        "spec.mpiReplicaSpecs.Worker.restartPolicy: set to Never (the v1 default, and v2beta1's)",
        KEPT_4,
        SSH,
    ]


def test_v1_job_without_a_clean_pod_policy_gets_v1s_default_note():
    _, notes = converted(mpijob("v1"))
    assert notes[2] == (
        "spec.runPolicy.cleanPodPolicy: set to None, v1's default (v2beta1's CRD documents Running: the workers "
        "would be deleted when the launcher ends)"
    )


def test_a_field_in_both_places_with_the_same_value_is_kept_once():
    new, notes = converted(mpijob(backoffLimit=2, runPolicy={"backoffLimit": 2}))
    assert new["spec"]["runPolicy"] == {"backoffLimit": 2, "cleanPodPolicy": "None"}
    assert notes[2:5] == [
        "spec.runPolicy: kept (backoffLimit)",
        "spec.backoffLimit -> spec.runPolicy.backoffLimit (2)",
        CLEAN_V1ALPHA2,
    ]


# ---- the launcher's service account ----------------------------------------------------------------------------------
ACCOUNT_NOTE = (
    "spec.mpiReplicaSpecs.Launcher.template.spec.serviceAccountName: 'mpi-launcher' is used now (the v1alpha2 operator "
    "ran the launcher under its own <name>-launcher account, for kubectl exec)"
)


@pytest.mark.parametrize(
    ("version", "replica_type", "pod_fields", "noted"),
    [
        pytest.param("v1alpha2", "Launcher", {"serviceAccountName": "mpi-launcher"}, True, id="v1alpha2-name"),
        pytest.param("v1alpha2", "Launcher", {"serviceAccount": "mpi-launcher"}, True, id="v1alpha2-deprecated-field"),
        pytest.param(
            "v1alpha2",
            "Launcher",
            {"serviceAccountName": "mpi-launcher", "serviceAccount": "default"},
            True,
            id="v1alpha2-name-wins",
        ),
        pytest.param("v1alpha2", "Worker", {"serviceAccountName": "mpi-launcher"}, False, id="v1alpha2-worker"),
        pytest.param("v1", "Launcher", {"serviceAccountName": "mpi-launcher"}, False, id="v1-launcher"),
    ],
)
def test_the_v1alpha2_launchers_own_service_account_is_noted(version, replica_type, pod_fields, noted):
    """The v1alpha2 operator gave the launcher a <name>-launcher account for kubectl exec; a job that names one runs
    under it now. A worker's account, or a v1 job's (whose operator used the template's), is no news."""
    old = mpijob(version)
    old["spec"]["mpiReplicaSpecs"][replica_type]["template"]["spec"].update(pod_fields)
    new, notes = converted(old)
    assert replicas(new)[replica_type]["template"]["spec"] == {
        "containers": [launcher_container() if replica_type == "Launcher" else worker_container()],
        **pod_fields,
    }
    assert [n for n in notes if "serviceAccount" in n] == ([ACCOUNT_NOTE] if noted else [])


# ---- refusals: the replica specs -------------------------------------------------------------------------------------
def without_launcher(job: dict) -> None:
    del job["spec"]["mpiReplicaSpecs"]["Launcher"]


def without_worker(job: dict) -> None:
    del job["spec"]["mpiReplicaSpecs"]["Worker"]


def set_replica(replica_type: str, **fields):
    def change(job: dict) -> None:
        job["spec"]["mpiReplicaSpecs"][replica_type].update(fields)

    return change


def set_specs(value):
    def change(job: dict) -> None:
        job["spec"]["mpiReplicaSpecs"] = value

    return change


def set_pod(replica_type: str, **fields):
    def change(job: dict) -> None:
        job["spec"]["mpiReplicaSpecs"][replica_type]["template"]["spec"].update(fields)

    return change


def add_replica_types(job: dict) -> None:
    job["spec"]["mpiReplicaSpecs"].update(PS={"replicas": 2}, Chief={"replicas": 1})


def launcher_empty(job: dict) -> None:
    job["spec"]["mpiReplicaSpecs"]["Launcher"] = None


def launcher_a_file_name(job: dict) -> None:
    job["spec"]["mpiReplicaSpecs"]["Launcher"] = "launcher.yaml"


@pytest.mark.parametrize(
    ("break_it", "message"),
    [
        pytest.param(
            set_specs([{"Launcher": {"replicas": 1}}, {"Worker": {"replicas": 4}}]),
            "spec.mpiReplicaSpecs: missing (an MPIJob needs at least its Launcher)",
            id="specs-a-list",
        ),
        pytest.param(
            set_specs({}), "spec.mpiReplicaSpecs: missing (an MPIJob needs at least its Launcher)", id="specs-empty"
        ),
        pytest.param(
            add_replica_types,
            "spec.mpiReplicaSpecs: unknown replica type(s) Chief, PS (Launcher, Worker)",
            id="tfjob-replica-types",
        ),
        pytest.param(
            without_launcher, "spec.mpiReplicaSpecs.Launcher: missing (v2beta1 needs the launcher)", id="no-launcher"
        ),
        pytest.param(
            without_worker,
            "spec.mpiReplicaSpecs.Worker: missing, the Worker replica spec (its replicas and template): the launcher's "
            "mpirun would have no host to start ranks on (is the file cut short?)",
            id="no-worker",
        ),
        pytest.param(
            launcher_empty,
            "spec.mpiReplicaSpecs.Launcher: empty, a replica spec needs its replicas and template (is the file cut "
            "short?)",
            id="launcher-empty",
        ),
        pytest.param(
            launcher_a_file_name,
            "spec.mpiReplicaSpecs.Launcher: 'launcher.yaml' is not a replica spec",
            id="launcher-not-a-mapping",
        ),
        pytest.param(
            set_replica("Worker", minReplicas=2, maxReplicas=8),
            "spec.mpiReplicaSpecs.Worker: unknown field(s) maxReplicas, minReplicas",
            id="worker-elastic-fields",
        ),
        pytest.param(
            set_replica("Launcher", template="launcher-pod.yaml"),
            "spec.mpiReplicaSpecs.Launcher.template.spec.containers: missing (a replica runs at least one container)",
            id="template-not-a-mapping",
        ),
        pytest.param(
            set_pod("Worker", containers=[]),
            "spec.mpiReplicaSpecs.Worker.template.spec.containers: missing (a replica runs at least one container)",
            id="no-container",
        ),
        pytest.param(
            set_pod("Worker", containers={"name": "worker", "image": IMAGE}),
            "spec.mpiReplicaSpecs.Worker.template.spec.containers: missing (a replica runs at least one container)",
            id="containers-a-mapping",
        ),
        pytest.param(
            set_replica("Launcher", replicas=2),
            "spec.mpiReplicaSpecs.Launcher.replicas: 2, but v2beta1 runs exactly 1 launcher",
            id="two-launchers",
        ),
        pytest.param(
            set_replica("Worker", replicas=0),
            "spec.mpiReplicaSpecs.Worker.replicas: 0 is not an integer of at least 1",
            id="no-workers",
        ),
        pytest.param(
            set_replica("Worker", restartPolicy="ExitCode"),
            "spec.mpiReplicaSpecs.Worker.restartPolicy: 'ExitCode' has no v2beta1 equivalent: one of Never, OnFailure",
            id="worker-exit-code",
        ),
    ],
)
def test_a_replica_spec_v2beta1_cannot_take_is_refused_word_for_word(break_it, message):
    old = mpijob()
    break_it(old)
    assert refused(old) == message


# ---- refusals: v1alpha1 fields, the run policy -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("version", "field", "value"),
    [
        ("v1alpha2", "gpus", 16),
        ("v1alpha2", "gpusPerNode", 4),
        ("v1alpha2", "processingUnits", 16),
        ("v1alpha2", "processingUnitsPerNode", 4),
        ("v1alpha2", "replicas", 4),
        ("v1", "template", {"spec": {"containers": [launcher_container()]}}),
    ],
)
def test_a_v1alpha1_field_in_a_later_job_is_refused_naming_the_version(version, field, value):
    assert refused(mpijob(version, **{field: value})) == (
        f"spec.{field}: a kubeflow.org/v1alpha1 field in a {version} MPIJob (give it apiVersion v1alpha1, or move it "
        "into spec.mpiReplicaSpecs)"
    )


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        pytest.param(
            {"runPolicy": [{"cleanPodPolicy": "Running"}, {"backoffLimit": 3}]},
            "spec.runPolicy: [{'cleanPodPolicy': 'Running'}, {'backoffLimit': 3}] is not a mapping",
            id="run-policy-a-list",
        ),
        pytest.param(
            {"runPolicy": {"backoffLimit": 3, "suspend": False, "managedBy": "kueue.x-k8s.io/multikueue"}},
            "spec.runPolicy: unknown field(s) managedBy, suspend",
            id="run-policy-later-fields",
        ),
        pytest.param(
            {"backoffLimit": 3, "runPolicy": {"backoffLimit": 5}},
            "spec.backoffLimit (3) and spec.runPolicy.backoffLimit (5) disagree: keep one",
            id="backoff-limits-disagree",
        ),
        pytest.param(
            {"cleanPodPolicy": "Running", "runPolicy": {"cleanPodPolicy": "All"}},
            "spec.cleanPodPolicy ('Running') and spec.runPolicy.cleanPodPolicy ('All') disagree: keep one",
            id="clean-pod-policies-disagree",
        ),
        pytest.param(
            {"runPolicy": {"backoffLimit": -1}},
            "spec.runPolicy.backoffLimit: -1 is not an integer of at least 0",
            id="negative-backoff-limit",
        ),
        pytest.param(
            {"activeDeadlineSeconds": "24h"},
            "spec.runPolicy.activeDeadlineSeconds: '24h' is not an integer of at least 0",
            id="deadline-a-duration",
        ),
        pytest.param(
            {"runPolicy": {"ttlSecondsAfterFinished": 3.5}},
            "spec.runPolicy.ttlSecondsAfterFinished: 3.5 is not an integer of at least 0",
            id="ttl-a-float",
        ),
        pytest.param(
            {"cleanPodPolicy": "OnCompletion"},
            "spec.runPolicy.cleanPodPolicy: 'OnCompletion' is not one of None, Running, All",
            id="clean-pod-policy-unknown",
        ),
    ],
)
def test_a_run_policy_v2beta1_cannot_take_is_refused_word_for_word(spec, message):
    assert refused(mpijob(**spec)) == message


@pytest.mark.parametrize(
    ("run_policy", "shown"),
    [
        pytest.param(
            [{"cleanPodPolicy": "Running"}, {"ttlSecondsAfterFinished": 86400}, {"activeDeadlineSeconds": 3600}],
            "[{'cleanPodPolicy': 'Running'}, {'ttlSecondsAfterFinished': 86400}, {'activeDeadlineSeconds': 3600}]",
            id="100-characters-whole",
        ),
        pytest.param(
            [{"cleanPodPolicy": "Running"}, {"ttlSecondsAfterFinished": 86400}, {"activeDeadlineSeconds": 86400}],
            "[{'cleanPodPolicy': 'Running'}, {'ttlSecondsAfterFinished': 86400}, {'activeDeadlineSeconds': 864...",
            id="101-characters-cut-to-100",
        ),
    ],
)
def test_a_value_is_quoted_whole_up_to_100_characters_then_cut_with_an_ellipsis(run_policy, shown):
    assert refused(mpijob(runPolicy=run_policy)) == f"spec.runPolicy: {shown} is not a mapping"


# ---- the workers' hostnames: <name>-worker-<index>, a DNS label ------------------------------------------------------
NAME_54 = "imagenet-resnet152-horovod-fp16-bs256-lr0p1-2024-06-01"


def test_a_long_name_converts_while_the_last_workers_hostname_is_63_characters():
    new, _ = converted(mpijob(name=NAME_54, workers=10, slotsPerWorker=2))
    assert new["metadata"] == {"name": NAME_54, "namespace": "ml-team"}
    assert replicas(new)["Worker"]["replicas"] == 10


def test_a_long_name_is_refused_when_the_last_workers_hostname_passes_63_characters():
    """Worker 10 of 11 is <name>-worker-10: 64 characters, where worker 0's would still fit."""
    assert refused(mpijob(name=NAME_54, workers=11, slotsPerWorker=2)) == (
        f"metadata.name: '{NAME_54}' would name a worker '{NAME_54}-worker-10', which is not a DNS label (lowercase "
        "alphanumerics and '-', at most 63 characters): v2beta1 refuses the MPIJob"
    )


# ---- the SSH notes ---------------------------------------------------------------------------------------------------
SSHD = ["/usr/sbin/sshd", "-De", "-f", "/home/mpiuser/.sshd_config"]
NON_ROOT = (
    "spec.sshAuthMountPath: left at /root/.ssh, but the workers run as uid {}: set it to that user's ~/.ssh and run "
    "sshd as that user (its own sshd_config, an unprivileged port), as the MPI Operator's v2beta1 pi example does"
)
DIGEST = "sha256:" + "0123456789abcdef" * 4


def ssh_notes(worker: dict, **pod) -> list[str]:
    old = mpijob(worker=worker)
    old["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"].update(pod)
    _, notes = converted(old)
    return notes[notes.index(KEPT_4) + 1 :]


def sshd_note(image: str) -> str:
    return (
        "spec.mpiReplicaSpecs.Worker: v2beta1 reaches the workers over SSH, not kubectl exec: the operator starts "
        f"/usr/sbin/sshd -De in container 'worker', so its image ({image}) needs an SSH server, and the Launcher's "
        "image an SSH client"
    )


@pytest.mark.parametrize(
    "worker",
    [
        pytest.param(worker_container(command=SSHD), id="command"),
        pytest.param(worker_container(args=["-De", "-f", "/home/mpiuser/.sshd_config"]), id="args"),
        pytest.param(worker_container(command=["/usr/sbin/sshd"], args=["-De"]), id="both"),
    ],
)
def test_a_worker_with_its_own_command_or_args_is_told_to_run_an_ssh_server(worker):
    assert ssh_notes(worker) == [OWN_COMMAND]


@pytest.mark.parametrize(
    ("image", "shown"),
    [
        pytest.param(None, "<no image>", id="no-image"),
        pytest.param(2024.1, "2024.1", id="image-read-as-a-number"),
        pytest.param(
            f"registry.lab/ml/{'nested/' * 15}horovod@{DIGEST}",
            f"registry.lab/ml/{'nested/' * 15}horovod@{DIGEST}",
            id="200-characters-whole",
        ),
        pytest.param(
            f"registry.lab/ml2/{'nested/' * 15}horovod@{DIGEST}",
            "'registry.lab/ml2/nested/nested/nested...abcdef0123456789abcdef0123456789abcdef'",
            id="201-characters-quoted-short",
        ),
    ],
)
def test_the_workers_image_is_named_in_the_sshd_note(image, shown):
    worker = worker_container(image=image)
    if image is None:
        del worker["image"]
    assert ssh_notes(worker) == [sshd_note(shown)]


@pytest.mark.parametrize(
    ("container_context", "pod_context", "uid"),
    [
        pytest.param(None, {"runAsUser": 1000, "fsGroup": 1000}, 1000, id="pod-non-root"),
        pytest.param({"runAsUser": 1001}, {"runAsUser": 1000}, 1001, id="container-first"),
        pytest.param({"runAsUser": 1}, None, 1, id="uid-1"),
        pytest.param({"runAsUser": 0}, None, None, id="container-root"),
        pytest.param(None, {"runAsUser": 0, "runAsNonRoot": False}, None, id="pod-root"),
    ],
)
def test_workers_that_run_as_a_user_other_than_root_are_told_to_move_the_ssh_keys(container_context, pod_context, uid):
    worker = worker_container() if container_context is None else worker_container(securityContext=container_context)
    pod = {} if pod_context is None else {"securityContext": pod_context}
    assert ssh_notes(worker, **pod) == [SSH, *([] if uid is None else [NON_ROOT.format(uid)])]


# ---- mpirun's -np: nested shells, the end of mpirun's command --------------------------------------------------------
NP_64 = (
    "spec.mpiReplicaSpecs.Launcher: mpirun -np 64 but the hostfile has 16 slots (4 workers x slotsPerWorker 4): "
    "mpirun will refuse to start"
)


def nested(words: list[str], shells: list[str]) -> list[str]:
    """`words` run through `shell -c '...'`, the last shell outermost."""
    for shell in shells:
        words = [shell, "-c", shlex.join(words)]
    return words


def np_notes(command: list[str]) -> list[str]:
    _, notes = converted(mpijob(launcher=launcher_container(command=command)))
    return [n for n in notes if "mpirun -np" in n]


@pytest.mark.parametrize(
    ("shells", "noted"),
    [
        pytest.param(["sh"], True, id="one-shell"),
        pytest.param(["bash", "sh", "sh"], True, id="three-shells"),
        pytest.param(["bash", "bash", "sh", "sh"], False, id="four-shells"),
    ],
)
def test_mpirun_is_looked_for_through_at_most_three_nested_shells(shells, noted):
    command = nested(["mpirun", "-np", "64", "python", "train.py"], shells)
    assert np_notes(command) == ([NP_64] if noted else [])


def test_mpiruns_options_end_at_its_command_another_programs_n_is_not_its_count():
    command = ["sh", "-c", "mpirun python train.py; python eval.py -n 64"]
    assert np_notes(command) == []
    command = ["sh", "-c", "mpirun -np 64 python train.py; python eval.py -n 8"]
    assert np_notes(command) == [NP_64]


# ---- the converted replicas share nothing with each other ------------------------------------------------------------
SHARED_ENV = """\
apiVersion: kubeflow.org/v1alpha2
kind: MPIJob
metadata: {name: resnet50-horovod}
spec:
  slotsPerWorker: 4
  mpiReplicaSpecs:
    Launcher:
      replicas: 1
      template:
        spec:
          containers:
          - name: launcher
            image: registry.lab/ml/horovod:0.28.1
            command: [mpirun, -np, "16", python, train.py]
            env: &env [{name: NCCL_DEBUG, value: INFO}]
    Worker:
      replicas: 4
      template:
        spec:
          containers:
          - name: worker
            image: registry.lab/ml/horovod:0.28.1
            env: *env
"""


def test_an_env_the_file_shares_through_an_alias_is_two_lists_once_converted():
    """Editing the converted launcher (a variable of its own, a nodeSelector) must not edit the workers."""
    [(_, _, doc)] = mpijob_convert.load(SHARED_ENV.encode(), "job.yaml")
    new, _ = mpijob_convert.convert(doc)
    launcher_env = replicas(new)["Launcher"]["template"]["spec"]["containers"][0]["env"]
    launcher_env.append({"name": "HOROVOD_TIMELINE", "value": "/tmp/timeline.json"})
    assert replicas(new)["Worker"]["template"]["spec"]["containers"][0] == {
        "name": "worker",
        "image": "registry.lab/ml/horovod:0.28.1",
        "env": [{"name": "NCCL_DEBUG", "value": "INFO"}],
    }


# ---- load(): the exact limits ----------------------------------------------------------------------------------------
def load_refusal(data: bytes) -> str:
    with pytest.raises(ValueError) as refusal:
        mpijob_convert.load(data, "job.yaml")
    return str(refusal.value)


def test_a_document_of_exactly_max_depth_levels_is_read():
    """`kind: MPIJob` and 99 nested sequences: the document, its spec and 98 more levels, 100 in all."""
    data = b"kind: MPIJob\nspec: " + b"[" * 99 + b"]" * 99 + b"\n"
    [(number, line, doc)] = mpijob_convert.load(data, "job.yaml")
    assert (number, line, doc["kind"]) == (1, 1, "MPIJob")
    depth, value = 0, doc["spec"]
    while value != []:
        depth, value = depth + 1, value[0]
    assert depth == 98


def test_a_document_one_level_deeper_than_max_depth_is_refused_at_its_line():
    data = b"kind: MPIJob\nspec: " + b"[" * 100 + b"]" * 100 + b"\n"
    assert load_refusal(data) == "job.yaml, line 1: nested deeper than 100 levels, refused"


def test_a_document_of_exactly_max_nodes_values_is_read():
    """The mapping, its 2 keys, `MPIJob`, the sequence and its 99,995 items: 100,000 values."""
    data = b"kind: MPIJob\nspec: [" + b"0, " * 99_995 + b"]\n"
    [(_, _, doc)] = mpijob_convert.load(data, "job.yaml")
    assert len(doc["spec"]) == 99_995


def test_a_document_of_one_value_more_than_max_nodes_is_refused_at_its_line():
    data = b"kind: MPIJob\nspec: [" + b"0, " * 99_996 + b"]\n"
    assert load_refusal(data) == (
        "job.yaml, line 1: more than 100000 values once its YAML aliases are expanded, refused (a Kubernetes object is "
        "far smaller: an alias bomb?)"
    )


def test_a_value_that_contains_itself_is_refused_word_for_word():
    data = b"kind: MPIJob\nspec:\n  mpiReplicaSpecs:\n    Worker:\n      args: &args [--epochs, '90', *args]\n"
    assert load_refusal(data) == (
        "job.yaml, line 5: a YAML alias inside the value it names (a value that contains itself is no Kubernetes "
        "object)"
    )
