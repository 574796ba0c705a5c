"""The memory estimator scored on the zoo's table: estimate against the measured cgroup peak.

Warm pass: every row trains one epoch in a fresh cgroup without a limit (the page cache
already holds TensorFlow); its peak is what the estimate must cover, by at most 1.2x.  The
estimate is DiSDeL's: the row's model trained one epoch at its batch on two prefixes of its data
(half of it, eight to 64 batches, and half that), and the line through the two peaks
extrapolated to the row's samples.
Fresh pass: for each held-out row the page cache is dropped (as on a machine that just
booted), the runtime is loaded once in a container of its own (the prime probe: a job's own
measured epoch does this before its actions, or the probe when it is not measured), and the row
trains under a limit equal to its estimate: it must not be OOM-killed.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from owx.bench.disdel.zoo import TABLE, Row
from owx.disdel.calibration import local_probe, measure_step
from owx.disdel.data import write_npz
from owx.disdel.estimator import MB, MemoryEstimator, RuntimeCalibration
from owx.disdel.isolated import run_isolated
from owx.disdel.messages import ModelRef
from owx.disdel.model_profile import ModelProfile, profile_model
from owx.disdel.models import load_model


@dataclass
class Scored:
    row: Row
    estimate: int
    peak: int
    seconds: float
    fresh_ok: bool | None = None  # None: no fresh run
    fresh_oom_kills: int = 0
    fresh_seconds: float = 0.0

    @property
    def ratio(self) -> float:
        return self.estimate / self.peak


def ref(row: Row) -> ModelRef:
    return ModelRef(function=row.function, classes=row.classes)


def shard(row: Row, work: Path) -> Path:
    rng = np.random.default_rng(7)
    shape = (row.samples, *row.shape)
    x = rng.integers(0, row.tokens, shape, dtype=np.int32) if row.tokens else rng.random(shape, dtype=np.float32)
    y = rng.integers(0, row.classes, row.samples, dtype=np.int32) if row.classes else rng.random(row.samples, np.float32)
    return write_npz(work / f"{row.model}.npz", x, y)


def sample_bytes(row: Row) -> int:
    return int(np.prod(row.shape)) * 4 + 4


def fixed_constants(calibration: RuntimeCalibration, profile: ModelProfile, row: Row) -> int:
    """The estimator before this redesign (control): 16 B per parameter, three float32 copies of each
    activation, two copies of the shard, x1.25, on the measured baseline and per-layer cost."""
    batch = min(row.batch, row.samples)
    variable = (calibration.per_layer_bytes * max(0, profile.layers - calibration.baseline_layers)
                + 16 * profile.params + 3 * batch * profile.activations_per_sample
                + 2 * row.samples * sample_bytes(row))
    return int(calibration.baseline_bytes + 1.25 * variable)


def estimate(calibration: RuntimeCalibration, row: Row, path: Path, work: Path, prefix: str,
             control: str | None) -> int:
    """DiSDeL's estimate for ``row``: its model measured on two parts of its data and extrapolated (or a control's)."""
    profile = profile_model(load_model(ref(row)))
    if control == "fixed":
        return fixed_constants(calibration, profile, row)
    if control == "no-safety":
        calibration = calibration.model_copy(update={"safety": 1.0})
    step = None
    if control != "static":
        with np.load(path) as archive:
            x, y = archive["x"], archive["y"]
        step = measure_step(local_probe(prefix), ref(row).model_dump(mode="json"), x, y, row.batch, work)
    return MemoryEstimator(calibration).training(profile, row.batch, row.samples, sample_bytes(row), step=step).total


def _params(row: Row, path: Path, work: Path) -> dict:
    return {"key": row.model, "job_id": "bench", "model": ref(row).model_dump(mode="json"), "shard": str(path),
            "out_weights": str(work / f"{row.model}-out.npz"), "progress": str(work / f"{row.model}.json"),
            "epochs": 1, "batch_size": row.batch}


def drop_page_cache() -> None:
    subprocess.run(["sync"], check=True)
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def score(calibration: RuntimeCalibration, work: Path, prefix: str, control: str | None,
          log: callable = print) -> list[Scored]:
    """Both passes over the table."""
    rows = []
    for row in TABLE:
        path = shard(row, work)
        run = run_isolated("train", _params(row, path, work), prefix=prefix)
        if not run.ok:
            raise RuntimeError(f"{row.label}: training failed: {run.stderr[-1500:]}")
        rows.append(Scored(row, estimate(calibration, row, path, work, prefix, control), run.peak_bytes, run.duration_s))
        log(f"  {row.half:8} {row.label:40} estimate {rows[-1].estimate / MB:7.1f} MiB  peak "
            f"{run.peak_bytes / MB:7.1f} MiB  ratio {rows[-1].ratio:5.3f}  ({run.duration_s:.0f} s)")
    for scored in rows:
        if scored.row.half != "held_out":
            continue
        path = shard(scored.row, work)
        drop_page_cache()
        if control != "no-prime":
            run_isolated("calibrate", {"probe": "prime"}, prefix=prefix)
        started = time.monotonic()
        run = run_isolated("train", _params(scored.row, path, work), prefix=prefix, memory_limit=scored.estimate)
        scored.fresh_ok, scored.fresh_oom_kills = run.ok, run.oom_kills
        scored.fresh_seconds = time.monotonic() - started
        log(f"  fresh    {scored.row.label:40} limit {scored.estimate / MB:7.1f} MiB: "
            f"{'ok' if run.ok else 'FAILED'} ({run.oom_kills} OOM kills, {scored.fresh_seconds:.0f} s)")
    return rows
