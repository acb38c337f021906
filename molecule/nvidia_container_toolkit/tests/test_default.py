"""Verify nvidia_container_toolkit for containerd, Docker, CRI-O and podman from the signed fixture repository.

The node runs Debian's own containerd 1.6 and Docker 20.10 (prepare.yml): both daemons were restarted by the role and
report the nvidia runtime themselves. CRI-O and podman are not installed: their files are checked against their
formats (TOML; the OCI hooks 1.0.0 rules of containers/common's hook reader). The role installed the manifest's toolkit
1.20.0 exactly, pinned and held although 1.21.0 is in the repository, and added nvidia to every runtime without
making it the default (Kubernetes selects it through the RuntimeClass). No GPU here: CDI generation was skipped.
Commands run on the node as verify_lib.node_host reaches it; playbook runs use molecule's inventory.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import verify_lib
from verify_lib import containerd_dump, docker_info, held, installed_version

SCENARIO_DIR = Path(__file__).resolve().parent.parent
CONVERGE = SCENARIO_DIR / "converge.yml"
FIXTURE_REPO = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "fixture-repo"

KEYRING = "/etc/apt/keyrings/nodeforge-nvidia-container-toolkit.asc"
SOURCE_LIST = "/etc/apt/sources.list.d/nodeforge-nvidia-container-toolkit.list"
PIN_FILE = "/etc/apt/preferences.d/nodeforge-nvidia-container-toolkit"
REPO_URL = "http://127.0.0.1:8083/stable/deb/$(ARCH)"
PACKAGES = verify_lib.TOOLKIT_PACKAGES
PINNED = "1.20.0-1"  # the version manifest's 1.20.0
NEWER = "1.21.0-1"

CRI = "io.containerd.grpc.v1.cri"
CONTAINERD_CONFIG = "/etc/containerd/config.toml"
CONTAINERD_DEBIAN = "/root/containerd-config.toml.debian"  # prepare.yml's copy of the package's file
CONTAINERD_DROPIN = "/etc/containerd/conf.d/99-nvidia.toml"
CONTAINERD_IMPORT = "/etc/containerd/conf.d/*.toml"
RUNTIME_BINARY = "/usr/bin/nvidia-container-runtime"
DAEMON_JSON = "/etc/docker/daemon.json"
PREPARED_DAEMON_JSON = {"storage-driver": "vfs", "iptables": False, "bridge": "none"}  # prepare.yml's
CRIO_DROPIN = "/etc/crio/crio.conf.d/99-nvidia.toml"
HOOK = "/usr/share/containers/oci/hooks.d/oci-nvidia-hook.json"
MEMLOCK_DROPIN = "/etc/systemd/system/{}.service.d/20-nodeforge-nvidia-memlock.conf"
FACTS = "/root/nvidia_container_toolkit_facts.json"


def is_subsequence(lines: list[str], of: list[str]) -> bool:
    rest = iter(of)
    return all(line in rest for line in lines)


def test_keyring_is_the_repository_key(node):
    keyring = node.file(KEYRING)
    assert keyring.content_string == (FIXTURE_REPO / "repo" / "fixture-archive-keyring.asc").read_text()
    fingerprint = json.loads((FIXTURE_REPO / "fixture-repo.json").read_text())["fingerprint"]
    assert f"fpr:::::::::{fingerprint}:" in node.check_output("gpg --show-keys --with-colons %s", KEYRING)


def test_a_key_without_the_pinned_fingerprint_is_refused(node):
    """The key used to be fetched once (force: false) and never checked: now each run fetches it and refuses a key
    whose fingerprint the manifest does not pin (here NVIDIA's real one, which the stand-in key is not)."""
    before = node.file(KEYRING).content_string
    nvidia = "C95B321B61E88C1809C4F759DDCAE044F796ECB0"
    overrides = {
        "nvidia_container_toolkit": {
            "deb_url": REPO_URL,
            "key_url": "http://127.0.0.1:8083/gpgkey",
            "key_fingerprints": [nvidia],
        }
    }
    run = verify_lib.run_playbook(CONVERGE, {"nodeforge_manifest_overrides": overrides})
    assert run.rc != 0
    [refusal] = run.results("Check the key against the pinned fingerprints")
    fingerprint = json.loads((FIXTURE_REPO / "fixture-repo.json").read_text())["fingerprint"]
    message = " ".join(refusal["msg"].split())
    assert (
        f"holds the key(s) {fingerprint}, of which the version manifest does not pin {fingerprint} (pinned: {nvidia})"
        in message
    )
    assert run.failed == ["nodeforge : Check the key against the pinned fingerprints"]
    assert node.file(KEYRING).content_string == before


def test_a_second_key_behind_the_pinned_one_is_refused(node):
    """apt trusts every key of the keyring file: a file whose first block is the pinned key and whose second is
    another key used to pass (only the first block was read, and one pinned match was enough)."""
    before = node.file(KEYRING).content_string
    fingerprint = json.loads((FIXTURE_REPO / "fixture-repo.json").read_text())["fingerprint"]
    outputs = Path(__file__).resolve().parents[3] / "tests" / "data" / "outputs"
    extra = (outputs / "openpgp-key-ed25519-fixture.asc").read_text()
    # gpg's own listing of that key: the fpr line after pub.
    [extra_fingerprint] = [
        line.split(":")[9]
        for line in (outputs / "gpg-show-keys-ed25519-fixture.txt").read_text().splitlines()[1:2]
        if line.startswith("fpr:")
    ]
    served = "/srv/nvidia-container-toolkit-repo"
    node.run_expect([0], f"cat {served}/gpgkey - > {served}/gpgkey2 <<'EOF'\n{extra}EOF")
    overrides = {
        "nvidia_container_toolkit": {
            "deb_url": REPO_URL,
            "key_url": "http://127.0.0.1:8083/gpgkey2",
            "key_fingerprints": [fingerprint],
        }
    }
    try:
        run = verify_lib.run_playbook(CONVERGE, {"nodeforge_manifest_overrides": overrides})
    finally:
        node.run(f"rm -f {served}/gpgkey2")
    assert run.rc != 0
    [refusal] = run.results("Check the key against the pinned fingerprints")
    message = " ".join(refusal["msg"].split())
    assert f"holds the key(s) {fingerprint}, {extra_fingerprint}, of which the version manifest does not pin" in message
    assert f"does not pin {extra_fingerprint} (pinned: {fingerprint})" in message
    assert run.failed == ["nodeforge : Check the key against the pinned fingerprints"]
    assert node.file(KEYRING).content_string == before


def test_source_list_names_the_flat_repository_signed_by_the_keyring(node):
    lines = [line for line in node.file(SOURCE_LIST).content_string.splitlines() if line and not line.startswith("#")]
    assert lines == [f"deb [signed-by={KEYRING}] {REPO_URL} /"]
    # apt expanded $(ARCH) and reads the repository from there.
    assert "http://127.0.0.1:8083/stable/deb/amd64" in node.check_output("apt-cache policy nvidia-container-toolkit")
    # The key in that keyring verifies the signed index apt fetched.
    verify_lib.assert_apt_index_signed_by(node, KEYRING, "127.0.0.1:8083")


def test_the_manifest_version_is_installed_pinned_and_held(node):
    for package in PACKAGES:
        assert installed_version(node, package) == PINNED, package
        policy = node.check_output("apt-cache policy %s", package)
        assert f"Candidate: {PINNED}" in policy and NEWER in policy, policy
    assert held(node) >= set(PACKAGES)
    stanza = dict(
        line.split(": ", 1)
        for line in node.file(PIN_FILE).content_string.splitlines()
        if ": " in line and line[0] != "#"
    )
    assert set(stanza["Package"].split()) == set(PACKAGES)
    assert re.fullmatch(r"version 1\.20\.0-(1|\*)", stanza["Pin"]), stanza["Pin"]
    assert stanza["Pin-Priority"] == "1001"
    assert node.check_output("nvidia-ctk --version").splitlines()[0] == "NVIDIA Container Toolkit CLI version 1.20.0"


def test_apt_upgrade_leaves_the_toolkit_alone(node):
    # Control: without nodeforge's pin and the holds, apt would move the four packages to the newer version.
    unpinned = node.check_output(
        "apt-get --simulate --ignore-hold -o Dir::Etc::PreferencesParts=/nonexistent upgrade 2>/dev/null"
    )
    for package in PACKAGES:
        assert re.search(rf"^Inst {package} \[{re.escape(PINNED)}\] \({re.escape(NEWER)} ", unpinned, re.M), unpinned
    dist = node.check_output("apt-get --simulate dist-upgrade 2>/dev/null")
    assert not re.search(r"^(Inst|Remv) \S*nvidia-container", dist, re.M), dist


def test_containerd_dump_has_the_nvidia_runtime_and_debian_s_cri_settings(node):
    dump = containerd_dump(node)
    assert CONTAINERD_DROPIN in dump["imports"]
    cri = dump["plugins"][CRI]
    nvidia = cri["containerd"]["runtimes"]["nvidia"]
    assert nvidia["runtime_type"] == "io.containerd.runc.v2"
    assert nvidia["options"] == {"BinaryName": RUNTIME_BINARY}
    # Not the default: pods ask for it through the RuntimeClass.
    assert cri["containerd"]["default_runtime_name"] == "runc"
    # Debian's CNI paths survive the import that replaces the whole CRI table (containerd's default is /opt/cni/bin).
    assert (cri["cni"]["bin_dir"], cri["cni"]["conf_dir"]) == ("/usr/lib/cni", "/etc/cni/net.d")
    # Debian's other plugin setting is untouched.
    assert dump["plugins"]["io.containerd.internal.v1.opt"]["path"] == "/var/lib/containerd/opt"


def test_containerd_drop_in_is_debian_s_cri_table_plus_the_nvidia_runtime(node):
    debian = tomllib.loads(node.file(CONTAINERD_DEBIAN).content_string)
    dropin = tomllib.loads(node.file(CONTAINERD_DROPIN).content_string)
    assert dropin["version"] == 2 and set(dropin) == {"version", "plugins"}
    assert set(dropin["plugins"]) == {CRI}
    cri = dropin["plugins"][CRI]
    assert cri["cni"] == debian["plugins"][CRI]["cni"]
    assert cri["containerd"]["runtimes"] == {
        "nvidia": {"runtime_type": "io.containerd.runc.v2", "options": {"BinaryName": RUNTIME_BINARY}}
    }
    assert "default_runtime_name" not in cri["containerd"]


def test_containerd_config_toml_only_gains_the_import(node):
    debian = node.file(CONTAINERD_DEBIAN).content_string
    config = node.file(CONTAINERD_CONFIG).content_string
    assert is_subsequence(debian.splitlines(), config.splitlines()), config
    assert [line for line in config.splitlines() if line not in debian.splitlines()] == [
        f'imports = ["{CONTAINERD_IMPORT}"]'
    ]
    parsed = tomllib.loads(config)
    assert parsed.pop("imports") == [CONTAINERD_IMPORT]
    assert parsed == tomllib.loads(debian)


def test_docker_lists_the_nvidia_runtime_and_keeps_runc_the_default(node):
    info = docker_info(node)
    assert info["Runtimes"]["nvidia"]["path"] == "nvidia-container-runtime"
    assert info["DefaultRuntime"] == "runc"
    # dockerd still runs with prepare.yml's settings.
    assert info["Driver"] == "vfs"
    daemon = json.loads(node.file(DAEMON_JSON).content_string)
    assert daemon == {**PREPARED_DAEMON_JSON, "runtimes": {"nvidia": {"path": "nvidia-container-runtime", "args": []}}}


@pytest.mark.parametrize("service", ["containerd", "docker"])
def test_running_runtime_was_restarted_with_unlimited_memlock(node, service):
    verify_lib.assert_runs_with_unlimited_memlock(node, service, MEMLOCK_DROPIN.format(service))


def test_crio_gets_the_nvidia_runtime_and_a_memlock_drop_in(node):
    assert tomllib.loads(node.file(CRIO_DROPIN).content_string) == {
        "crio": {"runtime": {"runtimes": {"nvidia": {"runtime_path": RUNTIME_BINARY, "runtime_type": "oci"}}}}
    }
    # crio_memlock dropin (the default): the service's limit, not default_ulimits.
    assert "[Service]\nLimitMEMLOCK=infinity\n" in node.file(MEMLOCK_DROPIN.format("crio")).content_string
    # CRI-O runs crun: the nvidia runtime must be allowed to wrap it.
    runtime_config = tomllib.loads(node.file("/etc/nvidia-container-runtime/config.toml").content_string)
    assert "crun" in runtime_config["nvidia-container-runtime"]["runtimes"]


def test_podman_hook_runs_the_toolkit_s_binary_in_every_container(node):
    hook = json.loads(node.file(HOOK).content_string)
    assert hook == {
        "version": "1.0.0",
        "hook": {
            "path": "/usr/bin/nvidia-container-runtime-hook",
            "args": ["nvidia-container-runtime-hook", "prestart"],
        },
        "when": {"always": True, "commands": [".*"]},
        "stages": ["prestart"],
    }
    # The hook runs the installed toolkit's binary.
    binary = node.file(hook["hook"]["path"])
    assert binary.is_file and binary.mode & 0o111
    assert node.check_output("dpkg-query --search %s", hook["hook"]["path"]).startswith("nvidia-container-toolkit:")


def test_podman_itself_injects_the_hook_the_role_wrote(node, tmp_path):
    """The file as the role wrote it, in a hooks directory of this machine's podman: podman's hook reader (containers/
    common pkg/hooks, which CRI-O shares) validates it - it drops a hook whose path does not exist, so a recorder stands
    at /usr/bin/nvidia-container-runtime-hook, in an overlay of /usr/bin in a mount namespace of this test's own - and
    the runtime runs it at prestart with the file's arguments and the container's OCI state on stdin."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root podman and unshare: the recorder is mounted over /usr/bin in a private mount namespace")
    hooks, bin_dir, record = tmp_path / "hooks", tmp_path / "bin", tmp_path / "record"
    hooks.mkdir()
    bin_dir.mkdir()
    record.mkdir()
    (hooks / Path(HOOK).name).write_text(node.file(HOOK).content_string)
    recorder = bin_dir / "nvidia-container-runtime-hook"
    recorder.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {record}/argv\ncat > {record}/state.json\n")
    recorder.chmod(0o755)
    image = os.environ.get("MOLECULE_DISTRO") or "localhost/nodeforge-debian12:latest"
    script = (
        f"mount -t overlay nodeforge-hook-test -o lowerdir={bin_dir}:/usr/bin /usr/bin"
        f" && exec podman --hooks-dir={hooks} run --rm --network=none {image} true"
    )
    run = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert (record / "argv").read_text().splitlines() == ["prestart"]
    state = json.loads((record / "state.json").read_text())
    assert state["status"] == "creating" and state["ociVersion"].startswith("1."), state


def test_facts_say_nvidia_is_a_runtime_class_and_cdi_was_skipped(node):
    facts = json.loads(node.file(FACTS).content_string)
    assert facts["version"] == "1.20.0"
    assert facts["runtimes"] == ["containerd", "docker", "crio", "podman"]
    assert (facts["default_runtime"], facts["runtime_class"]) == ("", "nvidia")
    # No /dev/nvidiactl: nothing to describe, and nvidia-ctk was not asked to (it would fail without NVML).
    assert (facts["cdi"], facts["gpus"]) == ("skipped", False)
    assert not node.file("/dev/nvidiactl").exists
    for spec in ("/etc/cdi/nvidia.yaml", "/var/run/cdi/nvidia.yaml"):
        assert not node.file(spec).exists, spec


def test_check_mode_run_changes_nothing(node):
    run = verify_lib.run_playbook(CONVERGE, check=True)
    assert run.rc == 0 and run.failed == [], run.failed
    assert run.changed == [], run.changed
    messages = [
        str(result.get("msg", ""))
        for play in run.out["plays"]
        for task in play["tasks"]
        for result in task["hosts"].values()
    ]
    assert any("no NVIDIA GPU" in message for message in messages), messages
