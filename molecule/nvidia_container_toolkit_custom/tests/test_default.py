"""Verify nvidia_container_toolkit on a node an operator had set up: nothing of theirs is lost, nvidia is the default.

prepare.yml left containerd on the operator's config.toml (files/config.toml: own root, pause image, runc with the
systemd cgroup driver, a registry mirror, an import of their own, files/10-site.toml), Docker on their daemon.json
(files/daemon.json) and toolkit 1.19.1 held, installed by NVIDIA's guide (its own list and keyring). The role replaced
that list (a copy kept), moved the toolkit to the manifest's 1.20.0 (held again), made nvidia the default runtime of
containerd and Docker, and both daemons, restarted, run the operator's settings still.
The node also looks like a GPU node to the toolkit (prepare.yml: /dev/nvidiactl, an nvidia-smi stand-in reporting one
compute process, the nvidia module in modules.dep), so the role took the CDI refresh path of toolkit >= 1.18.
Commands run on the node as verify_lib.node_host reaches it; playbook runs use molecule's inventory.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest
import verify_lib
import yaml
from verify_lib import containerd_dump, held, installed_version

SCENARIO_DIR = Path(__file__).resolve().parent.parent
CONVERGE = SCENARIO_DIR / "converge.yml"
OPERATOR_CONFIG = (SCENARIO_DIR / "files" / "config.toml").read_text()
OPERATOR_DAEMON_JSON = json.loads((SCENARIO_DIR / "files" / "daemon.json").read_text())

PACKAGES = (
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
)
OLDER = "1.19.1-1"
PINNED = "1.20.0-1"  # the version manifest's 1.20.0
CRI = "io.containerd.grpc.v1.cri"
CONTAINERD_CONFIG = "/etc/containerd/config.toml"
CONTAINERD_DROPIN = "/etc/containerd/conf.d/99-nvidia.toml"
SITE_IMPORT = "/etc/containerd/site.d/10-site.toml"
RUNTIME_BINARY = "/usr/bin/nvidia-container-runtime"
MEMLOCK_DROPIN = "/etc/systemd/system/{}.service.d/20-nodeforge-nvidia-memlock.conf"
FACTS = "/root/nvidia_container_toolkit_facts.json"
REFRESH_SPEC = "/var/run/cdi/nvidia.yaml"  # nvidia-cdi-refresh.service's output
STATIC_SPEC = "/etc/cdi/nvidia.yaml"  # nvidia_container_toolkit_cdi_spec (nvidia-ctk cdi generate, older toolkits)


def test_toolkit_moved_from_the_held_older_version_to_the_pinned_one(node):
    for package in PACKAGES:
        assert installed_version(node, package) == PINNED, package
    assert held(node) >= set(PACKAGES)
    # dpkg upgraded the operator's 1.19.1 in place.
    log = node.file("/var/log/dpkg.log").content_string
    for package in PACKAGES:
        assert re.search(rf" upgrade {package}:amd64 {re.escape(OLDER)} {re.escape(PINNED)}$", log, re.M), package
    assert node.check_output("nvidia-ctk --version").splitlines()[0] == "NVIDIA Container Toolkit CLI version 1.20.0"


def test_nvidia_guides_source_list_was_replaced_and_kept(node):
    guide = "/etc/apt/sources.list.d/nvidia-container-toolkit.list"
    assert not node.file(guide).exists
    kept = node.file("/var/backups/nodeforge/nvidia_container_toolkit/nvidia-container-toolkit.list")
    assert "signed-by=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg" in kept.content_string
    ours = node.file("/etc/apt/sources.list.d/nodeforge-nvidia-container-toolkit.list").content_string
    assert "signed-by=/etc/apt/keyrings/nodeforge-nvidia-container-toolkit.asc" in ours
    # apt reads its sources again without "Conflicting values set for option Signed-By".
    update = node.run("apt-get update")
    assert update.rc == 0 and "Conflicting" not in update.stderr, update.stderr


def test_containerd_dump_keeps_the_operator_s_settings_and_defaults_to_nvidia(node):
    dump = containerd_dump(node)
    # Their import still applies, and so does the nvidia drop-in. containerd lists the files it loaded sorted by
    # path, not in the order it merged them; that order is config.toml's imports, asserted in the test below.
    assert {CONTAINERD_CONFIG, SITE_IMPORT, CONTAINERD_DROPIN} == set(dump["imports"]), dump["imports"]
    assert dump["metrics"]["address"] == "127.0.0.1:1338"
    assert dump["root"] == "/srv/containerd"
    assert dump["plugins"]["io.containerd.internal.v1.opt"]["path"] == "/srv/containerd/opt"
    cri = dump["plugins"][CRI]
    assert cri["sandbox_image"] == "registry.example.internal/k8s/pause:3.9"
    assert cri["registry"]["mirrors"] == {"docker.io": {"endpoint": ["https://mirror.example.internal"]}}
    assert cri["cni"]["bin_dir"] == "/usr/lib/cni"
    runtimes = cri["containerd"]["runtimes"]
    assert runtimes["runc"]["options"] == {"SystemdCgroup": True}
    assert cri["containerd"]["default_runtime_name"] == "nvidia"
    assert runtimes["nvidia"]["runtime_type"] == "io.containerd.runc.v2"
    assert runtimes["nvidia"]["options"]["BinaryName"] == RUNTIME_BINARY
    # The nvidia runtime wraps runc with the same cgroup driver (pods behave the same under both).
    assert runtimes["nvidia"]["options"]["SystemdCgroup"] is True


def test_running_containerd_uses_the_operator_s_configuration(node):
    assert node.service("containerd").is_running
    # Their import is live in the restarted daemon: it serves metrics where 10-site.toml says.
    metrics = node.run(
        "python3 -c %s",
        "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:1338/v1/metrics', timeout=10).status)",
    )
    assert metrics.rc == 0 and metrics.stdout.strip() == "200", metrics.stderr
    # And keeps its state under their root.
    assert node.file("/srv/containerd/io.containerd.metadata.v1.bolt").is_directory


def test_containerd_config_toml_only_gains_the_import(node):
    config = node.file(CONTAINERD_CONFIG).content_string
    operator_lines = [line for line in OPERATOR_CONFIG.splitlines() if not line.startswith("imports")]
    config_lines = config.splitlines()
    rest = iter(config_lines)
    assert all(line in rest for line in operator_lines), config
    assert 'imports = ["/etc/containerd/site.d/*.toml", "/etc/containerd/conf.d/*.toml"]' in config_lines
    parsed, operator = tomllib.loads(config), tomllib.loads(OPERATOR_CONFIG)
    assert parsed.pop("imports") == [*operator.pop("imports"), "/etc/containerd/conf.d/*.toml"]
    assert parsed == operator


def test_daemon_json_keeps_every_operator_key_and_defaults_to_nvidia(node):
    daemon = json.loads(node.file("/etc/docker/daemon.json").content_string)
    for key, value in OPERATOR_DAEMON_JSON.items():
        assert daemon[key] == value, key
    assert daemon["runtimes"] == {"nvidia": {"path": "nvidia-container-runtime", "args": []}}
    assert daemon["default-runtime"] == "nvidia"
    assert set(daemon) == {*OPERATOR_DAEMON_JSON, "runtimes", "default-runtime"}


def test_running_docker_defaults_to_nvidia_with_the_operator_s_settings(node):
    info = json.loads(node.check_output("docker info --format '{{json .}}'"))
    assert info["DefaultRuntime"] == "nvidia"
    assert info["Runtimes"]["nvidia"]["path"] == "nvidia-container-runtime"
    assert info["RegistryConfig"]["Mirrors"] == ["https://mirror.example.internal/"]
    assert (info["LoggingDriver"], info["Driver"]) == ("json-file", "vfs")


@pytest.mark.parametrize("service", ["containerd", "docker"])
def test_running_runtime_was_restarted_with_unlimited_memlock(node, service):
    verify_lib.assert_runs_with_unlimited_memlock(node, service, MEMLOCK_DROPIN.format(service))


def test_only_the_configured_runtimes_are_touched(node):
    assert not node.file("/etc/crio/crio.conf.d/99-nvidia.toml").exists
    assert not node.file(MEMLOCK_DROPIN.format("crio")).exists
    assert not node.file("/usr/share/containers/oci/hooks.d/oci-nvidia-hook.json").exists


def test_facts_say_nvidia_is_the_default_runtime(node):
    facts = json.loads(node.file(FACTS).content_string)
    assert facts["version"] == "1.20.0" and facts["runtimes"] == ["containerd", "docker"]
    # The default runtime: pods need no RuntimeClass.
    assert (facts["default_runtime"], facts["runtime_class"]) == ("nvidia", "")
    assert (facts["cdi"], facts["gpus"]) == ("refresh", True)


def test_cdi_refresh_units_keep_the_gpu_specification(node):
    assert node.check_output("systemctl is-enabled nvidia-cdi-refresh.path nvidia-cdi-refresh.service").split() == [
        "enabled",
        "enabled",
    ]
    # The trigger waits for driver changes; the service is a oneshot, inactive once it has run.
    assert node.check_output("systemctl is-active nvidia-cdi-refresh.path") == "active"
    assert node.run("systemctl is-failed --quiet nvidia-cdi-refresh.service").rc != 0
    spec = yaml.safe_load(node.file(REFRESH_SPEC).content_string)
    assert spec["kind"] == "nvidia.com/gpu" and [d["name"] for d in spec["devices"]] == ["all"]
    assert node.check_output("nvidia-ctk cdi list").split() == ["nvidia.com/gpu=all"]
    # No second specification from `nvidia-ctk cdi generate`: the refresh units own it.
    assert not node.file(STATIC_SPEC).exists


def test_rerun_writes_a_lost_spec_again_and_announces_the_runtime_restart(node):
    """/var/run is a tmpfs: a lost spec comes back; a restart on a node with GPU processes is announced first."""
    node.run_expect([0], f"rm -f {REFRESH_SPEC}")
    # A specification an older toolkit wrote (the role warns, keeps it) and an edited memlock drop-in (restarts).
    node.run_expect([0], f"mkdir -p /etc/cdi && printf 'cdiVersion: 0.5.0\\nkind: nvidia.com/gpu\\n' > {STATIC_SPEC}")
    dropin = MEMLOCK_DROPIN.format("containerd")
    node.run_expect([0], f"printf '[Service]\\nLimitMEMLOCK=64M\\n' > {dropin}")
    try:
        run = verify_lib.run_playbook(CONVERGE)
    finally:
        node.run_expect([0], f"rm -f {STATIC_SPEC}")
    assert run.rc == 0 and run.failed == [], run.failed
    changed = {name.split(" : ")[-1] for name in run.changed}
    assert {"Write the missing CDI specification with the refresh service", "Write the memlock drop-ins"} <= changed
    assert changed <= {
        "Write the missing CDI specification with the refresh service",
        "Write the memlock drop-ins",
        "Reload systemd units",
        "Restart the runtime",
    }, changed
    assert yaml.safe_load(node.file(REFRESH_SPEC).content_string)["kind"] == "nvidia.com/gpu"
    [warning] = [r["msg"] for r in run.results("Warn about a second NVIDIA CDI specification") if "msg" in r]
    assert STATIC_SPEC in warning and REFRESH_SPEC in warning
    announced = sorted(r["msg"] for r in run.results("Announce the restart") if "msg" in r)
    assert len(announced) == 2, announced  # containerd and Docker
    for message in announced:
        assert "is restarted now" in message and "1 GPU process(es) running on the node" in message, message
    # What happens to containers, per runtime: containerd's shims keep them; dockerd without live-restore would stop
    # them (it has none running here, so it is restarted).
    assert "containerd is restarted now" in announced[0] and "their shims are not restarted" in announced[0]
    assert "docker is restarted now" in announced[1]
    assert "no container is running (daemon.json has no live-restore)" in announced[1]
    verify_lib.assert_runs_with_unlimited_memlock(node, "containerd", dropin)


def test_check_mode_run_changes_nothing(node):
    run = verify_lib.run_playbook(CONVERGE, check=True)
    assert run.rc == 0 and run.failed == [], run.failed
    assert run.changed == [], run.changed
