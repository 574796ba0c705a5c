"""The THORN bench's plots (matplotlib, PNG into the results folder)."""

from __future__ import annotations

from pathlib import Path

from owx.bench.thorn.outages import FAULTS, OutageResult
from owx.bench.thorn.throughput import PLAIN, ThroughputResult


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_outages(result: OutageResult, path: Path) -> None:
    """Per fault: THORN's round-trip outage, the pair's stall over THORN, the restart baseline (log ms)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(11, 5))
    series = (("round_trip_ms", "THORN: round-trip outage (probe, all flows)", "tab:green", -0.2),
              ("pair_stall_ms", "THORN: TCP pair stall (no reconnect)", "tab:blue", 0.0),
              ("baseline_resume_ms", "no THORN: pair bound to a NIC, time to resume", "tab:red", 0.2))
    names = [n for n in FAULTS if n in result.per_fault]
    for key, label, color, dx in series:
        xs = [i + dx for i, n in enumerate(names) for _ in result.per_fault[n][key]]
        ys = [max(v, 1.0) for n in names for v in result.per_fault[n][key]]
        ax.scatter(xs, ys, color=color, label=label, s=18)
    for i, name in enumerate(names):
        ax.hlines(FAULTS[name][2], i - 0.35, i + 0.35, color="black", linestyles="dashed",
                  label="goal" if i == 0 else None)
    ax.set_xticks(range(len(names)), names)
    ax.set_yscale("log")
    ax.set_ylabel("ms (log)")
    ax.set_title("Disruption per fault, every run")
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_throughput(result: ThroughputResult, path: Path) -> None:
    """Per round: THORN's datapath, the plain bridge/FDB datapath, the underlay."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    rounds = range(len(result.thorn_gbps))
    for dx, values, label in ((-0.25, result.thorn_gbps, f"THORN ({result.driver})"),
                              (0.0, result.plain_gbps, f"plain bridge + VXLAN FDB ({PLAIN})"),
                              (0.25, result.underlay_gbps, "underlay, no overlay")):
        ax.bar([r + dx for r in rounds], values, width=0.25, label=label)
    ax.set_xticks(list(rounds), [f"round {r + 1}" for r in rounds])
    ax.set_ylabel("Gbit/s (one TCP stream, unshaped veths)")
    ax.set_title(f"Overlay throughput: THORN / plain = {result.ratio:.3f}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
