"""Verify scale_client on a DGX-1 client of the IBM Redbook REDP-5610's Scale cluster (stand-in gpfs.base 5.2.3-1).

prepare.yml installed the stand-in from the signed fixture repository and made the node dgx01 a member of cluster
SpectrumScale.ocp4.scale.ibm.com, node class dgx, with sections [servers], [dgx] (pagepool 64g, maxStatCache 1048576,
verbsRdma enable) and [common] already set, and emptied the stand-in's call log. The check step and converge ran
before these tests, then idempotence. The settings are read back through mmlsconfig (the stand-in's, printing Scale's
format, parsed here on its own) and the call log (the argv of every mmchconfig, mmshutdown and mmstartup).
Commands run on the node as verify_lib.node_host reaches it; playbook runs use molecule's inventory.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import verify_lib

SCENARIO_DIR = Path(__file__).resolve().parent.parent
CONVERGE = SCENARIO_DIR / "converge.yml"
BIN = "/usr/lpp/mmfs/bin"
STATE = "/var/mmfs/gen/nodeforge-standin.json"
CALLS = "/var/mmfs/gen/nodeforge-standin-calls.log"
RECORD = "/var/lib/nodeforge/scale-client-restart-pending"
DAEMON_LOG = "/var/adm/ras/mmfs.log.latest"
CLUSTER = "SpectrumScale.ocp4.scale.ibm.com"
SUBNETS = "10.10.11.0/ess3000.bda.scale.ibm.com;SpectrumScale.ocp4.scale.ibm.com"
PORTS = "mlx5_0/1 mlx5_1/1 mlx5_2/1 mlx5_3/1"  # the dgx-1 profile's four HCAs, port 1
# molecule.yml's settings, as a playbook run's extra vars (to change one of them).
CONFIG = {
    "dgx": {
        "pagepool": "128G",
        "workerThreads": 1024,
        "ignorePrefetchLUNCount": True,
        "maxFilesToCache": "1M",
        "maxStatCache": "1M",
        "subnets": SUBNETS,
        "verbsRdma": "enable",
        "verbsRdmaSend": True,
    },
    "common": {"maxMBpS": 20000, "enforceFilesetQuotaOnRoot": True, "controlSetxattrImmutableSELinux": True},
}
# What converge changed, attributes in the role's fixed order: [dgx] without -i (verbsPorts and the others need a
# restart), [common] with -i.
DGX_CALL = [
    "mmchconfig",
    "pagepool=128G,workerThreads=1024,maxFilesToCache=1M,ignorePrefetchLUNCount=yes,"
    f"subnets={SUBNETS},verbsRdmaSend=yes,verbsPorts={PORTS}",
    "-N",
    "dgx",
]
COMMON_CALL = ["mmchconfig", "maxMBpS=20000,enforceFilesetQuotaOnRoot=yes,controlSetxattrImmutableSELinux=yes", "-i"]
RESTART_OWED = [
    "pagepool",
    "workerThreads",
    "maxFilesToCache",
    "ignorePrefetchLUNCount",
    "subnets",
    "verbsRdmaSend",
    "verbsPorts",
]


def mmlsconfig(node) -> dict[str, dict[str, str]]:
    """mmlsconfig's sections: lines before the first [..] and under [common] are "common"."""
    sections: dict[str, dict[str, str]] = {"common": {}}
    section = "common"
    lines = node.check_output(f"{BIN}/mmlsconfig").splitlines()
    assert lines[0] == f"Configuration data for cluster {CLUSTER}:" and set(lines[1]) == {"-"}
    for line in lines[2 : lines.index(f"File systems in cluster {CLUSTER}:") - 1]:
        if line.startswith("["):
            section = line.strip("[]")
            sections.setdefault(section, {})
        else:
            name, value = line.split(" ", 1)
            sections[section][name] = value
    return sections


def calls(node) -> list[list[str]]:
    log = node.file(CALLS)
    return [json.loads(line)["argv"] for line in log.content_string.splitlines()] if log.exists else []


def daemon_log(node) -> str:
    return node.check_output(f"readlink {DAEMON_LOG}")


def record(node) -> dict | None:
    file = node.file(RECORD)
    return json.loads(file.content_string) if file.exists else None


def messages(run: verify_lib.PlaybookRun, task: str) -> list[str]:
    """The task's messages, one per loop item for a loop."""
    results = [item for r in run.results(task) for item in r.get("results", [r])]
    return [" ".join(str(r.get("msg", "")).split()) for r in results if not r.get("skipped")]


def test_mmlsconfig_shows_the_redbook_s_client_settings(node):
    sections = mmlsconfig(node)
    assert sections["dgx"] == {
        "pagepool": "128G",
        # Set before as 1048576, equal to 1M: not rewritten.
        "maxStatCache": "1048576",
        "verbsRdma": "enable",
        "workerThreads": "1024",
        "ignorePrefetchLUNCount": "yes",
        "maxFilesToCache": "1M",
        "subnets": SUBNETS,
        "verbsRdmaSend": "yes",
        "verbsPorts": PORTS,
    }
    common = sections["common"]
    assert (common["maxMBpS"], common["enforceFilesetQuotaOnRoot"]) == ("20000", "yes")
    assert common["controlSetxattrImmutableSELinux"] == "yes"
    # Another node class's section is untouched.
    assert sections["servers"] == {"pagepool": "32G", "nsdbufspace": "70"}


def test_mmlsconfig_attribute_form_names_the_node_class(node):
    assert node.check_output(f"{BIN}/mmlsconfig pagepool").splitlines() == [
        "pagepool 32G [servers]",
        "pagepool 128G [dgx]",
    ]
    assert node.check_output(f"{BIN}/mmlsconfig verbsPorts") == f"verbsPorts {PORTS} [dgx]"


def test_one_mmchconfig_call_per_section_and_none_in_check_mode_or_idempotence(node):
    # The check step before converge and the idempotence run after it made no call: the log holds converge's two.
    assert calls(node) == [DGX_CALL, COMMON_CALL]


def test_facts_record_the_cluster_and_the_label(node):
    facts = json.loads(node.file("/root/scale_client_facts.json").content_string)
    assert (facts["cluster_name"], facts["cluster_id"]) == (CLUSTER, "16217308676014575381")
    assert (facts["node_name"], facts["node_class"], facts["daemon_state"]) == ("dgx01", "dgx", "active")
    assert facts["node_label"] == {"key": "scale", "value": "true"}
    assert facts["restart_pending"] is True


def test_the_restart_the_node_owes_is_recorded_not_done(node):
    assert record(node) == {"attributes": RESTART_OWED, "daemon_log": daemon_log(node)}
    assert not any(call[0] in ("mmshutdown", "mmstartup") for call in calls(node))


def test_one_changed_attribute_calls_mmchconfig_for_it_only(node):
    before = calls(node)
    changed = {**CONFIG, "dgx": {**CONFIG["dgx"], "pagepool": "96g"}}
    run = verify_lib.run_playbook(CONVERGE, {"scale_client_config": changed})
    assert run.rc == 0, run.failed
    # pagepool alone allows -i: applied now.
    assert calls(node) == [*before, ["mmchconfig", "pagepool=96G", "-i", "-N", "dgx"]]
    assert mmlsconfig(node)["dgx"]["pagepool"] == "96G"
    assert run.changed == [
        "scale_client : Change the Scale configuration",
        "Record scale_client_facts for the verifier",
    ]
    # The restart converge's changes owe is still reported.
    [warning] = messages(run, "Warn that the GPFS daemon needs a restart")
    assert "GPFS daemon restart pending: pagepool, workerThreads" in warning
    assert "scale_client_restart_policy is never" in warning
    assert record(node)["attributes"] == RESTART_OWED


def test_a_restart_done_elsewhere_settles_the_record_and_when_needed_restarts(node):
    """The operator restarts GPFS by hand, which settles what converge left owed; the next change that needs a restart
    (workerThreads, and pagepool back to 128G in the same call, so without -i), with the restart policy when_needed,
    restarts the daemon for those two only."""
    node.run_expect([0], f"{BIN}/mmshutdown && {BIN}/mmstartup")
    by_hand = daemon_log(node)
    before = calls(node)
    changed = {**CONFIG, "dgx": {**CONFIG["dgx"], "workerThreads": 2048}}
    run = verify_lib.run_playbook(
        CONVERGE, {"scale_client_config": changed, "scale_client_restart_policy": "when_needed"}
    )
    assert run.rc == 0, run.failed
    assert calls(node)[len(before) :] == [
        ["mmchconfig", "pagepool=128G,workerThreads=2048", "-N", "dgx"],
        ["mmshutdown"],
        ["mmstartup"],
    ]
    [announcement] = messages(run, "Announce the restart of the GPFS daemon")
    assert announcement.endswith(
        "restarts the GPFS daemon (scale_client_restart_policy when_needed; mmshutdown "
        "unmounts the Scale file systems here) for pagepool, workerThreads."
    )
    assert messages(run, "Warn that the GPFS daemon needs a restart") == []
    assert re.search(r"^\s+2\s+dgx01\s+active$", node.check_output(f"{BIN}/mmgetstate"), re.M)
    assert daemon_log(node) not in (by_hand, "")
    assert record(node) is None
    assert mmlsconfig(node)["dgx"]["workerThreads"] == "2048"
    assert json.loads(node.file("/root/scale_client_facts.json").content_string)["restart_pending"] is False


def test_a_node_that_is_not_a_cluster_member_fails_with_what_to_do(node):
    node.run_expect([0], f"mv {STATE} {STATE}.away")
    try:
        run = verify_lib.run_playbook(CONVERGE)
        assert run.rc != 0
        assert run.failed == ["scale_client : Refuse a node that is not a member of a Scale cluster"]
        [refusal] = messages(run, "Refuse a node that is not a member of a Scale cluster")
        assert "has IBM Storage Scale but is not a member of a cluster" in refusal
        # The refusal quotes what mmlscluster says on this node, whatever that is.
        said = " ".join(node.run(f"{BIN}/mmlscluster").stderr.split())
        assert said and f"(mmlscluster: {said})" in refusal, (said, refusal)
        assert "nodeforge does not add nodes to a cluster" in refusal and "mmaddnode -N" in refusal
    finally:
        node.run_expect([0], f"mv {STATE}.away {STATE}")
