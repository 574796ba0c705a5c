"""PNG plots of ``owx bench canary``, one per figure of the Canary chapter (6.3–6.10).

Runs have different sizes (the goal runs 100 invocations, the others fewer), so cost and
execution time are drawn per 100 invocations.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

LABELS = {"dynamic": "Canary (DR)", "aggressive": "Canary (AR)", "lenient": "Canary (LR)", "retry": "retry",
          "request-replication": "request replication (RR)", "active-standby": "active-standby (AS)"}


def _runs(runs: list[Any], strategy: str) -> list[Any]:
    return sorted((r for r in runs if r.strategy == strategy), key=lambda r: r.rate)


def _save(fig, out: Path, name: str) -> Path:
    path = out / name
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _by_rate(ax, runs: list[Any], strategies: list[str], value, ylabel: str) -> None:
    for strategy in strategies:
        series = _runs(runs, strategy)
        if series:
            ax.plot([r.rate * 100 for r in series], [value(r) for r in series], marker="o", label=LABELS[strategy])
    ax.set_xlabel("failure rate (%)")
    ax.set_ylabel(ylabel)
    ax.legend()
    ax.grid(alpha=0.3)


def recovery_vs_rate(runs, out: Path) -> Path:
    """Fig. 6.3: recovery time per workload as the failure rate grows (Canary vs retry)."""
    workloads = sorted({w for r in runs for w in r.recovery_s})
    fig, axes = plt.subplots(1, len(workloads), figsize=(4 * len(workloads), 3.4), sharey=True)
    for ax, workload in zip(axes, workloads):
        def mean(r, w=workload):
            values = r.recovery_s.get(w) or []
            return statistics.fmean(values) * 1000 if values else 0.0
        _by_rate(ax, runs, ["dynamic", "retry"], mean, "mean recovery time (ms)")
        ax.set_title(workload)
    return _save(fig, out, "canary_fig6_3_recovery_vs_failure_rate.png")


def recovery_at(runs, rate: float, out: Path) -> Path:
    """Fig. 6.4: recovery time per workload at one failure rate, for every strategy."""
    chosen = [r for r in runs if r.rate == rate]
    workloads = sorted({w for r in chosen for w in r.recovery_s})
    fig, ax = plt.subplots(figsize=(9, 4))
    width = 0.8 / max(1, len(chosen))
    for i, run in enumerate(chosen):
        values = [statistics.fmean(run.recovery_s[w]) * 1000 if run.recovery_s.get(w) else 0 for w in workloads]
        ax.bar([j + i * width for j in range(len(workloads))], values, width, label=LABELS[run.strategy])
    ax.set_xticks([j + width * (len(chosen) - 1) / 2 for j in range(len(workloads))], workloads)
    ax.set_ylabel("mean recovery time (ms)")
    ax.set_title(f"recovery time at {rate:.0%} failure rate")
    ax.legend(fontsize=7)
    return _save(fig, out, "canary_fig6_4_recovery_by_workload.png")


def checkpoints_effect(runs, out: Path) -> Path:
    """Fig. 6.5: what checkpoints add to replicas (Canary vs active-standby vs retry)."""
    fig, ax = plt.subplots(figsize=(6, 4))
    _by_rate(ax, runs, ["dynamic", "active-standby", "retry"], lambda r: r.mean_recovery_s * 1000,
             "mean recovery time (ms)")
    ax.set_title("replicas + checkpoints vs replicas only vs retry")
    return _save(fig, out, "canary_fig6_5_checkpoints.png")


def _per100(value):
    return lambda r: value(r) * 100 / r.invocations


def makespan(runs, baseline, out: Path) -> Path:
    """Fig. 6.6: makespan against the failure-free run."""
    fig, ax = plt.subplots(figsize=(6, 4))
    _by_rate(ax, runs, ["dynamic", "retry"], _per100(lambda r: r.makespan_s), "makespan per 100 invocations (s)")
    ax.axhline(baseline.makespan_s * 100 / baseline.invocations, color="grey", linestyle="--", label="failure-free")
    ax.legend()
    return _save(fig, out, "canary_fig6_6_makespan.png")


def cost_and_time(runs, strategies: list[str], name: str, title: str, out: Path) -> Path:
    """Figs. 6.7–6.9: dollar cost and execution time by failure rate."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    _by_rate(left, runs, strategies, _per100(lambda r: r.cost_usd), "cost per 100 invocations (USD, $0.000017/GB-s)")
    _by_rate(right, runs, strategies, _per100(lambda r: r.makespan_s), "execution time per 100 invocations (s)")
    fig.suptitle(title)
    return _save(fig, out, name)


def scaling(scaled, out: Path) -> Path:
    """Fig. 6.10: recovery time as invocations and failure rate grow together."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for strategy in ("dynamic", "retry"):
        series = sorted((r for r in scaled if r.strategy == strategy), key=lambda r: r.invocations)
        ax.plot([f"{r.invocations}\n{r.rate:.0%}" for r in series],
                [r.mean_recovery_s * 1000 for r in series], marker="o", label=LABELS[strategy])
    ax.set_xlabel("invocations / failure rate")
    ax.set_ylabel("mean recovery time (ms)")
    ax.legend()
    ax.grid(alpha=0.3)
    return _save(fig, out, "canary_fig6_10_scaling.png")


def draw(runs, scaled, baseline, out: Path) -> list[Path]:
    """Every figure; returns the written paths."""
    return [
        recovery_vs_rate(runs, out),
        recovery_at(runs, 0.15, out),
        checkpoints_effect(runs, out),
        makespan(runs, baseline, out),
        cost_and_time(runs, ["dynamic", "retry"], "canary_fig6_7_cost_canary_vs_retry.png",
                      "Canary vs retry", out),
        cost_and_time(runs, ["dynamic", "aggressive", "lenient"], "canary_fig6_8_replication_strategies.png",
                      "replication strategies", out),
        cost_and_time(runs, ["dynamic", "request-replication", "active-standby"],
                      "canary_fig6_9_vs_rr_as.png", "Canary vs request replication and active-standby", out),
        scaling(scaled, out),
    ]
