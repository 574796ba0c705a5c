"""Training data: generating synthetic sets, loading ``.npz`` files, writing shards.

Shards and evaluation sets are plain ``.npz`` files (``x`` float32 NHWC, ``y`` int32)
in the job directory, which every action reads from the shared data dir.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from owx.disdel.job import JobError, NpzDataset, SyntheticDataset


@dataclass(frozen=True)
class DatasetInfo:
    """What the estimator needs to know about a dataset without loading it."""

    samples: int
    shape: tuple[int, int, int]
    classes: int

    @property
    def sample_bytes(self) -> int:
        """Bytes of one sample in memory: float32 pixels plus an int32 label."""
        h, w, c = self.shape
        return h * w * c * 4 + 4


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


def load_npz(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """``x`` and ``y`` from a dataset file, checked for shape and label type."""
    try:
        with np.load(path) as archive:
            if "x" not in archive or "y" not in archive:
                raise JobError(f"{path}: a dataset file needs arrays 'x' and 'y', found {sorted(archive.files)}")
            x, y = archive["x"], archive["y"]
    except (OSError, ValueError) as exc:
        raise JobError(f"{path}: not a readable .npz dataset ({exc})") from None
    if x.ndim == 3:
        x = x[..., None]
    if x.ndim != 4 or y.ndim != 1 or len(x) != len(y):
        raise JobError(f"{path}: need x of shape (N, H, W[, C]) and y of shape (N,), got {x.shape} and {y.shape}")
    if not np.issubdtype(y.dtype, np.integer) or y.min() < 0:
        raise JobError(f"{path}: labels y must be non-negative integers")
    return x.astype(np.float32, copy=False), y.astype(np.int32, copy=False)


def load(spec: SyntheticDataset | NpzDataset) -> tuple[np.ndarray, np.ndarray]:
    return synthetic(spec) if isinstance(spec, SyntheticDataset) else load_npz(spec.path)


def describe(spec: SyntheticDataset | NpzDataset) -> DatasetInfo:
    """Size, sample shape and class count, reading only the labels of an ``.npz`` file."""
    if isinstance(spec, SyntheticDataset):
        return DatasetInfo(spec.samples, spec.shape, spec.classes)
    x, y = load_npz(spec.path)
    return DatasetInfo(len(y), tuple(int(d) for d in x.shape[1:]), int(y.max()) + 1)  # type: ignore[arg-type]


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
    """Write atomically and world-readable (actions may run as another user)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, x=x, y=y)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    return path


def write_shards(x: np.ndarray, y: np.ndarray, shards: int, directory: Path) -> list[tuple[Path, int]]:
    """Split into ``shards`` equal parts; returns (path, samples) per shard."""
    out = []
    for index, (start, end) in enumerate(shard_bounds(len(y), shards)):
        out.append((write_npz(directory / f"shard-{index}.npz", x[start:end], y[start:end]), end - start))
    return out
