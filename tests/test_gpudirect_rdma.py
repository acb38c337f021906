"""Role gpudirect_rdma's logic that runs on the controller, rendered from the role's own files: which tasks file sets up
the peer memory module, the driver branch check and its report, the reading of the module index probe (the module's
name, the kernels that lack it, whether it waits for a reboot to load) and the report of why a module is not loaded
now. The molecule scenarios (gpudirect_rdma, gpudirect_rdma_nv_peer_mem) prove the rest on a node; these cover the
branches a container cannot reach."""

from __future__ import annotations

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from nodeforge import content
from tests import role_expressions
from tests.role_expressions import trusted

ROLE = "gpudirect_rdma"
ROLE_VARS = role_expressions.load(content.roles_dir() / ROLE / "vars" / "main.yml")
CHOOSE = ("nvidia_peermem.yml", "Choose the peer memory module name and record the kernels that lack it")
BRANCH = ("resolve.yml", "Assert that the peer memory module suits the driver branch")
KERNELS = ["6.1.0-28-amd64", "6.1.0-30-amd64"]


def templar(**variables) -> Templar:
    return Templar(loader=DataLoader(), variables={**ROLE_VARS, **variables})


@pytest.mark.parametrize(
    ("container", "module", "expected"),
    [
        (False, "nvidia-peermem", "nvidia_peermem.yml"),
        (False, "nv_peer_mem", "nv_peer_mem.yml"),
        (False, "none", "none.yml"),
        # The GPU Operator's driver container provides the module; operator.yml refuses nv_peer_mem there.
        (True, "nvidia-peermem", "operator.yml"),
        (True, "nv_peer_mem", "operator.yml"),
        (True, "none", "operator.yml"),
    ],
)
def test_one_tasks_file_sets_up_each_module(container, module, expected):
    include = role_expressions.task(ROLE, "main.yml", "Set up or remove the peer memory module")
    chosen = templar(__gpudirect_rdma_driver_container=container, gpudirect_rdma_module=module).template(
        include["ansible.builtin.include_tasks"]
    )
    assert chosen.strip() == expected
    assert (content.roles_dir() / ROLE / "tasks" / expected).is_file()


def branch_check(module: str, branch: str, dkms: list | None = None, container: bool = False):
    """Whether the branch check passes, and its report."""
    task = role_expressions.task(ROLE, *BRANCH)
    variables = {
        "inventory_hostname": "node-01",
        "gpudirect_rdma_module": module,
        "gpudirect_rdma_gdrcopy": False,
        "gpudirect_rdma_rebuild_on_ib_core_change": True,
        "gpudirect_rdma_nvidia_dkms_pattern": "^nvidia(-current|-srv)?(-open)?$",
        "__gpudirect_rdma_driver_container": container,
        "__gpudirect_rdma_driver": {
            "flavor": "open",
            "flavor_from": "nvidia_driver_facts.flavor",
            "branch": branch,
            "branch_from": "nvidia_driver_branch",
            "version": "",
            "version_from": "nowhere",
        },
        "__gpudirect_rdma_min_branch": 470,
        "__gpudirect_rdma_kernels": KERNELS[:1],
        "__gpudirect_rdma_kernels_from": "the running kernel",
        "__gpudirect_rdma_nvidia_dkms": dkms or [],
        **task["vars"],
    }
    t = templar(**variables)
    passed = all(t.template(trusted("{{ (" + c + ") | bool }}")) for c in task["ansible.builtin.assert"]["that"])
    return passed, t.template(task["ansible.builtin.assert"]["success_msg"])


@pytest.mark.parametrize(
    ("module", "branch", "passes"),
    [
        ("nvidia-peermem", "535", True),
        ("nvidia-peermem", "450", False),
        ("nv_peer_mem", "450", True),
        ("nv_peer_mem", "535", False),
        # No module, or a branch that is not known: nothing to check.
        ("none", "450", True),
        ("nv_peer_mem", "", True),
    ],
)
def test_the_module_must_suit_the_driver_branch(module, branch, passes):
    assert branch_check(module, branch)[0] is passes


def test_the_report_says_when_there_is_no_dkms_driver_to_rebuild():
    dkms = [{"name": "nvidia-current-open", "version": "535.261.03", "kernel": KERNELS[0], "state": "installed"}]
    _, report = branch_check("nvidia-peermem", "535", dkms)
    assert report == [
        "module nvidia-peermem, GDRCopy no",
        "driver flavor open (from nvidia_driver_facts.flavor), branch 535 (from nvidia_driver_branch),"
        " version unknown (from nowhere)",
        f"kernels {KERNELS[0]} (from the running kernel)",
        f"NVIDIA DKMS modules: nvidia-current-open for {KERNELS[0]}",
    ]
    _, report = branch_check("nvidia-peermem", "535")
    assert report[-1] == (
        "node-01: no NVIDIA DKMS module matches gpudirect_rdma_nvidia_dkms_pattern (^nvidia(-current|-srv)?(-open)?$);"
        " a precompiled driver must itself come built against this OFED's ib_core."
    )
    # Only nvidia-peermem on a host driver compares DKMS builds with ib_core.
    assert len(branch_check("none", "535")[1]) == 4
    assert len(branch_check("nvidia-peermem", "535", container=True)[1]) == 4


def probe(*lines: str) -> dict:
    return {"__gpudirect_rdma_peermem_probe": {"stdout_lines": list(lines)}}


def chosen(driver_module: str, registered: dict) -> dict:
    """The set_fact's values (name, from, missing, wait) from the driver's module name and the probe's lines."""
    driver = {"peermem_module": driver_module, "peermem_module_from": "nvidia_driver_facts"}
    variables = {"__gpudirect_rdma_driver": driver, "__gpudirect_rdma_kernels": KERNELS, **registered}
    return {
        key: role_expressions.render(ROLE, *CHOOSE, fact, **variables)
        for key, fact in {
            "name": "__gpudirect_rdma_peermem",
            "from": "__gpudirect_rdma_peermem_from",
            "missing": "__gpudirect_rdma_peermem_missing",
            "wait": "__gpudirect_rdma_peermem_wait",
        }.items()
    }


DEBIAN = f"{KERNELS[0]} nvidia-current-peermem /lib/modules/{KERNELS[0]}/updates/dkms/nvidia-current-peermem.ko"


def test_the_driver_s_name_wins_and_the_kernels_without_it_are_listed():
    found = chosen("nvidia-current-peermem", probe(DEBIAN, "@nvidia ", "@version nvidia-current-peermem 535.261.03"))
    assert found["name"] == "nvidia-current-peermem"
    assert found["from"] == "nvidia_driver_facts"
    assert found["missing"] == [KERNELS[1]]
    # No NVIDIA module loaded: nothing to wait for.
    assert found["wait"] == ""


def test_without_the_driver_s_name_the_module_index_names_it():
    lines = (DEBIAN, "@nvidia 535.261.03", "@version nvidia-peermem ", "@version nvidia-current-peermem ")
    found = chosen("", probe(*lines))
    assert (found["name"], found["from"]) == ("nvidia-current-peermem", "the kernels' module index (modinfo)")


def test_with_no_name_anywhere_nvidia_s_name_is_the_fallback():
    # Neither the driver's facts nor any kernel's module index names a peer memory module (the driver is not
    # installed yet): NVIDIA's name, and every kernel lacks it.
    found = chosen("", probe("@nvidia "))
    assert (found["name"], found["from"]) == ("nvidia-peermem", "the default name")
    assert sorted(found["missing"]) == sorted(KERNELS)  # difference() keeps no order on every core


@pytest.mark.parametrize(
    ("running", "installed", "wait"),
    [
        ("535.261.03", "535.261.03", ""),
        ("", "535.261.03", ""),
        ("535.261.03", "", ""),
        # A driver upgrade whose old nvidia module stays loaded: the new peer memory module loads at the next boot.
        (
            "535.216.03",
            "535.261.03",
            "the running NVIDIA driver is 535.216.03 and the installed module 535.261.03: it loads with the new driver"
            " when the node boots",
        ),
    ],
)
def test_a_module_of_another_driver_than_the_running_one_waits_for_the_boot(running, installed, wait):
    lines = (DEBIAN, f"@nvidia {running}", "@version nvidia-peermem 580.95.05")
    lines += (f"@version nvidia-current-peermem {installed}",)
    assert chosen("nvidia-current-peermem", probe(*lines))["wait"] == wait


WAIT = "the running NVIDIA driver is 1 and the installed module 2: it loads with the new driver when the node boots"


@pytest.mark.parametrize(
    ("kernel", "wait", "reported"),
    [
        (KERNELS[0], "", None),
        (
            "6.1.0-31-amd64",
            "",
            "node-01: nv_peer_mem not loaded now: the running kernel 6.1.0-31-amd64 is not one of"
            f" {', '.join(KERNELS)}; it loads when the node boots one of them.",
        ),
        (KERNELS[0], WAIT, f"node-01: nv_peer_mem not loaded now: {WAIT}."),
    ],
)
def test_a_real_node_says_why_the_module_is_not_loaded_now(kernel, wait, reported):
    task = role_expressions.task(ROLE, "load_now.yml", "Report that the kernel module loads at the next boot")
    t = templar(
        inventory_hostname="node-01",
        ansible_facts={"kernel": kernel},
        __gpudirect_rdma_kernels=KERNELS,
        __gpudirect_rdma_load_module="nv_peer_mem",
        **({"__gpudirect_rdma_load_wait": wait} if wait else {}),
    )
    loads = role_expressions.task(ROLE, "load_now.yml", "Load the kernel module now")["when"]
    loaded = all(t.template(trusted("{{ (" + c + ") | bool }}")) for c in loads)
    assert loaded is (reported is None)
    assert t.template(trusted("{{ (" + task["when"] + ") | bool }}")) is (reported is not None)
    if reported:
        assert " ".join(t.template(task["ansible.builtin.debug"]["msg"]).split()) == reported
