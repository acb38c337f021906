"""IBM Storage Scale CSI on the cluster layer (module_utils/k8s_scale.py, role k8s_scale_csi, nodeforge k8s scale-pv).

The IBM Redbook REDP-5610 (3.4.5, 4.2) is the spec: two Scale clusters (the local one with the primary file system
fs0 and fileset csifset, a remote ESS), the DGX nodes labelled scale=true, a static PV of an existing directory.
Every object is validated against the real schemas: the CSIScaleOperator against the openAPIV3Schema of the CRD of
the pinned v3.0.0 release (nodeforge's strict validator, and plain jsonschema as an independent probe), built-in
kinds with kubernetes-validate's own validate(). The slow tests run `nodeforge k8s render` on a Redbook-style
inventory (the dgx1-openshift sample with Scale settings) and look for the GUI password in everything the run left.
"""

from __future__ import annotations

import base64
import copy
import functools
import hashlib
import http.server
import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path
from unittest import mock

import jsonschema
import kubernetes_validate
import pytest
import yaml

from nodeforge.collection import k8s_validate, model
from tests.test_k8s_objects import UPSTREAM, _nullable
from tests.test_k8s_render import read_rendered

from ansible_collections.nodeforge.gpu.plugins.action.k8s_render import MARKER, ActionModule  # isort: skip
from ansible_collections.nodeforge.gpu.plugins.module_utils import k8s_objects, k8s_scale  # isort: skip

REPO = Path(__file__).resolve().parent.parent
NODEFORGE = str(Path(sys.executable).parent / "nodeforge")
OPERATOR = "ibm-spectrum-scale-csi-operator-v3.0.0.yaml"
RELEASE = k8s_validate.load_documents((UPSTREAM / OPERATOR).read_text())
[CRD] = [d for d in RELEASE if d["kind"] == "CustomResourceDefinition"]
LOCAL, REMOTE = "16217308676014575381", "215057217487177715"
FS_UID = "099B6A7A:5EB99743"  # mmlsfs ess3000_4M --uid, seed 004 4.2
PASSWORDS = {"csisecret-local": "gui-Local-Pa55!", "csisecret-remote": "gui-Remote-Pa55?"}

# IBM Redbook REDP-5610 3.4.5, as printed (CSI 2.0): `quiHost` is a typo, scaleHostpath a field CSI v3.0.0 no longer
# has, and localScaleCluster (required since) is missing. The PDF text's indentation is repaired.
REDBOOK_CR = yaml.safe_load(
    """
apiVersion: csi.ibm.com/v1
kind: CSIScaleOperator
metadata:
  labels:
    app.kubernetes.io/instance: ibm-spectrum-scale-csi-operator
    app.kubernetes.io/managed-by: ibm-spectrum-scale-csi-operator
    app.kubernetes.io/name: ibm-spectrum-scale-csi-operator
  name: ibm-spectrum-scale-csi
  namespace: ibm-spectrum-scale-csi-driver
spec:
  clusters:
    - id: '16217308676014575381'
      primary:
        primaryFs: fs0
        primaryFset: csifset
      restApi:
        - quiHost: 192.168.1.30
      secrets: csisecret-local
      secureSslMode: false
    - id: '215057217487177715'
      restApi:
        - guiHost: 192.168.1.52
      secrets: csisecret-remote
      secureSslMode: false
  scaleHostpath: /gpfs/fs0
  attacherNodeSelector:
    - key: scale
      value: "true"
  provisionerNodeSelector:
    - key: scale
      value: "true"
  pluginNodeSelector:
    - key: scale
      value: "true"
"""
)

# IBM Redbook REDP-5610 4.2: nv-pv01.yaml and nv-data-pvc.yaml (the path's underscore, lost in the PDF, restored).
REDBOOK_PV = yaml.safe_load(
    """
apiVersion: v1
kind: PersistentVolume
metadata:
  name: adas-data-pv01
  labels: {type: data, dept: adas}
spec:
  storageClassName: static
  capacity: {storage: 100Gi}
  accessModes: [ReadWriteMany]
  csi:
    driver: spectrumscale.csi.ibm.com
    volumeHandle: "16217308676014575381;099B6A7A:5EB99743;path=/gpfs/ess3000_4M/adas"
"""
)
REDBOOK_PVC = yaml.safe_load(
    """
kind: PersistentVolumeClaim
apiVersion: v1
metadata:
  name: adas-data-pvc
spec:
  storageClassName: static
  accessModes: [ReadWriteMany]
  resources:
    requests:
      storage: 100Gi
  selector:
    matchLabels: {type: data, dept: adas}
"""
)


def redbook_settings(**extra) -> dict:
    """The Redbook's two clusters as k8s_scale_csi settings of the k8s_control host."""
    return {
        "k8s_scale_csi_enabled": True,
        "k8s_scale_csi_clusters": [
            {
                "id": LOCAL,
                "gui_hosts": ["192.168.1.30"],
                "secret": "csisecret-local",
                "primary": {"filesystem": "fs0", "fileset": "csifset"},
            },
            {"id": REMOTE, "gui_hosts": ["192.168.1.52"], "secret": "csisecret-remote"},
        ],
        "k8s_scale_csi_gui_secrets": [
            {"name": name, "username": "csiadmin", "password": password} for name, password in PASSWORDS.items()
        ],
        **extra,
    }


def build(distribution: str = "openshift", labels: tuple = (), **extra) -> tuple[list[dict], list[dict]]:
    """(the scale_csi component's objects, the GUI Secrets) for the Redbook's clusters."""
    control = {"nodeforge_k8s_distribution": distribution, **redbook_settings(**extra)}
    cluster = k8s_objects.cluster_from(control, {"dgx01": {"nodeforge_profile": "dgx-1"}})
    values = k8s_scale.settings(control, list(labels))
    return k8s_scale.scale_csi(cluster, values, RELEASE), k8s_scale.gui_secrets(values, k8s_scale.namespace_of(RELEASE))


def the(objects: list[dict], kind: str) -> dict:
    [found] = [o for o in objects if o["kind"] == kind]
    return found


def crds() -> k8s_validate.CrdSchemas:
    return k8s_validate.CrdSchemas.merged(k8s_validate.CrdSchemas([CRD]), k8s_validate.shipped_crds())


def crd_probe(obj: dict) -> None:
    """Plain jsonschema against the pinned CRD's openAPIV3Schema (not nodeforge's strict copy of it)."""
    [version] = CRD["spec"]["versions"]
    jsonschema.validate(obj, _nullable(version["schema"]["openAPIV3Schema"]))


# ---- the CSIScaleOperator --------------------------------------------------------------------------------------------
def test_the_redbook_cr_validates_against_the_crd_of_the_pinned_release():
    objects, _ = build()
    cr = the(objects, "CSIScaleOperator")
    assert k8s_validate.validate([cr], "1.33", crds()) == []
    crd_probe(cr)
    # The Redbook's CR, brought to v3.0.0: guiHost (not quiHost), no scaleHostpath, localScaleCluster the local one.
    wanted = copy.deepcopy(REDBOOK_CR["spec"])
    wanted["clusters"][0]["restApi"] = [{"guiHost": "192.168.1.30"}]
    del wanted["scaleHostpath"]
    wanted["localScaleCluster"] = LOCAL
    selector = [{"key": "scale", "value": "true"}]
    wanted.update(snapshotterNodeSelector=selector, resizerNodeSelector=selector)
    assert cr["spec"] == wanted
    assert cr["metadata"]["namespace"] == "ibm-spectrum-scale-csi-driver"
    assert {k: v for k, v in cr["metadata"]["labels"].items() if k != "release"} == REDBOOK_CR["metadata"]["labels"]


def test_the_redbook_cr_as_printed_is_refused_naming_each_field():
    problems = [str(p) for p in k8s_validate.validate([REDBOOK_CR], "1.33", crds())]
    name = "CSIScaleOperator ibm-spectrum-scale-csi-driver/ibm-spectrum-scale-csi"
    assert f"{name} at spec: missing required field: 'localScaleCluster'" in problems
    assert (
        f"{name} at spec: unknown field(s) scaleHostpath (strict validation: no such field in the schema)" in problems
    )
    assert f"{name} at spec.clusters[0].restApi[0]: missing required field: 'guiHost'" in problems
    assert (
        f"{name} at spec.clusters[0].restApi[0]: unknown field(s) quiHost (strict validation: no such field in the "
        "schema)" in problems
    )
    assert len(problems) == 4, problems


def test_a_cr_field_of_the_wrong_type_or_length_is_named():
    cr = copy.deepcopy(the(build()[0], "CSIScaleOperator"))
    cr["spec"]["clusters"][1]["id"] = "2150572174871777151234"  # 22 digits: the CRD allows 20
    cr["spec"]["clusters"][1]["secureSslMode"] = "no"
    cr["spec"]["pluginNodeSelector"] = [{"key": "scale"}]
    problems = {(p.field, p.message) for p in k8s_validate.validate([cr], "1.33", crds())}
    assert ("spec.clusters[1].id", "'2150572174871777151234' is too long") in problems
    assert ("spec.clusters[1].secureSslMode", "'no' is not of type 'boolean'") in problems
    assert ("spec.pluginNodeSelector[0]", "missing required field: 'value'") in problems


def test_every_object_validates_and_the_release_is_rendered_as_released():
    for distribution in ("openshift", "kubernetes"):
        objects, secrets = build(distribution)
        everything = objects + secrets
        assert k8s_validate.validate(everything, "1.33", crds()) == []
        for obj in everything:
            if obj["kind"] == "CSIScaleOperator":
                crd_probe(obj)
            elif obj["kind"] not in ("Role", "RoleBinding") or distribution == "kubernetes":
                kubernetes_validate.validate(obj, "1.33", strict=True)
        for released in RELEASE:
            assert released in objects, k8s_validate.describe(released)
        namespace = the(objects, "Namespace")
        assert namespace["metadata"]["name"] == "ibm-spectrum-scale-csi-driver"
        assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
        roles = [o for o in objects if o["kind"] in ("Role", "RoleBinding")]
        assert bool(roles) is (distribution == "openshift")
    role = the(build("openshift")[0], "Role")
    assert role["rules"][0]["resourceNames"] == ["nonroot-v2"]
    binding = the(build("openshift")[0], "RoleBinding")
    deployment = the(RELEASE, "Deployment")
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": deployment["spec"]["template"]["spec"]["serviceAccountName"],
            "namespace": "ibm-spectrum-scale-csi-driver",
        }
    ]


def test_gui_secrets_are_opaque_with_the_operator_s_label_and_the_inventory_s_credentials():
    _, secrets = build()
    assert [s["metadata"]["name"] for s in secrets] == list(PASSWORDS)
    for secret in secrets:
        kubernetes_validate.validate(secret, "1.33", strict=True)
        assert secret["type"] == "Opaque"
        assert secret["metadata"]["labels"]["product"] == "ibm-spectrum-scale-csi"
        assert secret["metadata"]["namespace"] == "ibm-spectrum-scale-csi-driver"
        decoded = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
        assert decoded == {"username": "csiadmin", "password": PASSWORDS[secret["metadata"]["name"]]}


def test_a_vault_encrypted_password_is_opened_for_the_secret():
    from ansible.parsing.dataloader import DataLoader
    from ansible.parsing.vault import VaultLib, VaultSecret

    secrets = [("default", VaultSecret(b"test-vault-password"))]
    ciphertext = VaultLib(secrets).encrypt("from-the-vault").decode()
    # An inline !vault value as the inventory's loader hands it over (2.16 to 2.18: AnsibleVaultEncryptedUnicode,
    # 2.19 and newer: EncryptedString), still encrypted: the Secrets' builder is what opens it.
    loader = DataLoader()
    loader.set_vault_secrets(secrets)
    inline = "password: !vault |\n" + "".join(f"  {line}\n" for line in ciphertext.splitlines())
    encrypted = loader.load(inline)["password"]
    assert not isinstance(encrypted, str)
    try:  # 2.19 and newer decrypt with the secrets of the process' vault context, as the CLI sets it up
        from ansible.parsing.vault import VaultSecretsContext
    except ImportError:  # 2.16 to 2.18: with the loader's
        pass
    else:
        VaultSecretsContext.initialize(VaultSecretsContext(secrets))  # conftest's vault_secrets_per_test clears it
    settings = redbook_settings()
    settings["k8s_scale_csi_gui_secrets"][1]["password"] = encrypted
    values = k8s_scale.settings(settings)
    [_, remote] = k8s_scale.gui_secrets(values, "ibm-spectrum-scale-csi-driver")
    assert base64.b64decode(remote["data"]["password"]).decode() == "from-the-vault"


def test_node_selectors_follow_the_scale_client_label():
    objects, _ = build(labels=("nodeforge.io/scale=yes",), k8s_scale_csi_sidecar_node_selector={"infranode": "1"})
    spec = the(objects, "CSIScaleOperator")["spec"]
    assert spec["pluginNodeSelector"] == [{"key": "nodeforge.io/scale", "value": "yes"}]
    sidecars = [{"key": "nodeforge.io/scale", "value": "yes"}, {"key": "infranode", "value": "1"}]
    for name in ("attacher", "provisioner", "snapshotter", "resizer"):
        assert spec[f"{name}NodeSelector"] == sidecars
    assert k8s_validate.validate(objects, "1.33", crds()) == []


def test_ca_certificates_become_configmaps_and_more_settings_reach_the_cr(tmp_path):
    pem = tmp_path / "gui-ca.pem"
    pem.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    settings = redbook_settings(
        k8s_scale_csi_node_mapping=[{"k8s_node": "dgx01.ocp4.scale.ibm.com", "scale_node": "dgx01-ib"}],
        k8s_scale_csi_kubelet_root_dir="/var/data/kubelet",
        k8s_scale_csi_tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    )
    settings["k8s_scale_csi_clusters"][1].update(secure_ssl_mode=True, cacert_file=str(pem), gui_port=8443)
    values = k8s_scale.settings(settings)
    cluster = k8s_objects.cluster_from({}, {})
    objects = k8s_scale.scale_csi(cluster, values, RELEASE)
    configmap = the(objects, "ConfigMap")
    assert configmap["metadata"]["name"] == f"cacert-{REMOTE}"
    assert configmap["data"] == {f"cacert-{REMOTE}": pem.read_text()}
    spec = the(objects, "CSIScaleOperator")["spec"]
    assert spec["clusters"][1]["cacert"] == f"cacert-{REMOTE}"
    assert spec["clusters"][1]["secureSslMode"] is True
    assert spec["clusters"][1]["restApi"] == [{"guiHost": "192.168.1.52", "guiPort": 8443}]
    assert spec["nodeMapping"] == [{"k8sNode": "dgx01.ocp4.scale.ibm.com", "spectrumscaleNode": "dgx01-ib"}]
    assert spec["kubeletRootDirPath"] == "/var/data/kubelet"
    assert spec["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert k8s_validate.validate(objects, "1.33", crds()) == []
    crd_probe(the(objects, "CSIScaleOperator"))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda s: s["k8s_scale_csi_clusters"][1].update(id="ESS-3000"),
            r"k8s_scale_csi_clusters\[1\]\.id: 'ESS-3000' is not a Scale cluster ID \(digits only",
        ),
        (
            lambda s: s["k8s_scale_csi_clusters"][1].update(secure_ssl_mode=True),
            r"k8s_scale_csi_clusters\[1\]\.secure_ssl_mode is true: the GUI's CA certificate is needed",
        ),
        (
            lambda s: s["k8s_scale_csi_gui_secrets"][1].update(name="csisecret-remot"),
            r"k8s_scale_csi_gui_secrets\[1\]\.name: csisecret-remot is no cluster's secret \(the clusters name: "
            r"csisecret-local, csisecret-remote\)",
        ),
        (
            lambda s: s["k8s_scale_csi_gui_secrets"][0].update(password=""),
            r"k8s_scale_csi_gui_secrets\[0\]\.password: empty",
        ),
        (
            lambda s: s["k8s_scale_csi_clusters"][1].update(primary={"filesystem": "ess3000_4M"}),
            r"more than one cluster names a primary file system",
        ),
        (
            lambda s: s.update(k8s_scale_csi_local_cluster="42"),
            r"k8s_scale_csi_local_cluster: 42 is none of the clusters",
        ),
        (
            lambda s: s["k8s_scale_csi_clusters"][0]["primary"].update(remote_cluster="99"),
            r"primary\.remote_cluster: '99' is not the ID of another cluster",
        ),
        (lambda s: s.update(k8s_scale_csi_clusters=[]), r"k8s_scale_csi_clusters is empty"),
        (
            lambda s: s.update(k8s_scale_csi_node_label="scale"),
            r"k8s_scale_csi_node_label: 'scale' is not a node label key=value",
        ),
    ],
)
def test_settings_that_cannot_make_valid_objects_are_named(change, message):
    settings = redbook_settings()
    change(settings)
    with pytest.raises(k8s_objects.K8sConfigError, match=message) as raised:
        k8s_scale.scale_csi(k8s_objects.cluster_from({}, {}), k8s_scale.settings(settings), RELEASE)
    assert not any(password in str(raised.value) for password in PASSWORDS.values())


def test_the_node_label_must_agree_with_role_scale_client():
    with pytest.raises(k8s_objects.K8sConfigError, match="differs from scale_client_node_label 'scale=yes'"):
        k8s_scale.settings(redbook_settings(k8s_scale_csi_node_label="scale=true"), ["scale=yes"])
    with pytest.raises(k8s_objects.K8sConfigError, match=r"differs between the scale_clients hosts \(a=b, scale=yes"):
        k8s_scale.settings(redbook_settings(), ["scale=yes", "a=b"])
    assert k8s_scale.settings(redbook_settings())["node_label"] == "scale=true"


def test_scale_client_nodes_get_the_label_and_render_merges_it_into_their_node_objects():
    control = {"nodeforge_k8s_distribution": "kubernetes", **redbook_settings()}
    cluster = k8s_objects.cluster_from(control, {"dgx01": {"nodeforge_profile": "dgx-1"}})
    values = k8s_scale.settings(control, ["scale=true"])
    objects = k8s_scale.scale_csi(cluster, values, RELEASE, nodes=["dgx01", "cpu01"])
    scale_nodes = [o for o in objects if o["kind"] == "Node"]
    assert [n["metadata"] for n in scale_nodes] == [
        {"name": "cpu01", "labels": {"scale": "true"}},
        {"name": "dgx01", "labels": {"scale": "true"}},
    ]
    everything = k8s_objects.node_labels(cluster) + objects
    result = render_action({"objects": everything, "k8s_version": "1.33"})
    nodes = {n["metadata"]["name"]: n for n in result["objects"] if n["kind"] == "Node"}
    assert set(nodes) == {"dgx01", "cpu01"}
    assert nodes["dgx01"]["metadata"]["labels"] == {
        **k8s_objects.node_labels(cluster)[0]["metadata"]["labels"],
        "scale": "true",
    }
    for node in nodes.values():
        kubernetes_validate.validate(node, "1.33", strict=True)
    clash = copy.deepcopy(scale_nodes[1])
    clash["metadata"]["labels"] = {"nvidia.com/gpu.present": "false"}
    with pytest.raises(Exception, match=r"Node dgx01 at metadata.labels.nvidia.com/gpu.present: two components set it"):
        render_action({"objects": [*everything, clash], "k8s_version": "1.33"})


def test_disabled_renders_nothing():
    values = k8s_scale.settings({})
    assert values["k8s_scale_csi_enabled"] is False
    assert k8s_scale.scale_csi(k8s_objects.cluster_from({}, {}), values, []) == []
    assert k8s_scale.gui_secrets(values, "") == []


# ---- static volumes (seed 004 4.2) -----------------------------------------------------------------------------------
def redbook_volume(**kw) -> list[dict]:
    args = {
        "cluster_id": LOCAL,
        "fs_uid": FS_UID,
        "path": "/gpfs/ess3000_4M/adas",
        "size": "100Gi",
        "labels": {"type": "data", "dept": "adas"},
        "name": "adas-data-pv01",
        "claim_name": "adas-data-pvc",
        "namespace": "ml-team",
        **kw,
    }
    return k8s_scale.static_volume(**args)


@pytest.mark.parametrize(
    ("handle_format", "handle"),
    [
        ("legacy", f"{LOCAL};{FS_UID};path=/gpfs/ess3000_4M/adas"),
        ("new", f"0;0;{LOCAL};{FS_UID};;;/gpfs/ess3000_4M/adas"),
    ],
)
def test_the_redbook_static_volume_in_both_handle_formats(handle_format, handle):
    pv, pvc = redbook_volume(handle_format=handle_format)
    for version in ("1.25", "1.33", "1.37"):
        for obj in (pv, pvc):
            kubernetes_validate.validate(obj, version, strict=True)
        assert k8s_validate.validate([pv, pvc], version, k8s_validate.shipped_crds()) == []
    assert pv["spec"]["csi"] == {"driver": "spectrumscale.csi.ibm.com", "volumeHandle": handle}
    # The Redbook's PV and claim, plus the binding both ways and Retain (the data predates the volume).
    for key in ("storageClassName", "capacity", "accessModes"):
        assert pv["spec"][key] == REDBOOK_PV["spec"][key]
    assert {k: v for k, v in pv["metadata"]["labels"].items() if k in ("type", "dept")} == {
        "type": "data",
        "dept": "adas",
    }
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    assert pv["spec"]["claimRef"] == {"namespace": "ml-team", "name": "adas-data-pvc"}
    assert {k: pvc["spec"][k] for k in REDBOOK_PVC["spec"]} == REDBOOK_PVC["spec"]
    assert pvc["spec"]["volumeName"] == "adas-data-pv01"
    assert pvc["metadata"]["namespace"] == "ml-team"


def test_a_fileset_volume_has_the_fileset_and_its_type_in_the_handle():
    pv, _ = redbook_volume(path="/gpfs/fs0/csifset", fileset="csifset", fileset_type="independent")
    assert pv["spec"]["csi"]["volumeHandle"] == f"0;2;{LOCAL};{FS_UID};;csifset;/gpfs/fs0/csifset"
    pv, _ = redbook_volume(path="/gpfs/fs0/dep", fileset="dep", fileset_type="dependent")
    assert pv["spec"]["csi"]["volumeHandle"].startswith(f"0;1;{LOCAL};")


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"size": "100 GB"}, r"--size: '100 GB' is not a positive Kubernetes quantity"),
        ({"size": "0Gi"}, r"--size: '0Gi' is not a positive Kubernetes quantity"),
        ({"handle_format": "legacy", "fileset": "csifset"}, r"--fileset: the legacy volume handle has no fileset"),
        ({"fileset": "csifset"}, r"--fileset csifset needs --fileset-type dependent or independent"),
        ({"path": "/gpfs/a;b"}, r"--path: '/gpfs/a;b' holds a ';'"),
        ({"path": "/gpfs/../etc"}, r"--path: '/gpfs/../etc' is not a normalized absolute directory path"),
        ({"cluster_id": "local"}, r"--cluster-id: 'local' is not a Scale cluster ID"),
        ({"fs_uid": "ess3000_4M"}, r"--fs: 'ess3000_4M' is not a file system UID"),
        ({"labels": {"type": "training data"}}, r"--label: type=training data is not a label key=value"),
        ({"storage_class": "Static"}, r"--storage-class: 'Static' is not a StorageClass name"),
    ],
)
def test_bad_static_volume_input_is_named(kw, message):
    with pytest.raises(k8s_objects.K8sConfigError, match=message):
        redbook_volume(**kw)


def test_a_file_system_is_named_by_its_uid_or_by_the_inventory_s_name():
    known = [{"name": "ess3000_4M", "uid": FS_UID.lower()}, {"name": "fs0", "uid": FS_UID, "mount_point": "/ibm/fs0"}]
    assert k8s_scale.filesystem("ess3000_4M", "adas", known) == (FS_UID, "/gpfs/ess3000_4M/adas")
    assert k8s_scale.filesystem("fs0", "data/x", known) == (FS_UID, "/ibm/fs0/data/x")
    assert k8s_scale.filesystem(FS_UID, "/gpfs/a", []) == (FS_UID, "/gpfs/a")
    with pytest.raises(k8s_objects.K8sConfigError, match=r"--path: 'adas' is relative"):
        k8s_scale.filesystem(FS_UID, "adas", [])
    with pytest.raises(k8s_objects.K8sConfigError, match=r"k8s_scale_csi_filesystems \(ess3000_4M, fs0\)"):
        k8s_scale.filesystem("fs1", "adas", known)


def test_scale_pv_s_default_cluster_is_the_cr_s_local_cluster():
    assert k8s_scale.local_cluster(k8s_scale.settings(redbook_settings())) == LOCAL  # the one with the primary fs
    assert k8s_scale.local_cluster(k8s_scale.settings(redbook_settings(k8s_scale_csi_local_cluster=REMOTE))) == REMOTE
    assert k8s_scale.local_cluster(k8s_scale.settings({})) == ""
    with pytest.raises(k8s_objects.K8sConfigError, match=r"k8s_scale_csi_local_cluster: 'ess' is not a Scale cluster"):
        k8s_scale.local_cluster(k8s_scale.settings(redbook_settings(k8s_scale_csi_local_cluster="ess")))


# ---- k8s_render: Secrets and other files -----------------------------------------------------------------------------
def render_action(args: dict, check_mode: bool = False) -> dict:
    """The action nodeforge.gpu.k8s_render as a task runs it."""
    task = mock.MagicMock()
    task.args = args
    task.async_val = 0
    play_context = mock.MagicMock()
    play_context.check_mode = check_mode
    action = ActionModule(task, mock.MagicMock(), play_context, loader=None, templar=None, shared_loader_obj=None)
    return action.run(task_vars={})


def test_render_writes_other_files_beside_the_objects_and_removes_them_like_the_objects(tmp_path):
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpu-operator"}}
    values = {"driver": {"enabled": False}, "toolkit": {"enabled": False}}
    first = render_action(
        {"objects": [namespace], "dest": str(tmp_path), "files": {"gpu-operator-values.yaml": values}}
    )
    written = tmp_path / "gpu-operator-values.yaml"
    assert written.read_text().startswith(MARKER)
    assert yaml.safe_load(written.read_text()) == values
    assert yaml.safe_load((tmp_path / "kustomization.yaml").read_text())["resources"] == ["namespace-gpu-operator.yaml"]
    assert first["extra_files"] == ["gpu-operator-values.yaml"] and first["rendered"] == 1
    again = render_action(
        {"objects": [namespace], "dest": str(tmp_path), "files": {"gpu-operator-values.yaml": values}}
    )
    assert again["changed"] is False
    gone = render_action({"objects": [namespace], "dest": str(tmp_path)})
    assert gone["removed"] == ["gpu-operator-values.yaml"] and not written.exists()
    with pytest.raises(Exception, match=r"files: 'kustomization.yaml' is not a file name ending in .yaml that no"):
        render_action({"objects": [namespace], "dest": str(tmp_path), "files": {"kustomization.yaml": {}}})


def test_render_writes_secrets_only_when_asked_and_then_owner_only(tmp_path):
    objects, secrets = build()
    everything = objects + secrets
    left_out = render_action({"objects": everything, "dest": str(tmp_path), "k8s_version": "1.33"})
    assert left_out["_ansible_no_log"] is True  # the result carries the Secrets' data for apply
    assert left_out["secrets_not_written"] == 2
    assert not list(tmp_path.glob("secret-*"))
    text = "".join(p.read_text() for p in tmp_path.iterdir())
    assert not any(password in text for password in PASSWORDS.values())
    included = render_action(
        {"objects": everything, "dest": str(tmp_path), "k8s_version": "1.33", "include_secrets": True}
    )
    files = sorted(tmp_path.glob("secret-*"))
    assert [f.name for f in files] == [f"secret-ibm-spectrum-scale-csi-driver-{name}.yaml" for name in PASSWORDS]
    assert all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in files)
    assert set(yaml.safe_load((tmp_path / "kustomization.yaml").read_text())["resources"]) >= {f.name for f in files}
    assert included["secrets_not_written"] == 0
    files[0].chmod(0o644)  # loosened by hand: the next render makes it owner-only again
    render_action({"objects": everything, "dest": str(tmp_path), "k8s_version": "1.33", "include_secrets": True})
    assert stat.S_IMODE(files[0].stat().st_mode) == 0o600
    render_action({"objects": everything, "dest": str(tmp_path), "k8s_version": "1.33"})
    assert not list(tmp_path.glob("secret-*"))  # rendered before, not now: removed


def test_a_problem_in_a_secret_never_shows_its_value():
    _, secrets = build()
    bad = copy.deepcopy(secrets[0])
    bad["data"]["password"] = {"nested": bad["data"]["password"]}
    with pytest.raises(Exception) as raised:
        render_action({"objects": [bad], "k8s_version": "1.33"})
    message = str(raised.value)
    assert "Secret ibm-spectrum-scale-csi-driver/csisecret-local at data.password" in message
    assert PASSWORDS["csisecret-local"] not in message
    assert base64.b64encode(PASSWORDS["csisecret-local"].encode()).decode() not in message
    assert "********" in message


# ---- nodeforge k8s render on a Redbook-style inventory (slow: ansible-runner) ----------------------------------------
@pytest.fixture(scope="module")
def upstream_url():
    """The pinned upstream manifests on a loopback HTTP server, as the release URLs would serve them."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(UPSTREAM))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


VAULT_PASSWORD = "nodeforge-test-vault"


def scale_inventory(tmp_path: Path, url: str, checksum: str | None = None) -> list[str]:
    """The dgx1-openshift sample read with the Redbook's Scale settings on its k8s_control host: the local cluster's
    GUI password in plain text, the remote one's vault-encrypted inline (!vault), as an operator keeps it."""
    vault_file = tmp_path / "vault-pass"
    vault_file.write_text(VAULT_PASSWORD)
    vault_file.chmod(0o600)
    encrypted = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-vault"),
            "encrypt_string",
            "--vault-password-file",
            str(vault_file),
            PASSWORDS["csisecret-remote"],
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    pins = {
        "mpi_operator": {"url": f"{url}/mpi-operator-v0.8.0.yaml"},
        "scale_csi": {"url": f"{url}/{OPERATOR}", **({"checksum": checksum} if checksum else {})},
    }
    host = {"nodeforge_manifest_overrides": {"kubernetes": pins}, **redbook_settings()}
    host["k8s_scale_csi_gui_secrets"][1]["password"] = "@@VAULT@@"
    # The Redbook's DGX-1 nodes are the Scale clients (the node roles' scale_clients group).
    clients = {"scale_clients": {"hosts": {"dgx1-01": None, "dgx1-02": None}}}
    text = yaml.safe_dump({"k8s_control": {"hosts": {"localhost": host}}, **clients}, sort_keys=False)
    indent = " " * 10
    vaulted = "!vault |\n" + "".join(indent + line + "\n" for line in encrypted.split("\n", 1)[1].splitlines())
    path = tmp_path / "scale.yml"
    path.write_text(text.replace("'@@VAULT@@'\n", vaulted))
    return [
        "-i",
        str(REPO / "inventories" / "dgx1-openshift"),
        "-i",
        str(path),
        "--vault-password-file",
        str(vault_file),
    ]


def nodeforge(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([NODEFORGE, *args], cwd=REPO, capture_output=True, text=True, timeout=600)


def leaks(texts: list[str], state: Path | None = None) -> list[str]:
    """Where a GUI password (as text or base64) shows up: in the texts given or in any file of the state directory."""
    needles = list(PASSWORDS.values()) + [base64.b64encode(p.encode()).decode() for p in PASSWORDS.values()]
    found = [f"output {i}" for i, text in enumerate(texts) for needle in needles if needle in text]
    for root, _, names in os.walk(state) if state else ():
        for name in names:
            data = Path(root, name).read_bytes()
            found += [f"{root}/{name}" for needle in needles if needle.encode() in data]
    return found


@pytest.mark.slow
def test_render_of_a_redbook_style_inventory_has_the_scale_objects_and_no_password(tmp_path, upstream_url, state_dir):
    out = tmp_path / "out"
    inventory = scale_inventory(tmp_path, upstream_url)
    run = nodeforge("k8s", "render", *inventory, "-o", str(out), "--json", "-vvv")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    files = read_rendered(out)
    objects = [obj for name, obj in files.items() if name != "kustomization.yaml"]
    kinds = [obj["kind"] for obj in objects]
    assert "Secret" not in kinds
    cr = the(objects, "CSIScaleOperator")
    crd_probe(cr)
    assert k8s_validate.validate(objects, "1.33", crds()) == []
    assert cr["spec"]["localScaleCluster"] == LOCAL
    assert [c["id"] for c in cr["spec"]["clusters"]] == [LOCAL, REMOTE]
    assert cr["spec"]["clusters"][0]["primary"] == {"primaryFs": "fs0", "primaryFset": "csifset"}
    for released in RELEASE:
        assert released in objects, k8s_validate.describe(released)
    assert the([o for o in objects if o["kind"] == "Role" and "scale" in o["metadata"]["name"]], "Role")
    # One Node object per DGX-1 with the node labels role's labels and the Redbook's scale=true.
    nodes = [o for o in objects if o["kind"] == "Node"]
    assert sorted(n["metadata"]["name"] for n in nodes) == ["dgx1-01", "dgx1-02"]
    for node in nodes:
        assert node["metadata"]["labels"]["scale"] == "true"
        assert node["metadata"]["labels"]["nvidia.com/gpu.present"] == "true"
    notices = " ".join(n["text"] for n in json.loads(run.stdout)["notices"])
    assert f"({len(objects)} objects and kustomization.yaml)" in notices
    assert "2 Secret(s) not written (nodeforge k8s render --include-secrets writes them, mode 0600)" in notices
    assert leaks([run.stdout, run.stderr], state_dir) == []
    assert leaks([p.read_text() for p in out.iterdir()]) == []


@pytest.mark.slow
def test_render_with_include_secrets_writes_them_owner_only(tmp_path, upstream_url, state_dir):
    out = tmp_path / "out"
    run = nodeforge("k8s", "render", *scale_inventory(tmp_path, upstream_url), "-o", str(out), "--include-secrets")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    secrets = sorted(out.glob("secret-*.yaml"))
    assert len(secrets) == 2
    for path in secrets:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        secret = yaml.safe_load(path.read_text())
        kubernetes_validate.validate(secret, "1.33", strict=True)
        name = secret["metadata"]["name"]
        assert base64.b64decode(secret["data"]["password"]).decode() == PASSWORDS[name]  # the vault's, opened
    assert {p.name for p in secrets} <= set(yaml.safe_load((out / "kustomization.yaml").read_text())["resources"])
    assert leaks([run.stdout, run.stderr], state_dir) == []


@pytest.mark.slow
def test_a_scale_csi_release_with_another_sha256_is_refused(tmp_path, upstream_url):
    out = tmp_path / "out"
    wrong = "sha256:" + hashlib.sha256(b"not the release").hexdigest()
    run = nodeforge("k8s", "render", *scale_inventory(tmp_path, upstream_url, wrong), "-o", str(out), "--json")
    assert run.returncode != 0
    download, failure = json.loads(run.stdout)["failures"]
    assert download["task"].endswith("Download the Scale CSI operator release manifest")
    assert "did not match" in download["message"]
    assert failure["task"].endswith("Refuse the Scale CSI operator release that did not verify")
    assert f"{upstream_url}/{OPERATOR} was not used" in failure["message"]
    assert f"pins kubernetes.scale_csi.checksum {wrong}" in failure["message"]
    assert not out.exists()


@pytest.mark.slow
def test_a_bad_scale_setting_is_named_by_render(tmp_path, upstream_url):
    inventory = scale_inventory(tmp_path, upstream_url)
    bad = '{"k8s_scale_csi_local_cluster": "42"}'
    run = nodeforge("k8s", "render", *inventory, "-o", str(tmp_path / "out"), "--json", "-e", bad)
    assert run.returncode != 0
    [failure] = json.loads(run.stdout)["failures"]
    assert failure["task"].endswith("Compute the Scale CSI operator's objects and its CSIScaleOperator")
    assert (
        "localhost: k8s_scale_csi_local_cluster: 42 is none of the clusters of k8s_scale_csi_clusters"
        in (failure["message"])
    )


def test_the_manifest_pins_the_release_that_is_tested():
    pin = model.manifest()["kubernetes"]["scale_csi"]
    assert pin["version"] == "v3.0.0" and "/v3.0.0/" in pin["url"]
    assert pin["checksum"] == "sha256:" + hashlib.sha256((UPSTREAM / OPERATOR).read_bytes()).hexdigest()
