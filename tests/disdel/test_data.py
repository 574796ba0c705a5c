from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from owx.disdel import data, weights
from owx.disdel.datasets import read_npz
from owx.disdel.job import JobError, SyntheticDataset


def test_synthetic_data_is_deterministic_and_shaped() -> None:
    spec = SyntheticDataset(samples=50, shape=(8, 10, 2), classes=3, seed=7)
    x1, y1 = data.synthetic(spec)
    x2, y2 = data.synthetic(spec)
    assert x1.shape == (50, 8, 10, 2) and x1.dtype == np.float32 and y1.dtype == np.int32
    assert np.array_equal(x1, x2) and np.array_equal(y1, y2)
    assert set(np.unique(y1)) <= {0, 1, 2}
    assert not np.array_equal(x1, data.synthetic(spec.model_copy(update={"seed": 8}))[0])


def test_shards_are_equal_and_cover_everything(tmp_path: Path) -> None:
    assert data.shard_bounds(10, 3) == [(0, 4), (4, 7), (7, 10)]
    x = np.arange(11 * 4, dtype=np.float32).reshape(11, 2, 2, 1)
    y = np.arange(11, dtype=np.int32)
    shards = data.write_shards(x, y, 4, tmp_path)
    assert [n for _, n in shards] == [3, 3, 3, 2]
    joined = np.concatenate([read_npz(path)[1] for path, _ in shards])
    assert np.array_equal(joined, y)


def test_bad_npz_files_are_explained(tmp_path: Path) -> None:
    np.savez(tmp_path / "a.npz", images=np.zeros((2, 4, 4)))
    with pytest.raises(JobError, match="needs arrays 'x' and 'y'"):
        read_npz(tmp_path / "a.npz")
    np.savez(tmp_path / "b.npz", x=np.zeros((3, 4, 4)), y=np.zeros(2, np.int64))
    with pytest.raises(JobError, match="need x of shape"):
        read_npz(tmp_path / "b.npz")
    np.savez(tmp_path / "c.npz", x=np.zeros((2, 4, 4)), y=np.array([-1, 1]))
    with pytest.raises(JobError, match="non-negative integers"):
        read_npz(tmp_path / "c.npz")
    (tmp_path / "d.npz").write_bytes(b"not a zip")
    with pytest.raises(JobError, match="not a readable"):
        read_npz(tmp_path / "d.npz")
    np.savez(tmp_path / "e.npz", x=np.zeros((2, 3)), y=np.array([0.5, 1.0]))
    assert read_npz(tmp_path / "e.npz")[1].dtype == np.float32  # real-valued targets: regression


def test_weighted_average_weights_by_samples(tmp_path: Path) -> None:
    a = [np.zeros((2, 2), np.float32), np.ones(3, np.float32)]
    b = [np.full((2, 2), 4.0, np.float32), np.full(3, 3.0, np.float32)]
    weights.save(tmp_path / "a.npz", a)
    loaded = weights.load(tmp_path / "a.npz")
    assert all(np.array_equal(p, q) for p, q in zip(loaded, a))
    avg = weights.weighted_average([a, b], [300, 100])
    assert np.allclose(avg[0], 1.0) and np.allclose(avg[1], 1.5) and avg[0].dtype == np.float32
    with pytest.raises(ValueError, match="shapes differ"):
        weights.weighted_average([a, [np.zeros(2)]], [1, 1])
