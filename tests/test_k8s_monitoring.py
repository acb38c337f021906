"""Role k8s_gpu_monitoring (module_utils/k8s_monitoring.py): dcgm-exporter at the pinned release, its counters, its
ServiceMonitor, the alert rules and the Grafana dashboard.

Probes independent of the code under test: the pinned upstream files in ../shared/reference (the shipped copies must
be them byte for byte), kubernetes-validate and the pinned Prometheus Operator CRDs (strict validation), the pinned
exporter's counters file (every metric an expression names), and Prometheus's own promtool (Debian's prometheus
package, tools/setup.sh), which checks the rules and evaluates the alerts and the dashboard's expressions over the GPU
readings recorded on the lent H200 and the acceptance textfile written there.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess

import pytest
import yaml

from nodeforge.collection import k8s_validate, model
from tests import monitoring_sample
from tests.conftest import REPO
from tests.test_k8s_objects import ROLES, UPSTREAM, _file, cluster, independent_problems

from ansible_collections.nodeforge.gpu.plugins.module_utils import k8s_monitoring, k8s_objects  # isort: skip

MONITORING = UPSTREAM / "monitoring"
PROMTOOL = REPO / "build" / "promtool" / "promtool"
ROLE_FILES = ROLES / "k8s_gpu_monitoring" / "files" / "upstream"
CRDS = ROLES / "nodeforge" / "files" / "crds"
# Shipped copy -> the pinned reference file it must equal.
COPIES = {
    ROLE_FILES / "dcgm-exporter.yaml": "dcgm-exporter-4.5.3-4.8.2.yaml",
    ROLE_FILES / "service-monitor.yaml": "dcgm-exporter-4.5.3-4.8.2-service-monitor.yaml",
    ROLE_FILES / "default-counters.csv": "dcgm-exporter-4.5.3-4.8.2-default-counters.csv",
    CRDS / "servicemonitors.monitoring.coreos.com.yaml": "prometheus-operator-v0.93.0-servicemonitors.crd.yaml",
    CRDS / "prometheusrules.monitoring.coreos.com.yaml": "prometheus-operator-v0.93.0-prometheusrules.crd.yaml",
}
PINNED_COUNTERS = (MONITORING / "dcgm-exporter-4.5.3-4.8.2-default-counters.csv").read_text()
TEXTFILE = REPO / "docs" / "gpu-validate" / "nodeforge-validate-h200.prom"


def monitoring(c: k8s_objects.Cluster) -> list[dict]:
    upstream = _file("k8s_gpu_monitoring", "upstream", "dcgm-exporter.yaml")
    [service_monitor] = _file("k8s_gpu_monitoring", "upstream", "service-monitor.yaml")
    return k8s_monitoring.gpu_monitoring(
        c, upstream, service_monitor, (ROLE_FILES / "default-counters.csv").read_text()
    )


def one(objects: list[dict], kind: str, name: str | None = None) -> dict:
    [found] = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    return found


def on(distribution="kubernetes", profile="dell-c4140", **settings) -> k8s_objects.Cluster:
    return cluster(distribution, profile, k8s_gpu_monitoring_enabled=True, **settings)


def test_the_shipped_upstream_files_are_the_pinned_ones():
    readme = (UPSTREAM / "README.md").read_text()
    for copy, name in COPIES.items():
        assert copy.read_bytes() == (MONITORING / name).read_bytes(), copy
        digest = hashlib.sha256(copy.read_bytes()).hexdigest()
        assert re.search(rf"\| monitoring/{re.escape(name)} \|.*\| {digest} \|", readme), name


def test_the_manifest_pins_the_image_of_the_pinned_release():
    [daemonset] = [
        d
        for d in k8s_validate.load_documents((MONITORING / "dcgm-exporter-4.5.3-4.8.2.yaml").read_text())
        if d["kind"] == "DaemonSet"
    ]
    pin = model.manifest()["kubernetes"]["dcgm_exporter"]
    assert pin["image"] == daemonset["spec"]["template"]["spec"]["containers"][0]["image"]
    assert pin["image"].split(":")[1].startswith(pin["version"])


@pytest.mark.parametrize(
    ("distribution", "profile", "settings"),
    [
        ("openshift", "dgx-1", {}),
        ("kubernetes", "dell-c4140", {}),
        ("kubernetes", "supermicro-4029gp-tvrt", {"nvidia_container_toolkit_set_as_default": False}),
        ("kubernetes", "dgx-h100", {"k8s_gpu_operator_enabled": True}),
        ("kubernetes", "dgx-h100", {"k8s_gpu_monitoring_prometheus_operator": False}),
    ],
)
def test_every_object_validates_strictly(distribution, profile, settings):
    c = on(distribution, profile, **settings)
    objects = monitoring(c)
    assert k8s_validate.validate(objects, c.k8s_version, k8s_validate.shipped_crds()) == []
    assert independent_problems(objects) == []


def test_the_exporter_runs_the_pinned_image_on_every_gpu_node_with_the_counters_configmap():
    objects = monitoring(on())
    daemonset = one(objects, "DaemonSet", "dcgm-exporter")
    pod = daemonset["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["image"] == "nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-distroless"
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    # The file the exporter reads (-f) is the ConfigMap's key, mounted at that path.
    assert container["args"][0] == "-f"
    [mount] = [m for m in container["volumeMounts"] if m["mountPath"] == container["args"][1]]
    [volume] = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    configmap = one(objects, "ConfigMap", volume["configMap"]["name"])
    text = configmap["data"][mount["subPath"]]
    assert text.startswith(PINNED_COUNTERS.rstrip("\n") + "\n")
    added = k8s_monitoring.counters_fields(text).keys() - k8s_monitoring.counters_fields(PINNED_COUNTERS).keys()
    assert added == {"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"}
    # nodeforge adds a field the pinned file has, commented out, with the same type.
    assert re.search(r"^# DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, counter,", PINNED_COUNTERS, re.M)
    # A change of the counters rolls the pods (a subPath mount is never refreshed).
    annotation = daemonset["spec"]["template"]["metadata"]["annotations"]["nodeforge.io/counters-sha256"]
    assert annotation == hashlib.sha256(text.encode()).hexdigest()
    extended = monitoring(
        on(
            k8s_gpu_monitoring_counters=[
                {
                    "field": "DCGM_FI_PROF_SM_ACTIVE",
                    "type": "gauge",
                    "help": "Ratio of cycles an SM has a warp assigned.",
                }
            ]
        )
    )
    other = one(extended, "DaemonSet")["spec"]["template"]["metadata"]["annotations"]["nodeforge.io/counters-sha256"]
    assert other != annotation
    assert one(extended, "ConfigMap", "dcgm-exporter-counters")["data"][mount["subPath"]].endswith(
        "DCGM_FI_PROF_SM_ACTIVE, gauge, Ratio of cycles an SM has a warp assigned.\n"
    )
    # Kubernetes: the namespace admits the exporter's hostPath and SYS_ADMIN (privileged), and nothing on OpenShift.
    namespace = one(objects, "Namespace")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    assert "serviceAccountName" not in pod
    # The toolkit's default leaves runc the default runtime: the exporter's pods ask for nvidia (the device plugin
    # role's RuntimeClass); where nvidia is every node's default, they need not.
    assert pod["runtimeClassName"] == "nvidia"
    nodes = {"node-01": {"nodeforge_profile": "dgx-1", "nvidia_container_toolkit_set_as_default": True}}
    c = k8s_objects.cluster_from({"k8s_gpu_monitoring_enabled": True}, nodes)
    assert "runtimeClassName" not in one(monitoring(c), "DaemonSet")["spec"]["template"]["spec"]


def test_openshift_runs_the_exporter_under_the_privileged_scc():
    objects = monitoring(on("openshift", "dgx-1"))
    pod = one(objects, "DaemonSet")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "dcgm-exporter"
    role = one(objects, "Role")
    assert role["rules"][0]["resourceNames"] == ["privileged"] and role["rules"][0]["verbs"] == ["use"]
    assert "pod-security.kubernetes.io/enforce" not in one(objects, "Namespace")["metadata"]["labels"]


def test_the_service_monitor_scrapes_the_exporter_service_and_labels_series_with_the_node():
    objects = monitoring(
        on(
            k8s_gpu_monitoring_prometheus_labels={"release": "kube-prometheus-stack"},
            k8s_gpu_monitoring_scrape_interval="30s",
        )
    )
    service, monitor = one(objects, "Service"), one(objects, "ServiceMonitor")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [service["metadata"]["namespace"]]}
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint["port"] == service["spec"]["ports"][0]["name"] and endpoint["interval"] == "30s"
    assert endpoint["relabelings"] == [
        {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node", "action": "replace"}
    ]
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert one(objects, "PrometheusRule")["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert "annotations" not in service["metadata"]


def test_without_the_prometheus_operator_the_service_is_annotated_and_the_rules_are_a_file():
    c = on(k8s_gpu_monitoring_prometheus_operator=False)
    objects = monitoring(c)
    kinds = {o["kind"] for o in objects}
    assert not kinds & {"ServiceMonitor", "PrometheusRule"}
    assert one(objects, "Service")["metadata"]["annotations"] == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "9400",
    }
    assert k8s_monitoring.rules_file(c) == {"groups": k8s_monitoring.rules(c)}
    # OpenShift's monitoring always runs the Operator: the setting is ignored there.
    openshift = monitoring(on("openshift", "dgx-1", k8s_gpu_monitoring_prometheus_operator=False))
    assert {"ServiceMonitor", "PrometheusRule"} <= {o["kind"] for o in openshift}
    assert k8s_monitoring.rules_file(on("openshift", "dgx-1", k8s_gpu_monitoring_prometheus_operator=False)) == {}


def test_with_the_gpu_operator_its_exporter_reads_nodeforges_counters_and_nothing_runs_twice():
    c = on("kubernetes", "dgx-h100", k8s_gpu_operator_enabled=True, k8s_gpu_operator_namespace="nvidia-gpu")
    objects = monitoring(c)
    assert not {o["kind"] for o in objects} & {"DaemonSet", "Service", "ServiceMonitor"}
    configmap = one(objects, "ConfigMap", k8s_monitoring.OPERATOR_COUNTERS_CONFIGMAP)
    assert configmap["metadata"]["namespace"] == "nvidia-gpu"
    assert "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL" in k8s_monitoring.counters_fields(configmap["data"]["dcgm-metrics.csv"])
    assert {"nvidia-gpu", "gpu-monitoring"} == {o["metadata"]["name"] for o in objects if o["kind"] == "Namespace"}
    values = k8s_objects.gpu_operator_values(c, k8s_monitoring.operator_values(c))["dcgmExporter"]
    assert values["config"] == {"name": configmap["metadata"]["name"]}
    assert values["env"] == [{"name": "DCGM_EXPORTER_COLLECTORS", "value": "/etc/dcgm-exporter/dcgm-metrics.csv"}]
    assert values["serviceMonitor"]["enabled"] is True
    assert values["serviceMonitor"]["relabelings"][0]["targetLabel"] == "node"
    # The alerts watch the operator's exporter (its Service is the scrape job).
    [down] = [r for r in k8s_monitoring.rules(c)[0]["rules"] if r["alert"] == "NodeforgeDcgmExporterDown"]
    assert down["expr"] == 'up{job="nvidia-dcgm-exporter"} == 0'
    # The site's own values still win over nodeforge's.
    own = {"dcgmExporter": {"serviceMonitor": {"interval": "60s"}}}
    merged = k8s_objects.gpu_operator_values(
        on("kubernetes", "dgx-h100", k8s_gpu_operator_enabled=True, k8s_gpu_operator_values=own),
        k8s_monitoring.operator_values(c),
    )
    assert merged["dcgmExporter"]["serviceMonitor"]["interval"] == "60s"
    assert k8s_monitoring.operator_values(on("kubernetes", "dgx-h100")) == {}


def test_monitoring_off_renders_nothing():
    c = cluster("kubernetes", "dgx-h100", k8s_gpu_operator_enabled=True)
    assert monitoring(c) == [] and k8s_monitoring.operator_values(c) == {} and k8s_monitoring.rules_file(c) == {}


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"k8s_gpu_monitoring_alert_for": "5 minutes"}, "k8s_gpu_monitoring_alert_for: found '5 minutes'"),
        ({"k8s_gpu_monitoring_scrape_interval": "15"}, "k8s_gpu_monitoring_scrape_interval: found '15'"),
        (
            {"k8s_gpu_monitoring_counters": [{"field": "SM_ACTIVE", "type": "gauge", "help": "x"}]},
            "k8s_gpu_monitoring_counters[0].field: found 'SM_ACTIVE'",
        ),
        (
            {"k8s_gpu_monitoring_counters": [{"field": "DCGM_FI_DEV_GPU_TEMP", "type": "gauge", "help": "x"}]},
            "k8s_gpu_monitoring_counters[0].field: DCGM_FI_DEV_GPU_TEMP is already exported",
        ),
        (
            {
                "k8s_gpu_monitoring_counters": [
                    {"field": "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "type": "counter", "help": "x"}
                ]
            },
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL is already exported",
        ),
        (
            {"k8s_gpu_monitoring_counters": [{"field": "DCGM_FI_PROF_SM_ACTIVE", "type": "histogram", "help": "x"}]},
            "k8s_gpu_monitoring_counters[0].type: found 'histogram'",
        ),
        (
            {"k8s_gpu_monitoring_counters": [{"field": "DCGM_FI_PROF_SM_ACTIVE", "type": "gauge", "help": "a, b"}]},
            "k8s_gpu_monitoring_counters[0].help: found 'a, b'",
        ),
    ],
)
def test_bad_settings_are_named(settings, message):
    with pytest.raises(k8s_objects.K8sConfigError, match=re.escape(message)):
        monitoring(on(**settings))


# ---- PromQL: the names, then Prometheus's own checks and evaluation ------------------------------------------------
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (strings, label matchers, label lists, ranges and function names
    left out)."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    expr = re.sub(r"\{[^}]*\}", " ", expr)
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    expr = re.sub(r"\[[^\]]*\]", " ", expr)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", expr):
        if expr[match.end() :].lstrip().startswith("(") or match.group(0) in _KEYWORDS:
            continue
        names.add(match.group(0))
    return names


def test_metric_names_reads_selectors_only():
    assert metric_names('count by (node) (DCGM_FI_DEV_GPU_TEMP{node=~"a|b"}) < 8') == {"DCGM_FI_DEV_GPU_TEMP"}
    assert metric_names("increase(A[15m]) > 0 or increase(B_total[5m]) > 0") == {"A", "B_total"}
    assert metric_names('time() - x{status="fail"} == 1') == {"x"}


def _expressions(c: k8s_objects.Cluster) -> list[str]:
    rules = [r["expr"] for g in k8s_monitoring.rules(c) for r in g["rules"]]
    board = k8s_monitoring.dashboard(c)
    panels = [t["expr"] for p in board["panels"] for t in p["targets"]]
    variables = [v["definition"] for v in board["templating"]["list"] if v["type"] == "query"]
    return rules + panels + [re.sub(r"^label_values\((\w+),.*$", r"\1", v) for v in variables]


def test_every_expression_names_a_metric_the_exporter_or_nodeforge_emits():
    """Every metric the alerts, the panels and the dashboard's variable select is a field the exporter emits with the
    rendered counters (the pinned file plus nodeforge's), Prometheus's `up`, or a family of validate's textfile (read
    from the file recorded on the H200 with the Prometheus client's parser)."""
    from prometheus_client.parser import text_string_to_metric_families

    c = on("openshift", "dgx-1")
    counters = one(monitoring(c), "ConfigMap", "dcgm-exporter-counters")["data"]["default-counters.csv"]
    emitted = {name for name, kind in k8s_monitoring.counters_fields(counters).items() if kind != "label"}
    textfile = {f.name for f in text_string_to_metric_families(TEXTFILE.read_text())}
    named = set().union(*(metric_names(e) for e in _expressions(c)))
    assert named - emitted - textfile == {"up"}
    # Each alert's own metrics: the GPU ones from the pinned file, or nodeforge's commented-out field.
    pinned = set(k8s_monitoring.counters_fields(PINNED_COUNTERS))
    assert (named & emitted) - pinned == {"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"}


@pytest.fixture(scope="module")
def promtool():
    if not PROMTOOL.is_file():
        pytest.fail(f"{PROMTOOL} is missing: `make setup` (tools/setup.sh) takes it from Debian's prometheus package")
    return str(PROMTOOL)


def test_promtool_accepts_the_rules_of_each_sample_cluster(tmp_path, promtool):
    for name, c in {
        "openshift": on("openshift", "dgx-1"),
        "file": on(k8s_gpu_monitoring_prometheus_operator=False),
        "operator": on("kubernetes", "dgx-h100", k8s_gpu_operator_enabled=True),
    }.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump({"groups": k8s_monitoring.rules(c)}))
        run = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
        assert run.returncode == 0, run.stdout + run.stderr
        assert f"SUCCESS: {len(k8s_monitoring.rules(c)[0]['rules'])} rules found" in run.stdout


def _promtool_test(tmp_path, promtool, c, tests) -> subprocess.CompletedProcess:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": k8s_monitoring.rules(c)}))
    (tmp_path / "test.yaml").write_text(
        yaml.safe_dump({"rule_files": ["rules.yaml"], "evaluation_interval": "1s", "tests": tests}, width=10000)
    )
    return subprocess.run([promtool, "test", "rules", str(tmp_path / "test.yaml")], capture_output=True, text=True)


def _selector(name: str, labels: dict) -> str:
    return name + "{" + ", ".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def _recorded_series() -> tuple[list[dict], list]:
    samples = monitoring_sample.read()
    labels = monitoring_sample.series_labels(samples[0])
    series = [
        {"series": _selector(counter, labels), "values": " ".join(f"{s.values[counter]:g}" for s in samples)}
        for counter in monitoring_sample.FIELDS.values()
    ]
    return series, samples


def _number(value: float) -> str:
    """A sample value as Go's %v prints it in an alert's annotation."""
    return f"{value:g}" if value == int(value) else repr(value)


def test_the_temperature_alert_fires_on_the_h200_under_load_and_not_at_the_default_threshold(tmp_path, promtool):
    """The recorded H200 ran 36 C idle and up to 61 C under load. With a 55 C threshold and `for` 30 s, the alert
    fires 30 s after the first reading above 55 (and not one second before), on that GPU's series; at the default
    threshold (85 C) it never fires."""
    series, samples = _recorded_series()
    temps = [s.values["DCGM_FI_DEV_GPU_TEMP"] for s in samples]
    first = next(i for i, t in enumerate(temps) if t > 55)
    last = max(i for i, t in enumerate(temps) if t > 55)
    assert last - first > 35, "the recording holds the load long enough"
    at = first + 32
    labels = {**monitoring_sample.series_labels(samples[0]), "severity": "warning"}
    hot = on("kubernetes", "dgx-h100", k8s_gpu_monitoring_temperature_max=55, k8s_gpu_monitoring_alert_for="30s")
    expected = {
        "exp_labels": labels,
        "exp_annotations": {
            "summary": f"GPU 0 of node {monitoring_sample.NODE} runs at {_number(temps[at])} C",
            "description": "Above k8s_gpu_monitoring_temperature_max (55 C) for 30s: check the node's cooling and the "
            "GPU's clocks (thermal slowdown).",
        },
    }
    tests = [
        {
            "interval": "1s",
            "input_series": series,
            "alert_rule_test": [
                {"eval_time": f"{first + 29}s", "alertname": "NodeforgeGpuTemperatureHigh", "exp_alerts": []},
                {"eval_time": f"{at}s", "alertname": "NodeforgeGpuTemperatureHigh", "exp_alerts": [expected]},
                {"eval_time": f"{last + 1}s", "alertname": "NodeforgeGpuTemperatureHigh", "exp_alerts": []},
            ],
        }
    ]
    run = _promtool_test(tmp_path, promtool, hot, tests)
    assert run.returncode == 0, run.stdout + run.stderr
    # The same expectation against the default threshold fails: promtool compares what it is told.
    cool = on("kubernetes", "dgx-h100", k8s_gpu_monitoring_alert_for="30s")
    tests[0]["alert_rule_test"] = tests[0]["alert_rule_test"][1:2]
    run = _promtool_test(tmp_path, promtool, cool, tests)
    assert run.returncode == 1 and "NodeforgeGpuTemperatureHigh" in run.stdout + run.stderr


def _gpu(node: str, gpu: int) -> dict:
    return {
        "gpu": str(gpu),
        "UUID": f"GPU-{node}-{gpu}",
        "modelName": "Tesla V100-SXM2-32GB",
        "job": "dcgm-exporter",
        "node": node,
    }


def test_the_gpu_error_alerts_fire_on_their_fields_and_only_there(tmp_path, promtool):
    """XID, double-bit ECC, uncorrectable remapped rows and row-remap failure on one GPU each of node-01; node-02 is
    healthy and stays quiet; after the 15-minute window the ECC alert resolves."""
    c = on("kubernetes", "dgx-1", k8s_gpu_monitoring_alert_for="1m")
    series = []
    for node in ("node-01", "node-02"):
        for gpu in range(8):
            bad = node == "node-01"
            series += [
                {
                    "series": _selector("DCGM_FI_DEV_XID_ERRORS", _gpu(node, gpu)),
                    "values": "0x3 79x40" if bad and gpu == 1 else "0x43",
                },
                {
                    "series": _selector("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", _gpu(node, gpu)),
                    "values": "0x3 2x1200" if bad and gpu == 2 else "0x1203",
                },
                {
                    "series": _selector("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", _gpu(node, gpu)),
                    "values": "0x3 1x40" if bad and gpu == 3 else "0x43",
                },
                {
                    "series": _selector("DCGM_FI_DEV_ROW_REMAP_FAILURE", _gpu(node, gpu)),
                    "values": "0x3 1x40" if bad and gpu == 4 else "0x43",
                },
            ]

    def alert(gpu: int, severity: str, summary: str, description: str) -> dict:
        return {
            "exp_labels": {**_gpu("node-01", gpu), "severity": severity},
            "exp_annotations": {"summary": summary, "description": description},
        }

    descriptions = {r["alert"]: r["annotations"]["description"] for r in k8s_monitoring.rules(c)[0]["rules"]}
    tests = [
        {
            "interval": "1m",
            "input_series": series,
            "alert_rule_test": [
                {
                    "eval_time": "5m",
                    "alertname": "NodeforgeGpuXidError",
                    "exp_alerts": [
                        alert(
                            1, "critical", "GPU 1 of node node-01 reported XID 79", descriptions["NodeforgeGpuXidError"]
                        )
                    ],
                },
                {
                    "eval_time": "5m",
                    "alertname": "NodeforgeGpuUncorrectableEcc",
                    "exp_alerts": [
                        alert(
                            2,
                            "critical",
                            "GPU 2 of node node-01 had an uncorrectable memory error",
                            descriptions["NodeforgeGpuUncorrectableEcc"],
                        ),
                        alert(
                            3,
                            "critical",
                            "GPU 3 of node node-01 had an uncorrectable memory error",
                            descriptions["NodeforgeGpuUncorrectableEcc"],
                        ),
                    ],
                },
                {"eval_time": "30m", "alertname": "NodeforgeGpuUncorrectableEcc", "exp_alerts": []},
                {
                    "eval_time": "5m",
                    "alertname": "NodeforgeGpuRowRemapFailure",
                    "exp_alerts": [
                        alert(
                            4,
                            "critical",
                            "GPU 4 of node node-01 failed to remap a row",
                            descriptions["NodeforgeGpuRowRemapFailure"],
                        )
                    ],
                },
                {"eval_time": "3m", "alertname": "NodeforgeGpuXidError", "exp_alerts": []},
            ],
        }
    ]
    run = _promtool_test(tmp_path, promtool, c, tests)
    assert run.returncode == 0, run.stdout + run.stderr


def test_a_node_with_fewer_gpus_than_its_profile_and_a_silent_exporter_alert(tmp_path, promtool):
    """Two DGX-1 (8 GPUs) and a DGX H100 whose inventory limits it to 1 GPU (nodeforge_profile_overrides): node-02
    shows 7 GPUs and alerts with 7; the H100 node's one GPU is all it should have; node-01's exporter target is down."""
    nodes = {
        "node-01": {"nodeforge_profile": "dgx-1"},
        "node-02": {"nodeforge_profile": "dgx-1"},
        "h100.example.com": {
            "nodeforge_profile": "dgx-h100",
            "nodeforge_profile_overrides": {"gpu": {"count": 1}, "expected": {"gpus": 1}},
        },
    }
    c = k8s_objects.cluster_from(
        {
            "nodeforge_k8s_distribution": "kubernetes",
            "k8s_gpu_monitoring_enabled": True,
            "k8s_gpu_monitoring_alert_for": "1m",
        },
        nodes,
    )
    missing = [r["expr"] for r in k8s_monitoring.rules(c)[0]["rules"] if r["alert"] == "NodeforgeGpuMissing"]
    assert missing == [
        'count by (node) (DCGM_FI_DEV_GPU_TEMP{node=~"h100\\\\.example\\\\.com"}) < 1',
        'count by (node) (DCGM_FI_DEV_GPU_TEMP{node=~"node-01|node-02"}) < 8',
    ]
    counts = {"node-01": 8, "node-02": 7, "h100.example.com": 1}
    series = [
        {"series": _selector("DCGM_FI_DEV_GPU_TEMP", _gpu(node, gpu)), "values": "40x10"}
        for node, count in counts.items()
        for gpu in range(count)
    ]
    series += [
        {
            "series": _selector("up", {"job": "dcgm-exporter", "node": node, "instance": f"{node}:9400"}),
            "values": "0x10" if node == "node-01" else "1x10",
        }
        for node in counts
    ]
    rule = {r["alert"]: r for r in k8s_monitoring.rules(c)[0]["rules"]}
    tests = [
        {
            "interval": "1m",
            "input_series": series,
            "alert_rule_test": [
                {
                    "eval_time": "2m",
                    "alertname": "NodeforgeGpuMissing",
                    "exp_alerts": [
                        {
                            "exp_labels": {"node": "node-02", "severity": "critical"},
                            "exp_annotations": {
                                "summary": "Node node-02 shows 7 GPUs; its profile has 8",
                                "description": rule["NodeforgeGpuMissing"]["annotations"]["description"],
                            },
                        }
                    ],
                },
                {
                    "eval_time": "2m",
                    "alertname": "NodeforgeDcgmExporterDown",
                    "exp_alerts": [
                        {
                            "exp_labels": {
                                "job": "dcgm-exporter",
                                "node": "node-01",
                                "instance": "node-01:9400",
                                "severity": "warning",
                            },
                            "exp_annotations": {
                                "summary": "dcgm-exporter on node-01 does not answer",
                                "description": rule["NodeforgeDcgmExporterDown"]["annotations"]["description"],
                            },
                        }
                    ],
                },
            ],
        }
    ]
    run = _promtool_test(tmp_path, promtool, c, tests)
    assert run.returncode == 0, run.stdout + run.stderr


def _textfile_series() -> list[dict]:
    from prometheus_client.parser import text_string_to_metric_families

    return [
        {"series": _selector(s.name, s.labels), "values": f"{s.value!r}x100"}
        for f in text_string_to_metric_families(TEXTFILE.read_text())
        for s in f.samples
    ]


def test_a_node_that_failed_acceptance_alerts_from_validates_textfile(tmp_path, promtool):
    """The textfile validate wrote on the H200 (14 checks failed) fires NodeforgeAcceptanceFailed for that node."""
    c = on("kubernetes", "dgx-h100", k8s_gpu_monitoring_alert_for="1m")
    [rule] = [r for r in k8s_monitoring.rules(c)[0]["rules"] if r["alert"] == "NodeforgeAcceptanceFailed"]
    expected = {
        "exp_labels": {"node": "gpu-node-01", "severity": "warning"},
        "exp_annotations": {
            "summary": "Node gpu-node-01 failed nodeforge validate",
            "description": rule["annotations"]["description"],
        },
    }
    passed = [s for s in _textfile_series() if s["series"].startswith("nodeforge_validate_node_passed")]
    assert passed == [{"series": 'nodeforge_validate_node_passed{node="gpu-node-01"}', "values": "0.0x100"}]
    healthy = [{"series": 'nodeforge_validate_node_passed{node="gpu-node-02"}', "values": "1x100"}]
    tests = [
        {
            "interval": "10s",
            "input_series": _textfile_series() + healthy,
            "alert_rule_test": [
                {"eval_time": "50s", "alertname": "NodeforgeAcceptanceFailed", "exp_alerts": []},
                {"eval_time": "70s", "alertname": "NodeforgeAcceptanceFailed", "exp_alerts": [expected]},
            ],
        }
    ]
    run = _promtool_test(tmp_path, promtool, c, tests)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]


def test_the_dashboard_expressions_evaluate_to_the_recorded_readings(tmp_path, promtool):
    """Each panel's expression ($node as the dashboard's "All") evaluated by promtool over the H200's recorded
    series and its validate textfile: the GPU panels give that GPU's reading at that second of the recording (one
    reading under load, one idle), the acceptance panels what the H200's run found (failed, 14 failed checks)."""
    series, samples = _recorded_series()
    c = on("kubernetes", "dgx-h100")
    labels = monitoring_sample.series_labels(samples[0])
    tests_ = []
    # What each GPU panel shows, as nvidia-smi read it on the H200 (seed 001, figures 10-12).
    shown = {
        "GPU utilization": "utilization.gpu",
        "GPU memory used": "memory.used",
        "GPU temperature": "temperature.gpu",
        "GPU power": "power.draw",
    }
    for at in (10, 50):
        for title, _kind, expr, _unit, _legend in k8s_monitoring.PANELS[:4]:
            counter = monitoring_sample.FIELDS[shown[title]]
            tests_.append(
                {
                    "expr": expr.replace("$node", ".*"),
                    "eval_time": f"{at}s",
                    "exp_samples": [{"labels": _selector(counter, labels), "value": samples[at].values[counter]}],
                }
            )
    report = json.loads((REPO / "docs" / "gpu-validate" / "validate-h200.json").read_text())
    failed = [c_["check"] for c_ in report["hosts"]["gpu-node-01"]["checks"] if c_["status"] == "fail"]
    stamp = next(s for s in _textfile_series() if s["series"].startswith("nodeforge_validate_last_run"))
    stamp_value = float(stamp["values"].split("x")[0])
    by_title = {p[0]: p[2] for p in k8s_monitoring.PANELS}
    tests_ += [
        {
            "expr": by_title["Acceptance: node passed"],
            "eval_time": "10s",
            "exp_samples": [{"labels": '{__name__="nodeforge_validate_node_passed", node="gpu-node-01"}', "value": 0}],
        },
        {
            "expr": by_title["Acceptance: age of the last run"],
            "eval_time": "10s",
            "exp_samples": [{"labels": '{node="gpu-node-01"}', "value": 10 - stamp_value}],
        },
        {
            "expr": by_title["Acceptance: failed checks"],
            "eval_time": "10s",
            "exp_samples": [
                {
                    "labels": _selector(
                        "nodeforge_validate_check_status", {"check": check, "node": "gpu-node-01", "status": "fail"}
                    ),
                    "value": 1,
                }
                for check in failed
            ],
        },
    ]
    assert len(failed) == 14
    run = _promtool_test(
        tmp_path,
        promtool,
        c,
        [{"interval": "1s", "input_series": series + _textfile_series(), "promql_expr_test": tests_}],
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]


def test_the_recorded_sample_is_valid_openmetrics_prometheus_backfills(tmp_path, promtool):
    """The recording as the exporter's series with timestamps: promtool backfills it into TSDB blocks (its own
    OpenMetrics parser), and the Prometheus client's text parser reads one scrape of it back with each counter's help
    from the pinned counters file."""
    from prometheus_client.parser import text_string_to_metric_families

    samples = monitoring_sample.read()
    helps = monitoring_sample.helps(PINNED_COUNTERS)
    path = tmp_path / "h200.om"
    path.write_text(monitoring_sample.openmetrics(samples, helps))
    run = subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(path), str(tmp_path / "tsdb")],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert list((tmp_path / "tsdb").glob("*/meta.json"))
    scrape = monitoring_sample.exposition(samples[50], helps)
    families = {f.name: f for f in text_string_to_metric_families(scrape)}
    assert set(families) == set(monitoring_sample.FIELDS.values())
    assert families["DCGM_FI_DEV_POWER_USAGE"].documentation == "Power draw (in W)."
    [power] = families["DCGM_FI_DEV_POWER_USAGE"].samples
    assert power.labels["modelName"] == "NVIDIA H200" and power.value > 600  # under load


def test_the_dashboard_is_a_configmap_the_grafana_sidecar_loads():
    c = on(k8s_gpu_monitoring_dashboard_namespace="grafana", k8s_gpu_monitoring_temperature_max=80)
    configmap = one(monitoring(c), "ConfigMap", "nodeforge-gpu-dashboard")
    assert configmap["metadata"]["namespace"] == "grafana"
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    [(key, text)] = configmap["data"].items()
    board = json.loads(text)
    assert key == f"{board['uid']}.json"
    titles = [p["title"] for p in board["panels"]]
    assert titles[:4] == ["GPU utilization", "GPU memory used", "GPU temperature", "GPU power"]
    assert len({p["id"] for p in board["panels"]}) == len(board["panels"])
    temperature = board["panels"][2]["fieldConfig"]["defaults"]
    assert temperature["thresholds"]["steps"][-1]["value"] == 80 and temperature["unit"] == "celsius"
    # The panels do not overlap on Grafana's 24-column grid.
    cells = set()
    for panel in board["panels"]:
        g = panel["gridPos"]
        assert g["x"] + g["w"] <= 24
        new = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & new, panel["title"]
        cells |= new
    without = monitoring(on(k8s_gpu_monitoring_dashboards=False))
    assert without == [o for o in monitoring(on()) if o["metadata"]["name"] != "nodeforge-gpu-dashboard"]


def test_the_namespace_node_selector_and_dashboard_labels_follow_the_inventory():
    objects = monitoring(
        on(
            k8s_gpu_monitoring_namespace="dcgm",
            k8s_gpu_monitoring_node_selector={"pool": "gpu"},
            k8s_gpu_monitoring_dashboard_labels={"grafana_dashboard": "nodeforge", "team": "hpc"},
        )
    )
    namespaced = {(o["kind"], o["metadata"].get("namespace")) for o in objects if o["kind"] != "Namespace"}
    assert namespaced == {(kind, "dcgm") for kind, _ in namespaced}
    assert one(objects, "Namespace")["metadata"]["name"] == "dcgm"
    assert one(objects, "ServiceMonitor")["spec"]["namespaceSelector"] == {"matchNames": ["dcgm"]}
    assert one(objects, "DaemonSet")["spec"]["template"]["spec"]["nodeSelector"] == {"pool": "gpu"}
    labels = one(objects, "ConfigMap", "nodeforge-gpu-dashboard")["metadata"]["labels"]
    assert labels == {"grafana_dashboard": "nodeforge", "team": "hpc", "app.kubernetes.io/managed-by": "nodeforge"}
