"""Memory over time of the benchmark's environments (the thesis' figure 4.5 style)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

MB = 1024 * 1024


def memory_over_time(panels: dict[str, list[tuple[float, int, str]]], marks: dict[str, list[tuple[float, str]]],
                     path: Path) -> Path:
    """One panel per environment: every container's memory and, with several, their sum."""
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), sharey=True)
    axes = axes if len(panels) > 1 else [axes]
    for ax, (title, samples) in zip(axes, panels.items()):
        if not samples:
            continue
        t0 = min([t for t, _, _ in samples] + [t for t, _ in marks.get(title, [])])
        by_series: dict[str, list[tuple[float, int]]] = defaultdict(list)
        for t, b, name in samples:
            by_series[name].append((t - t0, b))
        for name, points in sorted(by_series.items()):
            points.sort()
            ax.plot([p[0] for p in points], [p[1] / MB for p in points], label=name, linewidth=1)
        if len(by_series) > 1:
            grid = sorted({round(t, 1) for points in by_series.values() for t, _ in points})
            total = []
            for t in grid:
                total.append(sum(next((b for s, b in reversed(points) if s <= t), 0) for points in by_series.values()
                                 if points[0][0] <= t <= points[-1][0]) / MB)
            ax.plot(grid, total, color="black", linestyle="--", label="sum of containers")
        for t, label in marks.get(title, []):
            ax.axvline(t - t0, color="grey", linestyle=":", linewidth=0.8)
            ax.text(t - t0, ax.get_ylim()[1] * 0.02, label, rotation=90, fontsize=7, va="bottom")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("seconds since submission")
        ax.legend(fontsize=6, loc="upper left")
    axes[0].set_ylabel("memory (MiB, cgroup usage)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
