# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""IBM Storage (Spectrum) Scale CSI on the cluster layer, from the inventory: the operator's verified release, the
CSIScaleOperator custom resource, the GUI users' credential Secrets, the GUI CA ConfigMaps, and static
PersistentVolumes with their claims for existing data (`nodeforge k8s scale-pv`). Pure functions of plain data; the
role k8s_scale_csi reaches them through the action nodeforge.gpu.k8s_objects (components scale_csi and
scale_csi_secrets), the CLI directly.

The procedure is IBM Redbook REDP-5610's (3.4.5 and 4.2: DGX-1 nodes labelled scale=true, a local cluster with the
primary file system fs0 and fileset csifset, a remote ESS cluster, a static PV of an existing directory), brought to
CSI v3.0.0: its CSIScaleOperator needs localScaleCluster, its clusters list GUI hosts under restApi[].guiHost (the
Redbook's `quiHost` was a typo the API server would refuse) and it has no scaleHostpath any more; Secrets carry the
label product=ibm-spectrum-scale-csi, by which the operator watches them.
"""

from __future__ import annotations

import base64
import copy
import os
import posixpath
import re
from collections.abc import Callable, Mapping
from typing import Any

from ansible_collections.nodeforge.gpu.plugins.module_utils import k8s_objects, k8s_validate, model
from ansible_collections.nodeforge.gpu.plugins.module_utils.k8s_objects import K8sConfigError

ROLE = "k8s_scale_csi"
# Role scale_client (the node side) labels the Scale client nodes with its scale_client_node_label; the CSI pods are
# placed by the same label. The Redbook's is scale=true.
CLIENT_GROUP = "scale_clients"
CLIENT_LABEL = "scale_client_node_label"
DEFAULT_NODE_LABEL = "scale=true"
DRIVER = "spectrumscale.csi.ibm.com"
CR_NAME = "ibm-spectrum-scale-csi"
# The sample CR's labels (v3.0.0 operator/config/samples/csiscaleoperators.csi.ibm.com_cr.yaml).
CR_LABELS = {
    "app.kubernetes.io/name": "ibm-spectrum-scale-csi-operator",
    "app.kubernetes.io/instance": "ibm-spectrum-scale-csi-operator",
    "app.kubernetes.io/managed-by": "ibm-spectrum-scale-csi-operator",
    "release": "ibm-spectrum-scale-csi-operator",
}
# The operator reconciles on changes of the Secrets that carry this label (IBM's documented `kubectl label secret`).
SECRET_LABELS = {"product": "ibm-spectrum-scale-csi"}
# The driver's node plugin is privileged and mounts host paths: its namespace must admit that whatever the cluster's
# default Pod Security level.
NAMESPACE_LABELS = {"pod-security.kubernetes.io/enforce": "privileged"}
# OpenShift's restricted-v2 SCC gives a pod a UID from the namespace's range and refuses the operator Deployment's
# fixed runAsUser 10001; nonroot-v2 admits any non-root UID with what the Deployment already sets (no privilege
# escalation, every capability dropped). The operator creates the driver's own SCC itself.
OPENSHIFT_OPERATOR_SCC = "nonroot-v2"
SIDECARS = ("attacher", "provisioner", "snapshotter", "resizer")

CLUSTER_ID = re.compile(r"[0-9]{1,20}")
FS_UID = re.compile(r"[0-9A-Fa-f]{8}:[0-9A-Fa-f]{8}")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_CONFIGMAP_KEY = re.compile(r"[-._a-zA-Z0-9]+")
_HOST = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9.:\[\]]*[A-Za-z0-9\]])?")
_PEM = "-----BEGIN CERTIFICATE-----"


# ---- settings --------------------------------------------------------------------------------------------------------
def _plain(value: Any) -> Any:
    """Plain data; a vault-encrypted value stays encrypted (only the Secrets' builder opens it)."""
    return k8s_objects.plain(value)


def settings(control: Mapping[str, Any], client_labels: list[Any] | tuple[Any, ...] = ()) -> dict[str, Any]:
    """The role's settings (the k8s_control host's k8s_scale_csi_* values, else the role defaults) and `node_label`:
    k8s_scale_csi_node_label, else the Scale client hosts' scale_client_node_label, else scale=true."""
    values: dict[str, Any] = {}
    for name, spec in model.all_vars().items():
        if spec.role == ROLE:
            value = _plain(control.get(name))
            values[name] = copy.deepcopy(spec.default) if model.is_empty(value) else model.typed(name, value)
    found = sorted({str(label) for label in client_labels if not model.is_empty(label)})
    if len(found) > 1:
        raise K8sConfigError(
            f"{CLIENT_LABEL} differs between the {CLIENT_GROUP} hosts ({', '.join(found)}): the Scale CSI pods are "
            "placed by one node label"
        )
    own = str(values["k8s_scale_csi_node_label"] or "")
    if own and found and own != found[0]:
        raise K8sConfigError(
            f"k8s_scale_csi_node_label {own!r} differs from {CLIENT_LABEL} {found[0]!r} (the label role scale_client "
            "gives the Scale client nodes): the CSI pods would not run where Scale is; set one of them"
        )
    values["node_label"] = own or (found[0] if found else DEFAULT_NODE_LABEL)
    return values


def parse_label(text: str, variable: str, what: str = "node label") -> tuple[str, str]:
    """A label written key=value, checked as the API server checks label keys and values."""
    key, sep, value = str(text).partition("=")
    if not sep or not _label_ok(key, value):
        raise K8sConfigError(
            f"{variable}: {text!r} is not a {what} key=value (e.g. scale=true; a label key, then a value of at most "
            "63 characters: alphanumerics, '-', '_', '.', beginning and ending with an alphanumeric)"
        )
    return key, value


def _label_ok(key: str, value: Any) -> bool:
    return (
        bool(k8s_validate.LABEL_KEY.fullmatch(key))
        and len(key.rpartition("/")[2]) <= 63
        and isinstance(value, str)
        and len(value) <= 63
        and bool(k8s_validate.LABEL_VALUE.fullmatch(value))
    )


def _meta(name: str, namespace: str | None = None, labels: Mapping[str, str] | None = None) -> dict:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    meta["labels"] = {**(labels or {}), **k8s_objects.MANAGED_BY}
    return meta


def _name(value: Any, variable: str, what: str) -> str:
    text = str(value) if isinstance(value, (str, int)) and not isinstance(value, bool) else ""
    if not _DNS_SUBDOMAIN.fullmatch(text) or len(text) > 253:
        raise K8sConfigError(
            f"{variable}: {value!r} is not a {what} name (lowercase alphanumerics, '-' and '.', beginning and ending "
            "with an alphanumeric)"
        )
    return text


def _entries(values: Mapping[str, Any], variable: str) -> list[Mapping[str, Any]]:
    items = values.get(variable) or []
    if not isinstance(items, list):
        raise K8sConfigError(f"{variable}: expected a list, found {type(items).__name__}")
    for index, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise K8sConfigError(f"{variable}[{index}]: expected a mapping, found {type(item).__name__}")
    return items


# ---- the CSIScaleOperator --------------------------------------------------------------------------------------------
def _cluster_id(value: Any, variable: str) -> str:
    text = str(value) if isinstance(value, (str, int)) and not isinstance(value, bool) else ""
    if not CLUSTER_ID.fullmatch(text):
        raise K8sConfigError(
            f"{variable}: {value!r} is not a Scale cluster ID (digits only, at most 20, as mmlscluster prints its "
            "GPFS cluster id; quote it in YAML)"
        )
    return text


def _cacert(cluster: Mapping[str, Any], where: str, cid: str) -> tuple[str, str]:
    """The cluster's CA ConfigMap name, and the path of the PEM file to render it from ('' when it exists already)."""
    path = str(cluster.get("cacert_file") or "")
    name = str(cluster.get("cacert") or (f"cacert-{cid}" if path else ""))
    if name:
        _name(name, f"{where}.cacert", "ConfigMap")
        if not _CONFIGMAP_KEY.fullmatch(name):
            raise K8sConfigError(f"{where}.cacert: {name!r} cannot also be the ConfigMap's key")
    if model.as_bool(cluster.get("secure_ssl_mode")) and not name:
        raise K8sConfigError(
            f"{where}.secure_ssl_mode is true: the GUI's CA certificate is needed (cacert, the name of a ConfigMap "
            "holding it, or cacert_file, a PEM file nodeforge renders that ConfigMap from)"
        )
    return name, path


def _read_pem(path: str, variable: str, read: Callable[[str], str]) -> str:
    try:
        text = read(os.path.expanduser(path))
    except OSError as exc:
        raise K8sConfigError(f"{variable}: cannot read {path}: {exc.strerror or exc}") from exc
    if _PEM not in text:
        raise K8sConfigError(f"{variable}: {path} holds no PEM certificate (no {_PEM} line)")
    return text


def _read_text(path: str) -> str:
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def _selector(entries: Mapping[str, str]) -> list[dict[str, str]]:
    return [{"key": key, "value": value} for key, value in entries.items()]


def _node_selectors(values: Mapping[str, Any]) -> dict[str, list[dict[str, str]]]:
    key, value = parse_label(values["node_label"], "k8s_scale_csi_node_label")
    extra = values.get("k8s_scale_csi_sidecar_node_selector") or {}
    if not isinstance(extra, Mapping):
        raise K8sConfigError("k8s_scale_csi_sidecar_node_selector: expected a mapping of label keys to values")
    sidecar = {key: value}
    for extra_key, extra_value in extra.items():
        text = str(extra_value) if isinstance(extra_value, (str, int)) and not isinstance(extra_value, bool) else None
        if not _label_ok(str(extra_key), text):
            raise K8sConfigError(
                f"k8s_scale_csi_sidecar_node_selector.{extra_key}: {extra_value!r} is not a label key and value "
                '(quote numbers and true/false in YAML: infranode: "1")'
            )
        sidecar[str(extra_key)] = str(text)
    selectors = {f"{name}NodeSelector": _selector(sidecar) for name in SIDECARS}
    selectors["pluginNodeSelector"] = _selector({key: value})
    return selectors


def _release_namespace(release: list[Mapping[str, Any]]) -> tuple[str, str]:
    """The namespace the release's operator runs in (its manifest fixes it) and its ServiceAccount's name."""
    deployments = [o for o in release if o.get("kind") == "Deployment"]
    if len(deployments) != 1 or not any(o.get("kind") == "CustomResourceDefinition" for o in release):
        raise K8sConfigError(
            "the Scale CSI operator release manifest does not hold one operator Deployment and the CSIScaleOperator "
            "CRD: it is not the pinned release"
        )
    [deployment] = deployments
    return deployment["metadata"]["namespace"], deployment["spec"]["template"]["spec"]["serviceAccountName"]


def custom_resource(
    values: Mapping[str, Any], namespace: str, read: Callable[[str], str] = _read_text
) -> tuple[dict, list[dict]]:
    """The CSIScaleOperator, and the CA ConfigMaps nodeforge renders for it (from cacert_file)."""
    clusters = _entries(values, "k8s_scale_csi_clusters")
    if not clusters:
        raise K8sConfigError(
            "k8s_scale_csi_enabled is true and k8s_scale_csi_clusters is empty: name at least the Scale cluster the "
            "nodes belong to (id, gui_hosts, secret)"
        )
    entries, configmaps, ids, primaries = [], [], [], []
    for index, cluster in enumerate(clusters):
        where = f"k8s_scale_csi_clusters[{index}]"
        cid = _cluster_id(cluster.get("id"), f"{where}.id")
        if cid in ids:
            raise K8sConfigError(f"{where}.id: cluster {cid} is listed twice")
        ids.append(cid)
        hosts = cluster.get("gui_hosts")
        if isinstance(hosts, str):
            hosts = [hosts]
        if not isinstance(hosts, list) or not hosts:
            raise K8sConfigError(f"{where}.gui_hosts: expected a list of the cluster's GUI hosts, found {hosts!r}")
        port = cluster.get("gui_port")
        rest = []
        for position, host in enumerate(hosts):
            if not isinstance(host, str) or not _HOST.fullmatch(host):
                raise K8sConfigError(f"{where}.gui_hosts[{position}]: {host!r} is not a host name or address")
            entry: dict[str, Any] = {"guiHost": host}
            if port not in (None, ""):
                if isinstance(port, bool) or not str(port).isdigit() or not 0 < int(port) < 65536:
                    raise K8sConfigError(f"{where}.gui_port: {port!r} is not a TCP port (1 to 65535)")
                entry["guiPort"] = int(port)
            rest.append(entry)
        item: dict[str, Any] = {
            "id": cid,
            "secrets": _name(cluster.get("secret"), f"{where}.secret", "Secret"),
            "secureSslMode": model.as_bool(cluster.get("secure_ssl_mode")),
            "restApi": rest,
        }
        cacert, pem_file = _cacert(cluster, where, cid)
        if cacert:
            item["cacert"] = cacert
        if pem_file:
            pem = _read_pem(pem_file, f"{where}.cacert_file", read)
            configmaps.append(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": _meta(cacert, namespace),
                    "data": {cacert: pem},
                }
            )
        primary = cluster.get("primary")
        if primary:
            if not isinstance(primary, Mapping) or model.is_empty(primary.get("filesystem")):
                raise K8sConfigError(f"{where}.primary: expected filesystem (and optionally fileset, inode_limit)")
            fields = {
                "primaryFs": primary.get("filesystem"),
                "primaryFset": primary.get("fileset"),
                "inodeLimit": primary.get("inode_limit"),
                "remoteCluster": primary.get("remote_cluster"),
            }
            item["primary"] = {k: str(v) for k, v in fields.items() if not model.is_empty(v)}
            primaries.append((index, cid, item["primary"]))
        entries.append(item)
    if len(primaries) > 1:
        listed = ", ".join(f"k8s_scale_csi_clusters[{i}] ({cid})" for i, cid, _ in primaries)
        raise K8sConfigError(f"more than one cluster names a primary file system: {listed}; only one may")
    for index, _, primary in primaries:
        remote = primary.get("remoteCluster")
        if remote is not None and (remote not in ids or remote == ids[index]):
            raise K8sConfigError(
                f"k8s_scale_csi_clusters[{index}].primary.remote_cluster: {remote!r} is not the ID of another cluster "
                f"of k8s_scale_csi_clusters ({', '.join(ids)})"
            )
    local = values.get("k8s_scale_csi_local_cluster")
    if not model.is_empty(local):
        local = _cluster_id(local, "k8s_scale_csi_local_cluster")
        if local not in ids:
            raise K8sConfigError(
                f"k8s_scale_csi_local_cluster: {local} is none of the clusters of k8s_scale_csi_clusters "
                f"({', '.join(ids)})"
            )
    elif primaries:
        local = primaries[0][1]
    elif len(ids) == 1:
        local = ids[0]
    else:
        raise K8sConfigError(
            "k8s_scale_csi_local_cluster is empty and no cluster names a primary file system: say which of "
            f"{', '.join(ids)} the Kubernetes nodes belong to"
        )
    spec: dict[str, Any] = {"localScaleCluster": local, "clusters": entries, **_node_selectors(values)}
    mapping = _entries(values, "k8s_scale_csi_node_mapping")
    if mapping:
        spec["nodeMapping"] = []
        for index, pair in enumerate(mapping):
            if model.is_empty(pair.get("k8s_node")) or model.is_empty(pair.get("scale_node")):
                raise K8sConfigError(f"k8s_scale_csi_node_mapping[{index}]: expected k8s_node and scale_node")
            spec["nodeMapping"].append({"k8sNode": str(pair["k8s_node"]), "spectrumscaleNode": str(pair["scale_node"])})
    root = values.get("k8s_scale_csi_kubelet_root_dir")
    if not model.is_empty(root):
        if not str(root).startswith("/"):
            raise K8sConfigError(f"k8s_scale_csi_kubelet_root_dir: {root!r} is not an absolute path")
        spec["kubeletRootDirPath"] = str(root)
    tolerations = _entries(values, "k8s_scale_csi_tolerations")
    if tolerations:
        spec["tolerations"] = [dict(t) for t in tolerations]
    cr = {
        "apiVersion": "csi.ibm.com/v1",
        "kind": "CSIScaleOperator",
        "metadata": {"name": CR_NAME, "namespace": namespace, "labels": dict(CR_LABELS)},
        "spec": spec,
    }
    return cr, configmaps


def _openshift_operator_scc(namespace: str, service_account: str) -> list[dict]:
    name = "nodeforge-scale-csi-operator-scc"
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": _meta(name, namespace),
            "rules": [
                {
                    "apiGroups": ["security.openshift.io"],
                    "resources": ["securitycontextconstraints"],
                    "resourceNames": [OPENSHIFT_OPERATOR_SCC],
                    "verbs": ["use"],
                }
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": _meta(name, namespace),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}],
        },
    ]


def node_labels(values: Mapping[str, Any], nodes: list[str] | tuple[str, ...]) -> list[dict]:
    """The Scale client nodes' label (the Redbook's `oc label node dgx01... scale=true`), as Node objects holding only
    that label: k8s_render merges them with the node labels role's Node objects of the same nodes."""
    key, value = parse_label(values["node_label"], "k8s_scale_csi_node_label")
    return [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {key: value}}}
        for name in sorted(set(nodes))
    ]


def scale_csi(
    cluster: k8s_objects.Cluster,
    values: Mapping[str, Any],
    release: list[Mapping[str, Any]],
    read: Callable[[str], str] = _read_text,
    nodes: list[str] | tuple[str, ...] = (),
) -> list[dict]:
    """The operator's namespace, the pinned release's objects as released (verified by sha256 before this), on
    OpenShift the operator's SCC grant, the CA ConfigMaps, the CSIScaleOperator and the Scale client nodes' label
    (`nodes`: their Kubernetes names). The GUI Secrets come from gui_secrets(), apart, so that nothing computed here
    needs hiding. Every secret's entry is checked here."""
    if not values.get("k8s_scale_csi_enabled"):
        return []
    namespace, service_account = _release_namespace(release)
    cr, configmaps = custom_resource(values, namespace, read)
    _check_secrets(values, {c["secrets"] for c in cr["spec"]["clusters"]})
    objects: list[dict] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(namespace, labels=NAMESPACE_LABELS)}
    ]
    objects += [copy.deepcopy(dict(obj)) for obj in release]
    if cluster.openshift:
        objects += _openshift_operator_scc(namespace, service_account)
    return [*objects, *configmaps, cr, *node_labels(values, nodes)]


# ---- the GUI credential Secrets --------------------------------------------------------------------------------------
def _secret_text(value: Any, variable: str) -> str:
    """A credential as text: a vault-encrypted value is opened here (and only here). Messages never show it."""
    if isinstance(value, (bool, list, tuple, Mapping)):
        raise K8sConfigError(f"{variable}: expected a string")
    try:
        text = value if isinstance(value, str) else str(value)
    except Exception as exc:  # a vault that does not open: Ansible's error, which does not show the value
        raise K8sConfigError(f"{variable}: a vault-encrypted value that cannot be decrypted ({exc})") from exc
    if not text:
        raise K8sConfigError(f"{variable}: empty")
    return text


def _check_secrets(values: Mapping[str, Any], named: set[str]) -> None:
    seen: set[str] = set()
    for index, entry in enumerate(_entries(values, "k8s_scale_csi_gui_secrets")):
        where = f"k8s_scale_csi_gui_secrets[{index}]"
        name = _name(entry.get("name"), f"{where}.name", "Secret")
        if name in seen:
            raise K8sConfigError(f"{where}.name: Secret {name} is listed twice")
        seen.add(name)
        if name not in named:
            raise K8sConfigError(
                f"{where}.name: {name} is no cluster's secret (the clusters name: {', '.join(sorted(named))})"
            )
        for key in ("username", "password"):
            _secret_text(entry.get(key), f"{where}.{key}")


def gui_secrets(values: Mapping[str, Any], namespace: str) -> list[dict]:
    """One Opaque Secret per entry of k8s_scale_csi_gui_secrets: keys username and password (IBM's `kubectl create
    secret generic NAME --from-literal=username=... --from-literal=password=...`), label product=ibm-spectrum-scale-csi.
    The values go in `data` (base64), as the API server stores them: a second apply finds nothing to change."""
    if not values.get("k8s_scale_csi_enabled"):
        return []
    secrets = []
    for index, entry in enumerate(_entries(values, "k8s_scale_csi_gui_secrets")):
        where = f"k8s_scale_csi_gui_secrets[{index}]"
        data = {
            key: base64.b64encode(_secret_text(entry.get(key), f"{where}.{key}").encode("utf-8")).decode("ascii")
            for key in ("username", "password")
        }
        secrets.append(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": _meta(_name(entry.get("name"), f"{where}.name", "Secret"), namespace, SECRET_LABELS),
                "type": "Opaque",
                "data": data,
            }
        )
    return secrets


def namespace_of(release: list[Mapping[str, Any]]) -> str:
    return _release_namespace(release)[0]


# ---- static volumes --------------------------------------------------------------------------------------------------
HANDLE_FORMATS = ("new", "legacy")
FILESET_TYPES = ("dependent", "independent")
# The volume type of the CSI >= 2.5 handle: 0 a directory, 1 a dependent fileset, 2 an independent fileset.
_VOLUME_TYPE = {"": 0, "dependent": 1, "independent": 2}
ACCESS_MODES = ("ReadWriteMany", "ReadWriteOnce", "ReadOnlyMany", "ReadWriteOncePod")
# A Kubernetes quantity (apimachinery's resource.Quantity), positive: the capacity of a volume.
QUANTITY = re.compile(r"([0-9]+(\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?")


def filesystem(fs: str, path: str, filesystems: list[Mapping[str, Any]] | None = None) -> tuple[str, str]:
    """The file system UID and the absolute path of a static volume: --fs is a UID (mmlsfs FS --uid) or the name of a
    file system of k8s_scale_csi_filesystems, under whose mount point a relative --path lies."""
    known = {str(f.get("name")): f for f in filesystems or [] if isinstance(f, Mapping)}
    if FS_UID.fullmatch(fs):
        uid, mount = fs.upper(), ""
    elif fs in known:
        uid = str(known[fs].get("uid") or "")
        if not FS_UID.fullmatch(uid):
            raise K8sConfigError(
                f"k8s_scale_csi_filesystems: {fs}'s uid {uid!r} is not a file system UID (8 hex digits, ':', 8 hex "
                "digits, as mmlsfs FS --uid prints it)"
            )
        uid = uid.upper()
        mount = str(known[fs].get("mount_point") or f"/gpfs/{fs}")
    else:
        names = ", ".join(sorted(known)) or "none: give -i with k8s_scale_csi_filesystems, or the UID"
        raise K8sConfigError(
            f"--fs: {fs!r} is neither a file system UID (8 hex digits, ':', 8 hex digits, as mmlsfs FS --uid prints "
            f"it, e.g. 099B6A7A:5EB99743) nor a file system of the inventory's k8s_scale_csi_filesystems ({names})"
        )
    if not path.startswith("/"):
        if not mount:
            raise K8sConfigError(f"--path: {path!r} is relative: give the absolute path (e.g. /gpfs/fs1/data)")
        path = posixpath.join(mount, path)
    return uid, path


def _check_path(path: str) -> str:
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in path) or ";" in path:
        raise K8sConfigError(f"--path: {path!r} holds a ';' or a control character, which the volume handle cannot")
    normal = posixpath.normpath(path)
    if not path.startswith("/") or normal != path.rstrip("/") or normal == "/":
        raise K8sConfigError(f"--path: {path!r} is not a normalized absolute directory path (e.g. /gpfs/fs1/data)")
    return normal


def volume_handle(
    handle_format: str, cluster_id: str, fs_uid: str, path: str, fileset: str = "", fileset_type: str = ""
) -> str:
    """The CSI volumeHandle of an existing directory or fileset: CSI >= 2.5's
    `0;<volume type>;<cluster ID>;<fs UID>;;<fileset>;<path>` (static volumes: storage class type 0, no consistency
    group; the path of a fileset is its link path), or the older `<cluster ID>;<fs UID>;path=<path>` (the Redbook's,
    directories only). The cluster ID is the local (primary) cluster's, also for a remote cluster's file system."""
    cluster_id = _cluster_id(cluster_id, "--cluster-id")
    if not FS_UID.fullmatch(fs_uid):
        raise K8sConfigError(f"--fs: {fs_uid!r} is not a file system UID (8 hex digits, ':', 8 hex digits)")
    path = _check_path(path)
    if handle_format == "legacy":
        if fileset:
            raise K8sConfigError(
                "--fileset: the legacy volume handle has no fileset field; give the fileset's link path as --path, or "
                "use --handle-format new (CSI 2.5 and later)"
            )
        return f"{cluster_id};{fs_uid};path={path}"
    if handle_format != "new":
        raise K8sConfigError(f"--handle-format: {handle_format!r} (expected one of {', '.join(HANDLE_FORMATS)})")
    if fileset:
        if not re.fullmatch(r"[A-Za-z0-9_.+-]+", fileset):
            raise K8sConfigError(f"--fileset: {fileset!r} is not a fileset name")
        if fileset_type not in FILESET_TYPES:
            raise K8sConfigError(
                f"--fileset {fileset} needs --fileset-type dependent or independent (mmlsfileset FS {fileset} -L: an "
                "independent fileset has an inode space of its own)"
            )
    elif fileset_type:
        raise K8sConfigError("--fileset-type without --fileset: a directory volume has no fileset")
    return f"0;{_VOLUME_TYPE[fileset_type if fileset else '']};{cluster_id};{fs_uid};;{fileset};{path}"


def _slug(path: str) -> str:
    base = re.sub(r"[^a-z0-9-]+", "-", posixpath.basename(path.rstrip("/")).lower()).strip("-")
    return base[:50].strip("-")


def static_volume(
    *,
    cluster_id: str,
    fs_uid: str,
    path: str,
    size: str,
    fileset: str = "",
    fileset_type: str = "",
    handle_format: str = "new",
    storage_class: str = "static",
    access_mode: str = "ReadWriteMany",
    labels: Mapping[str, str] | None = None,
    name: str = "",
    claim_name: str = "",
    namespace: str = "default",
) -> list[dict]:
    """A PersistentVolume of an existing Scale directory or fileset and the claim bound to it (IBM Redbook REDP-5610
    4.2): the PV is reserved for the claim (claimRef) and kept when it is released (Retain: the data predates it),
    the claim names the PV (volumeName) and selects it by its labels, both in the storage class the Redbook uses to
    keep dynamic provisioning away (static, a class that must not exist)."""
    handle = volume_handle(handle_format, cluster_id, fs_uid, path, fileset, fileset_type)
    quantity = QUANTITY.fullmatch(size or "")
    if not quantity or float(quantity.group(1)) <= 0:
        raise K8sConfigError(
            f"--size: {size!r} is not a positive Kubernetes quantity (e.g. 100Gi, 1Ti, 500G; binary suffixes Ki Mi Gi "
            "Ti Pi Ei, decimal k M G T P E)"
        )
    if not quantity.group(3):
        # Kubernetes reads a bare number as bytes: "100" meant 100Gi, never a 100-byte volume.
        raise K8sConfigError(
            f"--size: {size!r} has no unit, which Kubernetes reads as {size} bytes; give the unit: {size}Gi, {size}Ti, "
            f"{size}G"
        )
    if access_mode not in ACCESS_MODES:
        raise K8sConfigError(f"--access-mode: {access_mode!r} (expected one of {', '.join(ACCESS_MODES)})")
    if storage_class:
        _name(storage_class, "--storage-class", "StorageClass")
    for key, value in (labels or {}).items():
        if not _label_ok(key, value):
            raise K8sConfigError(f"--label: {key}={value} is not a label key=value")
    slug = _slug(path)
    pv_name = name or (f"{slug}-pv" if slug else "")
    pvc_name = claim_name or (f"{slug}-pvc" if slug else "")
    _name(pv_name, "--name", "PersistentVolume")
    _name(pvc_name, "--claim-name", "PersistentVolumeClaim")
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", namespace):
        raise K8sConfigError(f"--namespace: {namespace!r} is not a namespace name")
    selected = dict(labels or {})
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": _meta(pv_name, labels=selected),
        "spec": {
            "storageClassName": storage_class,
            "capacity": {"storage": size},
            "accessModes": [access_mode],
            "persistentVolumeReclaimPolicy": "Retain",
            "claimRef": {"namespace": namespace, "name": pvc_name},
            "csi": {"driver": DRIVER, "volumeHandle": handle},
        },
    }
    claim_spec: dict[str, Any] = {
        "storageClassName": storage_class,
        "accessModes": [access_mode],
        "resources": {"requests": {"storage": size}},
        "volumeName": pv_name,
    }
    if selected:
        claim_spec["selector"] = {"matchLabels": selected}
    pvc = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _meta(pvc_name, namespace),
        "spec": claim_spec,
    }
    return [pv, pvc]


def local_cluster(values: Mapping[str, Any]) -> str:
    """The local cluster's ID as the CR names it (the default of scale-pv's --cluster-id); '' when none is known."""
    local = values.get("k8s_scale_csi_local_cluster")
    if not model.is_empty(local):
        return _cluster_id(local, "k8s_scale_csi_local_cluster")
    clusters = _entries(values, "k8s_scale_csi_clusters")
    primaries = [index for index, cluster in enumerate(clusters) if cluster.get("primary")]
    chosen = primaries if len(primaries) == 1 else [0] if len(clusters) == 1 else []
    if not chosen:
        return ""
    return _cluster_id(clusters[chosen[0]].get("id"), f"k8s_scale_csi_clusters[{chosen[0]}].id")
