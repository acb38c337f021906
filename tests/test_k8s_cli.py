"""`nodeforge k8s job` and `nodeforge k8s convert-mpijob` through the CLI: jobs for the sample inventories' clusters
and the sources' v1alpha2 MPIJobs converted, each output read back and validated by the independent probes of
tests/test_k8s_objects.py (kubernetes-validate's own validate(), jsonschema against the CRD)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from nodeforge.cli import main
from tests.test_k8s_objects import independent_problems

REPO = Path(__file__).resolve().parent.parent
SEED_JOBS = sorted((Path(__file__).resolve().parent / "data" / "seed_mpijobs").glob("*.yaml"))


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def documents(text: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def test_nccl_job_for_the_dgx1_openshift_sample():
    result = run("k8s", "job", "nccl", "-i", str(REPO / "inventories" / "dgx1-openshift"))
    assert result.exit_code == 0, result.output
    [job] = documents(result.stdout)
    assert independent_problems([job]) == []
    assert job["apiVersion"] == "kubeflow.org/v2beta1" and job["kind"] == "MPIJob"
    hosts = yaml.safe_load((REPO / "inventories" / "dgx1-openshift" / "hosts.yml").read_text())
    workers = job["spec"]["mpiReplicaSpecs"]["Worker"]
    assert workers["replicas"] == len(hosts["all"]["children"]["gpu_nodes"]["hosts"])
    assert job["spec"]["slotsPerWorker"] == 8  # DGX-1: 8 V100
    [container] = workers["template"]["spec"]["containers"]
    assert container["resources"]["limits"] == {
        "nvidia.com/gpu": 8,
        **{f"rdma/shared_ib{i}": 1 for i in range(4)},
    }
    assert container["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
    assert workers["template"]["spec"]["serviceAccountName"] == "mpi"


def test_cuda_vector_add_into_a_file_for_a_named_namespace(tmp_path):
    out = tmp_path / "job.yaml"
    result = run(
        "k8s", "job", "cuda-vector-add", "-i", str(REPO / "inventories" / "c4140-k8s"), "-n", "team-a", "-o", str(out)
    )
    assert result.exit_code == 0, result.output
    [pod] = documents(out.read_text())
    assert independent_problems([pod]) == []
    assert pod["metadata"]["namespace"] == "team-a"
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 1}


def test_ib_write_bw_needs_rdma_resources():
    # vSphere T4 guests have a PVRDMA device: the plugin's resource is there; a cluster without HCAs has none.
    result = CliRunner().invoke(
        main,
        [
            "k8s",
            "job",
            "ib-write-bw",
            "-i",
            str(REPO / "inventories" / "c4140-k8s"),
            "-e",
            '{"k8s_rdma_shared_device_plugin_enabled": false}',
        ],
    )
    assert result.exit_code == 1
    assert "rdma" in result.output.lower()


@pytest.mark.parametrize("seed", SEED_JOBS, ids=[p.stem for p in SEED_JOBS])
def test_the_sources_mpijobs_convert_to_v2beta1(seed):
    result = run("k8s", "convert-mpijob", str(seed))
    assert result.exit_code == 0, result.output
    [job] = [d for d in documents(result.stdout) if d.get("kind") == "MPIJob"]
    assert job["apiVersion"] == "kubeflow.org/v2beta1"
    assert independent_problems([job]) == []
    [source] = [d for d in documents(seed.read_text()) if d.get("kind") == "MPIJob"]
    for replica in ("Launcher", "Worker"):
        before = source["spec"]["mpiReplicaSpecs"][replica]["template"]["spec"]["containers"][0]
        after = job["spec"]["mpiReplicaSpecs"][replica]["template"]["spec"]["containers"][0]
        assert (after["image"], after.get("command"), after.get("args")) == (
            before["image"],
            before.get("command"),
            before.get("args"),
        )
    assert "apiVersion: kubeflow.org/v1alpha2 -> kubeflow.org/v2beta1" in result.stderr


def test_what_cannot_be_converted_is_named(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: kubeflow.org/v1alpha2\nkind: MPIJob\nmetadata: {name: x}\nspec: {}\n")
    result = CliRunner().invoke(main, ["k8s", "convert-mpijob", str(bad)])
    assert result.exit_code == 1
    assert f"{bad}, document 1: spec.mpiReplicaSpecs: missing" in result.output
