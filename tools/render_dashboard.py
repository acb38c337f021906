"""Render docs/images/monitoring-dashboard.png: the GPU panels of role k8s_gpu_monitoring's Grafana dashboard (titles,
units, the temperature alert's threshold from the dashboard the role renders) drawn with matplotlib from the GPU
readings recorded on the lent H200 (tests/monitoring_sample.py: docs/gpu-validate/metrics-h200.csv as dcgm-exporter's
series), and the acceptance panels from validate's textfile written there. tests/test_k8s_monitoring.py evaluates the
same panels' expressions over the same series with promtool.

    .venv/bin/python tools/render_dashboard.py [--exposition]

--exposition prints one scrape of the exporter under load (the sample docs/monitoring.md shows) instead.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests import monitoring_sample  # noqa: E402

from nodeforge import collection  # noqa: E402, F401  (makes the collection importable)

from ansible_collections.nodeforge.gpu.plugins.module_utils import k8s_monitoring, k8s_objects  # noqa: E402  # isort: skip

OUT = REPO / "docs" / "images" / "monitoring-dashboard.png"
TEXTFILE = REPO / "docs" / "gpu-validate" / "nodeforge-validate-h200.prom"
UNITS = {"percent": "%", "mbytes": "MiB", "celsius": "°C", "watt": "W"}


PINNED_COUNTERS = REPO / "roles" / "k8s_gpu_monitoring" / "files" / "upstream" / "default-counters.csv"


def main() -> int:
    samples = monitoring_sample.read()
    if "--exposition" in sys.argv[1:]:
        sys.stdout.write(
            monitoring_sample.exposition(samples[50], monitoring_sample.helps(PINNED_COUNTERS.read_text()))
        )
        return 0
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from prometheus_client.parser import text_string_to_metric_families

    cluster = k8s_objects.cluster_from(
        {"k8s_gpu_monitoring_enabled": True}, {monitoring_sample.NODE: {"nodeforge_profile": "dgx-h100"}}
    )
    board = k8s_monitoring.dashboard(cluster)
    start = samples[0].at
    seconds = [s.at - start for s in samples]
    plt.rcParams.update({"font.size": 9, "axes.titlesize": 10})
    fig = plt.figure(figsize=(12, 8.2), facecolor="#111217")
    grid = fig.add_gridspec(3, 6, height_ratios=[1, 1, 0.55], hspace=0.45, wspace=0.9)
    spots = [grid[0, 0:3], grid[0, 3:6], grid[1, 0:3], grid[1, 3:6]]
    for panel, spot in zip(board["panels"][:4], spots, strict=True):
        [target] = panel["targets"]
        counter = target["expr"].split("{")[0]
        ax = fig.add_subplot(spot, facecolor="#181b1f")
        ax.plot(
            seconds,
            [s.values[counter] for s in samples],
            color="#73bf69",
            linewidth=1.6,
            label=f"{monitoring_sample.NODE} GPU 0 ({samples[0].labels['modelName']})",
        )
        steps = panel["fieldConfig"]["defaults"].get("thresholds", {}).get("steps", [])
        for step in steps[1:]:
            ax.axhline(
                step["value"],
                color="#f2495c",
                linestyle="--",
                linewidth=1,
                label=f"alert threshold {step['value']} {UNITS['celsius']}",
            )
        unit = UNITS[panel["fieldConfig"]["defaults"]["unit"]]
        ax.set_title(f"{panel['title']} ({unit})", color="#d8d9da", loc="left")
        ax.set_xlabel("seconds into the recording", color="#9fa7b3")
        ax.tick_params(colors="#9fa7b3")
        for side in ax.spines.values():
            side.set_color("#2c3235")
        ax.grid(color="#2c3235", linewidth=0.6)
        ax.set_ylim(0, max([step["value"] + 10 for step in steps[1:]] + [ax.get_ylim()[1] * 1.15]))
        ax.legend(loc="upper left", fontsize=7, facecolor="#181b1f", edgecolor="#2c3235", labelcolor="#d8d9da")
    families = {f.name: f for f in text_string_to_metric_families(TEXTFILE.read_text())}
    [passed] = families["nodeforge_validate_node_passed"].samples
    failed = [
        s.labels["check"]
        for s in families["nodeforge_validate_check_status"].samples
        if s.labels["status"] == "fail" and s.value == 1
    ]
    stats = [
        (
            board["panels"][4]["title"],
            "passed" if passed.value == 1 else "failed",
            "#73bf69" if passed.value == 1 else "#f2495c",
        ),
        (board["panels"][5]["title"], "at the run (validate --textfile)", "#d8d9da"),
        (board["panels"][6]["title"], f"{len(failed)} failed:\n" + ", ".join(failed[:3]) + ", ...", "#f2495c"),
    ]
    for column, (title, text, colour) in enumerate(stats):
        ax = fig.add_subplot(grid[2, 2 * column : 2 * column + 2], facecolor="#181b1f")
        ax.set_xticks([])
        ax.set_yticks([])
        for side in ax.spines.values():
            side.set_color("#2c3235")
        ax.set_title(f"{title}: {passed.labels['node']}", color="#d8d9da", loc="left", fontsize=9)
        ax.text(
            0.5,
            0.45,
            text,
            color=colour,
            ha="center",
            va="center",
            fontsize=9 if column else 20,
            wrap=True,
            transform=ax.transAxes,
        )
    fig.suptitle(
        f"{board['title']}  (recorded on a lent NVIDIA H200, 2026-11-30: 20 s idle, 50 s bf16 matrix "
        "products, 20 s idle)",
        color="#d8d9da",
        fontsize=11,
    )
    OUT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(OUT, dpi=90, facecolor=fig.get_facecolor())
    print(f"wrote {OUT.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
