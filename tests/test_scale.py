"""IBM Storage Scale client settings (nodeforge.gpu module_utils/scale.py, its filters and action), and, kept apart in
TestStandinFixture as tests of a fixture, the stand-in for Scale's admin commands
(molecule/fixture_files/spectrum_scale/scale_standin.py), run here with a temporary state.

The parsers read the formats IBM documents (the mmlscluster, mmlsconfig, mmlsnodeclass and mmgetstate examples of the
Storage Scale documentation) and the IBM Redbook REDP-5610's client settings (seed 004, section 3.3)."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

from nodeforge.collection import model
from tests.conftest import REPO

# Through Ansible's collection loader, which importing nodeforge.collection set up.
scale = importlib.import_module("ansible_collections.nodeforge.gpu.plugins.module_utils.scale")
FilterModule = importlib.import_module("ansible_collections.nodeforge.gpu.plugins.filter.scale").FilterModule

STANDIN = REPO / "molecule" / "fixture_files" / "spectrum_scale" / "scale_standin.py"
MOLECULE_STATE = REPO / "molecule" / "scale_client" / "files" / "standin-state.json"
DGX1_HCAS = model.profiles()["dgx-1"]["hcas"]
REDBOOK_PORTS = "mlx5_0/1 mlx5_1/1 mlx5_2/1 mlx5_3/1"
REDBOOK_SUBNETS = "10.10.11.0/ess3000.bda.scale.ibm.com;SpectrumScale.ocp4.scale.ibm.com"

# The IBM Storage Scale documentation's examples (Displaying cluster configuration information; The mmlsconfig command;
# mmlsnodeclass command).
MMLSCLUSTER_DOC = """
GPFS cluster information
========================
  GPFS cluster name:         cluster1.kgn.ibm.com
  GPFS cluster id:           680681562214606028
  GPFS UID domain:           cluster1.kgn.ibm.com
  Remote shell command:      /usr/bin/ssh
  Remote file copy command:  /usr/bin/scp
  Repository type:           CCR

 Node  Daemon node name        IP address       Admin node name         Designation
--------------------------------------------------------------------------------------
   1   k164n04.kgn.ibm.com     198.117.68.68    k164n04.kgn.ibm.com     quorum
   2   k164n05.kgn.ibm.com     198.117.68.69    k164n05.kgn.ibm.com     quorum
   3   k164n06.kgn.ibm.com     198.117.68.70    k164sn06.kgn.ibm.com    quorum-manager
"""
MMLSCONFIG_DOC = """Configuration data for cluster cl1.cluster:
---------------------------------------------
clusterName cl1.cluster
clusterId 680752107138921233
autoload no
minReleaseLevel 4.1.0.0
pagepool 1G
maxblocksize 4m
[c5n97g]
pagepool 3500m
[common]
cipherList EXP-RC4-MD5

File systems in cluster cl1.cluster:
--------------------------------------
/dev/fs2
"""
# The Redbook's DGX-1 client settings (3.3) as mmlsconfig prints them on that cluster.
MMLSCONFIG_REDBOOK = """Configuration data for cluster SpectrumScale.ocp4.scale.ibm.com:
----------------------------------------------------------------
clusterName SpectrumScale.ocp4.scale.ibm.com
clusterId 16217308676014575381
autoload yes
ccrEnabled yes
[dgx]
pagepool 128G
workerThreads 1024
ignorePrefetchLUNCount yes
maxFilesToCache 1M
maxStatCache 1M
subnets 10.10.11.0/ess3000.bda.scale.ibm.com;SpectrumScale.ocp4.scale.ibm.com
verbsRdma enable
verbsRdmaSend yes
verbsPorts mlx5_0/1 mlx5_1/1 mlx5_2/1 mlx5_3/1
[common]
maxMBpS 20000
enforceFilesetQuotaOnRoot yes
controlSetxattrImmutableSELinux yes

File systems in cluster SpectrumScale.ocp4.scale.ibm.com:
---------------------------------------------------------
/dev/fs0
"""
MMLSNODECLASS_DOC = """Node Class Name       Members
--------------------- -----------------------------------------------------------
siteA                 linuxNodes
dgx                   dgx01.ocp4.scale.com,dgx02.ocp4.scale.com,
                      dgx03.ocp4.scale.com
"""
MMGETSTATE = """
 Node number  Node name        GPFS state
------------------------------------------
       2      dgx01            active
"""
# The Redbook's settings as an inventory writes them (YAML's yes read as true, numbers as numbers).
REDBOOK_CONFIG = {
    "dgx": {
        "pagepool": "128G",
        "workerThreads": 1024,
        "ignorePrefetchLUNCount": True,
        "maxFilesToCache": "1M",
        "maxStatCache": "1M",
        "subnets": REDBOOK_SUBNETS,
        "verbsRdma": "enable",
        "verbsRdmaSend": True,
    },
    "common": {"maxMBpS": 20000, "enforceFilesetQuotaOnRoot": True, "controlSetxattrImmutableSELinux": True},
}


def outputs(mmlsconfig: str = MMLSCONFIG_REDBOOK) -> dict[str, str]:
    return {
        "mmlscluster": MMLSCLUSTER_DOC.replace("cluster1.kgn.ibm.com", "SpectrumScale.ocp4.scale.ibm.com"),
        "mmgetstate": MMGETSTATE,
        "mmlsnodeclass": MMLSNODECLASS_DOC,
        "mmlsconfig": mmlsconfig,
    }


# ---- parsers ---------------------------------------------------------------------------------------------------


def test_mmlscluster_reads_the_information_block_and_the_node_table():
    cluster = scale.parse_mmlscluster(MMLSCLUSTER_DOC)
    assert (cluster["name"], cluster["id"], cluster["repository"]) == (
        "cluster1.kgn.ibm.com",
        "680681562214606028",
        "CCR",
    )
    assert (cluster["remote_shell"], cluster["remote_copy"]) == ("/usr/bin/ssh", "/usr/bin/scp")
    assert [n["daemon_name"] for n in cluster["nodes"]] == [f"k164n0{i}.kgn.ibm.com" for i in (4, 5, 6)]
    assert cluster["nodes"][2] == {
        "number": 3,
        "daemon_name": "k164n06.kgn.ibm.com",
        "ip": "198.117.68.70",
        "admin_name": "k164sn06.kgn.ibm.com",
        "designation": "quorum-manager",
    }


def test_mmlscluster_of_a_node_outside_any_cluster_is_refused():
    with pytest.raises(scale.ScaleError, match="mmlscluster: printed no GPFS cluster name and id"):
        scale.parse_mmlscluster("mmlscluster: This node does not belong to a GPFS cluster.\n")


# IBM Redbook REDP-5610 (seed 004) prints mmlscluster's table with node 1's designation wrapped ("quorum-
# manager-perfmon") and node 2's row run into node 1's line; read line by line, node 2 vanished into node 1's
# designation. The table as mmlscluster prints it (each node on its line) reads whole.
MMLSCLUSTER_REDBOOK_PRINTED = """GPFS cluster name: SpectrumScale.ocp4.scale.ibm.com
GPFS cluster id: 16217308676014575381
GPFS UID domain: SpectrumScale.ocp4.scale.ibm.com
Remote shell command: /usr/bin/ssh
Remote file copy command: /usr/bin/scp
Repository type: CCR

Node Daemon node name IP address Admin node name Designation

1 scale00.ocp4.scale.com 192.168.1.30 scale00.ocp4.scale.ibm.com quorum- manager-perfmon 2 dgx01.ocp4.scale.com \
192.168.1.19 dgx01.ocp4.scale.ibm.com perfmon
3 dgx02.ocp4.scale.com 192.168.1.20 dgx02.ocp4.scale.ibm.com perfmon
"""


def wrapped_mmlscluster(how: str) -> tuple[str, str]:
    """MMLSCLUSTER_DOC with one node row wrapped as print wraps it, and the line a reader must stop at."""
    lines = MMLSCLUSTER_DOC.splitlines()
    one, two, three = (i for i, line in enumerate(lines) if line.strip()[:1].isdigit())
    if how == "rows run together":  # the Redbook's: the line break between two rows lost
        offending = lines[one] + " " + lines[two].strip()
        lines[one : two + 1] = [offending]
    elif how == "designation continued":  # quorum-manager broken after its hyphen
        offending = lines[three].removesuffix("manager")
        lines[three : three + 1] = [offending, " " * len(offending) + "manager"]
    else:  # "admin name continued": the admin node name and designation on a line of their own
        daemon_ip, admin = lines[one].split("    k164n04.kgn.ibm.com     quorum")[0], "k164n04.kgn.ibm.com     quorum"
        offending = daemon_ip
        lines[one : one + 1] = [daemon_ip, " " * 48 + admin]
    return "\n".join(lines) + "\n", offending


@pytest.mark.parametrize("how", ["rows run together", "designation continued", "admin name continued"])
def test_mmlscluster_with_a_wrapped_row_is_refused_naming_the_line(how):
    text, offending = wrapped_mmlscluster(how)
    with pytest.raises(scale.ScaleParseError) as error:
        scale.parse_mmlscluster(text)
    assert error.value.line == offending
    assert isinstance(error.value, scale.ScaleError) and isinstance(error.value, ValueError)
    assert str(error.value).startswith("mmlscluster: a node table line of ")
    assert "expected one node per line: node number, daemon node name, IP address" in str(error.value)


def test_mmlscluster_as_the_redbook_printed_it_is_refused_and_reads_once_unwrapped():
    with pytest.raises(scale.ScaleParseError, match="a node table line of 11 fields that is no node") as error:
        scale.parse_mmlscluster(MMLSCLUSTER_REDBOOK_PRINTED)
    assert error.value.line.startswith("1 scale00.ocp4.scale.com") and " 2 dgx01" in error.value.line
    unwrapped = MMLSCLUSTER_REDBOOK_PRINTED.replace("quorum- manager-perfmon 2 ", "quorum-manager-perfmon\n2 ")
    cluster = scale.parse_mmlscluster(unwrapped)
    assert cluster["id"] == "16217308676014575381"
    assert [(n["number"], n["daemon_name"], n["designation"]) for n in cluster["nodes"]] == [
        (1, "scale00.ocp4.scale.com", "quorum-manager-perfmon"),
        (2, "dgx01.ocp4.scale.com", "perfmon"),
        (3, "dgx02.ocp4.scale.com", "perfmon"),
    ]


CUT_IN_A_ROW = MMLSCLUSTER_DOC[: MMLSCLUSTER_DOC.index("198.117.68.70") + 5]
CUT_BEFORE_THE_TABLE = MMLSCLUSTER_DOC[: MMLSCLUSTER_DOC.index("Daemon node name")]
NODE_TWICE = MMLSCLUSTER_DOC.replace("   2   k164n05", "   1   k164n05")


@pytest.mark.parametrize(
    ("text", "line"),
    [
        (CUT_IN_A_ROW, "   3   k164n06.kgn.ibm.com     198.1"),
        (CUT_BEFORE_THE_TABLE, " Node  "),
        (NODE_TWICE, "   1   k164n05.kgn.ibm.com     198.117.68.69    k164n05.kgn.ibm.com     quorum"),
        (
            MMLSCLUSTER_DOC.split(" Node ")[0] + " Node  Daemon node name  IP address\n",
            " Node  Daemon node name  IP address",
        ),
    ],
    ids=["cut-in-a-row", "cut-before-the-table", "node-twice", "table-without-a-node"],
)
def test_mmlscluster_cut_short_is_refused(text, line):
    with pytest.raises(scale.ScaleParseError) as error:
        scale.parse_mmlscluster(text)
    assert error.value.line == line


@pytest.mark.parametrize(
    ("parser", "text", "message"),
    [
        (scale.parse_mmlsconfig, MMLSCONFIG_DOC.replace("pagepool 3500m", "pagepool"), "no 'attribute value'"),
        (scale.parse_mmlsconfig, MMLSCONFIG_DOC.replace("[c5n97g]", "[c5n97"), "no 'attribute value'"),
        (scale.parse_mmlsconfig, "mmlsconfig: warning\n" + MMLSCONFIG_DOC, "a line before the 'Configuration"),
        (scale.parse_mmlsnodeclass, MMLSNODECLASS_DOC.replace("scale.com,\n", "scale.com\n"), "a continuation line"),
        (scale.parse_mmlsnodeclass, "siteA  linuxNodes\n", "a line before the table's header"),
        (scale.parse_mmgetstate, MMGETSTATE + "       3      dgx02            down\n", "not this node's one row"),
        (scale.parse_mmgetstate, MMGETSTATE.replace("active", ""), "not this node's one row"),
        (scale.parse_mmgetstate, MMGETSTATE.replace("GPFS state", "Quorum  GPFS state"), "printed no node state"),
    ],
    ids=[
        "attribute-without-value",
        "section-cut",
        "text-before",
        "continuation-without-comma",
        "no-header",
        "several-nodes",
        "no-state",
        "L-columns",
    ],
)
def test_scale_tables_read_in_part_are_refused(parser, text, message):
    with pytest.raises(scale.ScaleParseError, match=message):
        parser(text)


def test_mmlsconfig_sections_by_node_class():
    config = scale.parse_mmlsconfig(MMLSCONFIG_DOC)
    assert config["cluster"] == "cl1.cluster"
    # Lines before the first [..] and those under [common] are the whole cluster's.
    assert config["sections"]["common"] == {
        "clusterName": "cl1.cluster",
        "clusterId": "680752107138921233",
        "autoload": "no",
        "minReleaseLevel": "4.1.0.0",
        "pagepool": "1G",
        "maxblocksize": "4m",
        "cipherList": "EXP-RC4-MD5",
    }
    assert config["sections"]["c5n97g"] == {"pagepool": "3500m"}
    assert config["file_systems"] == ["/dev/fs2"]


def test_mmlsconfig_reads_the_redbook_s_client_settings():
    sections = scale.parse_mmlsconfig(MMLSCONFIG_REDBOOK)["sections"]
    assert sections["dgx"]["verbsPorts"] == REDBOOK_PORTS
    assert sections["dgx"]["subnets"] == REDBOOK_SUBNETS
    assert sections["common"]["maxMBpS"] == "20000"


def test_mmlsconfig_without_its_header_is_refused():
    with pytest.raises(scale.ScaleError, match="no 'Configuration data for cluster' header"):
        scale.parse_mmlsconfig("pagepool 1G\n")


def test_mmlsnodeclass_and_mmgetstate():
    assert scale.parse_mmlsnodeclass(MMLSNODECLASS_DOC) == {
        "siteA": ["linuxNodes"],
        "dgx": ["dgx01.ocp4.scale.com", "dgx02.ocp4.scale.com", "dgx03.ocp4.scale.com"],
    }
    assert scale.parse_mmgetstate(MMGETSTATE) == {"number": 2, "node": "dgx01", "state": "active"}


# ---- values ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("attribute", "a", "b"),
    [
        ("pagepool", "16G", "16g"),
        ("pagepool", "16G", "16384M"),
        ("pagepool", 17179869184, "16G"),
        ("maxFilesToCache", "1M", "1048576"),
        ("ignorePrefetchLUNCount", True, "yes"),
        ("verbsRdma", True, "enable"),
        ("verbsRdma", "enabled", "enable"),
        ("verbsPorts", ["mlx5_0/1", "mlx5_1/1"], "mlx5_0/1  mlx5_1/1"),
        ("subnets", " 10.10.11.0/a;b ", "10.10.11.0/a;b"),
    ],
)
def test_equal_settings_compare_equal(attribute, a, b):
    assert scale.comparable(attribute, a) == scale.comparable(attribute, b)


@pytest.mark.parametrize(
    ("attribute", "a", "b"),
    [("pagepool", "16G", "16M"), ("verbsRdmaSend", "yes", "no"), ("verbsPorts", "mlx5_0/1", "mlx5_0/2")],
)
def test_different_settings_differ(attribute, a, b):
    assert scale.comparable(attribute, a) != scale.comparable(attribute, b)


def test_values_are_written_in_the_attribute_s_own_words():
    assert scale.canonical("pagepool", "128g") == "128G"
    assert scale.canonical("verbsRdmaSend", True) == "yes"
    assert scale.canonical("verbsRdma", "yes") == "enable"
    assert scale.canonical("verbsPorts", ["mlx5_0/1", "mlx5_1/1/2"]) == "mlx5_0/1 mlx5_1/1/2"


@pytest.mark.parametrize(
    ("attribute", "value", "expected"),
    [
        ("pagepool", "lots", "a number with an optional K, M, G, T or P suffix"),
        ("pagepool", True, "a number"),
        ("verbsRdmaSend", "maybe", "yes or no"),
        # mmchconfig separates attributes with commas: a value with one would set something else.
        ("subnets", "10.0.0.0,10.1.0.0", "without commas"),
        ("verbsPorts", "mlx5_0/1,mlx5_1/1", "device/port[/fabric]"),
        ("verbsPorts", [], "device/port[/fabric]"),
    ],
)
def test_values_that_do_not_fit_are_refused(attribute, value, expected):
    with pytest.raises(scale.ScaleError, match=expected.replace("[", r"\[").replace("]", r"\]")):
        scale.canonical(attribute, value)


def test_verbs_ports_are_derived_from_the_profile_s_hcas():
    assert scale.derived_verbs_ports(DGX1_HCAS) == REDBOOK_PORTS
    assert scale.derived_verbs_ports(model.profiles()["lab"]["hcas"]) == ""


def test_the_attribute_table_follows_ibm_s_mmchconfig_reference():
    immediate = {name for name, spec in scale.ATTRIBUTES.items() if spec.immediate}
    assert immediate == {
        "pagepool",
        "maxMBpS",
        "ignorePrefetchLUNCount",
        "enforceFilesetQuotaOnRoot",
        "controlSetxattrImmutableSELinux",
    }
    # The stand-in keeps its own table: the two must agree, or the molecule scenario would not be a test.
    standin = load_standin()
    assert set(standin.ATTRIBUTES) == set(scale.ATTRIBUTES)
    assert {name for name, spec in standin.ATTRIBUTES.items() if spec[1]} == immediate


# ---- the inventory's settings ----------------------------------------------------------------------------------


def test_the_redbook_s_settings_are_accepted_for_a_dgx1():
    assert scale.config_problems(REDBOOK_CONFIG, "dgx", DGX1_HCAS, "dgx-1") == []


@pytest.mark.parametrize(
    ("config", "node_class", "profile", "expected"),
    [
        (
            {"dgx": {"verbsPorts": "mlx5_0/1 mlx5_7/1"}},
            "dgx",
            "dgx-1",
            ("scale_client_config.dgx.verbsPorts", "'mlx5_0/1 mlx5_7/1' naming mlx5_7",
             "ports of profile dgx-1's HCAs: mlx5_0, mlx5_1, mlx5_2, mlx5_3"),
        ),
        (
            {"dgx": {"pagepol": "1G"}},
            "dgx",
            "dgx-1",
            ("scale_client_config.dgx.pagepol", "an attribute nodeforge does not manage", "one of pagepool, "),
        ),
        (
            {"servers": {"pagepool": "1G"}},
            "dgx",
            "dgx-1",
            ("scale_client_config.servers", "a node class other than this host's", "common or dgx"),
        ),
        (
            {"dgx": {"pagepool": "1G"}},
            "",
            "dgx-1",
            ("scale_client_config.dgx", "a node class other than this host's", "scale_client_node_class set"),
        ),
        (
            {"lab": {"verbsRdma": "enable"}},
            "lab",
            "lab",
            ("scale_client_config.lab.verbsRdma", "enable without verbsPorts on profile lab, which has no HCA",
             "verbsPorts set explicitly"),
        ),
        ({}, "dgx 1", "dgx-1", ("scale_client_node_class", "'dgx 1'", "a Scale node class name")),
    ],
)  # fmt: skip
def test_settings_the_role_could_not_apply_are_named(config, node_class, profile, expected):
    [(path, found, wanted)] = scale.config_problems(config, node_class, model.profiles()[profile]["hcas"], profile)
    assert (path, found) == expected[:2]
    assert expected[2] in wanted


# ---- the plan ----------------------------------------------------------------------------------------------------


def test_a_cluster_that_has_the_redbook_s_settings_needs_no_change():
    plan = scale.plan("dgx01", outputs(), REDBOOK_CONFIG, "dgx", DGX1_HCAS, profile="dgx-1")
    assert (plan["changes"], plan["calls"], plan["restart_attributes"]) == ({}, [], [])
    assert plan["cluster"] == {"name": "SpectrumScale.ocp4.scale.ibm.com", "id": "680681562214606028"}
    assert plan["wanted"]["dgx"]["verbsPorts"] == REDBOOK_PORTS
    assert plan["node_label"] == {"key": "scale", "value": "true"}


def test_one_call_per_section_with_i_only_where_every_attribute_allows_it():
    current = MMLSCONFIG_REDBOOK.replace("pagepool 128G", "pagepool 64G").replace("maxMBpS 20000", "maxMBpS 2048")
    current = current.replace("verbsPorts mlx5_0/1 mlx5_1/1 mlx5_2/1 mlx5_3/1", "verbsPorts mlx5_0/1")
    plan = scale.plan("dgx01", outputs(current), REDBOOK_CONFIG, "dgx", DGX1_HCAS, bin_dir="/opt/bin")
    assert plan["changes"] == {
        "dgx": {
            "pagepool": {"from": "64G", "to": "128G"},
            "verbsPorts": {"from": "mlx5_0/1", "to": REDBOOK_PORTS},
        },
        "common": {"maxMBpS": {"from": "2048", "to": "20000"}},
    }
    assert [c["argv"] for c in plan["calls"]] == [
        ["/opt/bin/mmchconfig", f"pagepool=128G,verbsPorts={REDBOOK_PORTS}", "-N", "dgx"],
        ["/opt/bin/mmchconfig", "maxMBpS=20000", "-i"],
    ]
    assert plan["calls"][0]["summary"] == (
        f"[dgx] pagepool 64G -> 128G, verbsPorts mlx5_0/1 -> {REDBOOK_PORTS}; "
        "takes effect when the GPFS daemon restarts"
    )
    # pagepool allows -i, but the call without it takes effect at the restart too.
    assert plan["restart_attributes"] == ["pagepool", "verbsPorts"]


def test_a_node_class_attribute_set_only_cluster_wide_is_set_for_the_class():
    current = MMLSCONFIG_DOC.replace("cl1.cluster", "SpectrumScale.ocp4.scale.ibm.com")
    plan = scale.plan("dgx01", outputs(current), {"dgx": {"pagepool": "1G"}}, "dgx", DGX1_HCAS)
    assert [c["argv"][1:] for c in plan["calls"]] == [["pagepool=1G", "-i", "-N", "dgx"]]


def test_a_down_daemon_owes_no_restart():
    down = {**outputs(MMLSCONFIG_REDBOOK.replace("workerThreads 1024", "workerThreads 48")), "mmgetstate": MMGETSTATE}
    down["mmgetstate"] = MMGETSTATE.replace("active", "down")
    plan = scale.plan("dgx01", down, REDBOOK_CONFIG, "dgx", DGX1_HCAS)
    assert [c["attributes"] for c in plan["calls"]] == [["workerThreads"]]
    assert (plan["daemon_state"], plan["restart_attributes"]) == ("down", [])


@pytest.mark.parametrize(
    ("node_class", "classes", "expected"),
    [
        ("gpu", MMLSNODECLASS_DOC, "dgx01: scale_client_node_class: found gpu, which cluster "),
        ("siteA", MMLSNODECLASS_DOC, "do not include this node (dgx01)"),
    ],
)
def test_the_node_must_be_in_its_node_class(node_class, classes, expected):
    with pytest.raises(scale.ScaleError) as error:
        scale.plan("dgx01", outputs(), {node_class: {"pagepool": "1G"}}, node_class, DGX1_HCAS)
    assert expected in str(error.value)
    assert "-N dgx01" in str(error.value)


def test_bad_settings_name_the_host_the_variable_and_what_was_expected():
    with pytest.raises(scale.ScaleError) as error:
        scale.plan("dgx01", outputs(), {"dgx": {"pagepool": "big"}}, "dgx", DGX1_HCAS, node_label="scale")
    message = str(error.value)
    assert message.startswith("dgx01: scale_client settings refused: scale_client_config.dgx.pagepool: found 'big'")
    assert "scale_client_node_label: found 'scale'; expected a Kubernetes node label key=value" in message


def plan_for(host: str, cluster_id: str, config: dict) -> dict:
    text = MMLSCLUSTER_DOC.replace("680681562214606028", cluster_id)
    current = MMLSCONFIG_REDBOOK.replace("pagepool 128G", "pagepool 64G")
    return scale.plan(host, {**outputs(current), "mmlscluster": text}, config, "dgx", DGX1_HCAS)


def test_hosts_of_one_node_class_make_its_call_once():
    plans = [plan_for("dgx01", "1", REDBOOK_CONFIG), plan_for("dgx02", "1", REDBOOK_CONFIG)]
    assert [c["section"] for c in scale.owned_calls(plans, "dgx01")] == ["dgx"]
    assert scale.owned_calls(plans, "dgx02") == []
    # A host of another cluster makes its own.
    plans.append(plan_for("dgx09", "2", REDBOOK_CONFIG))
    assert [c["section"] for c in scale.owned_calls(plans, "dgx09")] == ["dgx"]


def test_hosts_of_one_node_class_that_want_different_values_are_refused():
    other = {**REDBOOK_CONFIG, "dgx": {**REDBOOK_CONFIG["dgx"], "pagepool": "96G"}}
    plans = [plan_for("dgx01", "1", REDBOOK_CONFIG), plan_for("dgx02", "1", other)]
    with pytest.raises(scale.ScaleError) as error:
        scale.owned_calls(plans, "dgx02")
    assert "[dgx] of cluster cluster1.kgn.ibm.com: dgx01 wants pagepool=128G but dgx02 wants pagepool=96G" in str(
        error.value
    )


def test_the_restart_record():
    record = scale.restart_record({}, ["verbsPorts"], "mmfs.log.1.dgx01", True)
    assert record == {"attributes": ["verbsPorts"], "daemon_log": "mmfs.log.1.dgx01"}
    # Owed until this daemon instance is gone: a later change adds to it.
    assert scale.restart_record(record, ["workerThreads"], "mmfs.log.1.dgx01", True)["attributes"] == [
        "verbsPorts",
        "workerThreads",
    ]
    # Settled by a restart (a new instance), or by a daemon that is down.
    assert scale.restart_record(record, [], "mmfs.log.2.dgx01", True) == {}
    assert scale.restart_record(record, ["pagepool"], "mmfs.log.1.dgx01", False) == {}


def test_filters_turn_scale_errors_into_filter_errors():
    filters = FilterModule().filters()
    assert filters["scale_mmgetstate"](MMGETSTATE)["state"] == "active"
    assert filters["scale_unapplied"](MMLSCONFIG_REDBOOK, {"dgx": {"pagepool": "128G"}}) == {}
    assert filters["scale_unapplied"](MMLSCONFIG_REDBOOK, {"dgx": {"pagepool": "96G"}}) == {
        "dgx": {"pagepool": {"from": "128G", "to": "96G"}}
    }
    with pytest.raises(AnsibleFilterError, match="mmgetstate: printed no node state"):
        filters["scale_mmgetstate"]("mmgetstate: Command failed.")


# ---- the stand-in (a fixture) ---------------------------------------------------------------------------------


def load_standin():
    spec = importlib.util.spec_from_file_location("scale_standin", STANDIN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Standin:
    """The stand-in program with its state, call log and /var/adm/ras in a temporary directory."""

    def __init__(self, tmp_path: Path, member: bool = True):
        self.state = tmp_path / "state.json"
        self.log = tmp_path / "calls.log"
        self.ras = tmp_path / "ras"
        self.env = {
            **os.environ,
            "NODEFORGE_SCALE_STANDIN_STATE": str(self.state),
            "NODEFORGE_SCALE_STANDIN_LOG": str(self.log),
            "NODEFORGE_SCALE_STANDIN_RAS": str(self.ras),
        }
        if member:
            shutil.copy(MOLECULE_STATE, self.state)

    def __call__(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(STANDIN), *argv], env=self.env, capture_output=True, text=True, check=False
        )

    def calls(self) -> list[dict]:
        return [json.loads(line) for line in self.log.read_text().splitlines()] if self.log.exists() else []


NOT_A_MEMBER = [
    "{0}: This node does not belong to a GPFS cluster.",
    "{0}: Command failed.  Examine previous error messages to determine cause.",
]


class TestStandinFixture:
    """Tests of a test fixture, not of nodeforge: the stand-in for Scale's admin commands
    (molecule/fixture_files/spectrum_scale/scale_standin.py, installed as gpfs.base in the molecule scenario
    scale_client). The role's tests there, and test_the_role_s_plan_applied_to_the_standin_converges here, prove
    something only as long as the stand-in answers as IBM's commands do: these hold it to their documented behaviour."""

    @pytest.mark.parametrize("command", ["mmlscluster", "mmlsconfig", "mmchconfig pagepool=1G", "mmgetstate"])
    def test_standin_on_a_node_outside_any_cluster_fails_as_scale_does(self, tmp_path, command):
        run = Standin(tmp_path, member=False)(*command.split())
        name = command.split()[0]
        assert (run.returncode, run.stdout) == (1, "")
        assert run.stderr.splitlines() == [line.format(name) for line in NOT_A_MEMBER]

    def test_standin_prints_what_the_parsers_read(self, tmp_path):
        standin = Standin(tmp_path)
        cluster = scale.parse_mmlscluster(standin("mmlscluster").stdout)
        assert (cluster["name"], cluster["id"]) == ("SpectrumScale.ocp4.scale.ibm.com", "16217308676014575381")
        assert [n["daemon_name"] for n in cluster["nodes"]] == [
            "scale00.ocp4.scale.com",
            "dgx01.ocp4.scale.com",
            "dgx02.ocp4.scale.com",
        ]
        config = scale.parse_mmlsconfig(standin("mmlsconfig").stdout)
        assert config["sections"]["dgx"] == {"pagepool": "64g", "maxStatCache": "1048576", "verbsRdma": "enable"}
        assert config["file_systems"] == ["/dev/fs0"]
        assert scale.parse_mmlsnodeclass(standin("mmlsnodeclass").stdout)["dgx"] == [
            "dgx01.ocp4.scale.com",
            "dgx02.ocp4.scale.com",
        ]
        assert scale.parse_mmgetstate(standin("mmgetstate").stdout) == {"number": 2, "node": "dgx01", "state": "down"}
        assert standin("mmlsconfig", "pagepool").stdout.splitlines() == ["pagepool 32G [servers]", "pagepool 64g [dgx]"]
        # An attribute nobody set shows Scale's default.
        assert standin("mmlsconfig", "workerThreads").stdout == "workerThreads 48\n"

    def test_standin_mmchconfig_refuses_i_for_attributes_that_need_a_restart(self, tmp_path):
        standin = Standin(tmp_path)
        before = standin.state.read_text()
        run = standin("mmchconfig", f"pagepool=128G,verbsPorts={REDBOOK_PORTS}", "-i", "-N", "dgx")
        assert run.returncode == 1
        assert run.stderr.splitlines() == [
            "mmchconfig: The -i option is not valid for attribute verbsPorts.",
            NOT_A_MEMBER[1].format("mmchconfig"),
        ]
        assert standin.state.read_text() == before
        assert standin.calls() == [
            {"command": "mmchconfig", "argv": ["mmchconfig", f"pagepool=128G,verbsPorts={REDBOOK_PORTS}", "-i", "-N",
                                               "dgx"], "rc": 1}
        ]  # fmt: skip

    def test_standin_mmchconfig_changes_a_node_class_and_says_when_it_takes_effect(self, tmp_path):
        standin = Standin(tmp_path)
        standin("mmstartup")
        run = standin("mmchconfig", f"verbsPorts={REDBOOK_PORTS},workerThreads=1024", "-N", "dgx")
        assert run.returncode == 0, run.stderr
        assert run.stdout.splitlines() == [
            "mmchconfig: Command successfully completed",
            "mmchconfig: The following attributes take effect only after the GPFS daemon is restarted: verbsPorts, "
            "workerThreads",
            "mmchconfig: Propagating the cluster configuration data to all",
            "  affected nodes.  This is an asynchronous process.",
        ]
        immediate = standin("mmchconfig", "maxMBpS=20000,controlSetxattrImmutableSELinux=yes", "-i")
        assert "take effect only after" not in immediate.stdout
        sections = scale.parse_mmlsconfig(standin("mmlsconfig").stdout)["sections"]
        assert sections["dgx"]["verbsPorts"] == REDBOOK_PORTS and sections["dgx"]["workerThreads"] == "1024"
        # maxMBpS was set in the cluster-wide head: changed in place; a new cluster-wide one goes under [common].
        text = standin("mmlsconfig").stdout
        assert text.index("maxMBpS 20000") < text.index("[servers]")
        assert text.index("[common]") < text.index("controlSetxattrImmutableSELinux yes")

    def test_standin_mmchconfig_capital_i_does_not_persist_and_default_removes(self, tmp_path):
        standin = Standin(tmp_path)
        assert standin("mmchconfig", "pagepool=96G", "-I", "-N", "dgx").returncode == 0
        assert standin("mmlsconfig", "pagepool").stdout.splitlines()[-1] == "pagepool 64g [dgx]"
        assert standin("mmchconfig", "pagepool=DEFAULT", "-N", "dgx").returncode == 0
        assert standin("mmlsconfig", "pagepool").stdout.splitlines() == ["pagepool 32G [servers]"]

    @pytest.mark.parametrize(
        ("argv", "stderr"),
        [
            (["mmchconfig", "pagepol=1G"], "mmchconfig: Unknown attribute: pagepol"),
            (["mmchconfig", "verbsRdma=yes", "-N", "dgx"], "mmchconfig: Incorrect value for attribute verbsRdma: yes"),
            (["mmchconfig", "pagepool=1G", "-N", "gpu"], "mmchconfig: Incorrect node gpu specified for command."),
            (["mmchconfig", "enforceFilesetQuotaOnRoot=yes", "-I"],
             "mmchconfig: The -I option is not valid for attribute enforceFilesetQuotaOnRoot."),
            (["mmchconfig", "-i", "pagepool=1G"], "Usage:"),
        ],
    )  # fmt: skip
    def test_standin_mmchconfig_refuses_what_scale_refuses(self, tmp_path, argv, stderr):
        standin = Standin(tmp_path)
        before = standin.state.read_text()
        run = standin(*argv)
        assert run.returncode == 1
        assert run.stderr.splitlines()[0] == stderr
        assert standin.state.read_text() == before

    def test_standin_restart_starts_a_new_daemon_log(self, tmp_path):
        standin = Standin(tmp_path)
        standin("mmstartup")
        first = os.readlink(standin.ras / "mmfs.log.latest")
        assert scale.parse_mmgetstate(standin("mmgetstate").stdout)["state"] == "active"
        shutdown = standin("mmshutdown")
        assert shutdown.stdout.splitlines()[-1].endswith(": mmshutdown: Finished")
        assert scale.parse_mmgetstate(standin("mmgetstate").stdout)["state"] == "down"
        standin("mmstartup")
        second = os.readlink(standin.ras / "mmfs.log.latest")
        assert first != second and second.startswith("mmfs.log.") and second.endswith(".dgx01")
        assert os.readlink(standin.ras / "mmfs.log.previous") == first
        assert [c["command"] for c in standin.calls()] == ["mmstartup", "mmshutdown", "mmstartup"]


def test_the_role_s_plan_applied_to_the_standin_converges(tmp_path):
    """The plan's argv, run against the stand-in, leaves nothing to change: the two agree on every format."""
    standin = Standin(tmp_path)
    standin("mmstartup")

    def read() -> dict[str, str]:
        return {c: standin(c).stdout for c in ("mmlscluster", "mmgetstate", "mmlsnodeclass", "mmlsconfig")}

    plan = scale.plan("dgx01", read(), REDBOOK_CONFIG, "dgx", DGX1_HCAS)
    assert [c["section"] for c in plan["calls"]] == ["dgx", "common"]
    for call in plan["calls"]:
        run = standin(Path(call["argv"][0]).name, *call["argv"][1:])
        assert run.returncode == 0, run.stderr
    again = scale.plan("dgx01", read(), REDBOOK_CONFIG, "dgx", DGX1_HCAS)
    assert (again["changes"], again["calls"]) == ({}, [])
    assert scale.parse_mmlsconfig(standin("mmlsconfig").stdout)["sections"]["dgx"]["verbsPorts"] == REDBOOK_PORTS
