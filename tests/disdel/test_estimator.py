"""The runtime's calibration, measured in real cgroups (TensorFlow in child processes).

How close estimates come to measured peaks (never under, at most 1.2x) is a figure of ``owx bench
disdel`` over its table of models, with a held-out half, not a test: it varies with the calibration's
measurement, which the bench reports."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from owx.disdel import weights
from owx.disdel.estimator import CALIBRATION_FORMAT, MemoryEstimator, RuntimeCalibration
from owx.disdel.isolated import run_isolated
from owx.disdel.model_profile import ModelProfile
from tests.disdel.conftest import CGROUP_PREFIX

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]  # calibration: ~2 min, much more on a loaded machine


def test_calibration_is_measured_and_cached(calibration: RuntimeCalibration, disdel_root: Path) -> None:
    assert 150 * 2**20 < calibration.baseline_bytes < 1024 * 2**20  # TensorFlow alone: hundreds of MB
    assert 0 < calibration.per_layer_bytes < 20 * 2**20
    # TensorFlow keeps more than one byte per byte of state, activations and data: copies, temporaries
    # Weights with their gradients and optimizer slots.  Dense state and embedding tables cost about the
    # same per byte (1.35-1.48) once freed tensors are unmapped (owx.disdel.malloc), in either order.
    assert 1.0 < calibration.state_factor and 1.0 < calibration.embedding_factor
    assert all(0 < factor < 8 for factor in calibration.activation_factor.values())  # activations cost memory
    assert 1.0 < calibration.data_factor <= calibration.warm_data_factor
    assert json.loads((disdel_root / "calibration.json").read_text())[calibration.runtime]["format"] == CALIBRATION_FORMAT


def test_an_aggregator_is_sized_for_the_optimizer_state_that_travels_with_the_models(
        calibration: RuntimeCalibration, tmp_path: Path) -> None:
    params = 8_000_000  # one 32 MB kernel; Adam keeps two moments of it
    profile = ModelProfile(name="wide", params=params, weights_bytes=4 * params, optimizer_bytes=8 * params,
                           state_bytes=16 * params, activation_bytes={}, layers=1, optimizer="Adam")
    rng = np.random.default_rng(0)
    inputs = []
    for index in range(4):
        kernel = rng.standard_normal(params, dtype=np.float32)
        path = weights.save(tmp_path / f"m{index}.npz", [kernel], [np.array(100), kernel, kernel * kernel], [True])
        inputs.append({"weights": str(path), "samples": 100 + index})
    estimate = MemoryEstimator(calibration).aggregation(profile, 4, 1, 4, evaluates=False)
    run = run_isolated("aggregate", {"key": "wide", "job_id": "e", "inputs": inputs, "out_weights": str(tmp_path / "avg.npz")},
                       prefix=CGROUP_PREFIX, memory_limit=estimate.total)
    assert run.ok and run.oom_kills == 0, run.stderr
    assert len(weights.load_snapshot(tmp_path / "avg.npz").optimizer) == 3
    # sized for the weights alone, as before the optimizer state travelled, it would be killed
    weights_only = MemoryEstimator(calibration).aggregation(profile.model_copy(update={"optimizer_bytes": 0}), 4, 1, 4,
                                                            evaluates=False)
    assert run.peak_bytes > weights_only.total
