"""`nodeforge k8s diff` and `nodeforge k8s apply` against a Kubernetes API server replayed on loopback
(tests/k8s_api_replay.py, its answers in tests/data/k8s_api_replay/: reconstructed from the Kubernetes API
documentation, not captured). What the product did is read from its exit code and --json report; what it sent, from the
requests the server recorded, compared with what `nodeforge k8s render` writes for the same inventory.

The c4140-k8s sample (two GPU nodes, already registered by their kubelets), its node labels and NVIDIA device plugin
only: 5 objects of 4 kinds in 3 API groups (each object costs a kubernetes.core module run, 1.5 s or more; all 20 of
the sample's objects take a run of 35 s).
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import secrets
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from nodeforge import runner
from tests.k8s_api_replay import APPLY_PATCH, ApiServer, Cluster, load, write_kubeconfig

pytestmark = pytest.mark.slow  # ansible-runner playbooks, each kubernetes.core loop item a module run

REPO = Path(__file__).resolve().parent.parent
NODEFORGE = str(Path(sys.executable).parent / "nodeforge")
UPSTREAM = Path(__file__).resolve().parents[2] / "shared" / "reference" / "upstream-manifests"
INVENTORY = REPO / "inventories" / "c4140-k8s"
# The node labels and the device plugin only: Node x2, ConfigMap, DaemonSet, RuntimeClass.
FEW = {
    "k8s_mpi_operator_enabled": False,
    "k8s_rdma_shared_device_plugin_enabled": False,
    "k8s_gpu_monitoring_enabled": False,
}
DEVICE_PLUGIN = "/apis/apps/v1/namespaces/kube-system/daemonsets/nvidia-device-plugin-daemonset"


@pytest.fixture(scope="module")
def overrides(tmp_path_factory):
    """An inventory file read after the sample: the MPI Operator's release from a loopback copy of the pinned file
    (the real release URL's bytes: the version manifest's sha256 matches)."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(UPSTREAM))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    path = tmp_path_factory.mktemp("inventory") / "control.yml"
    pins = {"mpi_operator": {"url": f"{url}/mpi-operator-v0.8.0.yaml"}}
    path.write_text(
        yaml.safe_dump(
            {"k8s_control": {"hosts": {"localhost": {"nodeforge_manifest_overrides": {"kubernetes": pins}}}}}
        )
    )
    yield path
    server.shutdown()
    server.server_close()


def nodeforge(verb: str, overrides: Path, tmp: Path, *extra: str) -> subprocess.CompletedProcess:
    """`nodeforge k8s VERB --json` on the sample; the kubernetes client's discovery cache in tmp (TMPDIR)."""
    (tmp / "tmpdir").mkdir(exist_ok=True)
    env = {**os.environ, "TMPDIR": str(tmp / "tmpdir")}
    # A run outside a test's state_dir (a module fixture's render) gets its own: two of them on two xdist workers in
    # one state directory share ansible-runner's private data directory, and one's cleanup removes the other's events.
    env.setdefault("NODEFORGE_STATE_DIR", str(tmp / "state"))
    argv = [NODEFORGE, "k8s", verb, "-i", str(INVENTORY), "-i", str(overrides), "--json", *extra]
    return subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env, cwd=tmp)


def rendered(overrides: Path, tmp: Path, *extra: str) -> list[dict]:
    """The objects `nodeforge k8s render` writes for the sample (read back from its files)."""
    out = tmp / "rendered"
    run = nodeforge("render", overrides, tmp, "-o", str(out), *extra)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    return [yaml.safe_load(p.read_text()) for p in sorted(out.glob("*.yaml")) if p.name != "kustomization.yaml"]


@pytest.fixture(scope="module")
def few_objects(overrides, tmp_path_factory):
    return rendered(overrides, tmp_path_factory.mktemp("render-few"), "-e", json.dumps(FEW))


@pytest.fixture
def api(tmp_path, state_dir):
    """A replayed API server (started per test, on a free loopback port; stopped after it) and a kubeconfig that
    points at it with a fresh bearer token. Returns start(user, deny) -> (server, kubeconfig, token)."""
    servers = []

    def start(user: str = "kubernetes-admin", deny: list | None = None):
        token = secrets.token_urlsafe(32)
        server = ApiServer(Cluster({token: user}, deny)).start()
        servers.append(server)
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", server.url, token)
        return server, kubeconfig, token

    yield start
    for server in servers:
        server.stop()


def run(verb: str, overrides: Path, tmp_path: Path, kubeconfig: Path, *extra: str):
    """The run and its --json report."""
    done = nodeforge(verb, overrides, tmp_path, "--kubeconfig", str(kubeconfig), *extra)
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"no JSON report (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done, report


def applies(server: ApiServer) -> list:
    return [r for r in server.requests if r.method == "PATCH"]


def by_path(server: ApiServer, objects: list[dict]) -> dict[str, dict]:
    return {server.cluster.path_of(obj): obj for obj in objects}


def notice(report: dict) -> str:
    return " ".join(n["text"] for n in report["notices"] if "objects" in n["text"])


def assert_no_secret(token: str, done: subprocess.CompletedProcess, state_dir: Path) -> None:
    assert token not in done.stdout + done.stderr
    artifacts = [p for p in (state_dir / "runner" / "artifacts").rglob("*") if p.is_file()]
    assert artifacts, "the run left no artifacts to search"
    assert not [str(p) for p in artifacts if token.encode() in p.read_bytes()]


def test_diff_asks_for_a_server_side_dry_run_of_every_rendered_object(overrides, tmp_path, api, few_objects, state_dir):
    server, kubeconfig, token = api()
    before = json.dumps(server.cluster.objects, sort_keys=True)
    done, report = run("diff", overrides, tmp_path, kubeconfig, "-e", json.dumps(FEW))
    assert done.returncode == runner.EXIT_OK, done.stdout[-3000:] + done.stderr[-3000:]
    expected = by_path(server, few_objects)
    assert len(expected) == 5
    # Discovery: the version, the group list and every group version the objects use.
    got = [r.path for r in server.requests if r.method == "GET"]
    assert {"/version", "/apis", "/api/v1"} <= set(got)
    for obj in few_objects:
        if "/" in obj["apiVersion"]:
            assert f"/apis/{obj['apiVersion']}" in got, obj["apiVersion"]
    # One server-side apply per object, each a dry run, as field manager nodeforge, never forced, the body the
    # object render writes.
    patches = applies(server)
    assert sorted(r.path for r in patches) == sorted(expected)
    for request in patches:
        assert request.content_type == APPLY_PATCH
        assert (request.param("dryRun"), request.param("fieldManager"), request.param("force")) == (
            "All",
            "nodeforge",
            "false",
        )
        assert request.body == expected[request.path], request.path
    # Nothing was written: the cluster is as it was (the Nodes as their kubelets registered them).
    assert json.dumps(server.cluster.objects, sort_keys=True) == before
    # The report: every object would change (the Nodes gain their labels, the others are created).
    text = notice(report)
    assert text.startswith("5 of 5 objects would change: "), report["notices"]
    for name in ("Node c4140-01", "Node c4140-02", "DaemonSet kube-system/nvidia-device-plugin-daemonset"):
        assert name in text
    assert report["failures"] == []
    assert_no_secret(token, done, state_dir)


def test_apply_changes_every_object_then_a_second_apply_changes_none(overrides, tmp_path, api, few_objects, state_dir):
    server, kubeconfig, token = api()
    first, report = run("apply", overrides, tmp_path, kubeconfig, "-e", json.dumps(FEW))
    assert first.returncode == runner.EXIT_OK, first.stdout[-3000:] + first.stderr[-3000:]
    expected = by_path(server, few_objects)
    assert sorted(expected) == sorted(
        [
            "/api/v1/namespaces/kube-system/configmaps/nvidia-device-plugin-config",
            "/api/v1/nodes/c4140-01",
            "/api/v1/nodes/c4140-02",
            DEVICE_PLUGIN,
            "/apis/node.k8s.io/v1/runtimeclasses/nvidia",
        ]
    )
    patches = applies(server)
    assert sorted(r.path for r in patches) == sorted(expected)
    for request in patches:
        assert request.content_type == APPLY_PATCH
        assert request.param("dryRun") is None  # applied for real
        assert (request.param("fieldManager"), request.param("force")) == ("nodeforge", "false")
        assert request.body == expected[request.path], request.path
    # The DaemonSet was waited for: read back after its apply.
    after = server.requests.index(next(r for r in patches if r.path == DEVICE_PLUGIN))
    assert any(r.method == "GET" and r.path == DEVICE_PLUGIN for r in server.requests[after + 1 :])
    assert notice(report).startswith("5 of 5 objects changed: ")
    assert report["hosts"]["localhost"]["changed"] == 1
    # The Nodes carry nodeforge's labels next to the kubelet's, each field manager's own.
    node = server.cluster.objects["/api/v1/nodes/c4140-01"]
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == "c4140-01"
    assert node["metadata"]["labels"]["nvidia.com/gpu.present"] == "true"
    assert [e["manager"] for e in node["metadata"]["managedFields"]] == [
        "nodeforge",
        "kubelet",
        "kube-controller-manager",
    ]

    # The server now holds what nodeforge applied: applying the same objects again changes nothing.
    server.requests.clear()
    second, report = run("apply", overrides, tmp_path, kubeconfig, "-e", json.dumps(FEW))
    assert second.returncode == runner.EXIT_OK, second.stdout[-3000:] + second.stderr[-3000:]
    assert sorted(r.path for r in applies(server)) == sorted(expected)
    assert notice(report) == "0 of 5 objects changed"
    assert report["hosts"]["localhost"]["changed"] == 0
    assert_no_secret(token, first, state_dir)
    assert_no_secret(token, second, state_dir)


def test_a_field_manager_conflict_fails_naming_the_object_the_field_and_its_manager(
    overrides, tmp_path, api, few_objects, state_dir
):
    scenario = load("scenarios.yaml")["conflict"]
    server, kubeconfig, token = api(scenario["user"])
    server.cluster.seed_apply(few_objects, "nodeforge")
    update = scenario["update"]
    server.cluster.update(update["path"], update["manager"], update["apiVersion"], update["patch"], update["fieldsV1"])
    done, report = run("apply", overrides, tmp_path, kubeconfig, "-e", json.dumps(FEW))
    assert done.returncode == runner.EXIT_HOST_FAILED, done.stdout[-3000:] + done.stderr[-3000:]
    [conflicted] = [r for r in applies(server) if r.path == DEVICE_PLUGIN]
    assert conflicted.param("force") == "false"  # nodeforge never takes fields over silently
    [failure] = report["failures"]
    message = failure["message"]
    assert "DaemonSet kube-system/nvidia-device-plugin-daemonset" in message, message
    assert "conflict" in message.lower()
    assert '"kubectl-set"' in message
    assert '.spec.template.spec.containers[name="nvidia-device-plugin-ctr"].image' in message
    assert "nodeforge does not take them over" in message and message.endswith("The other objects were applied.")
    assert failure["task"].endswith("Stop when the API server refused an object")
    assert "Traceback" not in done.stdout + done.stderr
    assert "b'{" not in message  # not the raw response body
    assert_no_secret(token, done, state_dir)


def test_a_forbidden_apply_fails_naming_the_object_and_the_denial(overrides, tmp_path, api, few_objects, state_dir):
    scenario = load("scenarios.yaml")["forbidden"]
    server, kubeconfig, token = api(scenario["user"], scenario["deny"])
    done, report = run("apply", overrides, tmp_path, kubeconfig, "-e", json.dumps(FEW))
    assert done.returncode == runner.EXIT_HOST_FAILED, done.stdout[-3000:] + done.stderr[-3000:]
    assert DEVICE_PLUGIN in [r.path for r in applies(server)]
    [failure] = report["failures"]
    message = failure["message"]
    assert "DaemonSet kube-system/nvidia-device-plugin-daemonset" in message, message
    assert (
        'daemonsets.apps "nvidia-device-plugin-daemonset" is forbidden: User '
        '"system:serviceaccount:ci:nodeforge-deployer" cannot patch resource "daemonsets" in API group "apps" in the '
        'namespace "kube-system"'
    ) in message
    assert "lacks that RBAC permission" in message and message.endswith("The other objects were applied.")
    assert failure["task"].endswith("Stop when the API server refused an object")
    assert "Traceback" not in done.stdout + done.stderr
    assert "b'{" not in message
    assert_no_secret(token, done, state_dir)
