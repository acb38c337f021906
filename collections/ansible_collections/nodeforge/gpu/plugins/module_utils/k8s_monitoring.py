# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""GPU monitoring for the cluster layer (role k8s_gpu_monitoring): NVIDIA's dcgm-exporter at the manifest's release,
its counters as a ConfigMap the inventory extends, its Service and ServiceMonitor, a PrometheusRule with the alerts an
operator needs, and Grafana dashboards as ConfigMaps in the form Grafana's sidecar loads. With the GPU Operator, its
own exporter is used: only the counters, the ServiceMonitor settings (Helm values), the alerts and the dashboards.

Every PromQL expression is here, in ALERTS and PANELS: tests read each one against the pinned exporter's counters
file and evaluate them with Prometheus's own promtool.
"""

from __future__ import annotations

import copy
import csv
import hashlib
import io
import json
import re
from collections.abc import Mapping
from typing import Any

from ansible_collections.nodeforge.gpu.plugins.module_utils import k8s_objects
from ansible_collections.nodeforge.gpu.plugins.module_utils.k8s_objects import GPU_PRESENT, Cluster, K8sConfigError

EXPORTER = "dcgm-exporter"
# The GPU Operator's exporter: its Service, hence the job label of what its ServiceMonitor scrapes.
OPERATOR_EXPORTER = "nvidia-dcgm-exporter"
COUNTERS_DIR = "/etc/dcgm-exporter"
COUNTERS_FILE = "default-counters.csv"  # the exporter's default -f, where the Helm chart mounts its list too
# The GPU Operator reads a site's counters from a ConfigMap (dcgmExporter.config.name) under this key, and from this
# path once DCGM_EXPORTER_COLLECTORS names it.
OPERATOR_COUNTERS_KEY = "dcgm-metrics.csv"
OPERATOR_COUNTERS_CONFIGMAP = "nodeforge-dcgm-counters"
RULES_FILE = "nodeforge-gpu-alerts.rules.yaml"  # render writes the rules here when no Prometheus Operator runs
DASHBOARD_UID = "nodeforge-gpus"

# DCGM fields the alerts read that the pinned default counters leave commented out (they are in that file,
# commented, with these types): volatile double-bit ECC errors, for the GPUs before Ampere that retire pages instead of
# remapping rows (the V100s of DGX-1, C4140 and the Supermicro node).
ADDED_COUNTERS = (("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Total number of double-bit volatile ECC errors."),)
COUNTER_TYPES = ("gauge", "counter", "label")
_FIELD = re.compile(r"^DCGM_(FI|EXP)_[A-Z0-9_]+$")
_DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")
# The label dcgm-exporter's series carry the node by: the ServiceMonitor copies the scraped pod's node name into it
# (the same relabeling the exporter's Helm chart documents as an example).
NODE_LABEL = "node"

# The alerts: (name, severity, PromQL with {placeholders}, summary, description). {job}, {threshold} and the GPU counts
# come from the inventory and the profiles (rules()).
ALERTS = (
    (
        "NodeforgeGpuTemperatureHigh",
        "warning",
        "DCGM_FI_DEV_GPU_TEMP > {threshold}",
        "GPU {{{{ $labels.gpu }}}} of node {{{{ $labels.node }}}} runs at {{{{ $value }}}} C",
        "Above k8s_gpu_monitoring_temperature_max ({threshold} C) for {duration}: check the node's cooling and the "
        "GPU's clocks (thermal slowdown).",
    ),
    (
        "NodeforgeGpuXidError",
        "critical",
        "DCGM_FI_DEV_XID_ERRORS != 0",
        "GPU {{{{ $labels.gpu }}}} of node {{{{ $labels.node }}}} reported XID {{{{ $value }}}}",
        "The last XID error DCGM saw on this GPU: look it up in NVIDIA's XID catalog; many need the GPU reset or the "
        "node drained.",
    ),
    (
        "NodeforgeGpuUncorrectableEcc",
        "critical",
        "increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[15m]) > 0"
        " or increase(DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS[15m]) > 0",
        "GPU {{{{ $labels.gpu }}}} of node {{{{ $labels.node }}}} had an uncorrectable memory error",
        "Double-bit ECC errors (GPUs that retire pages) or rows remapped for uncorrectable errors (Ampere and later) "
        "in the last 15 minutes: drain the node and reset the GPU.",
    ),
    (
        "NodeforgeGpuRowRemapFailure",
        "critical",
        "DCGM_FI_DEV_ROW_REMAP_FAILURE > 0",
        "GPU {{{{ $labels.gpu }}}} of node {{{{ $labels.node }}}} failed to remap a row",
        "Row remapping failed: the GPU's memory cannot hide the bad row any more; it needs replacing (RMA).",
    ),
    (
        "NodeforgeGpuMissing",
        "critical",
        'count by (node) (DCGM_FI_DEV_GPU_TEMP{{node=~"{nodes}"}}) < {count}',
        "Node {{{{ $labels.node }}}} shows {{{{ $value }}}} GPUs; its profile has {count}",
        "Fewer GPUs answer DCGM than the node's hardware profile holds: a GPU fell off the bus or its driver lost "
        "it (see the node's kernel log for XID 79).",
    ),
    (
        "NodeforgeDcgmExporterDown",
        "warning",
        'up{{job="{job}"}} == 0',
        "dcgm-exporter on {{{{ $labels.node }}}} does not answer",
        "Prometheus cannot scrape the exporter: this node's GPUs are not monitored.",
    ),
    (
        "NodeforgeAcceptanceFailed",
        "warning",
        "nodeforge_validate_node_passed == 0",
        "Node {{{{ $labels.node }}}} failed nodeforge validate",
        "The node's last acceptance run (nodeforge validate --textfile, read by node_exporter) failed a check: see "
        "nodeforge_validate_check_status and the run's report.",
    ),
)

# The dashboard's panels: (title, kind, PromQL, unit, legend). $node is the dashboard's node variable.
PANELS = (
    ("GPU utilization", "timeseries", 'DCGM_FI_DEV_GPU_UTIL{node=~"$node"}', "percent", "{{node}} GPU {{gpu}}"),
    ("GPU memory used", "timeseries", 'DCGM_FI_DEV_FB_USED{node=~"$node"}', "mbytes", "{{node}} GPU {{gpu}}"),
    ("GPU temperature", "timeseries", 'DCGM_FI_DEV_GPU_TEMP{node=~"$node"}', "celsius", "{{node}} GPU {{gpu}}"),
    ("GPU power", "timeseries", 'DCGM_FI_DEV_POWER_USAGE{node=~"$node"}', "watt", "{{node}} GPU {{gpu}}"),
    ("Acceptance: node passed", "stat", "nodeforge_validate_node_passed", "none", "{{node}}"),
    (
        "Acceptance: age of the last run",
        "stat",
        "time() - nodeforge_validate_last_run_timestamp_seconds",
        "s",
        "{{node}}",
    ),
    (
        "Acceptance: failed checks",
        "table",
        'nodeforge_validate_check_status{status="fail"} == 1',
        "none",
        "{{node}} {{check}}",
    ),
)


def counters_fields(text: str) -> dict[str, str]:
    """The fields a dcgm-exporter counters file makes the exporter emit: {field: type} of its lines that are not
    comments (a line starting with '#') or blank."""
    found = {}
    for row in csv.reader(io.StringIO(text)):
        if not row or not row[0].strip() or row[0].lstrip().startswith("#"):
            continue
        found[row[0].strip()] = row[1].strip() if len(row) > 1 else ""
    return found


def counters(cluster: Cluster, pinned: str) -> str:
    """The counters file: the pinned release's default file as released, then the fields nodeforge's alerts add, then
    k8s_gpu_monitoring_counters (each {field, type, help}), refused where a field is malformed or already emitted."""
    active = counters_fields(pinned)
    lines = [pinned.rstrip("\n"), "", "# Added by nodeforge: fields its alerts read (role k8s_gpu_monitoring)"]
    for field, kind, text in ADDED_COUNTERS:
        if field not in active:
            lines.append(f"{field}, {kind}, {text}")
            active[field] = kind
    extra = cluster.get("k8s_gpu_monitoring_counters") or []
    if extra:
        lines.append("# Added by the inventory (k8s_gpu_monitoring_counters)")
    for index, entry in enumerate(extra):
        name = f"k8s_gpu_monitoring_counters[{index}]"
        if not isinstance(entry, Mapping):
            raise K8sConfigError(f"{name}: found {entry!r}; expected a mapping with field, type and help")
        field, kind, text = (str(entry.get(k) or "").strip() for k in ("field", "type", "help"))
        if not _FIELD.match(field):
            raise K8sConfigError(f"{name}.field: found {field!r}; expected a DCGM field name such as DCGM_FI_DEV_...")
        if field in active:
            raise K8sConfigError(f"{name}.field: {field} is already exported (the pinned counters or nodeforge's)")
        if kind not in COUNTER_TYPES:
            raise K8sConfigError(f"{name}.type: found {kind!r}; expected one of {', '.join(COUNTER_TYPES)}")
        if not text or re.search(r"[,\n\r]", text):
            raise K8sConfigError(f"{name}.help: found {text!r}; expected one line of text without commas")
        lines.append(f"{field}, {kind}, {text}")
        active[field] = kind
    return "\n".join(lines) + "\n"


def _regex_literal(name: str) -> str:
    """A Node name as a literal inside a PromQL regular expression string: a name is a DNS subdomain (lower-case
    letters, digits, '-' and '.'), and a '.' is escaped for the regex, its backslash for the PromQL string."""
    if not re.fullmatch(r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?", name):
        raise K8sConfigError(f"Node name {name!r}: expected a DNS subdomain (lower-case letters, digits, '-', '.')")
    return name.replace(".", "\\\\.")


def _duration(cluster: Cluster, name: str) -> str:
    value = str(cluster.get(name))
    if not _DURATION.match(value):
        raise K8sConfigError(f"{name}: found {value!r}; expected a Prometheus duration such as 30s, 5m or 1h")
    return value


def _labels(cluster: Cluster, name: str) -> dict[str, str]:
    """A label map of the inventory (k8s_gpu_monitoring_*_labels), keys and values as strings."""
    return {str(k): str(v) for k, v in (cluster.get(name) or {}).items()}


def _operator(cluster: Cluster) -> bool:
    return bool(cluster.get("k8s_gpu_operator_enabled"))


def _prometheus_operator(cluster: Cluster) -> bool:
    """Whether ServiceMonitor and PrometheusRule objects are rendered: OpenShift's monitoring always runs the
    Prometheus Operator; elsewhere the inventory says."""
    return cluster.openshift or bool(cluster.get("k8s_gpu_monitoring_prometheus_operator"))


def rules(cluster: Cluster) -> list[dict]:
    """The alert rule groups (the PrometheusRule's spec.groups, or a Prometheus rules file's groups)."""
    threshold = int(cluster.get("k8s_gpu_monitoring_temperature_max"))
    duration = _duration(cluster, "k8s_gpu_monitoring_alert_for")
    job = OPERATOR_EXPORTER if _operator(cluster) else EXPORTER
    by_count: dict[int, list[str]] = {}
    for node in cluster.nodes:
        if node.gpu_count:
            by_count.setdefault(node.gpu_count, []).append(node.name)
    found = []
    for name, severity, expr, summary, description in ALERTS:
        values = {"threshold": threshold, "duration": duration, "job": job}
        groups = sorted(by_count.items()) if name == "NodeforgeGpuMissing" else [(0, [])]
        for count, nodes in groups:
            values.update(count=count, nodes="|".join(_regex_literal(n) for n in sorted(nodes)))
            rule = {
                "alert": name,
                "expr": expr.format(**values),
                "for": duration,
                "labels": {"severity": severity},
                "annotations": {"summary": summary.format(**values), "description": description.format(**values)},
            }
            found.append(rule)
    return [{"name": "nodeforge-gpu", "rules": found}]


def _panel(index: int, title: str, kind: str, expr: str, unit: str, legend: str) -> dict:
    width = 12 if kind == "timeseries" else 8
    row = index // 2 * 8 if kind == "timeseries" else 16 + 8 * ((index - 4) // 3)
    column = index % 2 * 12 if kind == "timeseries" else (index - 4) % 3 * 8
    panel: dict[str, Any] = {
        "id": index + 1,
        "type": kind,
        "title": title,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"h": 8, "w": width, "x": column, "y": row},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [{"refId": "A", "expr": expr, "legendFormat": legend, "instant": kind != "timeseries"}],
    }
    if kind == "stat" and expr == "nodeforge_validate_node_passed":
        panel["fieldConfig"]["defaults"]["mappings"] = [
            {
                "type": "value",
                "options": {"0": {"text": "failed", "color": "red"}, "1": {"text": "passed", "color": "green"}},
            }
        ]
    return panel


def dashboard(cluster: Cluster) -> dict:
    """The Grafana dashboard (JSON model): utilization, memory used, temperature (the alert's threshold drawn) and
    power per node and GPU, and the nodes' acceptance status from nodeforge validate's textfile."""
    panels = [_panel(i, *spec) for i, spec in enumerate(PANELS)]
    threshold = int(cluster.get("k8s_gpu_monitoring_temperature_max"))
    panels[2]["fieldConfig"]["defaults"]["thresholds"] = {
        "mode": "absolute",
        "steps": [{"color": "green", "value": None}, {"color": "red", "value": threshold}],
    }
    panels[2]["fieldConfig"]["defaults"]["custom"] = {"thresholdsStyle": {"mode": "line"}}
    return {
        "uid": DASHBOARD_UID,
        "title": "nodeforge: GPU nodes",
        "tags": ["nodeforge", "gpu", "dcgm"],
        "timezone": "utc",
        "schemaVersion": 39,
        "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {
            "list": [
                {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Data source"},
                {
                    "name": "node",
                    "type": "query",
                    "label": "Node",
                    "datasource": {"type": "prometheus", "uid": "${datasource}"},
                    "query": {"query": f"label_values(DCGM_FI_DEV_GPU_TEMP, {NODE_LABEL})", "refId": "nodes"},
                    "definition": f"label_values(DCGM_FI_DEV_GPU_TEMP, {NODE_LABEL})",
                    "includeAll": True,
                    "multi": True,
                    "allValue": ".*",
                    "refresh": 2,
                },
            ]
        },
        "panels": panels,
    }


def _relabelings() -> list[dict]:
    return [{"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": NODE_LABEL, "action": "replace"}]


def operator_values(cluster: Cluster) -> dict:
    """What the GPU Operator's Helm values need for nodeforge's monitoring: its exporter reads nodeforge's counters
    (dcgmExporter.config, DCGM_EXPORTER_COLLECTORS) and, with the Prometheus Operator, gets a ServiceMonitor whose
    series carry the node label the alerts and dashboards use. Empty when monitoring or the operator is off."""
    if not (cluster.get("k8s_gpu_monitoring_enabled") and _operator(cluster)):
        return {}
    exporter: dict[str, Any] = {
        "enabled": True,
        "config": {"name": OPERATOR_COUNTERS_CONFIGMAP},
        "env": [{"name": "DCGM_EXPORTER_COLLECTORS", "value": f"{COUNTERS_DIR}/{OPERATOR_COUNTERS_KEY}"}],
    }
    if _prometheus_operator(cluster):
        exporter["serviceMonitor"] = {
            "enabled": True,
            "interval": _duration(cluster, "k8s_gpu_monitoring_scrape_interval"),
            "additionalLabels": _labels(cluster, "k8s_gpu_monitoring_prometheus_labels"),
            "relabelings": _relabelings(),
        }
    return {"dcgmExporter": exporter}


def gpu_monitoring(
    cluster: Cluster, upstream: list[Mapping[str, Any]], service_monitor: Mapping[str, Any], pinned_counters: str
) -> list[dict]:
    """The objects: see the module's docstring. upstream: the exporter's static manifest (DaemonSet, Service);
    service_monitor: its ServiceMonitor; pinned_counters: its default counters file."""
    if not cluster.get("k8s_gpu_monitoring_enabled"):
        return []
    namespace = cluster.get("k8s_gpu_monitoring_namespace")
    prometheus_labels = _labels(cluster, "k8s_gpu_monitoring_prometheus_labels")
    text = counters(cluster, pinned_counters)
    operator = _operator(cluster)
    ns_labels: dict[str, str] = {}
    if not cluster.openshift and not operator:
        # The exporter mounts a hostPath and adds SYS_ADMIN (profiling metrics): the privileged Pod Security level.
        ns_labels = {
            "pod-security.kubernetes.io/enforce": "privileged",
            "pod-security.kubernetes.io/warn": "baseline",
            "pod-security.kubernetes.io/audit": "baseline",
        }
    objects: list[dict] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": k8s_objects.meta(namespace, labels=ns_labels)}
    ]
    if operator:
        # Before helm install creates it (--create-namespace accepts one that exists): the counters go there first.
        operator_ns = cluster.get("k8s_gpu_operator_namespace")
        objects.append({"apiVersion": "v1", "kind": "Namespace", "metadata": k8s_objects.meta(operator_ns)})
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": k8s_objects.meta(OPERATOR_COUNTERS_CONFIGMAP, operator_ns),
                "data": {OPERATOR_COUNTERS_KEY: text},
            }
        )
    else:
        objects += _exporter(cluster, namespace, upstream, text)
        if _prometheus_operator(cluster):
            monitor = copy.deepcopy(dict(service_monitor))
            monitor["metadata"] = k8s_objects.meta(
                monitor["metadata"]["name"], namespace, {**monitor["metadata"]["labels"], **prometheus_labels}
            )
            [endpoint] = monitor["spec"]["endpoints"]
            endpoint["interval"] = _duration(cluster, "k8s_gpu_monitoring_scrape_interval")
            endpoint["relabelings"] = _relabelings()
            monitor["spec"]["namespaceSelector"] = {"matchNames": [namespace]}
            objects.append(monitor)
    groups = rules(cluster)
    if _prometheus_operator(cluster):
        objects.append(
            {
                "apiVersion": "monitoring.coreos.com/v1",
                "kind": "PrometheusRule",
                "metadata": k8s_objects.meta("nodeforge-gpu-alerts", namespace, prometheus_labels),
                "spec": {"groups": groups},
            }
        )
    if cluster.get("k8s_gpu_monitoring_dashboards"):
        labels = _labels(cluster, "k8s_gpu_monitoring_dashboard_labels")
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": k8s_objects.meta(
                    "nodeforge-gpu-dashboard",
                    cluster.get("k8s_gpu_monitoring_dashboard_namespace") or namespace,
                    labels,
                ),
                "data": {f"{DASHBOARD_UID}.json": json.dumps(dashboard(cluster), indent=2, sort_keys=True) + "\n"},
            }
        )
    return objects


def rules_file(cluster: Cluster) -> dict:
    """The alert rules as a Prometheus rules file, for a Prometheus without the Operator (render writes it beside the
    objects); empty when monitoring is off or the PrometheusRule carries them."""
    if not cluster.get("k8s_gpu_monitoring_enabled") or _prometheus_operator(cluster):
        return {}
    return {"groups": rules(cluster)}


def _exporter(cluster: Cluster, namespace: str, upstream: list[Mapping[str, Any]], text: str) -> list[dict]:
    """The exporter's counters ConfigMap, DaemonSet and Service, from its static manifest. Where nvidia is not every
    GPU node's default runtime, the pods use the RuntimeClass nvidia (role k8s_gpu_device_plugin renders it)."""
    by_kind = {obj["kind"]: copy.deepcopy(dict(obj)) for obj in upstream}
    daemonset, service = by_kind["DaemonSet"], by_kind["Service"]
    pin = cluster.manifest["kubernetes"]["dcgm_exporter"]
    config_name = "dcgm-exporter-counters"
    objects: list[dict] = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": k8s_objects.meta(config_name, namespace),
            "data": {COUNTERS_FILE: text},
        }
    ]
    for obj in (daemonset, service):
        obj["metadata"]["namespace"] = namespace
        obj["metadata"]["labels"] = {**obj["metadata"].get("labels", {}), **k8s_objects.MANAGED_BY}
    template = daemonset["spec"]["template"]
    # A ConfigMap mounted through subPath is not refreshed in running pods: a change of the counters rolls the pods.
    template["metadata"]["annotations"] = {"nodeforge.io/counters-sha256": hashlib.sha256(text.encode()).hexdigest()}
    pod = template["spec"]
    pod["nodeSelector"] = dict(cluster.get("k8s_gpu_monitoring_node_selector") or {GPU_PRESENT: "true"})
    # GPU nodes are often tainted so that only GPU work lands there; the exporter must run on every one of them.
    pod["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    if k8s_objects.needs_runtime_class(cluster):
        pod["runtimeClassName"] = "nvidia"
    [container] = pod["containers"]
    container["image"] = pin["image"]
    container["args"] = ["-f", f"{COUNTERS_DIR}/{COUNTERS_FILE}"]
    container["volumeMounts"].append(
        {"name": "counters", "mountPath": f"{COUNTERS_DIR}/{COUNTERS_FILE}", "subPath": COUNTERS_FILE, "readOnly": True}
    )
    pod["volumes"].append({"name": "counters", "configMap": {"name": config_name}})
    if cluster.openshift:
        objects += k8s_objects.openshift_privileged(EXPORTER, namespace)
        pod["serviceAccountName"] = EXPORTER
    if not _prometheus_operator(cluster):
        port = str(service["spec"]["ports"][0]["port"])
        service["metadata"]["annotations"] = {"prometheus.io/scrape": "true", "prometheus.io/port": port}
    return [*objects, daemonset, service]
