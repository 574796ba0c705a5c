"""Measure the runtime's memory baseline and per-layer cost once, and cache them.

Probe runs, each in a fresh container: the smallest model trained for one step gives
``baseline`` (the larger of two runs); averaging two tiny weight files with NumPy gives ``light_baseline``
(an aggregator that does not evaluate never loads TensorFlow); a deep model (ResNet-like, 52 layers) on tiny inputs gives the
per-layer cost after the estimator's other terms are subtracted.  Probes run where the
actions will run: as actions of the runtime's kind through the gateway (the action
reads its own cgroup's peak), or, without a gateway, as child processes in fresh
cgroups (:mod:`owx.disdel.isolated`).  Results are cached per runtime in
``<shared dir>/calibration.json``; delete that file to measure again.
"""

from __future__ import annotations

import json
import secrets
import sys
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from owx.disdel.data import write_npz
from owx.disdel.weights import save as save_weights
from owx.disdel.estimator import MemoryEstimator, RuntimeCalibration
from owx.disdel.isolated import run_isolated
from owx.disdel.model_profile import profile_model
from owx.disdel.models import build_model

BASELINE_LAYERS = 8  # small_cnn, the baseline probe's model
DEPTH_PROBE = {"name": "resnet", "shape": (8, 8, 1), "classes": 2, "samples": 64, "batch": 8}

#: runs one probe ("baseline", "aggregate" or "train" with its params) in a fresh container; returns its peak bytes
Probe = Callable[[str, dict[str, Any]], int]


class CalibrationError(RuntimeError):
    """A probe run failed, so the runtime cannot be calibrated."""


def local_runtime_key() -> str:
    """The runtime of child processes on this machine: interpreter and TensorFlow version."""
    for dist in ("tensorflow-cpu", "tensorflow"):
        try:
            return f"{sys.executable}|{dist}=={metadata.version(dist)}"
        except metadata.PackageNotFoundError:
            continue
    return f"{sys.executable}|no-tensorflow"


def local_probe(prefix: str = "owx-disdel") -> Probe:
    """Probes as child processes in fresh cgroups under ``prefix``."""

    def probe(task: str, params: dict[str, Any]) -> int:
        run = run_isolated(task, params, prefix=prefix)
        if not run.ok:
            raise CalibrationError(f"{task} probe failed (exit {run.returncode}): {run.stderr.strip()[-800:]}")
        return run.peak_bytes

    return probe


def gateway_probe(gateway: Any, kind: str, memory_mb: int) -> Probe:
    """Probes as actions of ``kind`` with ``memory_mb``; a new action (so a new container) per probe."""

    def probe(task: str, params: dict[str, Any]) -> int:
        name = f"disdel-calibrate-{secrets.token_hex(4)}"
        gateway.client.put_action(name, "from owx.disdel.actions.calibrate import main  # noqa: F401\n", kind=kind,
                                  limits={"memory": memory_mb, "timeout": 300_000})
        try:
            record = gateway.client.invoke_record(name, {"probe": task, "params": params})
        finally:
            gateway.client.delete_action(name)
        result = (record.get("response") or {}).get("result") or {}
        if not (record.get("response") or {}).get("success") or not result.get("peak_memory_bytes"):
            raise CalibrationError(f"{task} probe action failed: {result}")
        return int(result["peak_memory_bytes"])

    return probe


def measure(probe: Probe, workdir: Path, runtime: str, safety: float = 1.25) -> RuntimeCalibration:
    """Run both probes now (about 10-30 s on 2 cores); ``workdir`` must be readable by the probes."""
    # The first import of TensorFlow after an install reads its libraries into the page cache and the
    # kernel charges those pages to that probe's cgroup: a warm-up probe keeps them out of the baseline.
    probe("baseline", {})
    baseline = max(probe("baseline", {}) for _ in range(2))  # page-cache charging varies by a few MiB
    spec = DEPTH_PROBE
    workdir.mkdir(parents=True, exist_ok=True)
    shard = write_npz(workdir / "probe-shard.npz", np.zeros((spec["samples"], *spec["shape"]), np.float32),
                      np.zeros(spec["samples"], np.int32))
    params = {
        "key": f"calibration-{secrets.token_hex(3)}", "job_id": "calibration",
        "model": {"name": spec["name"], "shape": spec["shape"], "classes": spec["classes"], "learning_rate": 1e-3},
        "shard": str(shard), "out_weights": str(workdir / "probe-out.npz"), "progress": str(workdir / "probe.json"),
        "epochs": 1, "batch_size": spec["batch"],
    }
    deep = probe("train", params)
    tiny = [np.zeros(4, np.float32)]
    for name in ("probe-a.npz", "probe-b.npz"):
        save_weights(workdir / name, tiny)
    light = probe("aggregate", {"key": "calibration", "job_id": "calibration", "out_weights": str(workdir / "probe-avg.npz"),
                                "inputs": [{"weights": str(workdir / n), "samples": 1} for n in ("probe-a.npz", "probe-b.npz")]})
    provisional = RuntimeCalibration(runtime=runtime, baseline_bytes=baseline, light_baseline_bytes=light,
                                     baseline_layers=BASELINE_LAYERS, per_layer_bytes=0, safety=1.0)
    profile = profile_model(build_model(spec["name"], spec["shape"], spec["classes"]))
    sample_bytes = int(np.prod(spec["shape"])) * 4 + 4
    other = MemoryEstimator(provisional).training(profile, spec["batch"], spec["samples"], sample_bytes).total
    per_layer = max(0, (deep - other) // (profile.layers - BASELINE_LAYERS))
    return RuntimeCalibration(runtime=runtime, baseline_bytes=baseline, light_baseline_bytes=light,
                              baseline_layers=BASELINE_LAYERS,
                              per_layer_bytes=per_layer, safety=safety, measured_at=time.time())


def load_or_measure(root: Path, runtime: str, probe: Probe) -> RuntimeCalibration:
    """The cached calibration of ``runtime``, measuring (and caching) it first if needed."""
    path = root / "calibration.json"
    cached: dict[str, dict] = json.loads(path.read_text()) if path.exists() else {}
    if runtime in cached:
        return RuntimeCalibration.model_validate(cached[runtime])
    calibration = measure(probe, root / "calibration", runtime)
    cached[runtime] = calibration.model_dump()
    root.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(cached, indent=1))
    tmp.replace(path)
    return calibration
