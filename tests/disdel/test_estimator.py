"""The memory estimator against peaks measured in real cgroups (TensorFlow in child processes)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from owx.bench.disdel.zoo import Row
from owx.disdel import data
from owx.disdel.estimator import MemoryEstimator, RuntimeCalibration
from owx.disdel.isolated import run_isolated
from owx.disdel.job import SyntheticDataset
from owx.disdel.messages import ModelRef
from owx.disdel.model_profile import profile_model
from owx.disdel.models import build_model, load_model
from tests.disdel.conftest import CGROUP_PREFIX

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]  # calibration: ~2 min, much more on a loaded machine


def test_calibration_is_measured_and_cached(calibration: RuntimeCalibration, disdel_root: Path) -> None:
    assert 150 * 2**20 < calibration.baseline_bytes < 1024 * 2**20  # TensorFlow alone: hundreds of MB
    assert 0 < calibration.per_layer_bytes < 20 * 2**20
    # TensorFlow keeps more than one byte per byte of state, activations and data: copies, temporaries
    assert 1.0 < calibration.state_factor < calibration.embedding_factor  # embedding gradients are densified
    assert all(0.5 < factor < 8 for factor in calibration.activation_factor.values())
    assert 1.0 < calibration.data_factor <= calibration.warm_data_factor
    assert json.loads((disdel_root / "calibration.json").read_text())[calibration.runtime]["format"] == 2


def train_peak(ref: ModelRef, x: np.ndarray, y: np.ndarray, batch: int, directory: Path) -> int:
    shard = data.write_npz(directory / "shard.npz", x, y)
    params = {"key": "e", "job_id": "e", "model": ref.model_dump(mode="json"), "shard": str(shard),
              "out_weights": str(directory / "w.npz"), "progress": str(directory / "p.json"), "epochs": 1,
              "batch_size": batch}
    run = run_isolated("train", params, prefix=CGROUP_PREFIX)
    assert run.ok, run.stderr
    return run.peak_bytes


@pytest.mark.parametrize(("model", "shape", "samples", "batch"), [
    ("small_cnn", (32, 32, 3), 3000, 64),
    ("mobilenet", (16, 16, 3), 800, 32),
])
def test_estimate_covers_the_measured_peak_within_25_percent(calibration: RuntimeCalibration, tmp_path: Path,
                                                             model: str, shape: tuple, samples: int, batch: int) -> None:
    x, y = data.synthetic(SyntheticDataset(samples=samples, shape=shape, classes=10, seed=1))
    peak = train_peak(ModelRef(builtin=model, shape=shape, classes=10), x, y, batch, tmp_path)
    profile = profile_model(build_model(model, shape, 10))
    estimate = MemoryEstimator(calibration).training(profile, batch, samples, x[0].nbytes + 4).total
    assert peak <= estimate <= 1.25 * peak, (estimate, peak)


def test_a_users_recurrent_text_model_is_covered(calibration: RuntimeCalibration, tmp_path: Path) -> None:
    """A family the calibration never trains (embedding + bidirectional GRU), as a user's function."""
    row = Row("gru_text", (60,), 1500, 64, "held_out", "text", tokens=20_000, classes=4)
    ref = ModelRef(function=row.function, classes=4)
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 20_000, (1500, 60), dtype=np.int32), rng.integers(0, 4, 1500, dtype=np.int32)
    peak = train_peak(ref, x, y, row.batch, tmp_path)
    estimate = MemoryEstimator(calibration).training(profile_model(load_model(ref)), 64, 1500, 60 * 4 + 4).total
    assert peak <= estimate <= 1.25 * peak, (estimate, peak)
