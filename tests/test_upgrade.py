"""nodeforge upgrade's rules (module_utils/upgrade.py, filters nodeforge.gpu.upgrade_*) and its CLI's option handling.
The runs against lab nodes are in tests/test_lab_upgrade.py."""

from __future__ import annotations

import importlib
import json
import os

import pytest
import yaml
from click.testing import CliRunner

from nodeforge.cli import main
from nodeforge.collection import upgrade
from tests.conftest import REPO

FilterModule = importlib.import_module("ansible_collections.nodeforge.gpu.plugins.filter.upgrade").FilterModule
FILTERS = FilterModule().filters()


def found(installed: str, target: str, na: str = "") -> dict:
    return {"installed": installed, "target": target, "na": na}


# --- versions and one component ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("package", "upstream"),
    [("1.20.0-1", "1.20.0"), ("1:580.126.20-1~deb12u1", "580.126.20"), ("535.216.01-1~deb12u1", "535.216.01"),
     ("580.105.08", "580.105.08"), ("", ""), (None, "")],
)  # fmt: skip
def test_package_versions_compare_as_the_manifest_writes_them(package, upstream):
    assert upgrade.upstream(package) == upstream


def test_component_moves_up_stays_or_refuses_a_downgrade():
    assert upgrade.component_plan("toolkit", "1.20.0-1", "1.21.0", False)["action"] == "upgrade"
    # dpkg's order, not the strings': 580.105.08 < 580.126.20, 1.9.0 < 1.10.0.
    assert upgrade.component_plan("driver", "580.105.08-1", "580.126.20", False)["action"] == "upgrade"
    assert upgrade.component_plan("toolkit", "1.9.0-1", "1.10.0", False)["action"] == "upgrade"
    current = upgrade.component_plan("toolkit", "1.21.0-1", "1.21.0", False)
    assert (current["action"], current["reason"]) == ("current", "already at 1.21.0")
    refused = upgrade.component_plan("toolkit", "1.21.0-1", "1.20.0", False)
    assert refused["action"] == "refused" and "--allow-downgrade" in refused["reason"]
    allowed = upgrade.component_plan("toolkit", "1.21.0-1", "1.20.0", True)
    assert (allowed["action"], allowed["from"], allowed["to"]) == ("downgrade", "1.21.0", "1.20.0")


def test_a_component_without_target_or_install_is_refused_with_what_to_do():
    assert "nvidia_driver_version" in upgrade.component_plan("driver", "535.216.01-1", "", False)["reason"]
    assert "nodeforge provision" in upgrade.component_plan("ofed", "", "24.10-3.2.5.0", False)["reason"]


# --- a node -----------------------------------------------------------------------------------------------------------


def test_node_plan_from_the_versions_found():
    plan = upgrade.node_plan({"toolkit": found("1.20.0-1", "1.21.0")}, "toolkit")
    assert plan["action"] == "todo" and plan["components"][0]["reason"] == "1.20.0 -> 1.21.0"
    assert upgrade.node_plan({"toolkit": found("1.21.0-1", "1.21.0")}, "toolkit")["action"] == "current"
    refused = upgrade.node_plan({"driver": found("", "", na="DGX OS keeps its vendor-managed driver")}, "driver")
    assert refused["action"] == "refused" and refused["refused"] == ["driver: DGX OS keeps its vendor-managed driver"]


def test_stack_moves_what_the_node_has_and_leaves_out_what_does_not_apply():
    plan = upgrade.node_plan(
        {
            "driver": found("580.105.08-1", "580.126.20"),
            "ofed": found("", "", na="the inbox RDMA stack (rdma-core 44.0) moves with the OS's updates"),
            "toolkit": found("1.20.0-1", "1.20.0"),
        },
        "stack",
    )
    assert plan["action"] == "todo"
    assert [(e["component"], e["action"]) for e in plan["components"]] == [
        ("driver", "upgrade"),
        ("toolkit", "current"),
    ]
    assert upgrade.node_plan({}, "stack")["action"] == "refused"


def test_an_unfinished_upgrade_is_refused_unless_resumed_and_then_redone_even_at_the_target():
    record = json.dumps({"state": "upgrade-failed", "component": "toolkit", "step": "install",
                         "from": {"toolkit": "1.20.0"}, "to": {"toolkit": "1.21.0"}})  # fmt: skip
    at_target = {"toolkit": found("1.21.0-1", "1.21.0")}
    refused = upgrade.node_plan(at_target, "toolkit", record)
    assert refused["action"] == "refused"
    assert "(toolkit to 1.21.0) stopped in state upgrade-failed at step install" in refused["refused"][0]
    assert "--resume" in refused["refused"][0]
    resumed = upgrade.node_plan(at_target, "toolkit", record, resume=True)
    # Installed already, yet still cordoned: the run goes through the remaining steps again.
    assert (resumed["action"], resumed["resume"]) == ("todo", True)
    # The failed install left the package half-configured: dpkg no longer counts it as installed; the record knows.
    half = upgrade.node_plan({"toolkit": found("", "1.21.0")}, "toolkit", record, resume=True)
    assert (half["action"], half["components"][0]["from"]) == ("todo", "1.20.0")
    other = upgrade.node_plan({"driver": found("580.105.08-1", "580.126.20")}, "driver", record, resume=True)
    assert other["action"] == "refused" and "--component toolkit" in other["refused"][0]
    done = {"state": "upgrade-done", "component": "toolkit", "step": "done"}
    # As JSON text, and as the mapping Ansible's templating makes of a JSON string.
    assert upgrade.node_plan(at_target, "toolkit", json.dumps(done))["action"] == "current"
    assert upgrade.node_plan(at_target, "toolkit", done)["action"] == "current"


CONSUMERS = ["nvidia-persistenced.service", "nvidia-dcgm.service", "dcgm.service", "nvidia-fabricmanager.service"]
FAILED = {
    "state": "upgrade-failed",
    "component": "toolkit",
    "step": "install",
    "message": "dpkg: postinst failed",
    "from": {"toolkit": "1.20.0"},
    "to": {"toolkit": "1.21.0"},
    "stopped_units": ["nvidia-persistenced.service"],
}


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        ({"state": "upgrade-done"}, "state upgrade-done names step 'install', where a finished upgrade's record says"),
        ({"state": "upgrade-done", "step": "done"}, "state upgrade-done carries a failure's message"),
        ({"stopped_units": ["ssh.service", "nvidia-dcgm.service"]},
         "stopped_units names ssh.service, which no upgrade stops (it stops nvidia-persistenced.service, "),
        ({"stopped_units": "ssh.service"}, "stopped_units is not a list of unit names"),
        ({"step": "rm -rf"}, "step 'rm -rf' is none of the upgrade's steps (cordon, drain, "),
        ({"component": "kernel"}, "component 'kernel' is none of driver, ofed, toolkit, stack"),
        ({"to": {"toolkit": ["1.21.0"]}}, "to is not a mapping of driver, ofed, toolkit to versions"),
        ({"from": "1.20.0"}, "from is not a mapping of driver, ofed, toolkit to versions"),
    ],
)  # fmt: skip
def test_a_record_that_does_not_fit_the_schedule_refuses_the_node_and_is_not_acted_on(edit, problem):
    """An upgrade record edited on the node is reported, resumed or not: neither skipped as done nor carrying units
    into --resume."""
    at_target = {"toolkit": found("1.21.0-1", "1.21.0")}
    assert upgrade.record_problems(FAILED, CONSUMERS) == []
    for resume in (False, True):
        plan = FILTERS["upgrade_node_plan"](at_target, "toolkit", json.dumps({**FAILED, **edit}), False, resume,
                                            CONSUMERS)  # fmt: skip
        assert (plan["action"], plan["resume"], plan["state"]) == ("refused", False, {})
        [reason] = plan["refused"]
        assert reason.startswith("the node's upgrade record does not fit an upgrade's schedule (") and problem in reason
    # What an upgrade writes fits: done, with the units it stopped.
    done = {k: v for k, v in {**FAILED, "state": "upgrade-done", "step": "done"}.items() if k != "message"}
    assert FILTERS["upgrade_node_plan"](at_target, "toolkit", done, False, False, CONSUMERS)["action"] == "current"


def test_the_role_passes_the_units_it_stops_to_the_plan():
    """The consumers a record may name are the ones the role stops (vars/main.yml), as probe.yml hands them over."""
    role = REPO / "collections" / "ansible_collections" / "nodeforge" / "gpu" / "roles" / "upgrade"
    units = yaml.safe_load((role / "vars" / "main.yml").read_text())["__upgrade_consumer_units"]
    assert units == CONSUMERS
    assert "upgrade_resume | bool, __upgrade_consumer_units) }}" in (role / "tasks" / "probe.yml").read_text()


@pytest.mark.parametrize("text", ["{not json", json.dumps({"state": "upgrading"}), json.dumps([1])])
def test_a_damaged_state_file_is_an_error_naming_what_was_found(text):
    with pytest.raises(upgrade.UpgradeError, match="upgrade state file"):
        upgrade.read_state(text)


# --- batches ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("total", "batch", "max_unavailable", "size"),
    [(10, None, None, 1), (10, 3, None, 3), (10, None, "25%", 2), (3, None, "25%", 1), (8, None, "100%", 8),
     (10, None, "4", 4)],
)  # fmt: skip
def test_batch_size(total, batch, max_unavailable, size):
    assert upgrade.batch_size(total, batch, max_unavailable) == size


@pytest.mark.parametrize(
    ("batch", "max_unavailable"), [(2, "50%"), (0, None), (None, "0%"), (None, "150%"), (None, "x")]
)
def test_batch_size_refuses_bad_values(batch, max_unavailable):
    with pytest.raises(upgrade.UpgradeError):
        upgrade.batch_size(4, batch, max_unavailable)


@pytest.mark.parametrize(
    ("total", "batch", "max_unavailable", "size"),
    [(4, 1, "", 1), (4, 3, None, 3), (4, 1, "50%", 2), (4, 3, "50%", 2), (10, 1, "4", 4), (3, 1, "25%", 1)],
)
def test_the_playbook_sizes_its_batches_with_max_unavailable_over_its_batch_default(
    total, batch, max_unavailable, size
):
    # playbooks/upgrade.yml's plan play: upgrade_batch always has a value (its default, 1), so a set
    # upgrade_max_unavailable wins instead of being refused as the CLI refuses both flags together.
    assert FILTERS["upgrade_batch_size"](total, batch, max_unavailable) == size


@pytest.mark.parametrize(("batch", "max_unavailable"), [(None, None), (3, None), (None, "50%"), (None, "2"), (1, None)])
@pytest.mark.parametrize("total", [1, 4, 7])
def test_the_playbook_batches_are_the_ones_the_cli_schedule_shows(total, batch, max_unavailable):
    # `upgrade --yes` prints its schedule from upgrade.batch_size; the playbook's plan play sizes the real batches
    # from the variables the CLI passes (set over the inventory's and -e values).
    from nodeforge.upgrade_cli import _batch_vars

    passed = _batch_vars(batch, max_unavailable)
    played = FILTERS["upgrade_batch_size"](total, passed["upgrade_batch"], passed["upgrade_max_unavailable"])
    assert played == upgrade.batch_size(total, batch, max_unavailable)


def test_schedule_batches_the_nodes_to_do_in_host_name_order():
    plans = {
        "gpu-04": {"action": "todo"},
        "gpu-01": {"action": "todo"},
        "gpu-03": {"action": "current"},
        "gpu-02": {"action": "todo"},
        "gpu-05": {"action": "refused", "refused": ["toolkit: not installed"]},
        "gpu-06": {"action": "todo"},
    }
    sched = upgrade.schedule(plans, 2)
    assert sched["batches"] == [["gpu-01", "gpu-02"], ["gpu-04", "gpu-06"]]
    assert sched["current"] == ["gpu-03"] and sched["refused"] == {"gpu-05": ["toolkit: not installed"]}


# --- the filters the role uses ----------------------------------------------------------------------------------------


def test_modules_unload_in_dependency_order_from_proc_modules():
    proc_modules = (
        "nvidia_uvm 1400832 0 - Live 0x0000000000000000 (POE)\n"
        "nvidia_drm 122880 2 - Live 0x0000000000000000 (POE)\n"
        "nvidia_modeset 1368064 1 nvidia_drm, Live 0x0000000000000000 (POE)\n"
        "nvidia 56819712 12 nvidia_uvm,nvidia_peermem,nvidia_modeset, Live 0x0000000000000000 (POE)\n"
        "nvidia_peermem 16384 0 - Live 0x0000000000000000 (POE)\n"
        "ib_core 434176 9 nvidia_peermem,rdma_ucm, Live 0x0000000000000000\n"
    )
    assert FILTERS["upgrade_modules_to_unload"](proc_modules) == [
        "nvidia_peermem", "nvidia_uvm", "nvidia_drm", "nvidia_modeset", "nvidia",
    ]  # fmt: skip
    assert FILTERS["upgrade_modules_to_unload"]("ib_core 434176 9 - Live 0x0\n") == []


def test_gpu_pods_leave_out_daemonsets_and_finished_pods():
    def pod(name, gpus, owner="Job", phase="Running", where="limits"):
        return {
            "metadata": {"name": name, "namespace": "ml", "ownerReferences": [{"kind": owner}]},
            "spec": {"containers": [{"resources": {where: {"nvidia.com/gpu": gpus}}}]},
            "status": {"phase": phase},
        }

    # A Pending pod holding GPUs is waited for too: it is scheduled on the node and starts once the drain ends.
    pods = [pod("train", 8), pod("dcgm-exporter", 1, owner="DaemonSet"), pod("cpu-only", 0),
            pod("old", 1, phase="Succeeded"), pod("asks", "2", where="requests"), pod("queued", 1, phase="Pending"),
            pod("broke", 1, phase="Failed")]  # fmt: skip
    assert FILTERS["upgrade_gpu_pods"](pods) == ["ml/train", "ml/asks", "ml/queued"]


def test_state_record_carries_the_step_versions_and_message():
    plan = upgrade.node_plan({"toolkit": found("1.20.0-1", "1.21.0")}, "toolkit")
    record = FILTERS["upgrade_state_record"]("upgrade-failed", "toolkit", "install", plan, "dpkg:\n  postinst failed",
                                             {"stopped_units": ["nvidia-persistenced.service"]})  # fmt: skip
    assert record == {
        "state": "upgrade-failed", "component": "toolkit", "step": "install", "from": {"toolkit": "1.20.0"},
        "to": {"toolkit": "1.21.0"}, "message": "dpkg: postinst failed",
        "stopped_units": ["nvidia-persistenced.service"],
    }  # fmt: skip
    assert upgrade.read_state(json.dumps(record))["state"] == "upgrade-failed"
    with pytest.raises(Exception, match="unknown upgrade state"):
        FILTERS["upgrade_state_record"]("upgrading", "toolkit", "install", plan)


def test_roles_per_component_follow_the_node_stack_order():
    assert FILTERS["upgrade_roles"]("driver") == ["nvidia_driver", "gpudirect_rdma", "nvidia_container_toolkit"]
    assert FILTERS["upgrade_roles"]("ofed") == ["ofed", "gpudirect_rdma"]
    # A node with no container runtime (an empty list, not an unset one) has no toolkit to follow the driver; a
    # toolkit upgrade still runs its role.
    assert FILTERS["upgrade_roles"]("driver", []) == ["nvidia_driver", "gpudirect_rdma"]
    assert FILTERS["upgrade_roles"]("stack", []) == ["nvidia_driver", "ofed", "gpudirect_rdma", "selinux_modules"]
    assert FILTERS["upgrade_roles"]("driver", None) == FILTERS["upgrade_roles"]("driver", ["containerd"])
    assert FILTERS["upgrade_roles"]("toolkit", []) == ["nvidia_container_toolkit"]
    with pytest.raises(Exception, match="component 'gpu'"):
        FILTERS["upgrade_roles"]("gpu")
    # The role's steps are the module's.
    from tests.conftest import REPO

    steps = __import__("yaml").safe_load((REPO / "roles" / "upgrade" / "vars" / "main.yml").read_text())[
        "__upgrade_steps"
    ]
    assert tuple(steps) == upgrade.STEPS
    assert all((REPO / "roles" / "upgrade" / "tasks" / f"step-{s.replace('_', '-')}.yml").is_file() for s in steps)


# --- the CLI's own refusals (before any node is touched) -----------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["upgrade", "-i", "x,"], "--component is required"),
        (["upgrade", "-i", "x,", "--component", "stack", "--to", "1.0"], "--to names one component"),
        (["upgrade", "-i", "x,", "--component", "toolkit", "--check"], "no check mode"),
        (["plan", "-i", "x,", "--component", "toolkit"], "need --upgrade"),
        (["plan", "-i", "x,", "--upgrade"], "needs --component"),
        # Refused before the one run --yes makes (its plan play would otherwise size the batches).
        (
            ["upgrade", "-i", "x,", "--component", "toolkit", "--batch", "2", "--max-unavailable", "50%", "--yes"],
            "not both",
        ),
        (["upgrade", "-i", "x,", "--component", "toolkit", "--max-unavailable", "150%", "--yes"], "1%..100%"),
    ],
)
def test_cli_refuses_bad_flag_combinations(argv, message):
    run = CliRunner().invoke(main, argv)
    assert run.exit_code == 5 and message in run.output, run.output


def test_the_first_ctrl_c_asks_for_a_stop_after_the_step_and_the_second_cancels(tmp_path):
    from rich.console import Console

    from nodeforge.upgrade_cli import StopAfterStep

    stop = tmp_path / "stop"
    canceller = StopAfterStep(stop, Console(file=open(os.devnull, "w")))  # noqa: SIM115
    canceller.request()
    # The playbook sees the file and stops each node before its next step; ansible-runner is not cancelled.
    assert stop.exists() and canceller() is False
    canceller.request()
    assert canceller() is True


def test_the_filters_documentation_parses_and_names_every_filter():
    module = importlib.import_module("ansible_collections.nodeforge.gpu.plugins.filter.upgrade")
    doc = __import__("yaml").safe_load(module.DOCUMENTATION)
    assert doc["name"] in FILTERS
    assert all(f"C({name})" in module.DOCUMENTATION for name in FILTERS)
