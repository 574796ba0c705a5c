"""PNG plots of ``owx bench escra``, after the Escra chapter's figures (2.2, 2.6–2.8)."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"escra": "tab:blue", "static": "tab:orange"}


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _cdf(ax, values, label: str, color: str | None = None) -> None:
    ordered = np.sort(np.asarray(values, dtype=float))
    if len(ordered):
        ax.plot(ordered, np.arange(1, len(ordered) + 1) / len(ordered), label=label, color=color)


def tracking(ticks, demand: list[tuple[float, int]], path: Path) -> Path:
    """Fig. 2.2: one container's Escra CPU limit following a demand that steps between 1 and 2 cores."""
    fig, ax = plt.subplots(figsize=(9, 3.5))
    ax.plot([t.t for t in ticks], [t.quota_cores for t in ticks], label="Escra CPU limit")
    ax.plot([t.t for t in ticks], [t.used_cores for t in ticks], label="CPU usage")
    ax.step([t for t, _ in demand], [n for _, n in demand], where="post", linestyle=":", color="grey",
            label="demand (busy processes; the node is shared)")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("cores")
    ax.set_title("Escra CPU tracking (demand steps between 1 and 2 busy cores)")
    ax.set_ylim(0, 2.6)
    ax.legend(loc="upper left", ncol=3, fontsize="small")
    return _save(fig, path)


def timeline(runs: dict, static_cores: float, duration_s: float, path: Path) -> Path:
    """Each Escra container's limit and usage, the static limit, and both applications' throughput per second."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    for index, ticks in enumerate(runs["escra"].ticks):
        line, = top.plot([t.t for t in ticks], [t.quota_cores for t in ticks], label=f"c{index} Escra limit")
        top.plot([t.t for t in ticks], [t.used_cores for t in ticks], linestyle=":", color=line.get_color(),
                 label=f"c{index} usage")
    top.axhline(static_cores, color=COLORS["static"], linestyle="--", label="static limit (each container)")
    top.set_ylabel("cores")
    top.set_title("Escra: per-container CPU limit (solid) and usage (dotted)")
    top.legend(ncol=4, fontsize="x-small", loc="upper right")
    bins = np.arange(0, duration_s + 1)
    for name, run in runs.items():
        done = [a.done - run.start for a in run.answered]
        counts, _ = np.histogram(done, bins=bins)
        bottom.step(bins[:-1], counts, where="post", label=name, color=COLORS[name])
    bottom.set_xlabel("time (s)")
    bottom.set_ylabel("requests answered / s")
    bottom.set_title("closed-loop throughput")
    bottom.legend()
    return _save(fig, path)


def cdfs(runs: dict, path: Path) -> Path:
    """Figs. 2.6–2.8: CDFs of request latency, per-container CPU slack and memory slack."""
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for name, run in runs.items():
        _cdf(axes[0], [a.latency_ms for a in run.answered], name, COLORS[name])
        _cdf(axes[1], run.cpu_slack(), name, COLORS[name])
        _cdf(axes[2], run.memory_slack_mib(), name, COLORS[name])
    for ax, label in zip(axes, ("request latency (ms)", "CPU slack (cores)", "memory slack (MiB)")):
        ax.set_xlabel(label)
        ax.set_ylabel("CDF")
        ax.grid(alpha=0.3)
        ax.legend()
    axes[0].set_xscale("log")
    return _save(fig, path)


def rescue(episodes, path: Path) -> Path:
    """OOM rescue: kernel event → task running again, beside the agent's own wake-up and write."""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    _cdf(ax, [e.rescue_ms for e in episodes if e.resumed_ns], "kernel event → task runs (gated)")
    _cdf(ax, [e.stall_ms for e in episodes if e.resumed_ns], "task's stall (last → first progress)")
    _cdf(ax, [e.agent_wake_ms() for e in episodes if e.agent_woke_ns], "kernel event → agent wakes")
    _cdf(ax, [e.agent_write_ms() for e in episodes if e.raised_ns], "agent wakes → limit written")
    survived = sum(1 for e in episodes if e.resumed_ns)
    ax.set_xlabel("ms")
    ax.set_ylabel("CDF")
    ax.set_title(f"OOM rescue: {len(episodes)} events, the task survived {survived}")
    ax.grid(alpha=0.3)
    if survived:
        ax.legend(fontsize="small")
    return _save(fig, path)
