"""Measure the runtime's memory coefficients once, and cache them.

Every probe trains one of :mod:`owx.disdel.probe_models` in a fresh container, where
the action reads its own cgroup's peak; each probe makes one term of the estimate
dominate, and the coefficient is that peak less the terms already known, divided by the
probe's size in that term:

1. ``tiny`` (after one warm-up run that takes TensorFlow's first page-cache charge): the
   baseline, the larger of two runs; averaging two tiny weight files with NumPy gives the
   light baseline (an aggregator that does not evaluate never loads TensorFlow);
2. ``deep`` (26 small layers): the cost per layer;
3. ``planes`` on 2,048 samples, trained twice in one container, against ``planes`` on 128
   at the same batch: bytes per data byte, in a fresh container and in one that already
   trained (multi-round jobs);
4. ``wide`` (9.6 M dense weights) and ``table`` (an embedding of 6.4 M weights): bytes per
   byte of weights, gradients and Adam's slots, for dense kernels and embedding tables;
5. ``narrow``, ``planes`` and ``steps`` at large batches: bytes per byte of dense,
   convolution and recurrent activations.

After the warm-up, probes run two at a time (each in its own container).  Probes run
where the actions will run: as actions of the runtime's kind through the
gateway, or, without a gateway, as child processes in fresh cgroups
(:mod:`owx.disdel.isolated`).  Results are cached per runtime in
``<shared dir>/calibration.json``; an entry of an older format is measured again.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

from owx.disdel.data import write_npz
from owx.disdel.estimator import CALIBRATION_FORMAT, MeasuredStep, RuntimeCalibration
from owx.disdel.isolated import run_isolated
from owx.disdel.model_profile import KINDS, ModelProfile, profile_model
from owx.disdel.models import build_model
from owx.disdel.weights import save as save_weights

MB = 1024 * 1024
PROBE_TIMEOUT_S = 1800  # a probe takes 10-30 s; on a machine loaded by others, ten minutes were seen

#: runs one probe ("train": a list of training runs in one container, or "aggregate") and
#: returns the container's peak bytes after each run
Probe = Callable[[str, Any], list[int]]


class CalibrationError(RuntimeError):
    """A probe run failed, so the runtime cannot be calibrated."""


@dataclass(frozen=True)
class ProbeRun:
    """One probe model trained on random data of ``shape`` (``int`` inputs index an embedding)."""

    model: str
    shape: tuple[int, ...]
    samples: int
    batch: int
    integer: bool = False
    rounds: int = 1

    @property
    def sample_bytes(self) -> int:
        return int(np.prod(self.shape)) * 4 + 4


TINY = ProbeRun("probe_tiny", (8,), 16, 2)
DEEP = ProbeRun("probe_deep", (8,), 16, 2)
DATA = ProbeRun("probe_planes", (32, 32, 3), 2048, 128, rounds=2)
WIDE = ProbeRun("probe_wide", (64,), 16, 2)
TABLE = ProbeRun("probe_table", (16,), 16, 2, integer=True)
ACTIVATIONS = {"dense": ProbeRun("probe_narrow", (256,), 4096, 4096),
               "conv": ProbeRun("probe_planes", (32, 32, 3), 128, 128),
               "recurrent": ProbeRun("probe_steps", (64, 8), 512, 512)}


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

    def probe(task: str, params: Any) -> list[int]:
        run = run_isolated("calibrate", {"probe": task, "params": params}, prefix=prefix, timeout_s=PROBE_TIMEOUT_S)
        if not run.ok or "peaks" not in run.result:
            detail = run.result.get("error") if run.result else run.stderr.strip()[-800:]
            raise CalibrationError(f"{task} probe failed (exit {run.returncode}, {run.oom_kills} OOM kills): {detail}")
        return [int(p) for p in run.result["peaks"]]

    return probe


def gateway_probe(gateway: Any, kind: str, memory_mb: int, timeout_ms: int = 300_000) -> Probe:
    """Probes as actions of ``kind`` with ``memory_mb``; a new action (so a new container) per probe."""

    def probe(task: str, params: Any) -> list[int]:
        name = f"disdel-calibrate-{secrets.token_hex(4)}"
        gateway.client.put_action(name, "from owx.disdel.actions.calibrate import main  # noqa: F401\n", kind=kind,
                                  limits={"memory": memory_mb, "timeout": timeout_ms})
        try:
            record = gateway.client.invoke_record(name, {"probe": task, "params": params})
        finally:
            gateway.client.delete_action(name)
        response = record.get("response") or {}
        result = response.get("result") or {}
        if not response.get("success") or not result.get("peaks"):
            raise CalibrationError(f"{task} probe action (memory {memory_mb} MB) failed: {result}")
        return [int(p) for p in result["peaks"]]

    return probe


class _Probes:
    """Writes each probe's shard under ``workdir`` and runs it through ``probe``."""

    def __init__(self, probe: Probe, workdir: Path) -> None:
        self.probe = probe
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        os.chmod(workdir, 0o777)  # probe actions may run as another user and write here
        self._profiles: dict[str, ModelProfile] = {}

    def ref(self, spec: ProbeRun) -> dict[str, Any]:
        return {"builtin": spec.model, "shape": spec.shape, "classes": 2, "learning_rate": 1e-3}

    def profile(self, spec: ProbeRun) -> ModelProfile:
        key = f"{spec.model}{spec.shape}"
        if key not in self._profiles:
            self._profiles[key] = profile_model(build_model(spec.model, spec.shape, 2))
        return self._profiles[key]

    def train(self, spec: ProbeRun) -> list[int]:
        rng = np.random.default_rng(0)
        shape = (spec.samples, *spec.shape)
        x = rng.integers(0, 100_000, shape, dtype=np.int32) if spec.integer else rng.random(shape, dtype=np.float32)
        name = f"{spec.model}-{spec.samples}-{secrets.token_hex(4)}"  # probes of one spec may run at once
        shard = write_npz(self.workdir / f"{name}.npz", x, rng.integers(0, 2, spec.samples, dtype=np.int32))
        run = {"key": f"calibration-{secrets.token_hex(3)}", "job_id": "calibration", "model": self.ref(spec),
               "shard": str(shard), "out_weights": str(self.workdir / f"{name}-out.npz"),
               "progress": str(self.workdir / f"{name}.json"), "epochs": 1, "batch_size": spec.batch}
        return self.probe("train", [run] * spec.rounds)

    def aggregate(self) -> int:
        tiny = [np.zeros(4, np.float32)]
        names = ("probe-a.npz", "probe-b.npz")
        for name in names:
            save_weights(self.workdir / name, tiny)
        return self.probe("aggregate", {"key": "calibration", "job_id": "calibration",
                                        "out_weights": str(self.workdir / "probe-avg.npz"),
                                        "inputs": [{"weights": str(self.workdir / n), "samples": 1} for n in names]})[0]


def measure(probe: Probe, workdir: Path, runtime: str, safety: float = 1.1) -> RuntimeCalibration:
    """Run every probe now (about ten TensorFlow processes); ``workdir`` must be readable by the probes."""
    probes = _Probes(probe, workdir)
    # The first import of TensorFlow after an install or a reboot reads its libraries into the page
    # cache, and the kernel charges those pages to that probe's cgroup: the warm-up takes that charge.
    probes.train(TINY)
    runs = {"tiny": TINY, "tiny again": TINY, "deep": DEEP, "data": DATA, "wide": WIDE, "table": TABLE, **ACTIVATIONS}
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="disdel-calibration") as pool:  # two at a time
        pending = {name: pool.submit(probes.train, spec) for name, spec in runs.items()}
        light = pool.submit(probes.aggregate)
        peaks = {name: future.result() for name, future in pending.items()}
    baseline = max(peaks["tiny"][0], peaks["tiny again"][0])  # page-cache charging varies by a few MiB
    tiny = probes.profile(TINY)

    def excess(name: str) -> float:
        """What probe ``name``'s peak holds beyond the baseline and the terms already measured."""
        spec = runs[name]
        profile = probes.profile(spec)
        known = per_layer * max(0, profile.layers - tiny.layers) + data_factor * spec.samples * spec.sample_bytes
        known += state_factor * profile.state_bytes
        return max(0.0, peaks[name][0] - baseline - known)

    per_layer, data_factor, state_factor = 0.0, 0.0, 0.0
    per_layer = excess("deep") / (probes.profile(DEEP).layers - tiny.layers)
    # the slope between two shard sizes of one convolutional model (whose steps also leave more behind per
    # sample than a dense one's), at the same batch
    conv = ACTIVATIONS["conv"]
    data_bytes = (DATA.samples - conv.samples) * DATA.sample_bytes
    data_factor = max(0, peaks["data"][0] - peaks["conv"][0]) / data_bytes
    warm_data_factor = max(data_factor, max(0, peaks["data"][1] - peaks["conv"][0]) / data_bytes)
    state_factor = excess("wide") / probes.profile(WIDE).state_bytes
    embedding_factor = excess("table") / probes.profile(TABLE).embedding_state_bytes
    for kind in KINDS:  # an excess lost in the peak's noise (clipped to 0) is measured once more
        if excess(kind) == 0:
            peaks[kind] = [max(a, b) for a, b in zip(peaks[kind], probes.train(ACTIVATIONS[kind]))]
    activation_factor = {kind: excess(kind) / (ACTIVATIONS[kind].batch * probes.profile(ACTIVATIONS[kind]).activation_bytes[kind])
                         for kind in KINDS}
    return RuntimeCalibration(runtime=runtime, baseline_bytes=baseline, light_baseline_bytes=light.result(),
                              baseline_layers=tiny.layers, per_layer_bytes=int(per_layer), state_factor=state_factor,
                              embedding_factor=embedding_factor, activation_factor=activation_factor,
                              data_factor=data_factor, warm_data_factor=warm_data_factor, safety=safety,
                              measured_at=time.time())


def measure_step(probe: Probe, model: dict[str, Any], x: np.ndarray, y: np.ndarray, batch: int,
                 workdir: Path) -> MeasuredStep:
    """Train ``model`` (a ModelRef as JSON) one epoch at ``batch`` on two prefixes of the data, each in
    a fresh container: the larger is half the data (at least eight batches, at most 64), the smaller
    half of that, so both run several steps and the growth between them is per sample, not the first
    steps' own. The line through them is extrapolated to the shard: at twice the larger part (a
    quarter of the data gave held-out estimates up to 1.31x the peak, the allocator's jumps between
    the two parts counting four times over)."""
    more = min(len(y), max(8 * batch, min(len(y) // 2, 64 * batch)))
    fewer = max(1, more // 2)
    peaks = [_one_epoch(probe, model, x[:n], y[:n], batch, workdir / f"step-{n}") for n in (fewer, more)]
    return MeasuredStep(peak_bytes=peaks[0], samples=fewer, more_peak_bytes=peaks[1], more_samples=more, batch=batch)


def _one_epoch(probe: Probe, model: dict[str, Any], x: np.ndarray, y: np.ndarray, batch: int, stem: Path) -> int:
    shard = write_npz(Path(f"{stem}.npz"), x, y)
    run = {"key": f"step-{secrets.token_hex(3)}", "job_id": "step", "model": model, "shard": str(shard),
           "out_weights": f"{stem}-out.npz", "progress": f"{stem}.json", "epochs": 1, "batch_size": batch}
    return probe("train", [run])[0]


def load_or_measure(root: Path, runtime: str, probe: Probe) -> RuntimeCalibration:
    """The cached calibration of ``runtime``, measuring (and caching) it first if needed."""
    path = root / "calibration.json"
    cached: dict[str, dict] = json.loads(path.read_text()) if path.exists() else {}
    if cached.get(runtime, {}).get("format") == CALIBRATION_FORMAT:
        try:
            return RuntimeCalibration.model_validate(cached[runtime])
        except ValidationError:
            pass
    calibration = measure(probe, root / "calibration", runtime)
    cached[runtime] = calibration.model_dump()
    root.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(cached, indent=1))
    tmp.replace(path)
    return calibration
