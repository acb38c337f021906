"""`nodeforge k8s render / apply` through the CLI on the sample inventories (ansible-runner, the k8s.yml playbook).

The MPI Operator's release manifest comes from a loopback HTTP server that serves ../shared/reference/upstream-
manifests (the pinned upstream files), as the real release URL would; the sha256 the version manifest pins is the
real file's. What is written is read back and validated again by independent probes (tests/test_k8s_objects.py).
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from nodeforge import checks, runner
from nodeforge.collection import k8s_validate
from tests.k8s_api_replay import write_kubeconfig
from tests.test_k8s_images import SITE, site_map
from tests.test_k8s_objects import UPSTREAM, independent_problems

from ansible_collections.nodeforge.gpu.plugins.module_utils import k8s_images, k8s_objects, k8s_scale  # isort: skip

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
NODEFORGE = str(Path(sys.executable).parent / "nodeforge")
SAMPLES = {
    "dgx1-openshift": "openshift",
    "c4140-k8s": "kubernetes",
    "vsphere-t4": "kubernetes",
    "dgx-h100-k8s": "kubernetes",
}
MPI_OPERATOR = "mpi-operator-v0.8.0.yaml"
SCALE_CSI = "ibm-spectrum-scale-csi-operator-v3.0.0.yaml"  # the Redbook sample (dgx1-openshift) uses Scale CSI


@pytest.fixture(scope="module")
def upstream_url():
    """The pinned upstream manifests on a loopback HTTP server, for the whole module."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(UPSTREAM))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


# The vGPU sample's GRID placeholder, filled in as its operator would (tests/test_samples.py fills the file itself).
GRID = {
    "version": "580.95.05",
    "package": "nvidia-linux-grid-580",
    "deb": {"url": "http://mirror.example/nvidia-linux-grid-580_580.95.05_amd64.deb", "checksum": "sha256:" + "a" * 64},
}


def control_overrides(tmp_path: Path, url: str, checksum: str | None = None, sample: str = "") -> Path:
    """An inventory file the sample is read with: the k8s_control host downloads the releases from loopback (and the
    vGPU guests name their GRID package)."""
    pin = {"url": f"{url}/{MPI_OPERATOR}"}
    if checksum:
        pin["checksum"] = checksum
    path = tmp_path / "control.yml"
    path.write_text(
        yaml.safe_dump(
            {
                "k8s_control": {
                    "hosts": {
                        "localhost": {
                            "nodeforge_manifest_overrides": {
                                "kubernetes": {"mpi_operator": pin, "scale_csi": {"url": f"{url}/{SCALE_CSI}"}}
                            }
                        }
                    }
                },
                # Host vars: an inventory file's group vars rank below the sample's group_vars/all.yml.
                "gpu_nodes": {
                    "hosts": {
                        host: {"nodeforge_manifest_overrides": {"nvidia_driver": {"grid": GRID}}}
                        for host in _workers(sample)
                    }
                },
            }
        )
    )
    return path


def _workers(sample: str) -> list[str]:
    if not sample:
        return []
    hosts = yaml.safe_load((REPO / "inventories" / sample / "hosts.yml").read_text())
    return list(hosts["all"]["children"]["gpu_nodes"]["hosts"])


def nodeforge(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([NODEFORGE, *args], cwd=cwd, capture_output=True, text=True, timeout=600)


def k8s(verb: str, tmp_path: Path, url: str, sample: str, *extra: str, checksum: str | None = None):
    """`nodeforge k8s VERB --json` on a sample, read together with control_overrides (and -o tmp_path/out for
    render)."""
    overrides = control_overrides(tmp_path, url, checksum, sample)
    output = ["-o", str(tmp_path / "out")] if verb == "render" else []
    inventory = str(REPO / "inventories" / sample)
    return nodeforge("k8s", verb, "-i", inventory, "-i", str(overrides), *output, "--json", *extra)


def read_rendered(directory: Path) -> dict[str, dict]:
    # libyaml's parser, as the collection reads YAML (k8s_validate.load_documents): the pure-Python one took seconds.
    return {
        path.name: yaml.load(path.read_text(), Loader=yaml.CSafeLoader) for path in sorted(directory.glob("*.yaml"))
    }


def planned_images(tmp_path: Path, url: str, sample: str) -> dict[str, list[str]]:
    """The images nodeforge mirror plans for the sample (k8s_images.cluster_images), its Cluster read as the
    k8s_control host sees it (nodeforge k8s job's way) with the releases of the components it enables: the pinned
    release manifests render downloads."""
    view = checks.load([str(REPO / "inventories" / sample), str(control_overrides(tmp_path, url, sample=sample))])
    [control_host] = view.hosts_of("k8s_control")
    control = checks.plain(view.host_variables(control_host)[0])
    nodes = {host: checks.plain(view.host_variables(host)[0]) for host in view.hosts_of("gpu_nodes")}
    cluster = k8s_objects.cluster_from(control, nodes)
    releases = {}
    if cluster.get("k8s_mpi_operator_enabled"):
        releases["mpi_operator"] = k8s_validate.load_documents((UPSTREAM / MPI_OPERATOR).read_text())
    if k8s_scale.settings(control)["k8s_scale_csi_enabled"]:
        releases["scale_csi"] = k8s_validate.load_documents((UPSTREAM / SCALE_CSI).read_text())
    return k8s_images.cluster_images(cluster, releases)


@pytest.mark.parametrize("sample", SAMPLES)
def test_render_writes_valid_objects_for_each_sample(tmp_path, upstream_url, sample):
    out = tmp_path / "out"
    run = k8s("render", tmp_path, upstream_url, sample)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    files = read_rendered(out)
    kustomization = files.pop("kustomization.yaml")
    assert sorted(kustomization["resources"]) == sorted(files)
    objects = list(files.values())
    assert independent_problems(objects) == []
    kinds = [obj["kind"] for obj in objects]
    assert kinds.count("Node") == len(
        yaml.safe_load((REPO / "inventories" / sample / "hosts.yml").read_text())["all"]["children"]["gpu_nodes"][
            "hosts"
        ]
    )
    assert ("SecurityContextConstraints" in kinds) is (SAMPLES[sample] == "openshift")
    # GPU monitoring where the sample enables it (role k8s_gpu_monitoring): the exporter, its ServiceMonitor, the
    # alerts and the dashboard, validated above like every object.
    monitored = {
        (o["kind"], o["metadata"]["name"]) for o in objects if o["metadata"].get("namespace") == "gpu-monitoring"
    }
    expected = {
        ("DaemonSet", "dcgm-exporter"),
        ("Service", "dcgm-exporter"),
        ("ServiceMonitor", "dcgm-exporter"),
        ("PrometheusRule", "nodeforge-gpu-alerts"),
        ("ConfigMap", "dcgm-exporter-counters"),
        ("ConfigMap", "nodeforge-gpu-dashboard"),
    }
    assert (expected <= monitored) is (sample in ("dgx1-openshift", "c4140-k8s")), monitored
    # The MPI Operator's objects are the pinned release's, unchanged.
    release = k8s_validate.load_documents((UPSTREAM / MPI_OPERATOR).read_text())
    for obj in release:
        assert obj in objects, f"{obj['kind']} {obj['metadata']['name']}"
    # nodeforge mirror copies every image render wrote: its plan (k8s_images.cluster_images) names them all.
    named = k8s_images.named(objects)
    assert named and set(named) <= set(planned_images(tmp_path, upstream_url, sample)), named
    result = json.loads(run.stdout)
    notices = " ".join(notice["text"] for notice in result["notices"])
    assert f"{len(files) + 1} files in {out} ({len(files)} objects and kustomization.yaml)" in notices
    assert result["files"] == sorted(str(out / name) for name in [*files, "kustomization.yaml"])


def test_render_is_byte_identical_across_runs(tmp_path, upstream_url):
    out = tmp_path / "out"
    first = k8s("render", tmp_path, upstream_url, "dgx1-openshift")
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    digest = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in out.iterdir()}
    second = k8s("render", tmp_path, upstream_url, "dgx1-openshift")
    assert second.returncode == 0
    assert {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in out.iterdir()} == digest
    assert "changed: 0, removed: 0" in second.stdout


def test_a_release_manifest_with_another_sha256_is_refused(tmp_path, upstream_url):
    out = tmp_path / "out"
    wrong = "sha256:" + hashlib.sha256(b"not the release").hexdigest()
    run = k8s("render", tmp_path, upstream_url, "c4140-k8s", checksum=wrong)
    assert run.returncode != 0
    download, failure = json.loads(run.stdout)["failures"]
    assert download["task"].endswith("Download the MPI Operator release manifest")
    assert "did not match" in download["message"]
    assert failure["task"].endswith("Refuse the MPI Operator release that did not verify")
    assert f"{upstream_url}/{MPI_OPERATOR} was not used" in failure["message"]
    assert f"pins kubernetes.mpi_operator.checksum {wrong}" in failure["message"]
    assert not out.exists()


def test_an_invalid_object_is_named_and_nothing_is_written(tmp_path, upstream_url):
    out = tmp_path / "out"
    run = k8s("render", tmp_path, upstream_url, "c4140-k8s", "-e", '{"k8s_node_labels_extra": {"team": "ml team!"}}')
    assert run.returncode != 0
    [failure] = json.loads(run.stdout)["failures"]
    assert "problem(s) in the rendered objects (validated against Kubernetes 1.33" in failure["message"]
    assert "at metadata.labels.team: 'ml team!' is not a valid label value" in failure["message"]
    assert "nothing was written or applied" in failure["message"]
    assert not out.exists()


def test_render_takes_every_image_from_the_site_registry_by_digest(tmp_path, upstream_url):
    """The Redbook sample (device plugin, RDMA plugin, monitoring, MPI Operator, Scale CSI) with the map nodeforge
    mirror overrides --registry writes: every image render writes is the site's, by the digest mapped; the Scale CSI
    operator's operands (its *_IMAGE variables) too."""
    sample = "dgx1-openshift"
    mapping = site_map(planned_images(tmp_path, upstream_url, sample))
    out = tmp_path / "out"
    run = k8s("render", tmp_path, upstream_url, sample, "-e", json.dumps({"k8s_cluster_image_mirror": mapping}))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    files = read_rendered(out)
    del files["kustomization.yaml"]
    objects = list(files.values())
    assert independent_problems(objects) == []
    named = k8s_images.named(objects)
    assert len(named) > 5 and set(named) <= set(mapping.values())
    assert all(image.startswith(f"{SITE}/") for image in named)
    [operator] = [o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "mpi-operator"]
    [container] = operator["spec"]["template"]["spec"]["containers"]
    assert container["image"] == mapping["docker.io/mpioperator/mpi-operator:0.8.0"]
    operands = {
        env["name"]: env["value"]
        for o in objects
        if o["kind"] == "Deployment"
        for c in o["spec"]["template"]["spec"]["containers"]
        for env in c.get("env") or []
        if env["name"].endswith("_IMAGE")
    }
    assert len(operands) == 7 and all(v.startswith(f"{SITE}/") and "@sha256:" in v for v in operands.values())


def test_render_refuses_an_image_the_site_registry_lacks_and_writes_nothing(tmp_path, upstream_url):
    mapping = site_map(planned_images(tmp_path, upstream_url, "c4140-k8s"))
    del mapping["docker.io/mpioperator/mpi-operator:0.8.0"]
    out = tmp_path / "out"
    run = k8s("render", tmp_path, upstream_url, "c4140-k8s", "-e", json.dumps({"k8s_cluster_image_mirror": mapping}))
    assert run.returncode == runner.EXIT_HOST_FAILED, run.stdout[-3000:] + run.stderr[-3000:]
    [failure] = json.loads(run.stdout)["failures"]
    assert (
        "localhost: mpi_operator: Deployment mpi-operator/mpi-operator names the image "
        "docker.io/mpioperator/mpi-operator:0.8.0, which k8s_cluster_image_mirror does not map" in failure["message"]
    ), failure
    assert not out.exists()


def test_apply_stops_before_any_object_when_the_api_server_does_not_answer(tmp_path, upstream_url):
    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = f"https://127.0.0.1:{port}"
    kubeconfig = write_kubeconfig(
        tmp_path / "kubeconfig", server, "not-a-secret-of-anyone", user="admin", **{"insecure-skip-tls-verify": True}
    )
    run = k8s("apply", tmp_path, upstream_url, "c4140-k8s", "--kubeconfig", str(kubeconfig))
    assert run.returncode != 0
    result = json.loads(run.stdout)
    [failure] = result["failures"]
    assert failure["task"].endswith("Stop when the API server does not answer")
    assert f"The Kubernetes API server {server} (kubeconfig {kubeconfig}) did not answer" in failure["message"]
    assert failure["message"].endswith("Nothing was applied.")
    assert not any("Apply each object" in task for tasks in result["changes"].values() for task in tasks)
    assert "not-a-secret-of-anyone" not in run.stdout + run.stderr


def test_a_malformed_kubeconfig_is_named_by_file_and_line_never_shown(tmp_path, upstream_url, state_dir):
    """A kubeconfig with a YAML error on its token's line (an indentation slip while pasting one): the failure names
    the file and line, the token appears nowhere: not in the output, not in the run's artifacts at -vvv."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: lab\n"
        "contexts:\n- name: lab\n  context: {cluster: lab, user: admin}\n"
        "clusters:\n- name: lab\n  cluster: {server: 'https://127.0.0.1:1'}\n"
        "users:\n- name: admin\n  user:\n    token: eyJhbGciOiJSUzI1NiJ9.Pasted-Token-Value: x\n"
    )
    run = k8s("apply", tmp_path, upstream_url, "c4140-k8s", "-vvv", "-e", f"k8s_cluster_kubeconfig={kubeconfig}")
    assert run.returncode != 0
    [failure] = json.loads(run.stdout)["failures"]
    assert f"the kubeconfig {kubeconfig} is not valid YAML (line 13, column 51" in failure["message"], failure
    assert "Pasted-Token-Value" not in run.stdout + run.stderr
    artifacts = [path for path in (state_dir / "runner" / "artifacts").rglob("*") if path.is_file()]
    assert artifacts and not [str(path) for path in artifacts if b"Pasted-Token-Value" in path.read_bytes()]
