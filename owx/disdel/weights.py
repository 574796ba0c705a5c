"""Model weights as ``.npz`` files (arrays ``w0 … wN`` in ``model.get_weights()`` order)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from owx.disdel.shared_files import write_shared


def save(path: str | Path, weights: Sequence[np.ndarray]) -> Path:
    """Write atomically and world-readable (:func:`~owx.disdel.shared_files.write_shared`)."""
    return write_shared(path, lambda tmp: np.savez(tmp, **{f"w{i}": np.asarray(w) for i, w in enumerate(weights)}))


def load(path: str | Path) -> list[np.ndarray]:
    with np.load(path) as archive:
        return [archive[f"w{i}"] for i in range(len(archive.files))]


def weighted_average(models: Sequence[Sequence[np.ndarray]], samples: Sequence[int]) -> list[np.ndarray]:
    """Per-tensor average of ``models`` weighted by the samples each was trained on."""
    if not models or len(models) != len(samples):
        raise ValueError("need one sample count per model and at least one model")
    shapes = [tuple(w.shape for w in m) for m in models]
    if any(s != shapes[0] for s in shapes):
        raise ValueError("cannot average models whose weight shapes differ")
    total = float(sum(samples))
    out = []
    for tensors in zip(*models):
        acc = np.zeros(tensors[0].shape, dtype=np.float64)
        for tensor, count in zip(tensors, samples):
            acc += tensor.astype(np.float64) * (count / total)
        out.append(acc.astype(tensors[0].dtype))
    return out
