"""`nodeforge validate`'s reports: the per-node table on the console, JSON (every result), JUnit XML (one testcase per
node and check), an HTML summary (per-node grid, bandwidth bars against their thresholds as inline SVG) and the
Prometheus text format for node_exporter's textfile collector (per node and check, and when).

The check results come from role validate's "Report the acceptance checks" task through the runner
(RunResult.acceptance): {check, status pass|fail|na, measured, expected, reason, unit}. A host the run did not finish
(unreachable, or failed before its report) gets one 'error' entry named "run" with the run's own message.
"""

from __future__ import annotations

import html
import json
import xml.etree.ElementTree as ET
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from nodeforge import report as json_report
from nodeforge.runner import EXIT_ERROR, EXIT_HOST_FAILED, EXIT_OK, RunResult

STATUS_STYLES = {"pass": "green", "fail": "red", "na": "dim", "error": "magenta"}
# Checks whose measurement is a bandwidth compared with a floor: drawn as bars in the HTML summary.
BANDWIDTH_UNITS = ("MB/s", "GB/s")


def _host_status(checks: list[dict], unreachable: bool, error: bool) -> str:
    if unreachable:
        return "unreachable"
    if error:
        return "error"
    return "failed" if any(c.get("status") == "fail" for c in checks) else "passed"


def payload(result: RunResult, warnings: Any = (), files: Any = ()) -> dict[str, Any]:
    """Every host's results, its status and counts, and the run's summary: what --json writes (report.json_payload's
    shape: hosts are each host's checks here; the check's warnings, the reports written)."""
    hosts: dict[str, Any] = {}
    problem_hosts = {h for h, c in result.hosts.items() if c.get("failed") or c.get("unreachable")}
    for host in sorted(set(result.acceptance) | problem_hosts):
        checks = list(result.acceptance.get(host, []))
        unreachable = bool(result.hosts.get(host, {}).get("unreachable"))
        error = host not in result.acceptance
        if error:
            messages = [f"{f.task}: {f.message}" for f in result.failures if f.host == host]
            reason = "; ".join(messages) or "the run ended before this host's acceptance report"
            checks = [
                {"check": "run", "status": "error", "measured": None, "expected": None, "reason": reason, "unit": None}
            ]
        counts = {s: sum(1 for c in checks if c.get("status") == s) for s in ("pass", "fail", "na", "error")}
        hosts[host] = {"status": _host_status(checks, unreachable, error), "counts": counts, "checks": checks}
    failed = any(h["status"] != "passed" for h in hosts.values())
    return json_report.json_payload(
        "failed" if failed or result.exit_code != EXIT_OK or not hosts else "passed",
        exit_code(result, hosts),
        warnings=warnings,
        notices=json_report.run_notices(result.notices),
        files=files,
        hosts=hosts,
        failures=[f.__dict__ for f in result.failures],
        run={
            "playbook": result.playbook,
            "status": result.status,
            "duration_s": round(result.duration_s, 2),
            "artifacts": result.artifacts,
            "error": result.error,
        },
    )


def exit_code(result: RunResult, hosts: dict[str, Any]) -> int:
    """The run's own exit code; a failed check or a host without results is never 0, nor is a run with no host."""
    code = result.exit_code
    if code == EXIT_OK and any(h["status"] != "passed" for h in hosts.values()):
        return EXIT_HOST_FAILED
    if code == EXIT_OK and not hosts:
        return EXIT_ERROR
    return code


def _cell(value: Any, unit: str | None = None) -> str:
    if value is None:
        return "-"
    return f"{value} {unit}" if unit else str(value)


def _measured_expected(c: dict) -> tuple[str, str]:
    return _cell(c.get("measured"), c.get("unit")), _cell(c.get("expected"), c.get("unit"))


def print_table(console: Console, report: dict[str, Any], verb: str = "validate") -> None:
    """One table per node: check, status, measured, expected, reason; then the verb's verdict."""
    for host, entry in report["hosts"].items():
        counts = entry["counts"]
        title = (
            f"{host}: {entry['status']} ({counts['pass']} pass, {counts['fail']} fail, {counts['na']} not applicable"
            + (f", {counts['error']} error" if counts["error"] else "")
            + ")"
        )
        table = Table(title=escape(title), title_justify="left", show_lines=False)
        for name in ("check", "status", "measured", "expected", "reason"):
            table.add_column(name, overflow="fold", no_wrap=name in ("check", "status"))
        for c in entry["checks"]:
            status = str(c.get("status"))
            measured, expected = _measured_expected(c)
            table.add_row(
                escape(str(c.get("check"))),
                f"[{STATUS_STYLES.get(status, 'default')}]{escape(status)}[/]",
                escape(measured),
                escape(expected),
                escape(str(c.get("reason") or "")),
            )
        console.print(table)
    status = report["status"]
    style = "green" if status == "passed" else "red"
    console.print(
        f"[{style}]{escape(verb)} {status}[/]: {len(report['hosts'])} node(s); artifacts: {report['run']['artifacts']}"
    )


def json_text(report: dict[str, Any]) -> str:
    """What --json FILE holds (the CLI writes it: plugin_utils/safe_write.py)."""
    return json.dumps(report, indent=2, sort_keys=True) + "\n"


def junit(report: dict[str, Any], verb: str = "validate") -> str:
    """JUnit XML: a testsuite per node, a testcase per check (classname nodeforge.validate.<node>); a failed check
    is a <failure>, a check that does not apply is <skipped> with its reason, a host without results an <error>."""
    suites = ET.Element("testsuites", name=f"nodeforge {verb}")
    totals = dict.fromkeys(("tests", "failures", "skipped", "errors"), 0)
    for host, entry in report["hosts"].items():
        counts = entry["counts"]
        numbers = {
            "tests": len(entry["checks"]),
            "failures": counts["fail"],
            "skipped": counts["na"],
            "errors": counts["error"],
        }
        suite = ET.SubElement(suites, "testsuite", name=host, **{k: str(v) for k, v in numbers.items()})
        for key, value in numbers.items():
            totals[key] += value
        for c in entry["checks"]:
            case = ET.SubElement(suite, "testcase", classname=f"nodeforge.validate.{host}", name=str(c.get("check")))
            measured, expected = _measured_expected(c)
            detail = f"measured: {measured}; expected: {expected}"
            reason = str(c.get("reason") or "")
            if c.get("status") == "fail":
                ET.SubElement(case, "failure", message=reason or detail, type="fail").text = detail
            elif c.get("status") == "na":
                ET.SubElement(case, "skipped", message=reason)
            elif c.get("status") == "error":
                ET.SubElement(case, "error", message=reason, type="error").text = reason
            else:
                ET.SubElement(case, "system-out").text = f"{detail}; {reason}" if reason else detail
    for key, value in totals.items():
        suites.set(key, str(value))
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


# `--textfile DIR` writes this file (one for every node of the run: node names never become file names).
TEXTFILE_NAME = "nodeforge-validate.prom"
STATUSES = ("pass", "fail", "na", "error")
_METRICS = {
    "nodeforge_validate_check_status": "One series per node, check and status: 1 for the check's status in the last "
    "run, 0 for the others.",
    "nodeforge_validate_check_measured": "What the check measured, where it is a number (the unit label says in what).",
    "nodeforge_validate_checks": "The node's checks in the last run, by status.",
    "nodeforge_validate_node_passed": "1 when every check of the node passed or does not apply, 0 when one failed or "
    "the node was not validated (unreachable, or its run stopped).",
    "nodeforge_validate_last_run_timestamp_seconds": "When the last run's results were written, in Unix time.",
}


def _label(value: Any) -> str:
    """A label value as the text format quotes it: backslash, double quote and line feed escaped."""
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _sample(name: str, labels: dict[str, Any], value: float) -> str:
    inside = ",".join(f'{key}="{_label(v)}"' for key, v in labels.items())
    return f"{name}{{{inside}}} {value!r}"


def textfile(report: dict[str, Any], written_at: float) -> str:
    """The report in Prometheus' text exposition format (version 0.0.4), for node_exporter's textfile collector: every
    node's checks (a series per status, the measured number where there is one), its counts, whether it passed, and
    written_at. Labels: node (the inventory name), check, status, unit. No sample carries a timestamp: the collector
    refuses them."""
    samples: dict[str, list[str]] = {name: [] for name in _METRICS}
    for node, entry in report["hosts"].items():
        for c in entry["checks"]:
            for status in STATUSES:
                labels = {"node": node, "check": c.get("check"), "status": status}
                samples["nodeforge_validate_check_status"].append(
                    _sample("nodeforge_validate_check_status", labels, 1.0 if c.get("status") == status else 0.0)
                )
            measured = c.get("measured")
            if isinstance(measured, (int, float)) and not isinstance(measured, bool):
                labels = {"node": node, "check": c.get("check"), "unit": c.get("unit") or ""}
                samples["nodeforge_validate_check_measured"].append(
                    _sample("nodeforge_validate_check_measured", labels, float(measured))
                )
        for status in STATUSES:
            samples["nodeforge_validate_checks"].append(
                _sample("nodeforge_validate_checks", {"node": node, "status": status}, float(entry["counts"][status]))
            )
        passed = 1.0 if entry["status"] == "passed" else 0.0
        samples["nodeforge_validate_node_passed"].append(
            _sample("nodeforge_validate_node_passed", {"node": node}, passed)
        )
        samples["nodeforge_validate_last_run_timestamp_seconds"].append(
            _sample("nodeforge_validate_last_run_timestamp_seconds", {"node": node}, float(written_at))
        )
    lines = []
    for name, help_text in _METRICS.items():
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", *samples[name]]
    return "\n".join(lines) + "\n"


_CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}
th,td{border:1px solid #ccc;padding:.25em .5em;text-align:left;vertical-align:top;font-size:90%}
th.check{writing-mode:vertical-rl;transform:rotate(180deg);white-space:nowrap}
td.pass{background:#c8f0c8}td.fail{background:#f6b8b8;font-weight:bold}td.na{background:#eee;color:#777}
td.error{background:#e8c0f0;font-weight:bold}
.passed{color:#186018}.failed,.error,.unreachable{color:#a01010}
"""


def _bar(measured: float, threshold: float, unit: str) -> str:
    """A horizontal bar of the measurement against its floor (a vertical line), as inline SVG."""
    width, height = 320, 18
    scale = max(measured, threshold) * 1.15 or 1.0
    bar = max(1.0, measured / scale * width)
    line = threshold / scale * width
    color = "#3a9a3a" if measured >= threshold else "#c03030"
    label = html.escape(f"{measured:g} {unit} (floor {threshold:g})")
    return (
        f'<svg width="{width + 200}" height="{height}" role="img" aria-label="{label}">'
        f'<rect x="0" y="2" width="{bar:.1f}" height="{height - 4}" fill="{color}"/>'
        f'<line x1="{line:.1f}" y1="0" x2="{line:.1f}" y2="{height}" stroke="#000" stroke-width="2"/>'
        f'<text x="{width + 6}" y="{height - 5}" font-size="12">{label}</text></svg>'
    )


def html_report(report: dict[str, Any], verb: str = "validate") -> str:
    """One self-contained page: the status per node, a grid of nodes x checks, the bandwidth bars, every result."""
    esc = html.escape
    checks: list[str] = []
    for entry in report["hosts"].values():
        for c in entry["checks"]:
            if c["check"] not in checks:
                checks.append(str(c["check"]))
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><title>nodeforge ' + esc(verb) + "</title>",
        f"<style>{_CSS}</style></head><body>",
        f'<h1>nodeforge {esc(verb)}: <span class="{esc(report["status"])}">{esc(report["status"])}</span></h1>',
        f"<p>{len(report['hosts'])} node(s), run {esc(str(report['run']['status']))} in "
        f"{report['run']['duration_s']} s</p>",
        "<h2>Nodes and checks</h2>",
        '<table class="grid"><tr><th>node</th>',
    ]
    out += [f'<th class="check">{esc(name)}</th>' for name in checks]
    out.append("</tr>")
    for host, entry in report["hosts"].items():
        by_name = {str(c["check"]): c for c in entry["checks"]}
        out.append(f'<tr><th class="{esc(entry["status"])}">{esc(host)}</th>')
        for name in checks:
            c = by_name.get(name)
            if c is None:
                out.append("<td></td>")
                continue
            status = str(c.get("status"))
            measured, expected = _measured_expected(c)
            tip = f"{name}: {measured} (expected {expected})"
            tip += f" - {c['reason']}" if c.get("reason") else ""
            out.append(f'<td class="{esc(status)}" title="{esc(tip)}">{esc(status)}</td>')
        out.append("</tr>")
    out.append("</table>")
    bars = [
        (host, c)
        for host, entry in report["hosts"].items()
        for c in entry["checks"]
        if c.get("unit") in BANDWIDTH_UNITS
        and isinstance(c.get("measured"), (int, float))
        and isinstance(c.get("expected"), (int, float))
    ]
    if bars:
        out.append("<h2>Bandwidth against the thresholds</h2><table>")
        for host, c in bars:
            out.append(
                f"<tr><td>{esc(host)}</td><td>{esc(str(c['check']))}</td>"
                f"<td>{_bar(float(c['measured']), float(c['expected']), str(c['unit']))}</td></tr>"
            )
        out.append("</table>")
    for host, entry in report["hosts"].items():
        out.append(f'<h2>{esc(host)}: <span class="{esc(entry["status"])}">{esc(entry["status"])}</span></h2>')
        out.append("<table><tr><th>check</th><th>status</th><th>measured</th><th>expected</th><th>reason</th></tr>")
        for c in entry["checks"]:
            status = str(c.get("status"))
            measured, expected = _measured_expected(c)
            out.append(
                f'<tr><td>{esc(str(c["check"]))}</td><td class="{esc(status)}">{esc(status)}</td>'
                f"<td>{esc(measured)}</td><td>{esc(expected)}</td><td>{esc(str(c.get('reason') or ''))}</td></tr>"
            )
        out.append("</table>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"
