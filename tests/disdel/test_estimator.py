"""The runtime's calibration, measured in real cgroups (TensorFlow in child processes).

How close estimates come to measured peaks (never under, at most 1.2x) is a figure of ``owx bench
disdel`` over its table of models, with a held-out half, not a test: it varies with the calibration's
measurement, which the bench reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from owx.disdel.estimator import CALIBRATION_FORMAT, RuntimeCalibration

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]  # calibration: ~2 min, much more on a loaded machine


def test_calibration_is_measured_and_cached(calibration: RuntimeCalibration, disdel_root: Path) -> None:
    assert 150 * 2**20 < calibration.baseline_bytes < 1024 * 2**20  # TensorFlow alone: hundreds of MB
    assert 0 < calibration.per_layer_bytes < 20 * 2**20
    # TensorFlow keeps more than one byte per byte of state, activations and data: copies, temporaries
    # Weights with their gradients and optimizer slots.  Dense state and embedding tables cost about the
    # same per byte (1.35-1.48) once freed tensors are unmapped (owx.common.malloc), in either order.
    assert 1.0 < calibration.state_factor and 1.0 < calibration.embedding_factor
    assert all(0 < factor < 8 for factor in calibration.activation_factor.values())  # activations cost memory
    assert 1.0 < calibration.data_factor <= calibration.warm_data_factor
    assert json.loads((disdel_root / "calibration.json").read_text())[calibration.runtime]["format"] == CALIBRATION_FORMAT
