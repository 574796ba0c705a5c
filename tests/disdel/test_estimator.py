"""The memory estimator against peaks measured in real cgroups (TensorFlow in child processes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from owx.disdel import data
from owx.disdel.estimator import MemoryEstimator, RuntimeCalibration
from owx.disdel.isolated import run_isolated
from owx.disdel.job import SyntheticDataset
from owx.disdel.model_profile import profile_model
from owx.disdel.models import build_model
from tests.disdel.conftest import CGROUP_PREFIX

pytestmark = pytest.mark.slow


def test_calibration_is_measured_and_cached(calibration: RuntimeCalibration, disdel_root: Path) -> None:
    assert 150 * 2**20 < calibration.baseline_bytes < 1024 * 2**20  # TensorFlow alone: hundreds of MB
    assert 0 < calibration.per_layer_bytes < 20 * 2**20
    assert calibration.runtime in (disdel_root / "calibration.json").read_text()


@pytest.mark.parametrize(("model", "shape", "samples", "batch"), [
    ("small_cnn", (32, 32, 3), 3000, 64),
    ("mobilenet", (16, 16, 3), 800, 32),
])
def test_estimate_covers_the_measured_peak_within_25_percent(calibration: RuntimeCalibration, tmp_path: Path,
                                                             model: str, shape: tuple, samples: int, batch: int) -> None:
    x, y = data.synthetic(SyntheticDataset(samples=samples, shape=shape, classes=10, seed=1))
    shard = data.write_npz(tmp_path / "shard.npz", x, y)
    params = {"key": "e", "job_id": "e", "model": {"name": model, "shape": shape, "classes": 10, "learning_rate": 1e-3},
              "shard": str(shard), "out_weights": str(tmp_path / "w.npz"), "progress": str(tmp_path / "p.json"),
              "epochs": 1, "batch_size": batch}
    run = run_isolated("train", params, prefix=CGROUP_PREFIX)
    assert run.ok, run.stderr
    profile = profile_model(build_model(model, shape, 10))
    estimate = MemoryEstimator(calibration).training(profile, batch, samples, x[0].nbytes + 4).total
    assert run.peak_bytes <= estimate <= 1.25 * run.peak_bytes, (estimate, run.peak_bytes)
