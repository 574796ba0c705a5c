"""Measure the runtime's memory baseline and per-layer cost once, and cache them.

Two probe runs in fresh cgroups (see :mod:`owx.disdel.isolated`): the smallest model
trained for one step gives ``baseline``; a deep model (ResNet-like, 52 layers) on tiny
inputs gives the per-layer cost after the estimator's other terms are subtracted.
Results are cached per runtime (interpreter + TensorFlow version) in
``<shared dir>/calibration.json``; delete that file to measure again.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

import numpy as np

from owx.disdel.data import write_npz
from owx.disdel.estimator import MemoryEstimator, RuntimeCalibration
from owx.disdel.isolated import IsolatedRun, run_isolated
from owx.disdel.model_profile import profile_model
from owx.disdel.models import build_model

BASELINE_LAYERS = 8  # small_cnn, the baseline probe's model
DEPTH_PROBE = {"name": "resnet", "shape": (8, 8, 1), "classes": 2, "samples": 64, "batch": 8}


class CalibrationError(RuntimeError):
    """A probe run failed, so the runtime cannot be calibrated."""


def runtime_key() -> str:
    """Which runtime a calibration belongs to."""
    for dist in ("tensorflow-cpu", "tensorflow"):
        try:
            return f"{sys.executable}|{dist}=={metadata.version(dist)}"
        except metadata.PackageNotFoundError:
            continue
    return f"{sys.executable}|no-tensorflow"


def _checked(run: IsolatedRun, what: str) -> int:
    if not run.ok:
        raise CalibrationError(f"{what} probe failed (exit {run.returncode}): {run.stderr.strip()[-800:]}")
    return run.peak_bytes


def measure(prefix: str = "owx-disdel", safety: float = 1.15) -> RuntimeCalibration:
    """Run both probes now (about 10-30 s on 2 cores)."""
    baseline = _checked(run_isolated("baseline", {}, prefix=prefix), "baseline")
    probe = DEPTH_PROBE
    with tempfile.TemporaryDirectory(prefix="owx-disdel-cal-") as tmp:
        shard = write_npz(Path(tmp) / "shard.npz", np.zeros((probe["samples"], *probe["shape"]), np.float32),
                          np.zeros(probe["samples"], np.int32))
        params = {
            "key": "calibration", "job_id": "calibration",
            "model": {"name": probe["name"], "shape": probe["shape"], "classes": probe["classes"], "learning_rate": 1e-3},
            "shard": str(shard), "out_weights": f"{tmp}/out.npz", "progress": f"{tmp}/progress.json",
            "epochs": 1, "batch_size": probe["batch"],
        }
        deep = _checked(run_isolated("train", params, prefix=prefix), "depth")
    provisional = RuntimeCalibration(runtime=runtime_key(), baseline_bytes=baseline, baseline_layers=BASELINE_LAYERS,
                                     per_layer_bytes=0, safety=1.0)
    profile = profile_model(build_model(probe["name"], probe["shape"], probe["classes"]))
    sample_bytes = int(np.prod(probe["shape"])) * 4 + 4
    other = MemoryEstimator(provisional).training(profile, probe["batch"], probe["samples"], sample_bytes).total
    per_layer = max(0, (deep - other) // (profile.layers - BASELINE_LAYERS))
    return RuntimeCalibration(runtime=runtime_key(), baseline_bytes=baseline, baseline_layers=BASELINE_LAYERS,
                              per_layer_bytes=per_layer, safety=safety, measured_at=time.time())


def load_or_measure(root: Path, prefix: str = "owx-disdel") -> RuntimeCalibration:
    """The cached calibration of this runtime, measuring (and caching) it first if needed."""
    path = root / "calibration.json"
    key = runtime_key()
    cached: dict[str, dict] = {}
    if path.exists():
        cached = json.loads(path.read_text())
        if key in cached:
            return RuntimeCalibration.model_validate(cached[key])
    calibration = measure(prefix)
    cached[key] = calibration.model_dump()
    root.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(cached, indent=1))
    tmp.replace(path)
    return calibration
