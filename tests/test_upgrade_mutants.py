"""nodeforge upgrade's rules (module_utils/upgrade.py) pinned down to the whole value: every field of a plan, every
word of an operator's message, the boundaries and the other branches the scenario tests in tests/test_upgrade.py do
not reach."""

from __future__ import annotations

import json

import pytest

from nodeforge.collection import upgrade

# A node at toolkit 1.20.0 with 1.21.0 the target and no upgrade record: the plan of a plain upgrade.
TOOLKIT_TODO = {
    "action": "todo",
    "components": [
        {
            "component": "toolkit",
            "from": "1.20.0",
            "to": "1.21.0",
            "action": "upgrade",
            "reason": "1.20.0 -> 1.21.0",
        }
    ],
    "refused": [],
    "resume": False,
    "state": {},
    "downgrade": False,
}


def found(installed: str | None = None, target: str | None = None, na: str = "") -> dict:
    """What the role's probe hands over for one component; a None version is left out, as a probe that found none."""
    versions = {"installed": installed, "target": target, "na": na}
    return {key: value for key, value in versions.items() if value is not None}


DOWNGRADE_REFUSED = "1.20.0 is older than the installed 1.21.0: a downgrade needs --allow-downgrade"


# --- one component ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "installed", "target", "allow_downgrade", "action", "reason"),
    [
        ("driver", "535.216.01-1", "", False, "refused", "no target version: give --to or set nvidia_driver_version"),
        ("ofed", "", "24.10-3.2.5.0", False, "refused", "ofed is not installed: run nodeforge provision first"),
        ("toolkit", "1.21.0-1", "1.21.0", True, "current", "already at 1.21.0"),
        ("toolkit", "1.21.0-1", "1.20.0", False, "refused", DOWNGRADE_REFUSED),
        ("toolkit", "1.21.0-1", "1.20.0", True, "downgrade", "1.21.0 -> 1.20.0"),
        ("toolkit", "1.20.0-1", "1.21.0", False, "upgrade", "1.20.0 -> 1.21.0"),
        ("toolkit", "1.20.0-1", "1.21.0", True, "upgrade", "1.20.0 -> 1.21.0"),
    ],
)
def test_component_plan_is_the_whole_entry(name, installed, target, allow_downgrade, action, reason):
    have, want = upgrade.upstream(installed), upgrade.upstream(target)
    assert upgrade.component_plan(name, installed, target, allow_downgrade) == {
        "component": name,
        "from": have,
        "to": want,
        "action": action,
        "reason": reason,
    }


def test_an_unknown_component_is_refused_naming_the_choices():
    with pytest.raises(upgrade.UpgradeError) as refused:
        upgrade.components("gpu")
    assert str(refused.value) == "component 'gpu': expected one of driver, ofed, toolkit, stack"
    assert upgrade.components("stack") == ["driver", "ofed", "toolkit"]
    assert upgrade.components("ofed") == ["ofed"]


# --- a node's plan, whole -------------------------------------------------------------------------------------------


def test_a_downgrade_is_refused_unless_allowed_and_then_marks_the_plan():
    at_newer = {"toolkit": found("1.21.0-1", "1.20.0")}
    entry = {"component": "toolkit", "from": "1.21.0", "to": "1.20.0"}
    # Not allowed by default.
    assert upgrade.node_plan(at_newer, "toolkit") == {
        "action": "refused",
        "components": [{**entry, "action": "refused", "reason": DOWNGRADE_REFUSED}],
        "refused": [f"toolkit: {DOWNGRADE_REFUSED}"],
        "resume": False,
        "state": {},
        "downgrade": False,
    }
    # Allowed, it is a node to do, and the plan says a downgrade is in it.
    assert upgrade.node_plan(at_newer, "toolkit", allow_downgrade=True) == {
        "action": "todo",
        "components": [{**entry, "action": "downgrade", "reason": "1.21.0 -> 1.20.0"}],
        "refused": [],
        "resume": False,
        "state": {},
        "downgrade": True,
    }


def test_an_upgrade_and_a_node_at_the_target_without_any_record():
    assert upgrade.node_plan({"toolkit": found("1.20.0-1", "1.21.0")}, "toolkit", allow_downgrade=True) == TOOLKIT_TODO
    # --resume with nothing unfinished resumes nothing.
    assert upgrade.node_plan({"toolkit": found("1.21.0-1", "1.21.0")}, "toolkit", resume=True) == {
        "action": "current",
        "components": [
            {
                "component": "toolkit",
                "from": "1.21.0",
                "to": "1.21.0",
                "action": "current",
                "reason": "already at 1.21.0",
            }
        ],
        "refused": [],
        "resume": False,
        "state": {},
        "downgrade": False,
    }


@pytest.mark.parametrize(
    ("versions", "reason"),
    [
        # The probe found no installed package, or no target: the key is absent, not empty.
        ({"target": "1.21.0"}, "toolkit is not installed: run nodeforge provision first"),
        ({"installed": "1.20.0-1"}, "no target version: give --to or set nvidia_container_toolkit_version"),
    ],
)
def test_a_version_the_probe_did_not_report_is_refused(versions, reason):
    plan = upgrade.node_plan({"toolkit": versions}, "toolkit")
    assert (plan["action"], plan["refused"]) == ("refused", [f"toolkit: {reason}"])


def test_a_component_that_does_not_apply_is_refused_with_the_probe_s_reason():
    dgx = "DGX OS keeps its vendor-managed driver"
    assert upgrade.node_plan({"driver": found("", "", na=dgx)}, "driver") == {
        "action": "refused",
        "components": [{"component": "driver", "from": "", "to": "", "action": "refused", "reason": dgx}],
        "refused": [f"driver: {dgx}"],
        "resume": False,
        "state": {},
        "downgrade": False,
    }


def test_stack_leaves_out_what_is_missing_or_does_not_apply_even_when_installed():
    plan = upgrade.node_plan(
        {
            # DGX OS: installed, but vendor-managed.
            "driver": found("580.105.08-1", "580.126.20", na="DGX OS keeps its vendor-managed driver"),
            # ofed: the probe reported nothing at all.
            "toolkit": found("1.20.0-1", "1.21.0"),
        },
        "stack",
    )
    assert plan == TOOLKIT_TODO


def test_stack_on_a_node_with_nothing_installed_is_refused_with_what_to_do():
    assert upgrade.node_plan({"toolkit": found("", "1.21.0")}, "stack") == {
        "action": "refused",
        "components": [],
        "refused": ["none of driver, ofed, toolkit is installed: run nodeforge provision first"],
        "resume": False,
        "state": {},
        "downgrade": False,
    }


# --- a node's plan with an earlier upgrade's record -------------------------------------------------------------------

FAILED = {
    "state": "upgrade-failed",
    "component": "toolkit",
    "step": "install",
    "from": {"toolkit": "1.20.0"},
    "to": {"toolkit": "1.21.0"},
}


def test_a_record_that_does_not_fit_is_refused_with_every_problem_and_nothing_else():
    record = {"state": "upgrade-done", "component": "kernel", "step": "install"}
    assert upgrade.node_plan({"toolkit": found("1.20.0-1", "1.21.0")}, "toolkit", record, True, True) == {
        "action": "refused",
        "components": [],
        "refused": [
            "the node's upgrade record does not fit an upgrade's schedule (component 'kernel' is none of driver, ofed, "
            "toolkit, stack; state upgrade-done names step 'install', where a finished upgrade's record says step "
            "done): nothing of it is acted on; check the node, then remove the record to plan afresh"
        ],
        "resume": False,
        "state": {},
        "downgrade": False,
    }


@pytest.mark.parametrize(
    ("record", "upgrading"),
    [
        (FAILED, "toolkit to 1.21.0"),
        # A record without targets (stopped before they were known) still says what it upgraded.
        ({"state": "upgrade-stopped", "component": "toolkit", "step": "install"}, "toolkit to ?"),
        ({**FAILED, "to": {}}, "toolkit to ?"),
        ({**FAILED, "component": "stack", "to": {"driver": "580.126.20", "toolkit": "1.21.0"}},
         "driver to 580.126.20, toolkit to 1.21.0"),
    ],
)  # fmt: skip
def test_an_unfinished_upgrade_not_resumed_names_what_it_upgraded(record, upgrading):
    plan = upgrade.node_plan({"toolkit": found("1.21.0-1", "1.21.0")}, "toolkit", json.dumps(record))
    assert (plan["action"], plan["resume"], plan["state"]) == ("refused", False, record)
    assert plan["refused"] == [
        f"an earlier upgrade ({upgrading}) stopped in state {record['state']} at step {record['step']}: fix what it "
        "reported, then run again with --resume"
    ]


def test_resuming_another_component_s_upgrade_is_refused_naming_it():
    plan = upgrade.node_plan({"driver": found("580.105.08-1", "580.126.20")}, "driver", FAILED, resume=True)
    assert plan == {
        "action": "refused",
        "components": [
            {
                "component": "driver",
                "from": "580.105.08",
                "to": "580.126.20",
                "action": "upgrade",
                "reason": "580.105.08 -> 580.126.20",
            }
        ],
        "refused": ["the unfinished upgrade is of toolkit, not driver: resume it with --component toolkit"],
        "resume": True,
        "state": FAILED,
        "downgrade": False,
    }


def test_a_resumed_upgrade_starts_from_what_dpkg_reports_when_it_reports_a_version():
    # The earlier run recorded 1.20.0; the failed install left 1.21.0 installed: the plan says so.
    plan = upgrade.node_plan({"toolkit": found("1.21.0-1", "1.21.0")}, "toolkit", FAILED, resume=True)
    assert plan == {
        "action": "todo",
        "components": [
            {
                "component": "toolkit",
                "from": "1.21.0",
                "to": "1.21.0",
                "action": "current",
                "reason": "already at 1.21.0",
            }
        ],
        "refused": [],
        "resume": True,
        "state": FAILED,
        "downgrade": False,
    }


def test_a_finished_upgrade_s_record_does_not_stand_in_for_a_missing_package():
    """Only an unfinished upgrade's record says what a half-configured package was; a done one is history."""
    done = {**FAILED, "state": "upgrade-done", "step": "done"}
    plan = upgrade.node_plan({"toolkit": found("", "1.21.0")}, "toolkit", done)
    assert (plan["action"], plan["refused"]) == ("refused", ["toolkit: toolkit is not installed: run nodeforge "
                                                             "provision first"])  # fmt: skip


def test_a_resumed_stack_upgrade_leaves_out_what_the_record_never_had():
    record = {**FAILED, "component": "stack", "from": {"driver": "580.105.08"}, "to": {"driver": "580.126.20"}}
    plan = upgrade.node_plan(
        {"driver": found("", "580.126.20"), "toolkit": found("", "1.21.0")}, "stack", record, resume=True
    )
    assert (plan["action"], plan["refused"]) == ("todo", [])
    assert plan["components"] == [
        {
            "component": "driver",
            "from": "580.105.08",
            "to": "580.126.20",
            "action": "upgrade",
            "reason": "580.105.08 -> 580.126.20",
        }
    ]


# --- the state file ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", [None, "", "  \n\t"])
def test_no_state_file_or_a_blank_one_is_no_record(text):
    assert upgrade.read_state(text) == {}


def test_a_damaged_state_file_shows_its_first_200_characters():
    text = "{" + "x" * 300
    with pytest.raises(upgrade.UpgradeError) as damaged:
        upgrade.read_state(text)
    assert str(damaged.value) == (
        "the upgrade state file is not JSON (Expecting property name enclosed in double quotes: line 1 column 2 "
        f"(char 1)): {text[:200]!r}"
    )
    unknown = json.dumps({"state": "upgrading", "note": "y" * 300})
    with pytest.raises(upgrade.UpgradeError) as named:
        upgrade.read_state(unknown)
    assert str(named.value) == f"the upgrade state file names no known state: {unknown[:200]!r}"
    with pytest.raises(upgrade.UpgradeError) as mapping:
        upgrade.read_state({"state": "upgrading"})
    assert str(mapping.value) == "the upgrade state file names no known state: \"{'state': 'upgrading'}\""


CONSUMERS = ("nvidia-persistenced.service", "nvidia-dcgm.service")


@pytest.mark.parametrize(
    ("edit", "consumers", "problems"),
    [
        ({}, CONSUMERS, []),
        ({"stopped_units": "nvidia-dcgm.service"}, CONSUMERS, ["stopped_units is not a list of unit names"]),
        ({"stopped_units": ["nvidia-dcgm.service", 1]}, CONSUMERS, ["stopped_units is not a list of unit names"]),
        ({"stopped_units": ["ssh.service", "nvidia-dcgm.service", "cron.service"]}, CONSUMERS,
         ["stopped_units names ssh.service, cron.service, which no upgrade stops (it stops "
          "nvidia-persistenced.service, nvidia-dcgm.service)"]),
        ({"stopped_units": ["nvidia-dcgm.service"]}, (),
         ["stopped_units names nvidia-dcgm.service, which no upgrade stops (it stops none)"]),
        ({"from": {"gpu": "1.0"}, "to": {"toolkit": 1.21}}, CONSUMERS,
         ["from is not a mapping of driver, ofed, toolkit to versions",
          "to is not a mapping of driver, ofed, toolkit to versions"]),
    ],
)  # fmt: skip
def test_record_problems_lists_each_problem_whole(edit, consumers, problems):
    record = {**FAILED, "stopped_units": ["nvidia-persistenced.service"], **edit}
    assert upgrade.record_problems(record, consumers) == problems


def test_state_record_without_a_message_or_components():
    assert upgrade.state_record("upgrade-started", "toolkit", "cordon", {}) == {
        "state": "upgrade-started",
        "component": "toolkit",
        "step": "cordon",
        "from": {},
        "to": {},
    }


def test_state_record_keeps_the_first_2000_characters_of_a_message():
    plan = upgrade.node_plan({"toolkit": found("1.20.0-1", "1.21.0")}, "toolkit")
    record = upgrade.state_record("upgrade-failed", "toolkit", "install", plan, "E" * 2500)
    assert record == {
        "state": "upgrade-failed",
        "component": "toolkit",
        "step": "install",
        "from": {"toolkit": "1.20.0"},
        "to": {"toolkit": "1.21.0"},
        "message": "E" * 2000,
    }


# --- the pods an upgrade waits for ------------------------------------------------------------------------------------


def test_gpu_pods_name_the_default_namespace_and_an_unnamed_pod():
    def pod(metadata: dict, gpus: object) -> dict:
        return {"metadata": metadata, "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}

    pods = [
        pod({"name": "train"}, 1),
        pod({"namespace": "ml"}, "2"),
        pod({"name": "empty", "namespace": "ml"}, ""),
        pod({"name": "none", "namespace": "ml"}, 0),
    ]
    assert upgrade.gpu_pods(pods) == ["default/train", "ml/?"]


# --- batches ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("total", "batch", "max_unavailable", "size"),
    [(10, None, "  ", 1), (10, None, "1", 1), (10, None, "1%", 1), (250, None, "1%", 2), (7, None, "100%", 7),
     (10, 1, None, 1)],
)  # fmt: skip
def test_batch_size_at_its_bounds(total, batch, max_unavailable, size):
    assert upgrade.batch_size(total, batch, max_unavailable) == size


@pytest.mark.parametrize(
    ("batch", "max_unavailable", "message"),
    [
        (2, "50%", "give --batch or --max-unavailable, not both"),
        (0, None, "--batch 0: expected a number of nodes >= 1"),
        (None, "101%", "--max-unavailable 101%: expected a percentage 1%..100% or a number of nodes >= 1"),
        (None, " 0 ", "--max-unavailable 0: expected a percentage 1%..100% or a number of nodes >= 1"),
    ],
)
def test_batch_size_refuses_with_the_whole_message(batch, max_unavailable, message):
    with pytest.raises(upgrade.UpgradeError) as refused:
        upgrade.batch_size(10, batch, max_unavailable)
    assert str(refused.value) == message
