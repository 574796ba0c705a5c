"""``owx bench table``: one Markdown table of every report in the results folder (``README.md`` there)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from owx.bench.results import results_dir

LOAD_FIGURE = "load average (1, 5, 15 min) at start"


def main(argv: list[str] | None = None) -> int:
    """Write ``README.md`` in the results folder and print it."""
    folder = results_dir()
    text = render(_reports(folder))
    (folder / "README.md").write_text(text)
    print(text)
    return 0


def render(reports: list[dict[str, Any]]) -> str:
    """The table: a row per goal of every report, normal runs first, then the controls."""
    lines = ["# Benchmark results", "",
             "Written by `owx bench table` from the JSON reports beside it. A control run switches the",
             "mechanism off on purpose and is expected to FAIL. Figures measured on one machine prove",
             "nothing on another: read the ratios, and the load the machine was under.", "",
             "| bench | run | goal | value | result | when | load at start |", "|---|---|---|---|---|---|---|"]
    for report in sorted(reports, key=lambda r: (r["bench"], r.get("control") or "")):
        when = time.strftime("%Y-%m-%d %H:%M", time.gmtime(report.get("started", 0)))
        load = " ".join(map(str, report.get("machine", {}).get("load_at_start", ()))) or next(
            (f["value"] for f in report.get("figures", ()) if f["name"] == LOAD_FIGURE), "")
        run = f"control: {report['control']}" if report.get("control") else "normal"
        for goal in report.get("goals", ()):
            value = f"{goal['value']:.4g} {goal.get('unit', '')}".strip() if isinstance(goal["value"], float) \
                else f"{goal['value']} {goal.get('unit', '')}".strip()
            verdict = "PASS" if goal["passed"] else "FAIL"
            lines.append(f"| {report['bench']} | {run} | {goal['label']} | {value} | {verdict} | {when} | {load} |")
        if not report.get("goals"):
            lines.append(f"| {report['bench']} | {run} | (no goals) | | | {when} | {load} |")
    return "\n".join(lines) + "\n"


def _reports(folder: Path) -> list[dict[str, Any]]:
    found = []
    for path in sorted(folder.glob("*.json")):
        try:
            report = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(report, dict) and "bench" in report and "goals" in report:
            found.append(report)
    return found
