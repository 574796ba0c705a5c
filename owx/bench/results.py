"""What every benchmark reports: its parameters, figures and goals, as JSON and plots in one folder.

A bench builds one :class:`Report`, adds figures and goals as it measures, saves its
plots under :meth:`Report.plot_path`, and returns :meth:`Report.finish` as its exit code::

    report = Report("thorn", parameters={"bfd_ms": 20, "runs": 5}, control=args.control)
    report.figure("link-down outage, round trip, max", 41.2, "ms")
    report.goal("link-down outage <= 100 ms", 41.2, limit=100, unit="ms")
    return report.finish()

``control`` names the mechanism a run switched off on purpose (``None`` for a normal
run); a control run is written beside the normal one (``thorn.control-NAME.json``) and
is expected to fail its goals. ``owx bench table`` rebuilds ``README.md`` in the folder
from every JSON file there.
"""

from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

RESULTS_ENV = "OWX_BENCH_RESULTS"
DEFAULT_RESULTS = "results"


def results_dir() -> Path:
    """Where reports go: ``$OWX_BENCH_RESULTS`` or ``./results``."""
    path = Path(os.environ.get(RESULTS_ENV, DEFAULT_RESULTS))
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass(frozen=True)
class Figure:
    """One measured number (or a short text, such as the datapath driver in use)."""

    name: str
    value: float | str
    unit: str = ""


@dataclass(frozen=True)
class Goal:
    """A gate: ``value`` against ``limit``, lower is better unless ``higher_is_better``."""

    label: str
    value: float
    limit: float
    unit: str = ""
    higher_is_better: bool = False

    @property
    def passed(self) -> bool:
        return self.value >= self.limit if self.higher_is_better else self.value <= self.limit


@dataclass
class Report:
    """The figures and goals of one run of one benchmark."""

    bench: str
    parameters: dict[str, Any] = field(default_factory=dict)
    control: str | None = None
    figures: list[Figure] = field(default_factory=list)
    goals: list[Goal] = field(default_factory=list)
    started: float = field(default_factory=time.time)
    load_at_start: tuple[float, float, float] = field(default_factory=os.getloadavg)

    @property
    def stem(self) -> str:
        return self.bench if self.control is None else f"{self.bench}.control-{self.control}"

    def figure(self, name: str, value: float | str, unit: str = "") -> None:
        self.figures.append(Figure(name, value, unit))

    def goal(self, label: str, value: float, limit: float, unit: str = "", higher_is_better: bool = False) -> Goal:
        goal = Goal(label, value, limit, unit, higher_is_better)
        self.goals.append(goal)
        return goal

    def plot_path(self, name: str) -> Path:
        """Where to save plot ``name`` (a PNG beside the JSON)."""
        return results_dir() / f"{self.stem}.{name}.png"

    def finish(self) -> int:
        """Print the goals, write the JSON, and return 0 if every goal passed (1 otherwise)."""
        for goal in self.goals:
            print(f"{'PASS' if goal.passed else 'FAIL'}  {goal.label}: {_number(goal.value)} {goal.unit}".rstrip())
        path = results_dir() / f"{self.stem}.json"
        path.write_text(json.dumps(self.as_dict(), indent=1, default=str))
        print(f"report: {path}")
        return 0 if all(goal.passed for goal in self.goals) else 1

    def as_dict(self) -> dict[str, Any]:
        return {
            "bench": self.bench,
            "control": self.control,
            "parameters": self.parameters,
            "machine": {"cpus": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version(),
                        "load_at_start": [round(x, 2) for x in self.load_at_start],
                        "load_at_end": [round(x, 2) for x in os.getloadavg()]},
            "started": self.started,
            "seconds": round(time.time() - self.started, 1),
            "figures": [asdict(f) for f in self.figures],
            "goals": [{**asdict(g), "passed": g.passed} for g in self.goals],
        }


def _number(value: float) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
