"""The GPU readings recorded on the lent H200 (docs/gpu-validate/metrics-h200.csv: nvidia-smi once a second through
20 s idle, 50 s of bf16 matrix products, 20 s idle) as dcgm-exporter's series: what its default counters name each
reading, with the exporter's labels and those Prometheus adds through nodeforge's ServiceMonitor (job, node).

Modelled, and said so in docs/monitoring.md: no DCGM ran there. nvidia-smi read the same NVML values that DCGM's fields
for these counters report (utilization, frame buffer used and free in MiB, GPU and memory temperature in C, power in
W, SM clock in MHz); the label values are the machine's own (UUID, PCI bus ID, model, driver), the node name the
validate run's inventory name.
"""

from __future__ import annotations

import csv
import datetime
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RECORDING = REPO / "docs" / "gpu-validate" / "metrics-h200.csv"
NODE = "gpu-node-01"
JOB = "dcgm-exporter"
INSTANCE = "10.128.2.15:9400"  # a pod address, as Prometheus's target label: modelled

# nvidia-smi's query field -> the dcgm-exporter counter that reports it (default-counters.csv of the pinned release).
FIELDS = {
    "utilization.gpu": "DCGM_FI_DEV_GPU_UTIL",
    "utilization.memory": "DCGM_FI_DEV_MEM_COPY_UTIL",
    "memory.used": "DCGM_FI_DEV_FB_USED",
    "memory.free": "DCGM_FI_DEV_FB_FREE",
    "temperature.gpu": "DCGM_FI_DEV_GPU_TEMP",
    "temperature.memory": "DCGM_FI_DEV_MEMORY_TEMP",
    "power.draw": "DCGM_FI_DEV_POWER_USAGE",
    "clocks.sm": "DCGM_FI_DEV_SM_CLOCK",
}


@dataclass(frozen=True)
class Sample:
    at: float  # Unix time, seconds
    labels: dict  # the exporter's labels of GPU index 0 (Prometheus's added separately)
    values: dict  # counter -> value


def read(path: Path = RECORDING) -> list[Sample]:
    """The recording's samples, in time order."""
    lines = path.read_text().splitlines()
    fields = lines[0].removeprefix("# fields: ").split(",")
    samples = []
    for row in csv.reader(line for line in lines[1:] if not line.startswith("#")):
        got = dict(zip(fields, (cell.strip() for cell in row), strict=True))
        stamp = datetime.datetime.strptime(got["timestamp"], "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=datetime.UTC)
        labels = {
            "gpu": got["index"],
            "UUID": got["uuid"],
            "pci_bus_id": got["pci.bus_id"],
            "device": f"nvidia{got['index']}",
            "modelName": got["name"],
            "Hostname": NODE,
            "DCGM_FI_DRIVER_VERSION": got["driver_version"],
        }
        samples.append(Sample(stamp.timestamp(), labels, {FIELDS[f]: float(got[f]) for f in FIELDS}))
    return samples


def helps(counters: str) -> dict:
    """Each exported field's help text in a dcgm-exporter counters file (field, type, help per line; '#' comments)."""
    found = {}
    for row in counters.splitlines():
        cells = [cell.strip() for cell in row.split(",", 2)]
        if len(cells) == 3 and not cells[0].startswith("#"):
            found[cells[0]] = cells[2]
    return found


def series_labels(sample: Sample) -> dict:
    """The labels a series of this sample has in Prometheus: the exporter's, and job, instance and node."""
    return {**sample.labels, "job": JOB, "instance": INSTANCE, "node": NODE}


def _labels(labels: dict) -> str:
    return ",".join(f'{k}="{v}"' for k, v in labels.items())


def _number(value: float) -> str:
    return str(int(value)) if value == int(value) else repr(value)


def exposition(sample: Sample, helps: dict) -> str:
    """One scrape of the exporter as its /metrics answers (Prometheus text format, no timestamps)."""
    out = []
    for counter, value in sample.values.items():
        out += [f"# HELP {counter} {helps[counter]}", f"# TYPE {counter} gauge"]
        out.append(f"{counter}{{{_labels(sample.labels)}}} {_number(value)}")
    return "\n".join(out) + "\n"


def openmetrics(samples: list[Sample], helps: dict) -> str:
    """Every sample as OpenMetrics with timestamps, the series as Prometheus stores them (what promtool tsdb
    create-blocks-from openmetrics backfills)."""
    out = []
    for counter in FIELDS.values():
        out += [f"# TYPE {counter} gauge", f"# HELP {counter} {helps[counter]}"]
        out += [f"{counter}{{{_labels(series_labels(s))}}} {_number(s.values[counter])} {s.at:.3f}" for s in samples]
    return "\n".join(out) + "\n# EOF\n"
