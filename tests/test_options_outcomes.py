"""Role options whose non-default value no other test set (issue 44), each given a value that changes what the role
decides, does or passes on: the role's own `when:` conditions and module arguments, read from its task files and
rendered with Ansible's templar (tests/role_expressions.py), and validate's checks (module_utils/validate.py).

Options whose value changes an outcome only on a real node, at a timeout's expiry or in a molecule scenario have
their reason in tools/options_coverage.yml instead.
"""

from __future__ import annotations

import base64
import json

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from nodeforge import content
from tests import role_expressions
from tests.test_k8s_objects import by_kind, cluster, everything
from tests.test_preflight_expressions import POLICY, preflight_result, probed
from tests.test_validate import by_check, expect, output

from ansible_collections.nodeforge.gpu.plugins.module_utils import validate  # isort: skip

OMIT = "__omit_place_holder__options_outcomes"


def find_task(role: str, file: str, name: str) -> dict:
    """The task of that name in a role's task file, inside blocks too; a block's `when:` goes with its tasks."""

    def walk(tasks: list, inherited: list) -> list[dict]:
        found = []
        for task in tasks or []:
            when = task.get("when", [])
            conditions = inherited + (when if isinstance(when, list) else [when])
            if task.get("name") == name:
                found.append({**task, "when": conditions})
            for key in ("block", "rescue", "always"):
                found += walk(task.get(key), conditions)
        return found

    [task] = walk(role_expressions.load(content.roles_dir() / role / "tasks" / file), [])
    return task


def role_defaults(role: str) -> dict:
    return role_expressions.load(content.roles_dir() / role / "defaults" / "main.yml")


def templar(variables: dict) -> Templar:
    return Templar(loader=DataLoader(), variables={"omit": OMIT, **variables})


def runs(task: dict, **variables) -> bool:
    """Whether the task's conditions (its own and its blocks') all hold, as Ansible evaluates `when:`."""
    t = templar({**variables, **task.get("vars", {})})
    return all(t.template(role_expressions.trusted(f"{{{{ ({c}) | bool }}}}")) for c in task["when"])


def argument(task: dict, module: str, **variables) -> object:
    return templar({**variables, **task.get("vars", {})}).template(task[module])


# --- nvidia_driver_load_modules ---------------------------------------------------------------------------------------

LOAD = find_task("nvidia_driver", "configure.yml", "Load the new driver modules and read the version loaded")
# A node where the role would load the driver it installed: nothing loaded, nouveau gone, DKMS built for this kernel.
LOADABLE = {
    "__nvidia_driver_in_container": False,
    "__nvidia_driver_modules": {"nvidia": "nvidia"},
    "__nvidia_driver_installed_version": "580.126.20",
    "__nvidia_driver_loaded_version": "",
    "__nvidia_driver_nouveau_loaded": False,
    "__nvidia_driver_dkms": {"name": "nvidia"},
    "__nvidia_driver_dkms_built": ["6.1.0-56-amd64"],
    "ansible_facts": {"kernel": "6.1.0-56-amd64"},
}


@pytest.mark.parametrize(("value", "loads"), [(True, True), (False, False), ("false", False), ("yes", True)])
def test_nvidia_driver_load_modules_false_leaves_the_modules_unloaded(value, loads):
    loaded = runs(LOAD, **LOADABLE, nvidia_driver_load_modules=value)
    assert loaded is loads
    # The role's default loads them.
    assert runs(LOAD, **{**role_defaults("nvidia_driver"), **LOADABLE}) is True


# --- ofed_ipoib_apply -------------------------------------------------------------------------------------------------

APPLY = find_task("ofed", "handlers/ipoib_apply.yml", "Apply the netplan configuration")
NOT_APPLIED = find_task("ofed", "handlers/ipoib_apply.yml", "Report that the IPoIB configuration is not applied")


@pytest.mark.parametrize(("value", "applied"), [(True, True), (False, False), ("false", False)])
def test_ofed_ipoib_apply_false_writes_the_configuration_for_the_next_boot(value, applied):
    node = {
        "nodeforge_in_container": False,
        "ansible_check_mode": False,
        "__ofed_ipoib_backend": "netplan",
        "ofed_ipoib_apply": value,
        "inventory_hostname": "n1",
    }
    assert runs(APPLY, **node) is applied
    assert runs(NOT_APPLIED, **node) is not applied
    if not applied:
        said = argument(NOT_APPLIED, "ansible.builtin.debug", **node)["msg"]
        assert said.strip() == "n1: ofed_ipoib_apply is false: the IPoIB configuration applies at the next boot."


# --- ofed_mlnx_ofed_add_kernel_support --------------------------------------------------------------------------------

FLAGS = find_task("ofed", "mlnx_ofed_install.yml", "Choose the mlnxofedinstall flags")
BASE_FLAGS = ["--all", "--without-fw-update"]  # ofed_mlnx_ofed_install_flags without its default --force


@pytest.mark.parametrize(
    ("value", "kernel_packages", "added"),
    [
        ("auto", 0, True),  # the tarball has no packages for this kernel: build them
        ("auto", 3, False),
        ("always", 3, True),
        ("never", 0, False),
    ],
)
def test_ofed_mlnx_ofed_add_kernel_support_decides_the_install_flags(value, kernel_packages, added):
    variables = {
        "ofed_mlnx_ofed_install_flags": BASE_FLAGS,
        "ofed_mlnx_ofed_add_kernel_support": value,
        "__ofed_mlnx_kernel_packages": {"matched": kernel_packages},
        "ansible_facts": {"kernel": "6.1.0-56-amd64"},
    }
    facts = argument(FLAGS, "ansible.builtin.set_fact", **variables)
    assert facts["__ofed_mlnx_flags"] == BASE_FLAGS + (["--add-kernel-support"] if added else [])
    if value != "auto":
        assert facts["__ofed_mlnx_kernel_note"].strip() == f"ofed_mlnx_ofed_add_kernel_support is {value}"


# --- validate_rdma_fraction -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("fraction", "status", "floor"), [(0.9, "pass", 11250.0), (0.95, "fail", 11875.0)])
def test_validate_rdma_fraction_sets_the_ib_write_bw_floor(fraction, status, floor):
    """11811.28 MB/s measured on a 100 Gb/s EDR port (12500 MB/s): above 90 % of its line rate, below 95 %."""
    runs_ = {"mlx5_0": {"item": {"name": "mlx5_0"}, "stdout": output("ib-write-bw-redbook-004.txt"), "rc": 0}}
    exp = expect("dgx-1", validate_rdma_fraction=fraction)
    found = by_check(validate.perf_checks({"enabled": True, "peer": "dgx02", "ib": runs_}, exp, "dgx01"))
    check = found["ib_write_bw[mlx5_0 <-> dgx02]"]
    assert (check["status"], check["measured"], check["expected"]) == (status, 11811.28, floor)


# --- k8s_cluster_context ----------------------------------------------------------------------------------------------

KUBECONFIG = yaml.safe_dump(
    {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "staging",
        "contexts": [
            {"name": "staging", "context": {"cluster": "staging", "user": "admin"}},
            {"name": "prod", "context": {"cluster": "prod", "user": "admin"}},
        ],
        "clusters": [
            {"name": "staging", "cluster": {"server": "https://staging.example:6443"}},
            {"name": "prod", "cluster": {"server": "https://prod.example:6443"}},
        ],
        "users": [{"name": "admin", "user": {"token": "x"}}],
    }
)


@pytest.mark.parametrize(("context", "server", "passed"), [("prod", "https://prod.example:6443", "prod"),
                                                           ("", "https://staging.example:6443", OMIT)])  # fmt: skip
def test_k8s_cluster_context_chooses_the_api_server_every_kubernetes_call_talks_to(context, server, passed):
    variables = {
        "k8s_cluster_context": context,
        "k8s_cluster_kubeconfig": "/home/op/.kube/config",
        "__k8s_cluster_kubeconfig_file": {"content": base64.b64encode(KUBECONFIG.encode()).decode()},
    }
    find = find_task("k8s_cluster", "main.yml", "Find the API server the kubeconfig points at")
    assert argument(find, "ansible.builtin.set_fact", **variables)["__k8s_cluster_server"].strip() == server
    # Each kubernetes.core call gets it as `context` (left out when empty: the kubeconfig's current context).
    for name, module in (
        ("Check that the API server answers", "kubernetes.core.k8s_cluster_info"),
        ("Apply each object (server-side apply, field manager nodeforge)", "kubernetes.core.k8s"),
    ):
        args = argument(find_task("k8s_cluster", "main.yml", name), module, **variables, item={}, **WAIT)
        assert args["context"] == passed, name


WAIT = {"__k8s_cluster_waited_kinds": [], "k8s_cluster_wait_timeout": 900}


def test_k8s_cluster_wait_timeout_reaches_the_apply():
    task = find_task("k8s_cluster", "main.yml", "Apply each object (server-side apply, field manager nodeforge)")
    args = argument(task, "kubernetes.core.k8s", **WAIT, item={"kind": "Deployment"}, k8s_cluster_context="",
                    k8s_cluster_kubeconfig="/k")  # fmt: skip
    assert int(args["wait_timeout"]) == 900


# --- the upgrade's drain ----------------------------------------------------------------------------------------------


def test_upgrade_drain_options_reach_k8s_drain():
    """upgrade_drain_timeout, upgrade_drain_delete_emptydir_data and upgrade_k8s_context as kubernetes.core.k8s_drain
    gets them (a timeout changes an outcome only at its expiry, on a cluster)."""
    task = find_task("upgrade", "step-drain.yml", "Drain the Kubernetes node")
    variables = {**role_defaults("upgrade"), "__upgrade_k8s_node": "gpu-01", "upgrade_drain": "kubernetes"}
    default = argument(task, "kubernetes.core.k8s_drain", **variables)
    assert default["delete_options"]["wait_timeout"] == 600
    assert default["delete_options"]["delete_emptydir_data"] is False and default["context"] == OMIT
    changed = {"upgrade_drain_timeout": "1200", "upgrade_drain_delete_emptydir_data": "yes", "upgrade_k8s_context": "p"}
    args = argument(task, "kubernetes.core.k8s_drain", **{**variables, **changed})
    assert args["delete_options"] == {"ignore_daemonsets": True, "delete_emptydir_data": True, "wait_timeout": 1200}
    assert args["context"] == "p"
    assert not runs(task, **{**variables, "upgrade_drain": "slurm"})


# --- nodeforge_reboot_timeout -----------------------------------------------------------------------------------------


def test_nodeforge_reboot_timeout_is_the_reboot_modules_timeout():
    """Only its expiry changes an outcome (a node that does not come back within it fails the run), which no machine
    here can reboot to show; what reaches ansible.builtin.reboot is shown instead."""
    task = find_task("nodeforge", "reboot_now.yml", "Reboot the node")
    args = argument(task, "ansible.builtin.reboot", nodeforge_reboot_timeout=3600, nodeforge_reboot_policy="always")
    assert int(args["reboot_timeout"]) == 3600
    assert args["msg"] == "nodeforge reboot (nodeforge_reboot_policy=always)"


# --- preflight --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("allow", "unmet"), [(False, True), (True, False), ("false", True)])
def test_preflight_allow_nouveau_accepts_a_loaded_nouveau(allow, unmet):
    probe = probed(
        "SecureBoot disabled",
        modules="nouveau 2875392 0 - Live 0x0",
        exists=("/sys/firmware/efi",),
        headers=POLICY.format(installed="(none)", candidate="6.1"),
    )
    result = preflight_result(
        __preflight_probe=probe, __preflight_repo_probe={"results": []}, preflight_allow_nouveau=allow
    )
    said = [line for line in result["unmet"] if line.startswith("the nouveau module is loaded")]
    assert result["nouveau_loaded"] is True
    assert (bool(said), result["passed"]) == (unmet, not unmet), result["unmet"]


def test_preflight_repository_options_reach_the_uri_probe():
    [task] = [
        t
        for t in role_expressions.load(content.roles_dir() / "preflight" / "tasks" / "main.yml")
        if "ansible.builtin.uri" in t
    ]
    args = argument(
        task,
        "ansible.builtin.uri",
        item="https://mirror.example/",
        preflight_repository_method="GET",
        preflight_repository_timeout=3,
        preflight_repository_validate_certs=False,
    )
    assert (args["method"], int(args["timeout"]), args["validate_certs"]) == ("GET", 3, False)


# --- the cluster layer's objects --------------------------------------------------------------------------------------


def test_k8s_placement_options_reach_the_rendered_objects():
    """The namespaces and node selectors of both device plugins, the tenants' ServiceAccount, and the RDMA plugin's
    resource names, per-resource limit and rescan interval, in the objects `nodeforge k8s render` writes."""
    objects = everything(
        cluster(
            "kubernetes",
            k8s_gpu_device_plugin_namespace="nvidia-system",
            k8s_gpu_device_plugin_node_selector={"pool": "gpu"},
            k8s_gpu_device_plugin_sharing="time-slicing",
            k8s_gpu_device_plugin_replicas=4,
            k8s_gpu_device_plugin_rename_by_default=True,
            k8s_rdma_shared_device_plugin_namespace="rdma-system",
            k8s_rdma_shared_device_plugin_node_selector={"pool": "rdma"},
            k8s_rdma_shared_device_plugin_resource_prefix="hca_",
            k8s_rdma_shared_device_plugin_rdma_hca_max=8,
            k8s_rdma_shared_device_plugin_periodic_update_interval=60,
            k8s_mpi_operator_service_account="launcher",
        )
    )
    daemonsets = {d["metadata"]["name"]: d for d in by_kind(objects, "DaemonSet")}
    gpu = daemonsets["nvidia-device-plugin-daemonset"]
    assert gpu["metadata"]["namespace"] == "nvidia-system"
    assert gpu["spec"]["template"]["spec"]["nodeSelector"] == {"pool": "gpu"}
    [rdma] = [d for name, d in daemonsets.items() if "rdma" in name]
    assert rdma["metadata"]["namespace"] == "rdma-system"
    assert rdma["spec"]["template"]["spec"]["nodeSelector"] == {"pool": "rdma"}
    configs = {c["metadata"]["name"]: c for c in by_kind(objects, "ConfigMap")}
    sharing = yaml.safe_load(configs["nvidia-device-plugin-config"]["data"]["config.yaml"])["sharing"]
    assert sharing["timeSlicing"]["renameByDefault"] is True
    assert configs["nvidia-device-plugin-config"]["metadata"]["namespace"] == "nvidia-system"
    [rdma_config] = [c for name, c in configs.items() if "rdma" in name]
    devices = json.loads(rdma_config["data"]["config.json"])
    assert devices["periodicUpdateInterval"] == 60
    assert {e["rdmaHcaMax"] for e in devices["configList"]} == {8}
    assert all(e["resourceName"].startswith("hca_") for e in devices["configList"]) and devices["configList"]
    tenant = [
        a["metadata"]["name"] for a in by_kind(objects, "ServiceAccount") if a["metadata"]["namespace"] == "ml-team"
    ]
    assert tenant == ["launcher"]
    [binding] = [b for b in by_kind(objects, "RoleBinding") if b["metadata"]["namespace"] == "ml-team"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "launcher", "namespace": "ml-team"}]


def test_k8s_gpu_operator_namespace_is_where_the_announced_helm_install_puts_it():
    task = find_task("k8s_gpu_operator", "main.yml", "Announce how the GPU Operator is installed")
    pins = {"version": "v25.3.0", "chart": "nvidia/gpu-operator", "repository": "https://helm.ngc.nvidia.com/nvidia"}
    computed = {"pins": {"gpu_operator": pins}, "values": {"driver": {"enabled": False}}}
    said = argument(
        task, "ansible.builtin.debug", __k8s_gpu_operator_computed=computed, k8s_gpu_operator_namespace="nvidia-gpu"
    )["msg"]
    assert " --namespace nvidia-gpu --create-namespace " in " ".join(said.split())
