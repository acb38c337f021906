# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""IBM Storage Scale client settings pinned down where test_scale.py looks at parts: mmlscluster's refusals of output
without a cluster or a node table (the line shown), who makes each section's mmchconfig call when hosts of a cluster
share two sections, the refusal of hosts that disagree word for word, and a restart record read back partly."""

from __future__ import annotations

import copy

import pytest

from tests.test_scale import (
    DGX1_HCAS,
    MMLSCLUSTER_DOC,
    MMLSCONFIG_REDBOOK,
    MMLSNODECLASS_DOC,
    REDBOOK_CONFIG,
    outputs,
    plan_for,
    scale,
)

NO_CLUSTER = (
    "mmlscluster: printed no GPFS cluster name and id: ''; expected the 'GPFS cluster information' block "
    "('GPFS cluster name:', 'GPFS cluster id:', ...) and the node table"
)
INFORMATION_ONLY = """
GPFS cluster information
========================
  GPFS cluster name:         cluster1.kgn.ibm.com
  GPFS cluster id:           680681562214606028

"""


@pytest.mark.parametrize("output", [None, "", "\n   \n", []], ids=["none", "empty", "blank-lines", "no-lines"])
def test_mmlscluster_that_printed_nothing_shows_an_empty_line(output):
    with pytest.raises(scale.ScaleParseError) as refused:
        scale.parse_mmlscluster(output)
    assert str(refused.value) == NO_CLUSTER
    assert refused.value.line == ""


def test_mmlscluster_without_a_node_table_shows_its_last_line():
    with pytest.raises(scale.ScaleParseError) as refused:
        scale.parse_mmlscluster(INFORMATION_ONLY)
    assert refused.value.line == "  GPFS cluster id:           680681562214606028"
    assert str(refused.value) == (
        "mmlscluster: no node table: '  GPFS cluster id:           680681562214606028'; expected the 'GPFS cluster "
        "information' block ('GPFS cluster name:', 'GPFS cluster id:', ...) and the node table"
    )


def both_sections(max_mbps: int = 30000, **dgx) -> dict:
    """The Redbook's settings, with a common section that differs from the cluster's (maxMBpS 20000)."""
    config = copy.deepcopy(REDBOOK_CONFIG)
    config["common"]["maxMBpS"] = max_mbps
    config["dgx"].update(dgx)
    return config


def test_the_first_host_makes_every_section_s_call():
    plans = [plan_for("dgx01", "1", both_sections()), plan_for("dgx02", "1", both_sections())]
    assert [c["section"] for c in plans[0]["calls"]] == ["dgx", "common"]
    assert scale.owned_calls(plans, "dgx01") == plans[0]["calls"]
    assert scale.owned_calls(plans, "dgx02") == []


def test_hosts_without_a_plan_are_skipped():
    """A host that made no plan (skipped, unreachable) has an empty one: the hosts after it still count."""
    plans = [{}, plan_for("dgx01", "1", both_sections()), None, plan_for("dgx02", "1", both_sections())]
    assert scale.owned_calls(plans, "dgx01") == plans[1]["calls"]
    assert scale.owned_calls(plans, "dgx02") == []
    assert scale.owned_calls(plans, "dgx03") == []


def test_hosts_that_want_different_settings_are_refused_naming_each_section_and_attribute():
    """An attribute one host sets and the other leaves unset differs too."""
    mine = plan_for("dgx01", "1", both_sections())
    theirs = both_sections(40000, pagepool="96G", maxMBpS=30000)
    del theirs["dgx"]["workerThreads"]
    with pytest.raises(scale.ScaleError) as refused:
        scale.owned_calls([mine, plan_for("dgx02", "1", theirs)], "dgx01")
    assert str(refused.value) == (
        "scale_client_config: hosts of one cluster want different settings for a node class they share: "
        "[dgx] of cluster cluster1.kgn.ibm.com: dgx01 wants maxMBpS=(unset), pagepool=128G, workerThreads=1024 but "
        "dgx02 wants maxMBpS=30000, pagepool=96G, workerThreads=(unset); "
        "[common] of cluster cluster1.kgn.ibm.com: dgx01 wants maxMBpS=30000 but dgx02 wants maxMBpS=40000; "
        "expected the same values (set them in the group both hosts are in), or separate node classes"
    )


def test_a_restart_record_without_attributes_owes_the_new_ones():
    """A record read back without its attributes (cut short) owes what changed now, for the same daemon."""
    assert scale.restart_record({"daemon_log": "mmfs.log.1.dgx01"}, ["verbsPorts"], "mmfs.log.1.dgx01", True) == {
        "attributes": ["verbsPorts"],
        "daemon_log": "mmfs.log.1.dgx01",
    }
    assert scale.restart_record({"daemon_log": "mmfs.log.1.dgx01"}, [], "mmfs.log.1.dgx01", True) == {}


def test_verbs_ports_with_a_fabric_number_name_their_device():
    assert scale.port_devices("mlx5_0/1/2 mlx5_1") == ["mlx5_0", "mlx5_1"]
    assert scale.port_devices(["mlx5_0/1", " ", "mlx5_3/1/1"]) == ["mlx5_0", "mlx5_3"]
    config = copy.deepcopy(REDBOOK_CONFIG)
    config["dgx"]["verbsPorts"] = "mlx5_0/1/1 mlx5_1/1/1 mlx5_2/1/2 mlx5_3/1/2"
    [call] = plan_for("dgx01", "1", config)["calls"]
    assert call["argv"] == [
        "/usr/lpp/mmfs/bin/mmchconfig",
        "pagepool=128G,verbsPorts=mlx5_0/1/1 mlx5_1/1/1 mlx5_2/1/2 mlx5_3/1/2",
        "-N",
        "dgx",
    ]


def test_verbs_ports_of_a_device_the_host_lacks_are_refused_naming_it():
    """Without a profile name, the HCAs are the host's."""
    config = copy.deepcopy(REDBOOK_CONFIG)
    config["dgx"]["verbsPorts"] = "mlx5_0/1/1 mlx5_9/1/1"
    with pytest.raises(scale.ScaleError) as refused:
        plan_for("dgx01", "1", config)
    assert str(refused.value) == (
        "dgx01: scale_client settings refused: scale_client_config.dgx.verbsPorts: found 'mlx5_0/1/1 mlx5_9/1/1' "
        "naming mlx5_9; expected ports of the host's HCAs: mlx5_0, mlx5_1, mlx5_2, mlx5_3"
    )


def test_an_mmchconfig_call_of_the_whole_cluster_takes_effect_now():
    diff = {"maxMBpS": {"from": None, "to": "30000"}, "pagepool": {"from": "64G", "to": "128G"}}
    assert scale.mmchconfig_call("common", diff, "/opt/mmfs/bin/") == {
        "section": "common",
        "argv": ["/opt/mmfs/bin/mmchconfig", "maxMBpS=30000,pagepool=128G", "-i"],
        "attributes": ["maxMBpS", "pagepool"],
        "immediate": True,
        "summary": "[common] maxMBpS (unset) -> 30000, pagepool 64G -> 128G; takes effect now (-i)",
    }


def test_an_mmchconfig_call_of_a_node_class_that_waits_for_a_restart():
    assert scale.mmchconfig_call("dgx", {"workerThreads": {"from": "512", "to": "1024"}}) == {
        "section": "dgx",
        "argv": ["/usr/lpp/mmfs/bin/mmchconfig", "workerThreads=1024", "-N", "dgx"],
        "attributes": ["workerThreads"],
        "immediate": False,
        "summary": "[dgx] workerThreads 512 -> 1024; takes effect when the GPFS daemon restarts",
    }


NESTED_CLASSES = {
    "site": ["rack1", "login01.lab"],
    "rack1": ["gpu", "storage"],
    "gpu": ["dgx", "dgx09"],
    "dgx": ["dgx01.lab", "dgx02"],
    "storage": ["ess01"],
}


@pytest.mark.parametrize(
    ("node", "node_class", "member"),
    [
        ("dgx02.lab.example.com", "dgx", True),  # mmlsnodeclass lists short names or FQDNs: compared by host
        ("dgx01", "dgx", True),
        ("dgx03", "dgx", False),
        ("dgx09", "rack1", True),  # through one class
        ("dgx01", "rack1", True),  # through two
        ("dgx01", "site", False),  # through three: deeper than nodeforge follows
        ("dgx09", "site", True),
        ("login01", "site", True),
        ("ess01", "gpu", False),  # a class in the list is followed, not a member by itself
        ("dgx01", "storage", False),
    ],
)
def test_node_class_membership_through_nested_classes(node, node_class, member):
    assert scale._member(node, node_class, NESTED_CLASSES) is member


def test_node_class_membership_of_classes_that_name_each_other_ends():
    assert scale._member("dgx01", "a", {"a": ["b"], "b": ["a"]}) is False


# ---- plan(): what one host does, and its refusals word for word --------------------------------------------------
def test_a_plan_says_which_host_node_class_and_label():
    found = plan_for("dgx01", "1", REDBOOK_CONFIG)
    assert {k: v for k, v in found.items() if k not in ("wanted", "changes", "calls")} == {
        "host": "dgx01",
        "cluster": {"name": "cluster1.kgn.ibm.com", "id": "1"},
        "node": "dgx01",
        "daemon_state": "active",
        "node_class": "dgx",
        "node_label": {"key": "scale", "value": "true"},
        "restart_attributes": [],
    }


def test_a_current_value_scale_would_not_print_is_changed():
    """An mmlsconfig value nodeforge cannot read (set by hand) differs from any wanted one."""
    current = MMLSCONFIG_REDBOOK.replace("pagepool 128G", "pagepool  lots  of")
    found = scale.plan("dgx01", outputs(current), REDBOOK_CONFIG, "dgx", DGX1_HCAS)
    assert found["changes"] == {"dgx": {"pagepool": {"from": "lots  of", "to": "128G"}}}


CLUSTER = "cluster SpectrumScale.ocp4.scale.ibm.com"
TWO_OTHERS = (
    "Node Class Name       Members\n--------------------- ------------------\ndgx                   dgx02,dgx03\n"
)


@pytest.mark.parametrize(
    ("node_classes", "node_class", "message"),
    [
        pytest.param(
            None,
            "dgx",
            f"dgx01: scale_client_node_class: found dgx, which {CLUSTER} does not have (mmlsnodeclass lists no "
            "user-defined node class); expected an existing node class: create it on an admin node with mmcrnodeclass "
            "dgx -N dgx01",
            id="no-mmlsnodeclass-output",
        ),
        pytest.param(
            MMLSNODECLASS_DOC,
            "gpu",
            f"dgx01: scale_client_node_class: found gpu, which {CLUSTER} does not have (mmlsnodeclass lists siteA, "
            "dgx); expected an existing node class: create it on an admin node with mmcrnodeclass gpu -N dgx01",
            id="unknown-class",
        ),
        pytest.param(
            TWO_OTHERS,
            "dgx",
            "dgx01: scale_client_node_class: found dgx, whose members (dgx02, dgx03) do not include this node (dgx01); "
            "expected a node class this node belongs to: add it on an admin node with mmchnodeclass dgx add -N dgx01",
            id="not-a-member",
        ),
    ],
)
def test_a_node_class_the_node_is_not_in_is_refused(node_classes, node_class, message):
    found = outputs()
    if node_classes is None:
        del found["mmlsnodeclass"]
    else:
        found["mmlsnodeclass"] = node_classes
    with pytest.raises(scale.ScaleError) as refused:
        scale.plan("dgx01", found, {node_class: {"pagepool": "1G"}}, node_class, DGX1_HCAS)
    assert str(refused.value) == message


def test_every_refused_setting_is_named_in_one_message():
    with pytest.raises(scale.ScaleError) as refused:
        scale.plan(
            "dgx01",
            outputs(),
            {"dgx": {"verbsPorts": "mlx5_7/1"}},
            "dgx",
            DGX1_HCAS,
            profile="dgx-1",
            node_label="scale",
        )
    assert str(refused.value) == (
        "dgx01: scale_client settings refused: scale_client_config.dgx.verbsPorts: found 'mlx5_7/1' naming mlx5_7; "
        "expected ports of profile dgx-1's HCAs: mlx5_0, mlx5_1, mlx5_2, mlx5_3; scale_client_node_label: found "
        "'scale'; expected a Kubernetes node label key=value, e.g. scale=true"
    )


# ---- the parsers' refusals, word for word ------------------------------------------------------------------------
MMGETSTATE_HEADER = " Node number  Node name        GPFS state\n------------------------------------------\n"
MMGETSTATE_EXPECTED = (
    "expected mmgetstate's table for this node: 'Node number  Node name  GPFS state', then one row: number, name, state"
)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("mmfsd: not running\n", "printed no node state: 'mmfsd: not running'", id="an-error-message"),
        pytest.param(
            MMGETSTATE_HEADER, "printed no node state: ' Node number  Node name        GPFS state'", id="no-row"
        ),
        pytest.param(
            MMGETSTATE_HEADER + "  2  dgx01  active\n  3  dgx02  down\n",
            "not this node's one row: '  3  dgx02  down'",
            id="two-rows",
        ),
        pytest.param(
            MMGETSTATE_HEADER + "  2  dgx01!  active\n", "not this node's one row: '  2  dgx01!  active'", id="bad-name"
        ),
    ],
)
def test_mmgetstate_refusals(text, message):
    with pytest.raises(scale.ScaleParseError) as refused:
        scale.parse_mmgetstate(text)
    assert str(refused.value) == f"mmgetstate: {message}; {MMGETSTATE_EXPECTED}"


NODE_TABLE = MMLSCLUSTER_DOC.split(" Node  Daemon", 1)[0] + (
    " Node  Daemon node name        IP address       Admin node name         Designation\n"
    "--------------------------------------------------------------------------------------\n"
)
NODE_ROW = (
    "expected one node per line: node number, daemon node name, IP address, admin node name and a designation such "
    "as quorum-manager (none for a client)"
)


def test_mmlscluster_reads_a_client_row_without_a_designation():
    cluster = scale.parse_mmlscluster(NODE_TABLE + "   7   dgx01.lab     10.0.0.7    dgx01.lab\n")
    assert cluster["nodes"] == [
        {"number": 7, "daemon_name": "dgx01.lab", "ip": "10.0.0.7", "admin_name": "dgx01.lab", "designation": ""}
    ]


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        pytest.param(
            "   7   dgx!01     10.0.0.7    dgx01\n",
            "a node table line of 4 fields that is no node: '   7   dgx!01     10.0.0.7    dgx01'",
            id="bad-daemon-name",
        ),
        pytest.param(
            "   7   dgx01     10.0.0    dgx01\n",
            "a node table line of 4 fields that is no node: '   7   dgx01     10.0.0    dgx01'",
            id="bad-ip",
        ),
        pytest.param(
            "   7   dgx01     10.0.0.7    dgx01\n   7   dgx02     10.0.0.8    dgx02\n",
            "node 7 listed twice: '   7   dgx02     10.0.0.8    dgx02'",
            id="number-twice",
        ),
    ],
)
def test_mmlscluster_node_rows_refused(rows, message):
    with pytest.raises(scale.ScaleParseError) as refused:
        scale.parse_mmlscluster(NODE_TABLE + rows)
    assert str(refused.value) == f"mmlscluster: {message}; {NODE_ROW}"


NODECLASS_HEADER = "Node Class Name       Members\n--------------------- -----------------------------------\n"
NODECLASS_EXPECTED = (
    "expected mmlsnodeclass's table: 'Node Class Name  Members', then one node class per line with its "
    "comma-separated members, a long list continued on the next, indented line after a trailing comma"
)


def test_mmlsnodeclass_continues_a_list_on_a_line_indented_by_one_space():
    assert scale.parse_mmlsnodeclass(NODECLASS_HEADER + "dgx                   dgx01,dgx02,\n dgx03\n") == {
        "dgx": ["dgx01", "dgx02", "dgx03"]
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "mmlsnodeclass: command not found\n" + NODECLASS_HEADER,
            "a line before the table's header: 'mmlsnodeclass: command not found'",
            id="before-the-header",
        ),
        pytest.param(
            NODECLASS_HEADER + "dgx                   dgx01,dgx02\n                      dgx03\n",
            "a continuation line after a complete member list: '                      dgx03'",
            id="continuation-without-a-comma",
        ),
        pytest.param(
            NODECLASS_HEADER + "dgx                   dgx01\ndgx                   dgx02\n",
            "not a node class name, or one listed twice: 'dgx                   dgx02'",
            id="class-twice",
        ),
        pytest.param(
            NODECLASS_HEADER + "dgx                   dgx01,dgx 02\n",
            "members that are no node or node class names: 'dgx                   dgx01,dgx 02'",
            id="bad-member",
        ),
    ],
)
def test_mmlsnodeclass_refusals(text, message):
    with pytest.raises(scale.ScaleParseError) as refused:
        scale.parse_mmlsnodeclass(text)
    assert str(refused.value) == f"mmlsnodeclass: {message}; {NODECLASS_EXPECTED}"


CONFIG_HEAD = (
    "Configuration data for cluster c1.lab:\n-------------------------------------\nclusterName c1.lab\npagepool 4G\n"
)
FILE_SYSTEMS = "\nFile systems in cluster c1.lab:\n-------------------------------\n"
CONFIG_EXPECTED = (
    "expected mmlsconfig's listing: 'Configuration data for cluster NAME:', then 'attribute value' lines and [node "
    "class] headers, then 'File systems in cluster NAME:' and one device per line"
)


@pytest.mark.parametrize(
    ("devices", "file_systems"),
    [("/dev/fs1\n/dev/fs2\n", ["/dev/fs1", "/dev/fs2"]), ("(none)\n", [])],
    ids=["two", "none"],
)
def test_mmlsconfig_file_systems(devices, file_systems):
    assert scale.parse_mmlsconfig(CONFIG_HEAD + FILE_SYSTEMS + devices) == {
        "cluster": "c1.lab",
        "sections": {"common": {"clusterName": "c1.lab", "pagepool": "4G"}},
        "file_systems": file_systems,
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "mmlsconfig: not found\n" + CONFIG_HEAD,
            f"a line before the 'Configuration data for cluster' header: 'mmlsconfig: not found'; {CONFIG_EXPECTED}",
            id="before-the-header",
        ),
        pytest.param(
            "mmfsd down\n",
            f"no 'Configuration data for cluster' header: 'mmfsd down'; {CONFIG_EXPECTED}",
            id="no-header",
        ),
        pytest.param(
            CONFIG_HEAD + "pagepool\n",
            f"a line that is no 'attribute value' and no [section]: 'pagepool'; {CONFIG_EXPECTED}",
            id="attribute-without-value",
        ),
        pytest.param(
            CONFIG_HEAD + FILE_SYSTEMS + "/dev/fs0 mounted\n",
            "a file system line that is no device: '/dev/fs0 mounted'; expected one device per line, e.g. /dev/fs0",
            id="file-system-line",
        ),
    ],
)
def test_mmlsconfig_refusals(text, message):
    with pytest.raises(scale.ScaleParseError) as refused:
        scale.parse_mmlsconfig(text)
    assert str(refused.value) == f"mmlsconfig: {message}"


CLUSTER_BLOCK = (
    "expected the 'GPFS cluster information' block ('GPFS cluster name:', 'GPFS cluster id:', ...) and the node table"
)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "GPFS cluster information\n  GPFS cluster name:  c1.lab\n",
            f"printed no GPFS cluster name and id: 'GPFS cluster information'; {CLUSTER_BLOCK}",
            id="no-id",
        ),
        pytest.param(
            "GPFS cluster information\n  GPFS cluster name:  c1 lab\n  GPFS cluster id:  123\n",
            "an unreadable cluster name or id: 'GPFS cluster name: c1 lab / GPFS cluster id: 123'; expected one name, "
            "and an id of digits",
            id="name-of-two-words",
        ),
        pytest.param(
            NODE_TABLE,
            "a node table without a node: ' Node  Daemon node name        IP address       Admin node name         "
            f"Designation'; {NODE_ROW}",
            id="table-without-a-node",
        ),
    ],
)
def test_mmlscluster_refusals(text, message):
    with pytest.raises(scale.ScaleParseError) as refused:
        scale.parse_mmlscluster(text)
    assert str(refused.value) == f"mmlscluster: {message}"


@pytest.mark.parametrize(
    ("attribute", "value", "written"),
    [
        ("ignorePrefetchLUNCount", False, "no"),
        ("ignorePrefetchLUNCount", " No ", "no"),
        ("ignorePrefetchLUNCount", "on", "yes"),
        ("verbsRdma", False, "disable"),
        ("verbsRdma", True, "enable"),
        ("verbsRdma", "Enabled", "enable"),
        ("verbsRdma", "off", "disable"),
        ("pagepool", 1024, "1024"),
        ("pagepool", "16g", "16G"),
        ("verbsPorts", ["mlx5_0/1", "mlx5_1/1/2"], "mlx5_0/1 mlx5_1/1/2"),
    ],
)
def test_canonical_values_as_mmchconfig_gets_them(attribute, value, written):
    assert scale.canonical(attribute, value) == written


@pytest.mark.parametrize(
    ("attribute", "value", "message"),
    [
        ("nsdThreads", 8, "nsdThreads is not an attribute nodeforge manages"),
        ("ignorePrefetchLUNCount", 1, "yes or no (true/false)"),  # a number is no answer, quote it: "1"
        ("verbsRdma", 0, "enable or disable (true/false)"),
        ("pagepool", True, "a number with an optional K, M, G, T or P suffix, e.g. 128G or 1M"),
        (
            "verbsPorts",
            5,
            "space-separated RDMA ports device/port[/fabric] (e.g. mlx5_0/1 mlx5_1/1), a list or a string",
        ),
        (
            "verbsPorts",
            "mlx5_0/1,mlx5_1/1",
            "space-separated RDMA ports device/port[/fabric] (e.g. mlx5_0/1 mlx5_1/1), a list or a string",
        ),
        ("subnets", 10, "space-separated subnets, each network[/clustername;clustername...] without commas"),
        (
            "subnets",
            "10.0.0.0/c1,c2",
            "space-separated subnets, each network[/clustername;clustername...] without commas",
        ),
    ],
)
def test_canonical_refusals_say_what_is_expected(attribute, value, message):
    with pytest.raises(scale.ScaleError) as refused:
        scale.canonical(attribute, value)
    assert str(refused.value) == message


def test_an_unreadable_verbs_rdma_is_named_once_not_read_as_enable():
    """verbsRdma "maybe" is refused for what it is; it is not also taken for enable (which would add a second,
    wrong problem: enable without verbsPorts on a profile without an HCA)."""
    from nodeforge.collection import model

    problems = scale.config_problems({"lab": {"verbsRdma": "maybe"}}, "lab", model.profiles()["lab"]["hcas"], "lab")
    assert [(path, found) for path, found, _ in problems] == [("scale_client_config.lab.verbsRdma", "'maybe'")]


def test_mmlscluster_keeps_a_value_holding_a_colon_whole():
    text = MMLSCLUSTER_DOC.replace("command:      /usr/bin/ssh", "command:      /opt/ssh:wrap")
    assert text != MMLSCLUSTER_DOC
    assert scale.parse_mmlscluster(text)["remote_shell"] == "/opt/ssh:wrap"


def test_mmlscluster_information_line_of_a_field_it_does_not_read_is_no_table_header():
    """A field of the information block this parser does not read (a later Scale release's, say) is passed over, even
    one that begins with "Node" or names the daemon node: only the table's own header line starts the node table."""
    head, table = NODE_TABLE.split(" Node  Daemon", 1)
    extra = "  Nodes in cluster:          1\n  Daemon node name format:   FQDN\n"
    cluster = scale.parse_mmlscluster(
        head + extra + " Node  Daemon" + table + "   7   dgx01.lab  10.0.0.7  dgx01.lab\n"
    )
    assert cluster["nodes"] == [
        {"number": 7, "daemon_name": "dgx01.lab", "ip": "10.0.0.7", "admin_name": "dgx01.lab", "designation": ""}
    ]
