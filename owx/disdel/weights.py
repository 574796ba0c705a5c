"""Model snapshots as ``.npz`` files.

A snapshot holds the weights (arrays ``w0 … wN`` in ``model.get_weights()`` order) and,
optionally, the optimizer's variables (``o0 … oM`` in ``model.optimizer.variables``
order) and which weights are trainable (``trainable``, one flag per weight).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np


class Snapshot(NamedTuple):
    """What one round leaves the next of a model: its weights and, maybe, its optimizer state."""

    weights: list[np.ndarray]
    optimizer: list[np.ndarray]  # empty: none saved (the next round starts a fresh optimizer)
    trainable: list[bool]  # one flag per weight; empty: not known


def save(path: str | Path, weights: Sequence[np.ndarray], optimizer: Sequence[np.ndarray] = (),
         trainable: Sequence[bool] = ()) -> Path:
    """Write atomically and world-readable (actions may run as another user). Several
    processes may write the same snapshot to the same path at once: each uses its own
    temporary file."""
    path = Path(path)
    tmp = path.with_name(f"{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp.npz")
    arrays = {f"w{i}": np.asarray(w) for i, w in enumerate(weights)}
    arrays |= {f"o{i}": np.asarray(v) for i, v in enumerate(optimizer)}
    if trainable:
        arrays["trainable"] = np.asarray(trainable, dtype=bool)
    try:
        np.savez(tmp, **arrays)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def _numbered(archive: np.lib.npyio.NpzFile, prefix: str) -> list[np.ndarray]:
    count = sum(1 for name in archive.files if name[0] == prefix and name[1:].isdigit())
    return [archive[f"{prefix}{i}"] for i in range(count)]


def load(path: str | Path) -> list[np.ndarray]:
    """The weights of the snapshot at ``path``."""
    with np.load(path) as archive:
        return _numbered(archive, "w")


def load_snapshot(path: str | Path) -> Snapshot:
    with np.load(path) as archive:
        trainable = archive["trainable"].tolist() if "trainable" in archive.files else []
        return Snapshot(_numbered(archive, "w"), _numbered(archive, "o"), trainable)


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


def average(snapshots: Sequence[Snapshot], samples: Sequence[int]) -> Snapshot:
    """Weights and optimizer state averaged by samples. The optimizer state is kept only when
    every snapshot has one of the same shapes (the job's trainers all carried theirs)."""
    weights = weighted_average([s.weights for s in snapshots], samples)
    states = [s.optimizer for s in snapshots]
    same = all(states) and all([v.shape for v in s] == [v.shape for v in states[0]] for s in states)
    return Snapshot(weights, weighted_average(states, samples) if same else [], snapshots[0].trainable)


def add_momentum(snapshot: Snapshot, current: str | Path, previous: str | Path, factor: float) -> Snapshot:
    """``snapshot`` plus ``factor`` × (``current`` − ``previous``) on its trainable weights.

    Read one tensor at a time, so this holds two weight tensors more than the snapshot,
    not two models more. Non-trainable weights (batch-norm statistics, counters) are not
    extrapolated: a variance could be pushed below zero.
    """
    trainable = snapshot.trainable or [True] * len(snapshot.weights)
    weights = list(snapshot.weights)
    with np.load(current) as now, np.load(previous) as before:
        for i, (weight, moves) in enumerate(zip(weights, trainable)):
            if moves and np.issubdtype(weight.dtype, np.floating):
                step = now[f"w{i}"].astype(np.float64) - before[f"w{i}"]
                weights[i] = (weight + factor * step).astype(weight.dtype)
    return snapshot._replace(weights=weights)
