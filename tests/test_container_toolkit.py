"""Role nvidia_container_toolkit's logic that runs on the controller: the containerd filters and the expressions
that parse dpkg/apt output and merge daemon.json, rendered from the role's own files. The molecule scenarios prove
the same against the real containerd and dockerd; these cover the branches they cannot reach."""

from __future__ import annotations

import base64
import importlib
import json
import re
import subprocess
import tomllib
from functools import partial

import kubernetes_validate
import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from nodeforge import content
from tests import role_expressions
from tests.role_expressions import trusted

ROLE = content.roles_dir() / "nvidia_container_toolkit"
render = partial(role_expressions.render, "nvidia_container_toolkit")

cc = importlib.import_module("ansible_collections.nodeforge.gpu.plugins.filter.containerd_config")

CRI = 'plugins."io.containerd.grpc.v1.cri"'
# Debian 12's /etc/containerd/config.toml as containerd 1.6.20~ds1-1+deb12u3 ships it.
DEBIAN = """version = 2

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "/etc/cni/net.d"
  [plugins."io.containerd.internal.v1.opt"]
    path = "/var/lib/containerd/opt"
"""
CUSTOM = """# site settings
version = 2
imports = ["/etc/containerd/site.d/*.toml"]  # ours
root = "/var/lib/containerd-custom"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.example/pause:3.9"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
    SystemdCgroup = true
  [plugins."io.containerd.grpc.v1.cri".registry.mirrors."docker.io"]
    endpoint = ["https://mirror.example"]
"""
GLOB = "/etc/containerd/conf.d/*.toml"
# The oldest Kubernetes release the rendered manifests are checked against (node.k8s.io/v1 RuntimeClass: since 1.20).
OLDEST_K8S = "1.30"


def cri(dropin: str, version: int = 2) -> dict:
    return tomllib.loads(dropin)["plugins"][cc.CRI_PLUGIN[version]]


def test_dropin_keeps_debians_cri_settings_and_adds_the_runtime():
    dropin = cc.containerd_dropin([["/etc/containerd/config.toml", DEBIAN]], 2, header="# managed")
    assert dropin.startswith("# managed\nversion = 2\n")
    table = cri(dropin)
    assert table["cni"] == {"bin_dir": "/usr/lib/cni", "conf_dir": "/etc/cni/net.d"}
    assert table["containerd"] == {
        "runtimes": {
            "nvidia": {
                "runtime_type": "io.containerd.runc.v2",
                "options": {"BinaryName": "/usr/bin/nvidia-container-runtime"},
            }
        }
    }
    # Only the CRI plugin: the drop-in must not replace other plugins' tables.
    assert list(tomllib.loads(dropin)["plugins"]) == [cc.CRI_PLUGIN[2]]


def test_dropin_as_default_with_the_operators_settings():
    table = cri(cc.containerd_dropin([["config.toml", CUSTOM]], 2, set_as_default=True))
    assert table["sandbox_image"] == "registry.example/pause:3.9"
    assert table["registry"]["mirrors"]["docker.io"] == {"endpoint": ["https://mirror.example"]}
    assert table["containerd"]["default_runtime_name"] == "nvidia"
    assert table["containerd"]["runtimes"]["runc"] == {"options": {"SystemdCgroup": True}}
    # The nvidia runtime wraps runc with runc's cgroup driver.
    assert table["containerd"]["runtimes"]["nvidia"]["options"] == {
        "BinaryName": "/usr/bin/nvidia-container-runtime",
        "SystemdCgroup": True,
    }


def test_dropin_starts_from_the_last_earlier_file_with_a_cri_table():
    site = '[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "site/pause:3.10"\n'
    table = cri(cc.containerd_dropin([["config.toml", CUSTOM], ["/etc/containerd/site.d/a.toml", site]], 2))
    assert table["sandbox_image"] == "site/pause:3.10"
    assert "registry" not in table  # containerd replaced config.toml's CRI table with site.d's, so does the drop-in


def test_dropin_for_containerd_2_uses_the_cri_runtime_plugin():
    dropin = cc.containerd_dropin([["config.toml", "version = 3\n"]], 3, set_as_default=True)
    assert cri(dropin, 3)["containerd"]["default_runtime_name"] == "nvidia"


def test_config_gets_the_import_and_nothing_else_changes():
    new = cc.containerd_config(DEBIAN, GLOB)
    assert new == DEBIAN.replace("version = 2\n", f'version = 2\nimports = ["{GLOB}"]\n', 1)
    assert cc.containerd_config(new, GLOB) == new


def test_config_with_its_own_imports_keeps_them_first_and_its_comment():
    new = cc.containerd_config(CUSTOM, GLOB)
    assert f'imports = ["/etc/containerd/site.d/*.toml", "{GLOB}"]  # ours\n' in new
    assert new.replace(f', "{GLOB}"', "") == CUSTOM


def test_multi_line_imports_are_extended():
    new = cc.containerd_config('version = 2\nimports = [\n  "/a/*.toml",\n]\n\n[plugins]\n', GLOB)
    assert new == f'version = 2\nimports = ["/a/*.toml", "{GLOB}"]\n\n[plugins]\n'


def test_missing_config_is_created_with_the_version_containerd_writes():
    assert cc.containerd_config("", GLOB, 1) == f'version = 2\nimports = ["{GLOB}"]\n'
    assert cc.containerd_config("", GLOB, 2) == f'version = 3\nimports = ["{GLOB}"]\n'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[plugins.cri]\n  sandbox_image = "x"\n', "config.toml has version = (none: version 1); expected 2"),
        ("version = 2\n[plugins\n", "node-01:/etc/containerd/config.toml is not valid TOML"),
    ],
)
def test_configs_nodeforge_cannot_extend_are_refused_naming_the_file(text, message):
    with pytest.raises(cc.ContainerdConfigError, match=re.escape(message)):
        cc.containerd_config(text, GLOB, 1, "node-01:/etc/containerd/config.toml")


@pytest.mark.parametrize(
    ("dpkg", "expected"),
    [
        # Nothing installed yet: the newest build of the pinned version, never the newer 1.21.0.
        ("nvidia-container-toolkit un \n", "1.20.0-2"),
        # Installed (held) at a build of the pinned version: kept, no move.
        ("nvidia-container-toolkit hi 1.20.0-1\nlibnvidia-container1 hi 1.20.0-1\n", "1.20.0-1"),
        # Installed at another version: the pinned one.
        ("nvidia-container-toolkit hi 1.19.1-1\n", "1.20.0-2"),
    ],
)
def test_package_version_choice_from_dpkg_and_madison(dpkg, expected):
    madison = "".join(
        f" nvidia-container-toolkit | {v} | http://127.0.0.1:8083/stable/deb/amd64  Packages\n"
        for v in ("1.21.0-1", "1.20.0-2", "1.20.0-1", "1.19.1-1")
    )
    registered = {
        "__nvidia_container_toolkit_version": "1.20.0",
        "__nvidia_container_toolkit_packages": ["nvidia-container-toolkit", "libnvidia-container1"],
        "__nvidia_container_toolkit_apt_state": {
            "commands": {
                "dpkg": {"stdout_lines": dpkg.splitlines()},
                "madison": {"stdout_lines": madison.splitlines()},
            }
        },
    }
    name = "Choose the package version of the pinned toolkit version"
    assert render("install-apt.yml", name, "__nvidia_container_toolkit_package_version", **registered) == expected
    installed = render("install-apt.yml", name, "__nvidia_container_toolkit_installed_versions", **registered)
    assert installed == dict(line.replace(" hi ", " ").split() for line in dpkg.splitlines() if " hi " in line)


@pytest.mark.parametrize(
    ("current", "as_default", "expected_default"),
    [
        ({}, False, None),
        ({"default-runtime": "runc"}, True, "nvidia"),
        ({"default-runtime": "nvidia"}, False, None),  # nodeforge's earlier choice is taken back
        ({"default-runtime": "crun"}, False, "crun"),  # the operator's own choice stays
    ],
)
def test_daemon_json_merge_keeps_every_other_key(current, as_default, expected_default):
    current = {**current, "log-opts": {"max-size": "10m"}, "runtimes": {"crun": {"path": "/usr/bin/crun"}}}
    merged = render(
        "docker.yml",
        "Merge the nvidia runtime into daemon.json",
        "__nvidia_container_toolkit_docker_wanted",
        __nvidia_container_toolkit_docker_current=current,
        __nvidia_container_toolkit_runtime_name="nvidia",
        __nvidia_container_toolkit_runtime_binary="/usr/bin/nvidia-container-runtime",
        nvidia_container_toolkit_set_as_default=as_default,
    )
    assert merged.get("default-runtime") == expected_default
    assert merged["log-opts"] == {"max-size": "10m"}
    assert merged["runtimes"] == {
        "crun": {"path": "/usr/bin/crun"},
        "nvidia": {"path": "nvidia-container-runtime", "args": []},
    }


def load_runtime_class() -> dict:
    # The device plugin role renders it (k8s_gpu_device_plugin), for the runtime name this role configures.
    path = content.roles_dir() / "k8s_gpu_device_plugin" / "files" / "runtimeclass-nvidia.yaml"
    [runtime_class] = yaml.safe_load_all(path.read_text())
    return runtime_class


def test_runtime_class_names_the_runtime_the_role_configures():
    runtime_class = load_runtime_class()
    runtime = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["__nvidia_container_toolkit_runtime_name"]
    assert runtime_class["apiVersion"] == "node.k8s.io/v1" and runtime_class["kind"] == "RuntimeClass"
    assert runtime_class["metadata"]["name"] == runtime_class["handler"] == runtime
    # The API server's own rule for handler (validation.IsDNS1123Label), which the OpenAPI schema does not carry.
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", runtime_class["handler"])


@pytest.mark.parametrize("k8s_version", [OLDEST_K8S, kubernetes_validate.latest_version()])
def test_runtime_class_is_valid_for_kubernetes(k8s_version):
    """Offline, against the Kubernetes OpenAPI schema (strict: an unknown or misspelt field is an error)."""
    runtime_class = load_runtime_class()
    kubernetes_validate.validate(runtime_class, k8s_version, strict=True)
    # Not vacuous: the same check refuses a misspelt field and a missing handler.
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate({**runtime_class, "handlr": "nvidia"}, k8s_version, strict=True)
    without_handler = {key: value for key, value in runtime_class.items() if key != "handler"}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(without_handler, k8s_version, strict=True)


@pytest.mark.parametrize(
    "url",
    ["https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH)", "http://127.0.0.1:8083/stable/deb/$(ARCH)"],
)
def test_nvidia_install_guide_source_list_is_recognised(url, tmp_path):
    """The role's probe command that finds a list NVIDIA's install guide wrote for the same repository, run here on a
    sources directory: the guide's list and deb822 file, not the role's own list, another repository, another
    channel of the same one, a hidden file or a file of another kind."""
    probe = role_expressions.task(
        "nvidia_container_toolkit",
        "main.yml",
        "Look for the configured runtimes, other toolkit sources, the control device and what the role wrote before",
    )
    variables = {
        **probe["vars"],
        "__nvidia_container_toolkit_repo_url": url,
        "__nvidia_container_toolkit_source_list": f"{tmp_path}/nvidia-container-toolkit.list",
        "__nvidia_container_toolkit_pkg_family": "apt",
        "nvidia_container_toolkit_runtimes": ["containerd"],
    }
    argv = Templar(loader=DataLoader(), variables=variables).template(probe["nodeforge.gpu.probe"]["commands"])[
        "other_sources"
    ]
    prefix = url.replace("$(ARCH)", "")
    guide = f"deb [signed-by=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg] {url} /\n"
    (tmp_path / "nvidia-container-toolkit.list").write_text(f"deb [signed-by=/etc/apt/keyrings/k.asc] {url} /\n")
    (tmp_path / "guide.list").write_text(guide)
    (tmp_path / "guide.sources").write_text(f"Types: deb\nURIs: {prefix}\nSuites: /\n")
    (tmp_path / "debian.list").write_text("deb http://deb.debian.org/debian bookworm main\n")
    (tmp_path / "experimental.list").write_text(f"deb [signed-by=/k.asc] {url.replace('stable', 'experimental')} /\n")
    (tmp_path / ".hidden.list").write_text(guide)
    (tmp_path / "guide.list.save").write_text(guide)

    found = subprocess.run(argv, capture_output=True, text=True, check=True).stdout.splitlines()

    assert sorted(found) == [f"{tmp_path}/guide.list", f"{tmp_path}/guide.sources"]
    # A missing directory is no sources at all.
    variables["__nvidia_container_toolkit_source_list"] = f"{tmp_path}/none/nvidia-container-toolkit.list"
    missing = Templar(loader=DataLoader(), variables=variables).template(probe["nodeforge.gpu.probe"]["commands"])
    assert subprocess.run(missing["other_sources"], capture_output=True, text=True, check=True).stdout == ""


HOOK_PATH = "/usr/share/containers/oci/hooks.d/oci-nvidia-hook.json"


def conditions(file: str, name: str) -> list[str]:
    """The named task's `when`, as a list of conditions."""
    when = role_expressions.task("nvidia_container_toolkit", file, name).get("when", [])
    return [when] if isinstance(when, str) else list(when)


def holds(variables: dict, *tasks: tuple[str, str]) -> bool:
    """Whether every condition of the given tasks (file, name) holds: an include's and then a task of its file."""
    templar = Templar(loader=DataLoader(), variables=variables)
    return all(
        templar.template(trusted("{{ (" + condition + ") | bool }}"))
        for file, name in tasks
        for condition in conditions(file, name)
    )


HOOKS_INCLUDE = ("main.yml", "Install or remove the OCI prestart hook (podman, CRI-O hooks mode)")


def hook_removed(probe_content: str | None, reread: dict | None = None) -> bool:
    """Whether hooks.yml removes the hook file on a node without a hooks runtime, from main.yml's probe answer (None:
    no file) and, after an install in the run, the slurp that read it again (None: skipped). main.yml includes
    hooks.yml only when one of them may have found a hook."""
    task = role_expressions.task(
        "nvidia_container_toolkit", "hooks.yml", "Remove the hook that no configured runtime uses"
    )
    variables = {
        **task["vars"],
        "ansible_search_path": [str(ROLE)],
        "__nvidia_container_toolkit_hooks": False,
        "__nvidia_container_toolkit_hook_path": HOOK_PATH,
        "__nvidia_container_toolkit_node": {
            "read": {HOOK_PATH: {"exists": probe_content is not None, "content": probe_content}}
        },
        # hooks.yml reads the hook again only after an install in the run.
        "__nvidia_container_toolkit_install": {"changed": reread is not None},
        "__nvidia_container_toolkit_hook_reread": reread or {"changed": False, "skipped": True},
    }
    return holds(variables, HOOKS_INCLUDE, ("hooks.yml", "Remove the hook that no configured runtime uses"))


def test_a_converged_node_without_hooks_skips_the_hook_tasks_at_once():
    variables = {
        "__nvidia_container_toolkit_hook_path": HOOK_PATH,
        "__nvidia_container_toolkit_node": {"read": {HOOK_PATH: {"exists": False, "content": None}}},
        "__nvidia_container_toolkit_install": {"changed": False, "skipped": True},
    }
    assert holds({**variables, "__nvidia_container_toolkit_hooks": False}, HOOKS_INCLUDE) is False
    assert holds({**variables, "__nvidia_container_toolkit_hooks": True}, HOOKS_INCLUDE) is True


def test_only_the_hook_as_nodeforge_wrote_it_is_removed():
    ours = (ROLE / "files" / "oci-nvidia-hook.json").read_text()
    operators = ours.replace("prestart", "poststart")
    assert hook_removed(ours) is True
    # Reformatted, the same JSON is still nodeforge's.
    assert hook_removed(json.dumps(json.loads(ours), indent=8)) is True
    assert hook_removed(operators) is False
    assert hook_removed(None) is False
    assert hook_removed("") is False
    # Read again after an install: that answer counts, not the probe's from before it.
    assert hook_removed(None, {"changed": False, "content": base64.b64encode(ours.encode()).decode()}) is True
    assert hook_removed(ours, {"changed": False, "failed": True, "msg": "file not found"}) is False


RUNTIME_CONFIG = "/etc/nvidia-container-runtime/config.toml"
ROLE_VARS = role_expressions.load(ROLE / "vars" / "main.yml")


def root_given_back(content: str | None) -> bool:
    """Whether driver_container.yml runs its give-back edit on a host-driver node, from main.yml's probe answer
    (main.yml includes driver_container.yml on such a node only when the probe found the root line)."""
    variables = {
        **ROLE_VARS,
        "__nvidia_container_toolkit_driver_container": False,
        "__nvidia_container_toolkit_node": {
            "read": {RUNTIME_CONFIG: {"exists": content is not None, "content": content}}
        },
    }
    return holds(
        variables,
        ("main.yml", "Point the runtime at the GPU Operator's driver container, or at the host driver"),
        ("driver_container.yml", "Give the host driver back its root"),
    )


def test_only_a_config_with_the_driver_containers_root_line_is_edited_back():
    shipped = '[nvidia-container-cli]\n#root = "/run/nvidia/driver"\nenvironment = []\n'
    set_by_nodeforge = shipped.replace('#root = "/run/nvidia/driver"', 'root = "/run/nvidia/driver"  ')
    assert root_given_back(set_by_nodeforge) is True
    assert root_given_back(shipped) is False
    assert root_given_back(None) is False
    assert root_given_back(shipped.replace("#root", 'root = "/opt/driver"\n#root')) is False
    # lineinfile applies the same pattern to each line: what it matches, the decision matches.
    pattern = Templar(loader=DataLoader(), variables=ROLE_VARS).template(
        ROLE_VARS["__nvidia_container_toolkit_root_line"]
    )
    for text in (set_by_nodeforge, shipped, 'root\n= "/run/nvidia/driver"\n'):
        per_line = any(re.search(pattern, line) for line in text.splitlines(keepends=True))
        assert root_given_back(text) is per_line


def test_only_memlock_drop_ins_found_on_the_node_are_removed():
    task = role_expressions.task(
        "nvidia_container_toolkit", "memlock.yml", "Remove the memlock drop-ins of services no longer configured"
    )
    defaults = role_expressions.load(ROLE / "defaults" / "main.yml")
    variables = {**defaults, **ROLE_VARS, **task["vars"], "nvidia_container_toolkit_runtimes": ["containerd"]}
    templar = Templar(loader=DataLoader(), variables=variables)
    unused = templar.template(trusted("{{ __nvidia_container_toolkit_memlock_unused }}"))
    dropin = ROLE_VARS["__nvidia_container_toolkit_memlock_dropin"]
    assert sorted(unused) == [f"/etc/systemd/system/{s}.service.d/{dropin}" for s in ("crio", "docker")]
    docker = f"/etc/systemd/system/docker.service.d/{dropin}"
    found = {path: {"exists": path == docker} for path in ["/dev/nvidiactl", *unused]}
    templar = Templar(loader=DataLoader(), variables={**variables, "__nvidia_container_toolkit_node": {"paths": found}})
    assert templar.template(trusted("{{ __found }}")) == [docker]
    nothing = {path: {"exists": False} for path in found}
    templar = Templar(
        loader=DataLoader(), variables={**variables, "__nvidia_container_toolkit_node": {"paths": nothing}}
    )
    assert templar.template(trusted("{{ __found | length > 0 }}")) is False


PACKAGES = ["nvidia-container-toolkit", "libnvidia-container1"]
PACKAGES_INCLUDE = ("install-apt.yml", "Install and hold the pinned toolkit packages")


@pytest.mark.parametrize(
    ("dpkg", "check_mode", "pin_changed", "pending", "expected"),
    [
        # Converged: both installed at the chosen build and held; nothing for apt or dpkg.
        ("nvidia-container-toolkit hi 1.20.0-1\nlibnvidia-container1 hi 1.20.0-1\n", False, False, False, False),
        # A hold an operator released: dpkg has a hold to set again.
        ("nvidia-container-toolkit ii 1.20.0-1\nlibnvidia-container1 hi 1.20.0-1\n", False, False, False, True),
        # A move to another version: holds released, install, holds.
        ("nvidia-container-toolkit hi 1.19.1-1\nlibnvidia-container1 hi 1.19.1-1\n", False, True, False, True),
        # Nothing installed yet.
        ("nvidia-container-toolkit un \n", False, True, False, True),
        # Check mode with a changed pin (and nothing else to do): the step says it cannot simulate the install.
        ("nvidia-container-toolkit hi 1.20.0-1\nlibnvidia-container1 hi 1.20.0-1\n", True, True, False, True),
        # Check mode before the repository is configured: nothing to ask apt about.
        ("nvidia-container-toolkit un \n", True, False, True, False),
    ],
)
def test_the_package_step_runs_only_when_apt_or_dpkg_has_work(dpkg, check_mode, pin_changed, pending, expected):
    registered = {
        "__nvidia_container_toolkit_version": "1.20.0",
        "__nvidia_container_toolkit_packages": PACKAGES,
        "__nvidia_container_toolkit_apt_state": {
            "commands": {
                "dpkg": {"stdout_lines": dpkg.splitlines()},
                "madison": {"stdout_lines": [" nvidia-container-toolkit | 1.20.0-1 | http://x/ Packages"]},
            }
        },
    }
    todo = render(
        "install-apt.yml",
        "Choose the package version of the pinned toolkit version",
        "__nvidia_container_toolkit_todo",
        **registered,
    )
    variables = {
        "ansible_check_mode": check_mode,
        "__nvidia_container_toolkit_pending": pending,
        "__nvidia_container_toolkit_todo": todo,
        "__nvidia_container_toolkit_pin": {"changed": pin_changed},
    }
    assert holds(variables, PACKAGES_INCLUDE) is expected


def cdi(state: str, check_mode: bool = False, installed_now: bool = False) -> tuple[str | None, str | None]:
    """What cdi.yml does in the given state: the report it shows (None: none) and the file it includes (None: none)."""
    decide = role_expressions.task("nvidia_container_toolkit", "cdi.yml", "Decide how to provide the CDI specification")
    variables = {
        **ROLE_VARS,
        **decide["vars"],
        "inventory_hostname": "node-01",
        "ansible_check_mode": check_mode,
        "nodeforge_in_container": True,
        "nvidia_container_toolkit_cdi": "disabled" if state == "disabled" else "auto",
        "nvidia_container_toolkit_cdi_spec": "/etc/cdi/nvidia.yaml",
        "__nvidia_container_toolkit_driver_container": state == "driver_container",
        "__nvidia_container_toolkit_node": {"paths": {"/dev/nvidiactl": {"exists": state in ("refresh", "generated")}}},
        "__nvidia_container_toolkit_version": "1.20.0" if state == "refresh" else "1.17.8",
        "__nvidia_container_toolkit_install": {"changed": installed_now},
    }
    templar = Templar(loader=DataLoader(), variables=variables)
    facts = templar.template(decide["ansible.builtin.set_fact"])
    assert facts["__nvidia_container_toolkit_cdi_state"] == state
    variables = {**variables, **facts}
    report = role_expressions.task(
        "nvidia_container_toolkit", "cdi.yml", "Report why this run writes no CDI specification"
    )
    templar = Templar(loader=DataLoader(), variables={**variables, **report["vars"]})
    message = (
        templar.template(report["ansible.builtin.debug"]["msg"])
        if holds(variables, ("cdi.yml", report["name"]))
        else None
    )
    include = role_expressions.task(
        "nvidia_container_toolkit",
        "cdi.yml",
        "Provide the CDI specification (the refresh units of toolkit >= 1.18, else nvidia-ctk cdi generate)",
    )
    included = (
        Templar(loader=DataLoader(), variables=variables).template(include["ansible.builtin.include_tasks"]["file"])
        if holds(variables, ("cdi.yml", include["name"]))
        else None
    )
    return message, included


def test_cdi_reports_and_includes_what_each_node_needs():
    message, included = cdi("skipped")
    assert message.startswith("node-01: no NVIDIA GPU (no /dev/nvidiactl, this is a container)") and included is None
    message, included = cdi("driver_container")
    assert "GPU Operator's driver container" in message and included is None
    assert cdi("disabled") == (None, None)
    assert cdi("refresh") == (None, "cdi_refresh.yml")
    assert cdi("generated") == (None, "cdi_generate.yml")
    # Check mode before the install: said so; the refresh file still looks for a second specification.
    message, included = cdi("refresh", check_mode=True, installed_now=True)
    assert "a real run enables nvidia-cdi-refresh.path" in message and included == "cdi_refresh.yml"
    message, included = cdi("generated", check_mode=True, installed_now=True)
    assert "writes /etc/cdi/nvidia.yaml with nvidia-ctk cdi generate" in message and included is None
