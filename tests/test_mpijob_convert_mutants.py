# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""`nodeforge k8s convert-mpijob` pinned down where test_k8s_jobs.py only looks at parts: a v1alpha1 MPIJob's whole
v2beta1 job and every note, the exact refusal of each field it cannot convert, and the file's YAML errors word for
word (what an operator reads), with both YAML loaders."""

from __future__ import annotations

import copy

import pytest
import yaml

from nodeforge import collection  # noqa: F401  (sets up the collection loader)

from ansible_collections.nodeforge.gpu.plugins.module_utils import mpijob_convert  # isort: skip

SSH_NOTE = (
    "spec.mpiReplicaSpecs.Worker: v2beta1 reaches the workers over SSH, not kubectl exec: the operator starts "
    "/usr/sbin/sshd -De in container 'bench', so its image (reg/bench:1) needs an SSH server, and the Launcher's image "
    "an SSH client"
)
TEMPLATE_NOTES = [
    "spec.template -> spec.mpiReplicaSpecs.Launcher and .Worker (v2beta1 has a template per role)",
    "spec.mpiReplicaSpecs: restartPolicy OnFailure for both (v1alpha1 ran the launcher Job so and restarted the "
    "workers, a StatefulSet)",
    "spec.mpiImplementation: set to OpenMPI (v1alpha1 ran Open MPI's mpirun; v2beta1 asks which)",
]
MPIRUN = ["mpirun", "python", "bench.py"]
CLEAN_NOTE = "spec.runPolicy.cleanPodPolicy: set to None (v1alpha1 deleted no pod when the job ended)"
SLEEP = "(v1alpha1 replaced it with `sleep`; v2beta1 starts /usr/sbin/sshd -De in a worker with no command)"


def container(**fields) -> dict:
    return {"name": "bench", "image": "reg/bench:1", **fields}


def v1alpha1(first: dict | None = None, **spec) -> dict:
    """A v1alpha1 MPIJob: one pod template for the launcher and the workers."""
    first = container(command=MPIRUN) if first is None else first
    return {
        "apiVersion": "kubeflow.org/v1alpha1",
        "kind": "MPIJob",
        "metadata": {"name": "bench"},
        "spec": {"template": {"spec": {"containers": [first]}}, **spec},
    }


def v2beta1(launcher: dict, worker: dict, workers: int, slots: int, **run_policy) -> dict:
    """The v2beta1 MPIJob the converter writes for v1alpha1()'s job."""
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": "bench"},
        "spec": {
            "slotsPerWorker": slots,
            "runPolicy": {"cleanPodPolicy": "None", **run_policy},
            "mpiImplementation": "OpenMPI",
            "mpiReplicaSpecs": {
                "Launcher": {
                    "replicas": 1,
                    "restartPolicy": "OnFailure",
                    "template": {"spec": {"containers": [launcher]}},
                },
                "Worker": {
                    "replicas": workers,
                    "restartPolicy": "OnFailure",
                    "template": {"spec": {"containers": [worker]}},
                },
            },
        },
    }


def converted(old: dict) -> tuple[dict, list[str]]:
    before = copy.deepcopy(old)
    new, notes = mpijob_convert.convert(old)
    assert old == before  # the operator's job is read, never changed
    return new, notes


# ---- v1alpha1: the whole job and every note --------------------------------------------------------------------------
def test_v1alpha1_gpus_split_by_gpus_per_node_keep_the_templates_other_resources():
    """The launcher loses the whole resources block; the workers keep it (memory, requests) with their GPU share,
    and lose command and args (v1alpha1 ran `sleep` there)."""
    resources = {"limits": {"nvidia.com/gpu": 8, "memory": "64Gi"}, "requests": {"cpu": "4"}}
    old = v1alpha1(
        container(command=["mpirun", "python", "bench.py"], args=["--steps", "10"], resources=resources),
        gpus=16,
        gpusPerNode=8,
        backoffLimit=3,
        activeDeadlineSeconds=0,
        launcherOnMaster=True,
    )
    new, notes = converted(old)
    assert new == v2beta1(
        container(command=["mpirun", "python", "bench.py"], args=["--steps", "10"]),
        container(resources=resources),
        workers=2,
        slots=8,
        backoffLimit=3,
        activeDeadlineSeconds=0,
    )
    assert notes == [
        "apiVersion: kubeflow.org/v1alpha1 -> kubeflow.org/v2beta1",
        "spec.gpus (16) and 8 per node -> spec.mpiReplicaSpecs.Worker.replicas (2) with nvidia.com/gpu: 8 each",
        "spec.slotsPerWorker: set to 8 (v1alpha1's default: the processing units a worker has)",
        CLEAN_NOTE,
        "spec.backoffLimit -> spec.runPolicy.backoffLimit (3)",
        "spec.activeDeadlineSeconds -> spec.runPolicy.activeDeadlineSeconds (0)",
        "spec.launcherOnMaster: dropped (v2beta1 has none; to run the launcher on a control-plane node, give the "
        "Launcher's template a nodeSelector and a toleration for its taint)",
        "spec.mpiReplicaSpecs.Launcher: the template's first container without its resources (the v1alpha1 launcher "
        "asked for none, and no nvidia.com/gpu)",
        f"spec.mpiReplicaSpecs.Worker: the first container's command dropped {SLEEP}",
        f"spec.mpiReplicaSpecs.Worker: the first container's args dropped {SLEEP}",
        *TEMPLATE_NOTES,
        SSH_NOTE,
    ]


def test_v1alpha1_gpus_per_node_from_the_templates_limit():
    """Without gpusPerNode, the template's limit (a quantity written as a string too) is a worker's share."""
    old = v1alpha1(container(resources={"limits": {"nvidia.com/gpu": "4"}}), gpus=8, launcherOnMaster=False)
    new, notes = converted(old)
    assert new == v2beta1(container(), container(resources={"limits": {"nvidia.com/gpu": 4}}), workers=2, slots=4)
    assert notes == [
        "apiVersion: kubeflow.org/v1alpha1 -> kubeflow.org/v2beta1",
        "spec.gpus (8) and 4 per node -> spec.mpiReplicaSpecs.Worker.replicas (2) with nvidia.com/gpu: 4 each",
        "spec.slotsPerWorker: set to 4 (v1alpha1's default: the processing units a worker has)",
        CLEAN_NOTE,
        "spec.mpiReplicaSpecs.Launcher: the template's first container without its resources (the v1alpha1 launcher "
        "asked for none, and no nvidia.com/gpu)",
        *TEMPLATE_NOTES,
        SSH_NOTE,
    ]


@pytest.mark.parametrize(
    ("gpus", "gpus_per_node", "workers", "share"),
    [(1, 1, 1, 1), (2, 8, 1, 2), (8, 8, 1, 8), (24, 8, 3, 8)],
    ids=["one-gpu", "fewer-than-a-node", "one-node", "three-nodes"],
)
def test_v1alpha1_workers_and_their_share_as_the_v1alpha1_operator_split_them(gpus, gpus_per_node, workers, share):
    new, notes = converted(v1alpha1(gpus=gpus, gpusPerNode=gpus_per_node))
    assert new == v2beta1(
        container(command=MPIRUN),
        container(resources={"limits": {"nvidia.com/gpu": share}}),
        workers=workers,
        slots=share,
    )
    assert notes[1] == (
        f"spec.gpus ({gpus}) and {gpus_per_node} per node -> spec.mpiReplicaSpecs.Worker.replicas ({workers}) "
        f"with nvidia.com/gpu: {share} each"
    )
    assert notes[-5] == f"spec.mpiReplicaSpecs.Worker: the first container's command dropped {SLEEP}"


def test_v1alpha1_processing_units_of_another_resource():
    old = v1alpha1(
        processingUnits=8,
        processingUnitsPerNode=4,
        processingResourceType="example.com/fpga",
        slotsPerWorker=1,
    )
    new, notes = converted(old)
    assert new == v2beta1(
        container(command=MPIRUN), container(resources={"limits": {"example.com/fpga": 4}}), workers=2, slots=1
    )
    assert notes == [
        "apiVersion: kubeflow.org/v1alpha1 -> kubeflow.org/v2beta1",
        "spec.processingUnits (8) and 4 per node -> spec.mpiReplicaSpecs.Worker.replicas (2) with example.com/fpga: "
        "4 each",
        "spec.slotsPerWorker: kept (1)",
        CLEAN_NOTE,
        "spec.processingResourceType: dropped (v2beta1 has none; the workers ask for example.com/fpga)",
        f"spec.mpiReplicaSpecs.Worker: the first container's command dropped {SLEEP}",
        *TEMPLATE_NOTES,
        SSH_NOTE,
    ]


def test_v1alpha1_processing_units_per_node_from_the_templates_limit_of_that_resource():
    first = container(resources={"limits": {"example.com/fpga": 2, "nvidia.com/gpu": 1}})
    new, notes = converted(v1alpha1(first, processingUnits=4, processingResourceType="example.com/fpga"))
    assert new == v2beta1(container(), first, workers=2, slots=2)
    assert notes[1] == (
        "spec.processingUnits (4) and 2 per node -> spec.mpiReplicaSpecs.Worker.replicas (2) with example.com/fpga: "
        "2 each"
    )


def test_v1alpha1_replicas_take_their_share_from_the_template():
    first = container(command=["mpirun", "bench"], resources={"limits": {"nvidia.com/gpu": 2}})
    new, notes = converted(v1alpha1(first, replicas=3))
    assert new == v2beta1(
        container(command=["mpirun", "bench"]), container(resources={"limits": {"nvidia.com/gpu": 2}}), 3, 2
    )
    assert notes[1:3] == [
        "spec.replicas -> spec.mpiReplicaSpecs.Worker.replicas (3)",
        "spec.slotsPerWorker: set to 2 (v1alpha1's default: the processing units a worker has)",
    ]


def test_v1alpha1_replicas_without_a_processing_resource_have_a_slot_each():
    new, notes = converted(v1alpha1(container(args=["bench"]), replicas=1, slotsPerWorker=None))
    assert new == v2beta1(container(args=["bench"]), container(), workers=1, slots=1)
    assert notes == [
        "apiVersion: kubeflow.org/v1alpha1 -> kubeflow.org/v2beta1",
        "spec.replicas -> spec.mpiReplicaSpecs.Worker.replicas (1)",
        "spec.slotsPerWorker: set to 1 (v1alpha1's default: the processing units a worker has)",
        CLEAN_NOTE,
        f"spec.mpiReplicaSpecs.Worker: the first container's args dropped {SLEEP}",
        *TEMPLATE_NOTES,
        SSH_NOTE,
    ]


def test_v1alpha1_slots_per_worker_given_are_kept():
    new, notes = converted(v1alpha1(gpus=16, gpusPerNode=8, slotsPerWorker=2))
    assert new["spec"]["slotsPerWorker"] == 2
    assert notes[2] == "spec.slotsPerWorker: kept (2)"


# ---- v1alpha1: each refusal, word for word ---------------------------------------------------------------------------
NOT_A_TEMPLATE = "spec.template.spec.containers: missing (v1alpha1's pod template)"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        pytest.param(
            {"replicas": 1, "mainContainer": "bench", "cleanPodPolicy": "All"},
            "spec: unknown field(s) of a v1alpha1 MPIJob: cleanPodPolicy, mainContainer",
            id="unknown-fields",
        ),
        pytest.param({"replicas": 1, "template": None}, NOT_A_TEMPLATE, id="no-template"),
        pytest.param({"replicas": 1, "template": ["bench"]}, NOT_A_TEMPLATE, id="template-a-list"),
        pytest.param({"replicas": 1, "template": {"spec": None}}, NOT_A_TEMPLATE, id="no-pod-spec"),
        pytest.param({"replicas": 1, "template": {"spec": {"containers": []}}}, NOT_A_TEMPLATE, id="no-container"),
        pytest.param(
            {"replicas": 1, "template": {"spec": {"containers": {"name": "bench"}}}},
            NOT_A_TEMPLATE,
            id="containers-a-mapping",
        ),
        pytest.param(
            {"replicas": 1, "template": {"spec": {"containers": ["bench"]}}}, NOT_A_TEMPLATE, id="container-a-string"
        ),
        pytest.param(
            {"gpus": 8, "processingUnits": 8},
            "spec.gpus and spec.processingUnits: both given (v1alpha1 refused that too): keep one",
            id="gpus-and-processing-units",
        ),
        pytest.param(
            {"replicas": 1, "processingResourceType": 5},
            "spec.processingResourceType: 5 is not a resource name",
            id="resource-not-a-string",
        ),
        pytest.param(
            {"gpus": 8, "gpusPerNode": 8, "processingResourceType": "example.com/fpga"},
            "spec.processingResourceType: 'example.com/fpga' with spec.gpus (GPUs are nvidia.com/gpu)",
            id="gpus-of-another-resource",
        ),
        pytest.param(
            {"processingUnits": 8, "replicas": 2},
            "spec.replicas and spec.processingUnits: both given (v1alpha1: mutually exclusive): keep one",
            id="replicas-and-processing-units",
        ),
        pytest.param({"gpus": 0, "gpusPerNode": 8}, "spec.gpus: 0 is not an integer of at least 1", id="no-gpus"),
        pytest.param(
            {"processingUnits": "8", "processingUnitsPerNode": 8},
            "spec.processingUnits: '8' is not an integer of at least 1",
            id="processing-units-a-string",
        ),
        pytest.param(
            {"gpus": 8, "gpusPerNode": 0}, "spec.gpusPerNode: 0 is not an integer of at least 1", id="no-gpus-per-node"
        ),
        pytest.param(
            {"processingUnits": 8, "processingUnitsPerNode": True},
            "spec.processingUnitsPerNode: True is not an integer of at least 1",
            id="processing-units-per-node-a-bool",
        ),
        pytest.param(
            {"gpus": 16},
            "spec.gpusPerNode: missing, and the template asks for no nvidia.com/gpu: the v1alpha1 operator split "
            "spec.gpus=16 into workers by its --gpus-per-node flag, unknown here: give it",
            id="no-gpus-per-node-anywhere",
        ),
        pytest.param(
            {"processingUnits": 6, "processingResourceType": "example.com/fpga"},
            "spec.processingUnitsPerNode: missing, and the template asks for no example.com/fpga: the v1alpha1 "
            "operator split spec.processingUnits=6 into workers by its --gpus-per-node flag, unknown here: give it",
            id="no-processing-units-per-node-anywhere",
        ),
        pytest.param(
            {"processingUnits": 12, "processingUnitsPerNode": 8},
            "spec.processingUnits: 12 is not a multiple of 8 per node",
            id="not-a-multiple",
        ),
        pytest.param({"replicas": 0}, "spec.replicas: 0 is not an integer of at least 1", id="no-replicas"),
        pytest.param(
            {},
            "spec.replicas (or spec.gpus / spec.processingUnits): missing, so the workers are unknown",
            id="no-workers",
        ),
        pytest.param(
            {"replicas": 2, "slotsPerWorker": 0},
            "spec.slotsPerWorker: 0 is not an integer of at least 1",
            id="no-slots",
        ),
        pytest.param(
            {"replicas": 2, "backoffLimit": -1},
            "spec.backoffLimit: -1 is not an integer of at least 0",
            id="negative-backoff-limit",
        ),
        pytest.param(
            {"replicas": 2, "activeDeadlineSeconds": "1h"},
            "spec.activeDeadlineSeconds: '1h' is not an integer of at least 0",
            id="deadline-a-string",
        ),
    ],
)
def test_v1alpha1_refusals_name_the_field(spec, message):
    old = v1alpha1()
    old["spec"].update(spec)
    with pytest.raises(ValueError) as refused:
        mpijob_convert.convert(old)
    assert str(refused.value) == message


@pytest.mark.parametrize(
    ("limit", "shown"),
    [(0, "0"), ("4Gi", "'4Gi'"), (1.5, "1.5")],
    ids=["zero", "not-a-count", "a-fraction"],
)
def test_v1alpha1_templates_limit_that_is_no_count_is_refused(limit, shown):
    old = v1alpha1(container(resources={"limits": {"nvidia.com/gpu": limit}}), replicas=2)
    with pytest.raises(ValueError) as refused:
        mpijob_convert.convert(old)
    assert str(refused.value) == (
        f"spec.template.spec.containers[0].resources.limits[nvidia.com/gpu]: {shown} is not an integer of at least 1"
    )


def test_v1alpha1_templates_limit_of_one_is_a_count():
    new, _ = converted(v1alpha1(container(resources={"limits": {"nvidia.com/gpu": 1}}), replicas=2))
    assert new == v2beta1(container(), container(resources={"limits": {"nvidia.com/gpu": 1}}), workers=2, slots=1)


# ---- the file's YAML errors, word for word ---------------------------------------------------------------------------
def refusal(data: bytes) -> str:
    with pytest.raises(ValueError) as refused:
        mpijob_convert.load(data, "job.yaml")
    return str(refused.value)


LIBYAML_ERRORS = [
    (
        b"kind: MPIJob\nspec: [a\nb: c\n",
        "job.yaml, line 3, column 2: not YAML: did not find expected ',' or ']' "
        "(while parsing a flow sequence, line 2)",
    ),
    (
        b"kind: MPIJob\nspec: a: b\n",
        "job.yaml, line 2, column 8: not YAML: mapping values are not allowed in this context",
    ),
    (b"kind: MPIJob\nspec: *x\n", "job.yaml, line 2, column 7: not YAML: found undefined alias"),
    (
        b"kind: &x MPIJob\nspec: &x {}\n",
        "job.yaml, line 2, column 7: not YAML: second occurrence (found duplicate anchor; first occurrence, line 1)",
    ),
]
PURE_PYTHON_ERRORS = [
    (
        b"kind: MPIJob\nspec: [a\nb: c\n",
        "job.yaml, line 3, column 2: not YAML: expected ',' or ']', but got ':' "
        "(while parsing a flow sequence, line 2)",
    ),
    (b"kind: MPIJob\nspec: a: b\n", "job.yaml, line 2, column 8: not YAML: mapping values are not allowed here"),
    # a context without a line: PyYAML's scanner gives none for this one
    (
        b"kind: MPIJob\nspec: @x\n",
        "job.yaml, line 2, column 7: not YAML: found character '@' that cannot start any token",
    ),
]


@pytest.mark.skipif(not hasattr(yaml, "CSafeLoader"), reason="PyYAML without libyaml")
@pytest.mark.parametrize(("data", "message"), LIBYAML_ERRORS)
def test_not_yaml_is_refused_with_the_parsers_problem_and_its_context(data, message):
    assert refusal(data) == message


@pytest.mark.parametrize(("data", "message"), PURE_PYTHON_ERRORS)
def test_not_yaml_is_refused_with_the_parsers_problem_and_its_context_without_libyaml(monkeypatch, data, message):
    monkeypatch.delattr(yaml, "CSafeLoader", raising=False)
    assert refusal(data) == message


BUILD_ERROR = "job.yaml, document 1 (line 1): a value YAML cannot build: "
FLOAT_ERROR = "could not convert string to float: '"  # then the value and a quote: 37 characters besides the value


@pytest.mark.parametrize(("length", "clipped"), [(4, False), (163, False), (164, True), (263, True)])
def test_a_value_yaml_cannot_build_is_quoted_up_to_200_characters(length, clipped):
    """The error of a tag's value quotes the value: up to 2 x SHOWN characters, then its first 197 and '...'."""
    value = "x" * length
    said = f"{FLOAT_ERROR}{value}'"
    assert len(said) == 37 + length
    expected = said[:197] + "..." if clipped else said
    assert refusal(f"kind: MPIJob\nspec: !!float {value}\n".encode()) == BUILD_ERROR + expected


# ---- mpirun -np in the launcher's command line: the shells' options, the script's words ------------------------------
def v1alpha2(**launcher) -> dict:
    """A v1alpha2 MPIJob of 2 workers with a slot each: -np 16 is more ranks than its hostfile has."""
    first = {"name": "main", "image": "reg/train:1", **launcher}
    worker = {"name": "main", "image": "reg/train:1"}
    return {
        "apiVersion": "kubeflow.org/v1alpha2",
        "kind": "MPIJob",
        "metadata": {"name": "job"},
        "spec": {
            "slotsPerWorker": 1,
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": {"spec": {"containers": [first]}}},
                "Worker": {"replicas": 2, "template": {"spec": {"containers": [worker]}}},
            },
        },
    }


NP_NOTE = (
    "spec.mpiReplicaSpecs.Launcher: mpirun -np 16 but the hostfile has 2 slots (2 workers x slotsPerWorker 1): "
    "mpirun will refuse to start"
)


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(["mpirun", "-np", "16", "bash", "train.sh"], id="mpirun-runs-a-shell-script"),
        pytest.param(["mpirun", "-np", "16", "bash", "--norc", "train.sh"], id="mpirun-runs-bash-norc"),
        pytest.param(["bash", "--login", "-c", "mpirun -np 16 a.out"], id="bash-login-c"),
        pytest.param(["bash", "--", "-c", "mpirun -np 16 a.out"], id="bash-double-dash"),
        pytest.param(["bash", "-o", "pipefail", "-c", "mpirun -np 16 a.out | tee log"], id="bash-o-option"),
        pytest.param(["bash", "+o", "history", "-c", "mpirun -np 16 a.out"], id="bash-plus-o-option"),
        pytest.param(["bash", "-O", "extglob", "-c", "mpirun -np 16 a.out"], id="bash-shopt-option"),
        pytest.param(["bash", "+O", "extglob", "-c", "mpirun -np 16 a.out"], id="bash-plus-shopt-option"),
        pytest.param(["sh", "-c", 'mpirun -np "16" a.out'], id="quoted-count"),
        pytest.param(["sh", "-c", "cd /work&&mpirun -np 16 a.out"], id="and-without-spaces"),
    ],
)
def test_np_beyond_the_slots_is_noted_through_the_shells_options(command):
    _, notes = converted(v1alpha2(command=command))
    assert [n for n in notes if "mpirun -np" in n] == [NP_NOTE]


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(["bash", "-o"], id="bash-o-without-its-argument"),
        pytest.param(["bash", "-o", "-c", "mpirun -np 16 a.out"], id="c-as-the-argument-of-o"),
        pytest.param(["bash", "/opt/run.sh", "-c", "mpirun -np 16 a.out"], id="script-before-c"),
    ],
)
def test_np_of_no_script_of_the_shell_is_not_noted(command):
    _, notes = converted(v1alpha2(command=command))
    assert [n for n in notes if "mpirun -np" in n] == []


def test_the_job_given_is_left_as_it_was():
    """The converted job is a new object: the worker's command is dropped from its own copy of the template, never
    from the job the caller still holds (the CLI writes notes from it; AWX may convert it again)."""
    job = v1alpha1(container(command=MPIRUN, args=["--steps", "10"], resources={"limits": {"nvidia.com/gpu": 8}}))
    job["spec"]["gpus"] = 16
    before = copy.deepcopy(job)
    converted, _ = mpijob_convert.convert(job)
    assert job == before
    assert "command" not in converted["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]


def test_a_yaml_error_without_a_position_names_the_file_and_says_unreadable():
    """PyYAML's errors carry a problem and a mark; one without either still names the file, never a traceback."""
    assert mpijob_convert._yaml_problem("job.yaml", yaml.MarkedYAMLError()) == "job.yaml: not YAML: unreadable"
    context = yaml.MarkedYAMLError(context="while parsing a block mapping", problem="found a tab")
    assert mpijob_convert._yaml_problem("job.yaml", context) == "job.yaml: not YAML: found a tab"


def test_a_launcher_script_is_split_into_the_shell_s_words():
    """Words as the shell splits them: at blanks and at its operators, never inside a host list or a path."""
    assert mpijob_convert._split(
        "mpirun -np 8 -H node-a:4,node-b:4 -x NCCL_IB_HCA=mlx5_0:1 ./all_reduce_perf && exit"
    ) == [
        "mpirun",
        "-np",
        "8",
        "-H",
        "node-a:4,node-b:4",
        "-x",
        "NCCL_IB_HCA=mlx5_0:1",
        "./all_reduce_perf",
        "&&",
        "exit",
    ]
