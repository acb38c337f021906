"""`nodeforge k8s job` and `nodeforge k8s convert-mpijob` through the CLI: jobs for the sample inventories' clusters
and the sources' v1alpha2 MPIJobs converted, each output read back and validated by the independent probes of
tests/test_k8s_objects.py (kubernetes-validate's own validate(), jsonschema against the CRD)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from nodeforge import cli
from nodeforge.cli import main
from nodeforge.collection import k8s_validate
from tests.test_k8s_jobs import NP_FORMS, alias_bomb, line_of, minimal, with_launcher
from tests.test_k8s_objects import independent_problems

from ansible_collections.nodeforge.gpu.plugins.module_utils import k8s_images, k8s_jobs  # isort: skip

REPO = Path(__file__).resolve().parent.parent
SEED_JOBS = sorted((Path(__file__).resolve().parent / "data" / "seed_mpijobs").glob("*.yaml"))


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def documents(text: str) -> list[dict]:
    return k8s_validate.load_documents(text)


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


def test_a_job_takes_its_images_from_the_site_registry_the_inventory_names(tmp_path):
    """k8s_cluster_image_mirror, as render's objects and verify's jobs: every image by the site's digest; one the map
    lacks refused naming the object and the image, nothing written."""
    inventory = str(REPO / "inventories" / "c4140-k8s")
    nccl_tests = k8s_images.normalize(k8s_jobs.DEFAULT_IMAGES["nccl_tests"])
    mirror = {nccl_tests: "registry.site.example/mpioperator/nccl-tests@sha256:" + "c" * 64}
    result = run("k8s", "job", "nccl", "-i", inventory, "-e", json.dumps({"k8s_cluster_image_mirror": mirror}))
    assert result.exit_code == 0, result.output
    [job] = documents(result.stdout)
    assert independent_problems([job]) == []
    for replica in job["spec"]["mpiReplicaSpecs"].values():
        assert [c["image"] for c in replica["template"]["spec"]["containers"]] == [mirror[nccl_tests]]
    out = tmp_path / "pod.yaml"
    argv = ["k8s", "job", "cuda-vector-add", "-i", inventory, "-o", str(out)]
    refused = run(*argv, "-e", json.dumps({"k8s_cluster_image_mirror": mirror}))
    assert refused.exit_code == 1
    vector_add = k8s_images.normalize(k8s_jobs.DEFAULT_IMAGES["cuda_vector_add"])
    assert (
        f"k8s job cuda-vector-add: Pod ml-team/cuda-vector-add names the image {vector_add}, which "
        "k8s_cluster_image_mirror does not map" in " ".join(refused.output.split())
    )
    assert not out.exists()


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
    assert f"{bad}, line 1 (document 1): spec.mpiReplicaSpecs: missing" in result.output


# ---- convert-mpijob: bad files end in one line naming the file (and the line), exit 1, nothing written ---------------
def refused(tmp_path: Path, data: bytes):
    """convert-mpijob on a file holding data, -o into tmp_path: the result, the source, and the output not written."""
    source = tmp_path / "job.yaml"
    source.write_bytes(data)
    out = tmp_path / "out.yaml"
    result = CliRunner().invoke(main, ["k8s", "convert-mpijob", str(source), "-o", str(out)])
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit) and "Traceback" not in result.output  # a ClickException's exit
    assert not out.exists()
    return result, source


SEED_002 = SEED_JOBS[0].read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        # bytes 0-255: the tenth is a newline, the 129th (0x80) no UTF-8 start
        pytest.param(bytes(range(256)) * 4, "line 2: not UTF-8 text (byte 0x80 at offset 128)", id="binary"),
        pytest.param(b"kind: MPIJob\n\n\x89PNG\r\n", "line 3: not UTF-8 text (byte 0x89 at offset 14)", id="png"),
        pytest.param(b"kind: MPIJob\nname: \x00\x01\n", "line 2: character U+0000 is not allowed in YAML", id="nul"),
    ],
)
def test_a_binary_file_is_refused_naming_the_line(tmp_path, data, message):
    result, source = refused(tmp_path, data)
    assert result.output == f"Error: {source}, {message}: a binary file?" + (
        " A manifest is UTF-8 YAML\n" if "UTF-8" in message else "\n"
    )


@pytest.mark.parametrize(
    ("data", "held"),
    [
        pytest.param(b"", "it holds no YAML document", id="empty"),
        pytest.param(b"---\n", "it holds no YAML document", id="only-a-separator"),
        pytest.param(b"# a comment\n---\n---\n", "it holds no YAML document", id="comments-and-separators"),
        pytest.param(b"apiVersion: v1\nkind: Pod\n", "its 1 document(s) hold 'Pod'", id="no-mpijob"),
    ],
)
def test_a_file_without_an_mpijob_is_refused(tmp_path, data, held):
    result, source = refused(tmp_path, data)
    assert result.output == f"Error: no MPIJob found in {source}: {held}\n"


def test_stdin_without_an_mpijob_is_refused():
    result = CliRunner().invoke(main, ["k8s", "convert-mpijob", "-"], input=b"---\n")
    assert result.exit_code == 1
    assert result.output == "Error: no MPIJob found in <stdin>: it holds no YAML document\n"


@pytest.mark.parametrize("cut", ["    Worker:\n", "      replicas: 4\n"], ids=["before-worker", "after-worker-key"])
def test_a_job_cut_short_before_its_worker_is_refused(tmp_path, cut):
    """Seed 002 cut before its Worker (or right after `Worker:`), its launcher asking for -np 16 ranks."""
    text = SEED_002[: SEED_002.index(cut)].replace('- "4"', '- "16"')
    assert yaml.safe_load(text)["spec"]["mpiReplicaSpecs"].get("Worker") is None
    result, source = refused(tmp_path, text.encode())
    first = line_of(text, "apiVersion:")
    assert result.output.startswith(
        f"Error: {source}, line {first} (document 1): spec.mpiReplicaSpecs.Worker: missing, the Worker replica spec "
    )
    assert "(is the file cut short?)" in result.output


@pytest.mark.timeout(60)  # before the loader counted aliases: 31 s and 3.4 GB, then the whole expansion printed
def test_a_yaml_alias_bomb_is_refused_fast_without_its_expansion(tmp_path):
    text = alias_bomb()
    assert len(text.encode()) < 1000
    result, source = refused(tmp_path, text.encode())
    line = line_of(text, "    l6:")  # the first whose expansion (597,871 values) passes the limit
    assert result.output == (
        f"Error: {source}, line {line}: more than 100000 values once its YAML aliases are expanded, refused "
        "(a Kubernetes object is far smaller: an alias bomb?)\n"
    )
    assert "LAUGH" not in result.output


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "kind: MPIJob\nmetadata:\n  x: &a [*a]\n", "line 3: a YAML alias inside the value it names", id="cycle"
        ),
        pytest.param(
            "kind: MPIJob\nspec:\n  x: " + "[" * 101 + "]" * 101 + "\n",
            "line 3: nested deeper than 100 levels",
            id="deep",
        ),
        pytest.param("kind: MPIJob\nspec: [a\nb: c\n", "line 3, column 2: not YAML: ", id="not-yaml"),
    ],
)
def test_yaml_that_is_no_kubernetes_object_is_refused_naming_the_line(tmp_path, text, message):
    result, source = refused(tmp_path, text.encode())
    assert result.output.startswith(f"Error: {source}, {message}")
    assert '"<unicode string>"' not in result.output  # PyYAML's snippet of the file is left out


def test_a_file_over_the_size_limit_is_refused(tmp_path):
    result, source = refused(tmp_path, SEED_002.encode() + b"#" * (3 * 1024 * 1024))
    assert result.output.startswith(f"Error: {source}: larger than 3 MiB, refused")


@pytest.mark.parametrize("form", NP_FORMS)
@pytest.mark.parametrize(("ranks", "noted"), [(2, False), (3, True)])
def test_np_in_every_form_is_noted_past_the_slots(tmp_path, form, ranks, noted):
    """minimal(): 2 workers x slotsPerWorker 1 = 2 slots; -np 2 is fine, 3 is noted (the conversion still succeeds)."""
    source = tmp_path / "job.yaml"
    source.write_text(yaml.safe_dump(with_launcher(minimal(), **NP_FORMS[form](ranks))))
    result = run("k8s", "convert-mpijob", str(source))
    assert result.exit_code == 0, result.output
    note = f"MPIJob ml-team/job: spec.mpiReplicaSpecs.Launcher: mpirun -np {ranks} but the hostfile has 2 slots"
    assert (note in result.stderr) is noted, result.stderr
    [job] = documents(result.stdout)
    assert job["apiVersion"] == "kubeflow.org/v2beta1"


def test_apply_and_diff_take_the_kubeconfig_and_context_as_kubectl_does(tmp_path, monkeypatch):
    """--kubeconfig (by its absolute path) and --context reach the run over the inventory's k8s_cluster_*; a
    kubeconfig that is not there is a usage error before anything runs."""
    seen = []

    def fake_run(_playbook, opts, **_kw):
        seen.append(opts.extravars)
        raise SystemExit(0)

    monkeypatch.setattr(cli, "run_playbook", fake_run)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "admin.conf").write_text("apiVersion: v1\nkind: Config\n")
    inventory = str(REPO / "inventories" / "c4140-k8s")
    for verb in ("apply", "diff"):
        argv = ["k8s", verb, "-i", inventory, "--kubeconfig", "admin.conf", "--context", "prod"]
        result = CliRunner().invoke(main, argv)
        assert result.exit_code == 0, result.output
        assert (seen[-1]["k8s_cluster_kubeconfig"], seen[-1]["k8s_cluster_context"]) == (
            str(tmp_path / "admin.conf"),
            "prod",
        )
    result = CliRunner().invoke(main, ["k8s", "apply", "-i", inventory])
    assert result.exit_code == 0 and "k8s_cluster_kubeconfig" not in seen[-1]  # the inventory's, or the default
    missing = CliRunner().invoke(main, ["k8s", "apply", "-i", inventory, "--kubeconfig", "nowhere.conf"])
    assert missing.exit_code == 5 and "nowhere.conf" in missing.output and len(seen) == 3
