# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""`nodeforge k8s convert-mpijob` word for word where the other converter tests only match a field's name: each
refusal of a job's top level, metadata, labels, mpiDistribution, mainContainer and unknown spec fields; the notes of
a dropped mainContainer and of a last-applied annotation that was all the annotations; the converted job as a copy
(a v2beta1 job and kept metadata included); and load()'s refusals: the size limit, the line of a character YAML
refuses, the kinds of a file without an MPIJob, and MAX_NODES counted over the whole file, not a document."""

from __future__ import annotations

import copy

import pytest

from nodeforge import collection  # noqa: F401  (sets up the collection loader)
from tests.test_mpijob_convert_replicas import (
    CLEAN_V1ALPHA2,
    KEPT_4,
    LAUNCHER_RESTART_V1ALPHA2,
    OPENMPI_V1ALPHA2,
    SSH,
    WORKER_RESTART_V1ALPHA2,
    converted,
    launcher_container,
    load_refusal,
    mpijob,
    refused,
    worker_container,
)

from ansible_collections.nodeforge.gpu.plugins.module_utils import mpijob_convert  # isort: skip

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
NO_NAME = "metadata.name: missing (the MPIJob's name)"


# ---- refusals, word for word -----------------------------------------------------------------------------------------
def set_top(**fields):
    def change(job: dict) -> None:
        job.update(fields)

    return change


def drop_top(field: str):
    def change(job: dict) -> None:
        del job[field]

    return change


def set_metadata(**fields):
    def change(job: dict) -> None:
        job["metadata"].update(fields)

    return change


def drop_name(job: dict) -> None:
    del job["metadata"]["name"]


def set_spec(**fields):
    def change(job: dict) -> None:
        job["spec"].update(fields)

    return change


@pytest.mark.parametrize(
    ("break_it", "message"),
    [
        pytest.param(set_top(kind="TFJob"), "kind: 'TFJob' is not an MPIJob", id="kind-tfjob"),
        pytest.param(
            set_top(apiVersion="kubeflow.org/v2"),
            "apiVersion: 'kubeflow.org/v2' is not an MPIJob version this converts (kubeflow.org/v1alpha1, "
            "kubeflow.org/v1alpha2, kubeflow.org/v1)",
            id="api-version-unknown",
        ),
        pytest.param(
            set_top(slotsPerWorker=4, sshAuthMountPath="/home/mpiuser/.ssh"),
            "unknown top-level field(s) of an MPIJob: slotsPerWorker, sshAuthMountPath",
            id="spec-fields-at-the-top",
        ),
        pytest.param(drop_top("spec"), "spec: missing (an MPIJob needs spec.mpiReplicaSpecs)", id="no-spec"),
        pytest.param(drop_top("metadata"), NO_NAME, id="no-metadata"),
        pytest.param(set_top(metadata=["resnet50-horovod"]), NO_NAME, id="metadata-a-list"),
        pytest.param(drop_name, NO_NAME, id="no-name"),
        pytest.param(set_metadata(name=""), NO_NAME, id="name-empty"),
        pytest.param(set_metadata(name=20240601), NO_NAME, id="name-a-number"),
        pytest.param(
            set_metadata(labels=["team=ml", "queue=gpu"]),
            "metadata.labels: a list, not a mapping of strings to strings",
            id="labels-a-list",
        ),
        pytest.param(
            set_metadata(annotations={2024: "q2"}),
            "metadata.annotations: the key 2024 is not a string",
            id="annotation-key-a-number",
        ),
        pytest.param(
            set_spec(mpiDistribution="mvapich"),
            "spec.mpiDistribution: 'mvapich' is not one of open_mpi, OpenMPI, intel_mpi, IntelMPI, mpich, MPICH",
            id="mpi-distribution-unknown",
        ),
        pytest.param(
            set_spec(mainContainer="launcher"),
            "spec.mainContainer: 'launcher', but v2beta1 runs MPI in the first container of each replica and the "
            "Worker's first is 'worker': put 'launcher' first",
            id="main-container-not-the-workers-first",
        ),
        pytest.param(
            set_spec(sshAuthMountPath="/home/mpiuser/.ssh", launcherCreationPolicy="WaitForWorkersReady"),
            "spec: unknown field(s) of a v1alpha2 MPIJob: launcherCreationPolicy, sshAuthMountPath",
            id="v2beta1-fields-in-a-v1alpha2-job",
        ),
    ],
)
def test_a_job_the_converter_cannot_take_is_refused_word_for_word(break_it, message):
    old = mpijob()
    break_it(old)
    assert refused(old) == message


@pytest.mark.parametrize(("doc", "type_name"), [(["kind: MPIJob"], "list"), ("kind: MPIJob", "str")])
def test_a_document_that_is_no_mapping_is_refused_naming_its_type(doc, type_name):
    with pytest.raises(ValueError) as refusal:
        mpijob_convert.convert(doc)  # type: ignore[arg-type]
    assert str(refusal.value) == f"an MPIJob is a mapping, not {type_name}"


# ---- what is dropped, with its note ----------------------------------------------------------------------------------
def test_a_main_container_first_in_both_replicas_is_dropped_with_a_note_naming_it():
    old = mpijob(
        launcher=launcher_container(name="horovod"), worker=worker_container(name="horovod"), mainContainer="horovod"
    )
    new, notes = converted(old)
    assert new == {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": "resnet50-horovod", "namespace": "ml-team"},
        "spec": {
            "slotsPerWorker": 4,
            "runPolicy": {"cleanPodPolicy": "None"},
            "mpiImplementation": "OpenMPI",
            "mpiReplicaSpecs": {
                "Launcher": {
                    "replicas": 1,
                    "restartPolicy": "OnFailure",
                    "template": {"spec": {"containers": [launcher_container(name="horovod")]}},
                },
                "Worker": {
                    "replicas": 4,
                    "restartPolicy": "OnFailure",
                    "template": {"spec": {"containers": [worker_container(name="horovod")]}},
                },
            },
        },
    }
    assert notes == [
        "apiVersion: kubeflow.org/v1alpha2 -> kubeflow.org/v2beta1",
        "spec.slotsPerWorker: kept (4)",
        CLEAN_V1ALPHA2,
        OPENMPI_V1ALPHA2,
        LAUNCHER_RESTART_V1ALPHA2,
        WORKER_RESTART_V1ALPHA2,
        KEPT_4,
        "spec.mainContainer: dropped (v2beta1 has none: MPI runs in the first container, 'horovod')",
        SSH.replace("'worker'", "'horovod'"),
    ]


def test_a_last_applied_annotation_that_was_all_the_annotations_leaves_none():
    """A `kubectl get -o yaml` copy: server metadata and the last-applied configuration go, and with it the
    annotations, which held nothing else."""
    old = mpijob()
    old["metadata"].update(
        uid="6f1c7a7e-2b1d-4c0e-9d0a-3c6f0e2b9a11",
        resourceVersion="48213",
        annotations={LAST_APPLIED: '{"apiVersion":"kubeflow.org/v1alpha2","kind":"MPIJob"}\n'},
    )
    new, notes = converted(old)
    assert new["metadata"] == {"name": "resnet50-horovod", "namespace": "ml-team"}
    assert new["spec"] == converted(mpijob())[0]["spec"]
    assert notes == [
        "apiVersion: kubeflow.org/v1alpha2 -> kubeflow.org/v2beta1",
        "metadata.uid: dropped (the API server sets it)",
        "metadata.resourceVersion: dropped (the API server sets it)",
        f"metadata.annotations.{LAST_APPLIED}: dropped (it holds the old version's object)",
        "spec.slotsPerWorker: kept (4)",
        CLEAN_V1ALPHA2,
        OPENMPI_V1ALPHA2,
        LAUNCHER_RESTART_V1ALPHA2,
        WORKER_RESTART_V1ALPHA2,
        KEPT_4,
        SSH,
    ]


# ---- the converted job is a copy -------------------------------------------------------------------------------------
def v2beta1_job() -> dict:
    new, _ = converted(mpijob())
    return new


def test_a_v2beta1_job_comes_back_as_a_copy_the_caller_can_edit():
    old = v2beta1_job()
    before = copy.deepcopy(old)
    new, notes = mpijob_convert.convert(old)
    assert (new, notes) == (before, ["apiVersion: already kubeflow.org/v2beta1, nothing to convert"])
    new["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 8
    new["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["image"] = "registry.lab/ml/x:2"
    assert old == before


def test_metadata_kept_as_given_is_copied_not_shared():
    """A namespace the converter does not check (a Namespace's metadata pasted in place of its name) is still a
    copy: editing the converted job leaves the job given as it was."""
    old = mpijob()
    old["metadata"]["namespace"] = {"name": "ml-team", "labels": {"team": "ml"}}
    before = copy.deepcopy(old)
    new, _ = mpijob_convert.convert(old)
    assert new["metadata"] == {"name": "resnet50-horovod", "namespace": {"name": "ml-team", "labels": {"team": "ml"}}}
    new["metadata"]["namespace"]["labels"]["team"] = "infra"
    assert old == before


# ---- load(): the file's refusals, word for word ----------------------------------------------------------------------
def test_a_file_over_3_mib_is_refused_before_it_is_read():
    assert load_refusal(b"\n" * (mpijob_convert.MAX_BYTES + 1)) == (
        "job.yaml: larger than 3 MiB, refused (the API server takes no larger object; an MPIJob is a few KiB)"
    )


def test_a_character_yaml_refuses_is_named_at_its_line_counted_from_the_files_start():
    """The file starts with a blank line, and more lines follow the bad one: the line is counted from the start."""
    data = (
        b"\n# job.yaml\napiVersion: kubeflow.org/v1alpha2\nkind: MPIJob\x01\nmetadata:\n  name: job\n"
        b"spec:\n  slotsPerWorker: 1\n  cleanPodPolicy: Running\n"
    )
    assert load_refusal(data) == "job.yaml, line 4: character U+0001 is not allowed in YAML: a binary file?"


def test_a_file_without_an_mpijob_names_the_kinds_and_types_of_its_documents():
    data = (
        b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: hosts}\n---\n"
        b"apiVersion: v1\nkind: Service\nmetadata: {name: launcher}\n---\n"
        b"- mpirun\n- -np\n- '16'\n---\n"
        b"MPIJob\n---\n"
        b"apiVersion: v1\nmetadata: {name: no-kind}\n"
    )
    assert load_refusal(data) == (
        "no MPIJob found in job.yaml: its 5 document(s) hold 'ConfigMap', 'Service', 'list', 'str', None"
    )


def document(number: int) -> bytes:
    """An MPIJob whose spec expands to 200 x 200 values through an alias: 40,005 values in all."""
    return (
        f"--- # document {number}\nkind: MPIJob\nspec: [&row [{', '.join(['0'] * 199)}], {', '.join(['*row'] * 199)}]\n"
    ).encode()


def test_max_nodes_counts_the_values_of_the_whole_file_not_of_each_document():
    """Two such documents (80,010 values) are read; a third passes 100,000, and is refused at its spec's line."""
    assert [(number, line) for number, line, _ in mpijob_convert.load(document(1) + document(2), "job.yaml")] == [
        (1, 2),
        (2, 5),
    ]
    assert load_refusal(document(1) + document(2) + document(3)) == (
        "job.yaml, line 9: more than 100000 values once its YAML aliases are expanded, refused (a Kubernetes object "
        "is far smaller: an alias bomb?)"
    )
