"""Escra against static limits: two applications with the same budget under the same load, side by side.

Both applications run at the same time on the same node with the same clients
(shape, seeds, start instant), so whatever else loads the machine loads both.
Each has ``CONTAINERS`` containers and a CPU budget of 1.5× their mean demand
(the paper's "safe buffer" over a profile that averages demand over the run):

* **static** splits the budget equally, as a developer sets per-container
  limits: the containers' long-run demand is equal by construction, so no
  other fixed split does better; memory gets a limit no request mix reaches;
* **Escra** gets the same CPU and memory as one application-wide budget and
  moves it between containers every 100 ms.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from owx.bench.escra.stack import EscraStack
from owx.bench.escra.workload import ActionContainer, Answered, App, ClosedLoad, Sampler, Shape, Tick

from owx.common.cgroups import CFS_PERIOD_US, Cgroup

MIB = 1 << 20
CONTAINERS = 3
BUDGET_FACTOR = 1.5
STATIC_MEMORY_MIB = 512  # above what 12 workers with the largest requests (32 MiB) touch


@dataclass
class AppRun:
    """What one application's clients saw and what its containers were allowed and used."""

    name: str
    start: float
    duration_s: float
    answered: list[Answered]
    failed: int
    ticks: list[list[Tick]]  # per container
    oom_kills: int

    def _window(self) -> list[Tick]:
        return [t for series in self.ticks for t in series if 0 <= t.t <= self.duration_s]

    def throughput(self) -> float:
        """Requests answered per second within the run."""
        return sum(a.done <= self.start + self.duration_s for a in self.answered) / self.duration_s

    def latency_ms(self, q: float) -> float:
        return percentile([a.latency_ms for a in self.answered], q) if self.answered else float("inf")

    def cpu_slack(self) -> list[float]:
        """Limit minus usage, cores, per container and 100 ms tick (never below 0, see :func:`slack`)."""
        return [slack(t) for t in self._window()]

    def memory_slack_mib(self) -> list[float]:
        return [(t.mem_limit - t.mem_usage) / MIB for t in self._window()]

    def mean_cores(self) -> tuple[float, float]:
        """(allocated, used): the application's summed limits and usage, averaged over the run."""
        ticks = self._window()
        periods = len(ticks) / max(1, len(self.ticks))
        return sum(t.quota_cores for t in ticks) / periods, sum(t.used_cores for t in ticks) / periods


def percentile(values, q: float) -> float:
    """The ``q``-th percentile, a value that occurred (so an infinite one stays infinite); NaN if none."""
    return float(np.percentile(values, q, method="higher")) if len(values) else float("nan")


def slack(tick: Tick) -> float:
    """Unused CPU allocation of one tick, cores.

    A 100 ms sample straddles two CFS periods, so it can hold up to two periods'
    quota of usage: usage above the limit is that misalignment, and counts as no slack.
    """
    return max(0.0, tick.quota_cores - tick.used_cores)


def budget_cores(shape: Shape) -> float:
    return BUDGET_FACTOR * shape.mean_demand_cores() * CONTAINERS


def compare(shape: Shape, duration_s: float, run: str, node: str, controller_args: tuple[str, ...] = (),
            seed: int = 7) -> dict[str, AppRun]:
    """One closed-loop run of ``shape`` against an Escra application and a static one."""
    budget = budget_cores(shape)
    static_quota = int(budget / CONTAINERS * CFS_PERIOD_US)
    escra, static, stack = [], [], None
    try:
        for index in range(CONTAINERS):
            escra.append(ActionContainer(Cgroup(f"{run}/{node}/c{index}"), shape.clients))
            group = Cgroup(f"{run}/static/c{index}").create()
            group.set_cpu_quota(static_quota)
            group.set_memory_limit(STATIC_MEMORY_MIB * MIB)
            static.append(ActionContainer(group, shape.clients))
        app = f"name=bench,cpu={budget:.4f},memory-mb={STATIC_MEMORY_MIB * CONTAINERS},containers={CONTAINERS}"
        stack = EscraStack(run, node, app, controller_args=controller_args)
        stack.wait_managed(CONTAINERS)
        apps = [App("escra", escra), App("static", static)]
        start = time.monotonic() + 1.0
        sampler = Sampler([c.group for c in escra + static]).start(start)
        ClosedLoad(shape, apps, duration_s, seed).run(start)
        sampler.stop()
        return {
            app.name: AppRun(app.name, start, duration_s, app.answered, app.failed,
                             sampler.ticks[i * CONTAINERS:(i + 1) * CONTAINERS],
                             sum(c.group.memory().oom_kills for c in app.containers))
            for i, app in enumerate(apps)
        }
    finally:
        if stack is not None:
            stack.close()
        for container in escra + static:
            container.close()
