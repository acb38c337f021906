"""tools/options_coverage.py: every public role option is set to a non-default value by some test, or
tools/options_coverage.yml says why not; and the tool's matching rule, on sources written for it."""

from __future__ import annotations

from tests.conftest import REPO, load_module_file

tool = load_module_file("options_coverage", REPO / "tools" / "options_coverage.py")
NAMES = {"ofed_ipoib_apply", "validate_rdma_fraction", "k8s_cluster_context"}


def test_every_option_is_set_by_a_test_or_has_a_reason():
    found = tool.coverage()
    assert len(found) > 150  # every role's argument_specs were read
    problems = tool.problems(found, tool.reasons())
    assert not problems, "\n".join(problems)


def set_names(source: str) -> list[str]:
    found = tool.options()
    return sorted(
        name
        for name, value, _ in tool.python_settings(source, set(found)) + tool.flag_settings(source)
        if not tool.is_default(value, found[name].default)
    )


def test_a_name_only_asserted_or_commented_is_not_set():
    source = '''
"""ofed_ipoib_apply=false in a docstring."""
def test_x(result):
    # ofed_ipoib_apply: false
    assert result["ofed_ipoib_apply"] is False
    assert {"validate_rdma_fraction": 0.5} == result
    assert "ofed_ipoib_apply=false" in result
    message = "ofed_ipoib_apply: must be a bool"
'''
    assert set_names(source) == []


def test_a_vars_mapping_an_extra_var_or_a_written_inventory_sets_it():
    assert set_names('run({"validate_rdma_fraction": 0.5})') == ["validate_rdma_fraction"]
    assert set_names("expect('dgx-1', validate_rdma_fraction=0.5)") == ["validate_rdma_fraction"]
    assert set_names('cmd = ["-e", "ofed_ipoib_apply=false"]') == ["ofed_ipoib_apply"]
    assert set_names('v["ofed_ipoib_apply"] = False') == ["ofed_ipoib_apply"]
    assert set_names('p.write_text(f"all:\\n  vars:\\n    k8s_cluster_context: {name}\\n")') == ["k8s_cluster_context"]


def test_the_default_value_does_not_count():
    assert set_names('run({"validate_rdma_fraction": 0.9, "ofed_ipoib_apply": True})') == []
    assert set_names('cmd = ["-e", "ofed_ipoib_apply=true", "-e", "k8s_cluster_context="]') == []


def test_a_cli_flag_counts_with_its_command():
    assert set_names('main(["k8s", "apply", "-i", inv, "--context", "prod"])') == [
        "k8s_cluster_action",
        "k8s_cluster_context",
    ]
    assert set_names('main(["check", "--context", "prod"])') == []
    assert set_names('main(["upgrade", "--drain", "none"])') == ["upgrade_plan_only"]  # none is upgrade_drain's default
    assert tool.flag_problems() == []
    assert tool.flag_problems([tool.Flag("k8s.py", ("k8s",), "--no-such-flag", "k8s_cluster_context")]) == [
        "CLI_FLAGS: --no-such-flag is not in src/nodeforge/k8s.py"
    ]


def test_stale_and_unknown_reasons_fail():
    found = tool.coverage()
    set_option = next(name for name, f in found.items() if f.set_in)
    unset_option = next(name for name, f in found.items() if not f.set_in)
    problems = tool.problems(found, {**tool.reasons(), set_option: "why", "no_such_option": "why"})
    assert [p.split(":")[0] for p in problems] == [set_option, "no_such_option"]
    reasons = {k: v for k, v in tool.reasons().items() if k != unset_option}
    assert tool.problems(found, reasons) == [
        f"{unset_option}: no test sets it and tools/options_coverage.yml gives no reason"
    ]
