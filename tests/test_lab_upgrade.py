"""The lab and `nodeforge upgrade` end to end on four lab nodes (podman containers over SSH), through the real CLI:
`lab up --provision` of the full stack and its checks (tests/test_lab.py's: the SSH path, each node's packages and
files, a no-op re-provision, host key checking, `validate`), then the upgrade: the plan, a halted run (batches of two
in host name order from an inventory in reverse order; a package that fails to install on one node of the first
batch), the refusal to go on without --resume, the resume, the no-op re-run,
a downgrade refused and then allowed in batches of two through the Kubernetes path; then `lab down`. One lab for both,
because provisioning a lab costs minutes of both cores.

Every expectation is read from the nodes themselves (dpkg's database, apt's holds, the state file, the Slurm stand-in's
call log) or from the calls the kubernetes.core stand-in recorded, never from nodeforge's own report alone."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml
from click.testing import CliRunner

from nodeforge import lab
from nodeforge.cli import main
from tests.conftest import REPO
from tests.test_lab import (
    become_works_as_sites_have_it,
    host_key_checking_is_on,
    lab_down_removes_it,
    provisioned_lab_is_what_the_roles_say,
    reprovision_changes_nothing,
    validate_checks_the_lab,
)

pytestmark = [
    pytest.mark.slow,
    # The 4-node lab: 450 s alone on a quiet machine, 1,400-1,640 s beside the other long tests in the machine's slow
    # phases; `make test-full` runs it, `make test` the 1-node lab of tests/test_lab.py (docs/testing.md, "What make
    # test runs").
    pytest.mark.full,
    pytest.mark.skipif(shutil.which("podman") is None, reason="podman is not installed (make setup installs it)"),
]

STANDINS = REPO / "tests" / "data" / "standins"
TOOLKIT = [
    "libnvidia-container-tools",
    "libnvidia-container1",
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
]
FAIL_MARKER = "/etc/nodeforge-fixture/fail-install-nvidia-container-toolkit"
STATE_FILE = "/var/lib/nodeforge/upgrade-state.json"


@pytest.fixture
def lab_name():
    name = f"pytestup{os.getpid()}"
    yield name
    lab.down(name)


def sh(host: str, command: str, check: bool = True) -> str:
    proc = lab._podman("exec", host, "sh", "-c", command, check=check)
    return proc.stdout


def toolkit_state(host: str) -> dict[str, str]:
    """Package -> dpkg's status and version (e.g. 'hi 1.21.0-1': held, installed), from the node's own database."""
    out = sh(host, "dpkg-query -W -f '${Package} ${db:Status-Abbrev}${Version}\\n' " + " ".join(TOOLKIT))
    return {line.split(" ", 1)[0]: line.split(" ", 1)[1].replace("  ", " ") for line in out.splitlines()}


def record(host: str) -> dict | None:
    out = sh(host, f"cat {STATE_FILE} 2>/dev/null || true")
    return json.loads(out) if out.strip() else None


def calls(host: str, tool: str) -> list[str]:
    return sh(host, f"cat /var/log/nodeforge-standin/{tool}.log 2>/dev/null || true").splitlines()


def drain_call(host: str) -> str:
    return f"update nodename={host} state=drain reason=nodeforge upgrade of toolkit"


def upgrade(inventory: str, *argv: str) -> tuple[int, dict]:
    run = CliRunner().invoke(main, ["upgrade", "-i", inventory, "--json", *argv])
    try:
        return run.exit_code, json.loads(run.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"nodeforge upgrade {' '.join(argv)}: no JSON (exit {run.exit_code}):\n{run.output}")


def test_rolling_toolkit_upgrade_halts_resumes_and_downgrades(lab_name, tmp_path, monkeypatch):
    mirror = tmp_path / "toolkit-mirror"
    subprocess.run([sys.executable, str(REPO / "tools" / "lab_mirror.py"), str(mirror)], check=True)
    up = CliRunner().invoke(main, ["lab", "up", "--nodes", "4", "--mirror", str(mirror), "--provision",
                                   "--json", "--name", lab_name])  # fmt: skip
    assert up.exit_code == 0, up.output
    nodes = [f"nodeforge-{lab_name}-{i}" for i in range(1, 5)]
    inventory = str(lab.inventory_path(lab_name))
    provisioned_lab_is_what_the_roles_say(lab_name, nodes, json.loads(up.stdout))
    reprovision_changes_nothing(lab_name)
    become_works_as_sites_have_it(lab_name, nodes, tmp_path)
    host_key_checking_is_on(lab_name, nodes, tmp_path)
    for host in nodes:
        assert toolkit_state(host) == dict.fromkeys(TOOLKIT, "hi 1.20.0-1"), host
        for tool in ("scontrol", "squeue"):
            lab._podman("cp", str(STANDINS / "slurm" / tool), f"{host}:/usr/local/bin/{tool}")
    # A job runs on node 1 for the first two looks: the upgrade waits for it before the install.
    sh(nodes[0], "mkdir -p /var/lib/nodeforge-standin && echo '4242 2' > /var/lib/nodeforge-standin/jobs")
    slurm = ["--component", "toolkit", "--to", "1.21.0", "--drain", "slurm", "-e", "upgrade_job_poll=1"]

    # The plan: four batches of one, in host name order, 1.20.0 -> 1.21.0; nothing touched.
    code, planned = upgrade(inventory, *slurm, "--batch", "1")
    assert code == 0 and planned["status"] == "planned", planned
    assert planned["schedule"]["batches"] == [[h] for h in nodes]
    for host in nodes:
        (entry,) = planned["plans"][host]["components"]
        assert (entry["component"], entry["from"], entry["to"], entry["action"]) == (
            "toolkit",
            "1.20.0",
            "1.21.0",
            "upgrade",
        )
        assert toolkit_state(host) == dict.fromkeys(TOOLKIT, "hi 1.20.0-1") and record(host) is None
        assert calls(host, "scontrol") == []

    # Batches of two, from an inventory that lists the nodes last to first: the batches still go in host name order
    # (nodes 1 and 2, then 3 and 4). Node 2 cannot install 1.21.0 while node 1 of its batch can: the run halts at
    # the end of that batch (a batch of two where one node fails; Ansible alone would go on to the next batch with
    # the node that did not fail), and nodes 3 and 4 are never touched.
    reversed_inventory = tmp_path / "reversed.yml"
    written = yaml.safe_load(lab.inventory_path(lab_name).read_text())
    group = written["all"]["children"]["gpu_nodes"]
    group["hosts"] = dict(reversed(group["hosts"].items()))
    reversed_inventory.write_text(yaml.safe_dump(written, sort_keys=False))
    assert list(group["hosts"]) == nodes[::-1]
    sh(nodes[1], f"mkdir -p {os.path.dirname(FAIL_MARKER)} && touch {FAIL_MARKER}")
    code, halted = upgrade(str(reversed_inventory), *slurm, "--batch", "2", "--yes")
    assert code != 0 and halted["status"] == "halted", halted
    assert halted["schedule"]["batches"] == [nodes[:2], nodes[2:]], halted["schedule"]
    first = nodes[0]
    assert toolkit_state(first) == dict.fromkeys(TOOLKIT, "hi 1.21.0-1")
    assert record(first)["state"] == "upgrade-done" and record(first)["from"] == {"toolkit": "1.20.0"}
    assert calls(first, "scontrol") == [drain_call(first),
                                        f"update nodename={first} state=resume"]  # fmt: skip
    assert len(calls(first, "squeue")) == 3  # two looks while job 4242 ran, one that found the node idle
    failed = record(nodes[1])
    assert (failed["state"], failed["step"]) == ("upgrade-failed", "install"), failed
    assert "configure failed" in failed["message"] or "nvidia-container-toolkit" in failed["message"], failed
    # Left drained in Slurm (no resume call) and not at 1.21.0 in dpkg's database.
    assert calls(nodes[1], "scontrol") == [drain_call(nodes[1])]
    assert toolkit_state(nodes[1])["nvidia-container-toolkit"] != "hi 1.21.0-1"
    for host in nodes[2:]:
        assert toolkit_state(host) == dict.fromkeys(TOOLKIT, "hi 1.20.0-1") and record(host) is None
        assert calls(host, "scontrol") == [] and calls(host, "squeue") == []

    # Without --resume the unfinished node is refused before anything is touched.
    code, refused = upgrade(inventory, *slurm, "--batch", "1", "--yes")
    assert code != 0 and refused["status"] == "refused"
    assert (
        list(refused["schedule"]["refused"]) == [nodes[1]] and "--resume" in refused["schedule"]["refused"][nodes[1]][0]
    )
    assert calls(nodes[2], "scontrol") == [] and record(nodes[1])["state"] == "upgrade-failed"

    # The record edited on the node: a failure turned into done (which would skip the node, still drained and not
    # validated), then units no upgrade stops slipped into stopped_units (which --resume would start): each refused
    # with what does not fit, before anything is touched.
    kept = record(nodes[1])
    for edit, expected in (
        ({"state": "upgrade-done"}, "state upgrade-done names step 'install'"),
        ({"stopped_units": ["ssh.service", "nvidia-persistenced.service"]}, "stopped_units names ssh.service, which"),
    ):
        sh(nodes[1], f"cat > {STATE_FILE} <<'EOF'\n{json.dumps({**kept, **edit})}\nEOF")
        code, refused = upgrade(inventory, *slurm, "--batch", "1", "--resume", "--yes")
        assert code != 0 and refused["status"] == "refused", refused
        [reason] = refused["schedule"]["refused"][nodes[1]]
        assert "upgrade record does not fit an upgrade's schedule" in reason and expected in reason, reason
        assert calls(nodes[1], "scontrol") == [drain_call(nodes[1])] and calls(nodes[2], "scontrol") == []
    sh(nodes[1], f"cat > {STATE_FILE} <<'EOF'\n{json.dumps(kept)}\nEOF")

    # Fixed; a stop asked for (the operator's stop file exists): the resumed node stops before its first step.
    sh(nodes[1], f"rm {FAIL_MARKER}")
    stop = tmp_path / "stop"
    stop.touch()
    code, stopped = upgrade(inventory, *slurm, "--resume", "--yes", "-e", f"upgrade_stop_file={stop}")
    assert code != 0 and stopped["status"] == "halted"
    assert (record(nodes[1])["state"], record(nodes[1])["step"]) == ("upgrade-stopped", "cordon")
    assert calls(nodes[1], "scontrol") == [drain_call(nodes[1])]
    assert record(nodes[2]) is None and stop.exists()
    stop.unlink()

    # Resumed in batches of two: node 2 finishes with node 3, then node 4; every node at 1.21.0, held, done,
    # back in Slurm.
    code, resumed = upgrade(inventory, *slurm, "--batch", "2", "--resume", "--yes")
    assert code == 0 and resumed["status"] == "done", resumed
    assert resumed["schedule"]["batches"] == [nodes[1:3], nodes[3:]]
    assert resumed["plans"][nodes[1]]["resume"] is True
    for host in nodes:
        assert toolkit_state(host) == dict.fromkeys(TOOLKIT, "hi 1.21.0-1"), host
        assert record(host)["state"] == "upgrade-done"
        assert calls(host, "scontrol")[-1] == f"update nodename={host} state=resume"

    # A second run changes nothing: every node is at the target.
    before = {host: sh(host, f"stat -c %Y {STATE_FILE}") for host in nodes}
    code, again = upgrade(inventory, *slurm, "--yes")
    assert code == 0 and again["status"] == "current" and again["schedule"]["current"] == nodes
    assert {host: sh(host, f"stat -c %Y {STATE_FILE}") for host in nodes} == before
    assert all(len(calls(host, "scontrol")) <= 4 for host in nodes)

    # validate on the upgraded lab; it ends by removing node 1's containerd drop-in, which is put back from node 2.
    validate_checks_the_lab(lab_name, nodes, tmp_path)
    dropin = "/etc/containerd/conf.d/99-nvidia.toml"
    lab._podman("cp", f"{nodes[1]}:{dropin}", str(tmp_path / "dropin.toml"))
    lab._podman("cp", str(tmp_path / "dropin.toml"), f"{nodes[0]}:{dropin}")

    # Back to 1.20.0: refused as a downgrade, then allowed, in batches of two through the Kubernetes path.
    k8s = ["--component", "toolkit", "--to", "1.20.0", "--drain", "kubernetes"]
    code, refused = upgrade(inventory, *k8s, "--yes")
    assert code != 0 and all("--allow-downgrade" in refused["schedule"]["refused"][h][0] for h in nodes)
    k8s_calls = tmp_path / "k8s-calls.jsonl"
    monkeypatch.setenv("ANSIBLE_COLLECTIONS_PATH", str(STANDINS / "collections"))
    monkeypatch.setenv("NODEFORGE_STANDIN_K8S_CALLS", str(k8s_calls))
    # Each node runs the GPU device plugin's DaemonSet pod, which holds a GPU and is not a job to wait for.
    pods = tmp_path / "pods.json"
    pods.write_text(json.dumps([{
        "metadata": {"name": "nvidia-device-plugin-x", "namespace": "kube-system",
                     "ownerReferences": [{"kind": "DaemonSet"}]},
        "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": 1}}}]}, "status": {"phase": "Running"},
    }]))  # fmt: skip
    monkeypatch.setenv("NODEFORGE_STANDIN_K8S_PODS", str(pods))
    code, down = upgrade(inventory, *k8s, "--allow-downgrade", "--max-unavailable", "50%", "--yes", "-e",
                         "upgrade_kubeconfig=/etc/nodeforge-test/kubeconfig")  # fmt: skip
    assert code == 0 and down["schedule"]["batches"] == [nodes[:2], nodes[2:]], down
    for host in nodes:
        assert toolkit_state(host) == dict.fromkeys(TOOLKIT, "hi 1.20.0-1"), host
        assert record(host)["state"] == "upgrade-done" and record(host)["from"] == {"toolkit": "1.21.0"}
    recorded = [json.loads(line) for line in k8s_calls.read_text().splitlines()]
    assert all(c["args"]["kubeconfig"] == "/etc/nodeforge-test/kubeconfig" for c in recorded)

    def per_node(host: str) -> list[str]:
        found = []
        for c in recorded:
            args = c["args"]
            if args.get("name") == host and c["module"] == "k8s_drain":
                found.append(f"drain:{args['state']}")
            elif args.get("name") == host and c["module"] == "k8s":
                found.append(f"label:{args['definition']['metadata']['labels']['nodeforge.io/upgrade-state']}")
            elif c["module"] == "k8s_info" and args["field_selectors"] == [f"spec.nodeName={host}"]:
                found.append("pods")
        return found

    for host in nodes:
        sequence = per_node(host)
        # Cordon before the look for GPU pods, the drain after it (DaemonSets ignored), uncordon last, labelled done.
        assert [s for s in sequence if not s.startswith("label:")] == [
            "drain:cordon",
            "pods",
            "drain:drain",
            "drain:uncordon",
        ]
        assert sequence[-1] == "label:upgrade-done" and "label:upgrade-started" in sequence
        (drain,) = [c for c in recorded if c["module"] == "k8s_drain" and c["args"]["name"] == host
                    and c["args"]["state"] == "drain"]  # fmt: skip
        options = drain["args"]["delete_options"]
        assert options["ignore_daemonsets"] is True and options["delete_emptydir_data"] is False
    # Batches of two (50% of four nodes, sized by the playbook's plan play): both nodes of a batch are cordoned
    # before either is uncordoned, and batch 2 starts only after batch 1 is uncordoned.
    order = [(c["args"].get("name"), c["args"].get("state")) for c in recorded if c["module"] == "k8s_drain"]
    for batch in (nodes[:2], nodes[2:]):
        assert max(order.index((h, "cordon")) for h in batch) < min(order.index((h, "uncordon")) for h in batch)
    last_of_first = max(order.index((h, "uncordon")) for h in nodes[:2])
    first_of_second = min(order.index((h, "cordon")) for h in nodes[2:])
    assert last_of_first < first_of_second, order

    lab_down_removes_it(lab_name)
