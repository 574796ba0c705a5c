"""Training data: generating synthetic sets, describing a dataset, writing shards.

Shards and evaluation sets are plain ``.npz`` files (``x`` (N, ...), ``y`` int32 classes or float32 targets)
in the job directory, which every action reads from the shared data dir.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from owx.disdel.job import SyntheticDataset
from owx.disdel.shared_files import write_shared


@dataclass(frozen=True)
class DatasetInfo:
    """What the estimator needs to know about a dataset: its size and one sample's bytes."""

    samples: int
    shape: tuple[int, ...]
    classes: int | None
    sample_bytes: int

    @classmethod
    def of(cls, x: np.ndarray, y: np.ndarray) -> "DatasetInfo":
        from owx.disdel.datasets import classes_of

        return cls(len(y), tuple(int(d) for d in x.shape[1:]), classes_of(y), x[:1].nbytes + y[:1].nbytes)


def synthetic(spec: SyntheticDataset) -> tuple[np.ndarray, np.ndarray]:
    """A learnable dataset: each class is a smooth random prototype plus Gaussian noise."""
    rng = np.random.default_rng(spec.seed)
    h, w, c = spec.shape
    coarse = rng.uniform(0.0, 1.0, size=(spec.classes, max(2, h // 4), max(2, w // 4), c)).astype(np.float32)
    prototypes = np.repeat(np.repeat(coarse, -(-h // coarse.shape[1]), axis=1), -(-w // coarse.shape[2]), axis=2)
    prototypes = prototypes[:, :h, :w, :]
    y = rng.integers(0, spec.classes, size=spec.samples, dtype=np.int32)
    x = prototypes[y] + rng.normal(0.0, spec.noise, size=(spec.samples, h, w, c)).astype(np.float32)
    return x.astype(np.float32, copy=False), y


def load(spec: object) -> tuple[np.ndarray, np.ndarray]:
    from owx.disdel.datasets import read

    return read(spec)


def describe(spec: object) -> DatasetInfo:
    """Size, sample shape and classes (a synthetic set without generating it)."""
    if isinstance(spec, SyntheticDataset):
        h, w, c = spec.shape
        return DatasetInfo(spec.samples, spec.shape, spec.classes, h * w * c * 4 + 4)
    return DatasetInfo.of(*load(spec))


def shard_bounds(samples: int, shards: int) -> list[tuple[int, int]]:
    """Equal contiguous ranges (sizes differ by at most one)."""
    base, extra = divmod(samples, shards)
    bounds, start = [], 0
    for index in range(shards):
        end = start + base + (1 if index < extra else 0)
        bounds.append((start, end))
        start = end
    return bounds


def write_npz(path: str | Path, x: np.ndarray, y: np.ndarray) -> Path:
    """Write atomically and world-readable (:func:`~owx.disdel.shared_files.write_shared`)."""
    return write_shared(path, lambda tmp: np.savez(tmp, x=x, y=y))


def write_shards(x: np.ndarray, y: np.ndarray, shards: int, directory: Path) -> list[tuple[Path, int]]:
    """Split into ``shards`` equal parts; returns (path, samples) per shard."""
    out = []
    for index, (start, end) in enumerate(shard_bounds(len(y), shards)):
        out.append((write_npz(directory / f"shard-{index}.npz", x[start:end], y[start:end]), end - start))
    return out
