"""The execution environments DiSDeL's benchmark compares (chapter 4.2.2 of the thesis).

* bare process: TensorFlow trains the whole set in one child process, no limits;
* default serverless: one action with hand-set adequate limits;
* retry strategy: one action starting at OpenWhisk's default limits, +memory after an
  OOM and +240 s of timeout after a time-out, from scratch each time;
* DiSDeL: the job through :func:`owx.disdel.submit`.
Each returns timings, peaks, memory samples and the held-out loss of its final model.
"""

from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from owx.disdel import data
from owx.disdel.failures import classify
from owx.disdel.gateway import Gateway, action_code
from owx.disdel.isolated import run_isolated
from owx.disdel.job import JobRequest


@dataclass
class EnvRun:
    name: str
    time_s: float
    peak_bytes: int  # the largest single container / process
    total_peak_bytes: int  # the most memory used at once by all of the job's containers
    eval_loss: float | None
    attempts: int = 1
    failed: int = 0
    wasted_s: float = 0.0
    memory: list[tuple[float, int, str]] = field(default_factory=list)  # (epoch s, bytes, series)
    marks: list[tuple[float, str]] = field(default_factory=list)  # (epoch s, phase) for the plot
    detail: dict[str, Any] = field(default_factory=dict)


class Inputs(NamedTuple):
    """Where the environments' runs read their data and write their weights."""

    job_dir: Path
    shard: Path  # the training samples
    eval_set: Path  # the held-out ones
    held_out: int


def inputs(shared: Path, job: JobRequest) -> Inputs:
    """The job's synthetic data in a directory of ``shared``: the only host directory the actions'
    sandboxes see read-write. The actions run as other users, so it is writable by all."""
    job_dir = shared / "environments"
    job_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(job_dir, 0o777)
    x, y = data.synthetic(job.dataset)
    held = job.held_out(len(y))
    return Inputs(job_dir, data.write_npz(job_dir / "full.npz", x[:-held], y[:-held]),
                  data.write_npz(job_dir / "eval.npz", x[-held:], y[-held:]), held)


def builtin_model(job: JobRequest) -> dict:
    """The model the runs train: the job's built-in one, initialised from the job's seed."""
    return {"builtin": job.model.name, "shape": job.dataset.shape, "classes": job.dataset.classes,
            "learning_rate": job.learning_rate, "seed": job.seed}


def phase_marks(phases: dict[str, float]) -> list[tuple[float, str]]:
    labels = {"start": "submitted", "data_loaded": "TF + data loaded", "fit_done": "fit done"}
    return [(phases[key], label) for key, label in labels.items() if key in phases]


def train_params(job_dir: Path, key: str, model: dict, shard: Path, epochs: int, batch: int, threads: int = 0) -> dict:
    return {"key": key, "job_id": "bench", "model": model, "shard": str(shard), "out_weights": str(job_dir / f"{key}.npz"),
            "progress": str(job_dir / f"{key}.json"), "epochs": epochs, "batch_size": batch, "threads": threads}


def evaluate_params(job_dir: Path, weights: str, model: dict, eval_set: Path) -> dict:
    return {"key": f"eval-{secrets.token_hex(3)}", "job_id": "bench", "inputs": [{"weights": weights, "samples": 1}],
            "out_weights": str(job_dir / "evaluated.npz"), "model": model, "evaluate": str(eval_set)}


def bare_process(job_dir: Path, model: dict, shard: Path, eval_set: Path, epochs: int, batch: int,
                 prefix: str, key: str = "bare") -> EnvRun:
    run = run_isolated("train", train_params(job_dir, key, model, shard, epochs, batch), prefix=prefix)
    if not run.ok:
        raise RuntimeError(f"bare-process training failed: {run.stderr[-2000:]}")
    scored = run_isolated("aggregate", evaluate_params(job_dir, run.result["weights"], model, eval_set), prefix=prefix)
    memory = [(s["t"], s["bytes"], "bare process") for s in run.result["memory"]]
    return EnvRun("TF bare process", run.duration_s, run.peak_bytes, run.peak_bytes, scored.result["eval_loss"],
                  memory=memory, marks=phase_marks(run.result["phases"]), detail={"losses": run.result["losses"]})


def _one_action(gateway: Gateway, params: dict, memory_mb: int, timeout_ms: int) -> tuple[dict, float]:
    """Deploy a fresh single action with these limits, run it blocking; (record, wall seconds).

    The seconds run from deploying the action to its trained model, as DiSDeL's "executing"
    time does: both include the deployment, the cold start, TensorFlow's import and compile.
    """
    name = f"bench-single-{secrets.token_hex(4)}"
    start = time.monotonic()
    gateway.client.put_action(name, action_code("train"), kind="python:tensorflow",
                              limits={"memory": memory_mb, "timeout": timeout_ms})
    try:
        record = gateway.client.invoke_record(name, params)
    finally:
        gateway.client.delete_action(name)
    return record, time.monotonic() - start


def _score(gateway: Gateway, job_dir: Path, weights: str, model: dict, eval_set: Path) -> float:
    name = f"bench-eval-{secrets.token_hex(4)}"
    gateway.client.put_action(name, action_code("aggregate"), kind="python:tensorflow",
                              limits={"memory": 2048, "timeout": 300_000})
    try:
        return gateway.client.invoke(name, evaluate_params(job_dir, weights, model, eval_set))["eval_loss"]
    finally:
        gateway.client.delete_action(name)


def single_action(gateway: Gateway, job_dir: Path, model: dict, shard: Path, eval_set: Path, epochs: int, batch: int,
                  memory_mb: int, timeout_ms: int) -> EnvRun:
    params = train_params(job_dir, "single", model, shard, epochs, batch)
    record, seconds = _one_action(gateway, params, memory_mb, timeout_ms)
    if classify(record) is not None:
        raise RuntimeError(f"the hand-set limits were not adequate: {record['response']}")
    result = record["response"]["result"]
    memory = [(s["t"], s["bytes"], "single action") for s in result["memory"]]
    return EnvRun("default serverless (1 action, hand-set limits)", seconds, result["peak_memory_bytes"],
                  result["peak_memory_bytes"], _score(gateway, job_dir, result["weights"], model, eval_set),
                  memory=memory, marks=phase_marks(result["phases"]), detail={"memory_mb": memory_mb, "timeout_ms": timeout_ms, "losses": result["losses"],
                                         "fit_s": result["phases"]["fit_done"] - result["phases"]["model_ready"],
                                         "startup_s": seconds - (result["phases"]["fit_done"] - result["phases"]["model_ready"])})


def retry_strategy(gateway: Gateway, job_dir: Path, model: dict, shard: Path, eval_set: Path, epochs: int, batch: int,
                   memory_step_mb: int = 256, timeout_step_ms: int = 240_000, max_attempts: int = 8) -> EnvRun:
    """The paper's manual strategy: default limits, then +memory per OOM / +240 s per time-out."""
    memory_mb, timeout_ms = 256, 60_000
    wasted, attempts, history = 0.0, 0, []
    started = time.monotonic()
    while attempts < max_attempts:
        attempts += 1
        params = train_params(job_dir, f"retry-{attempts}", model, shard, epochs, batch)
        record, seconds = _one_action(gateway, params, memory_mb, timeout_ms)
        failure = classify(record)
        history.append({"memory_mb": memory_mb, "timeout_ms": timeout_ms, "s": round(seconds, 1),
                        "failure": None if failure is None else failure.cause})
        if failure is None:
            result = record["response"]["result"]
            return EnvRun("retry strategy (paper)", time.monotonic() - started, result["peak_memory_bytes"],
                          result["peak_memory_bytes"], _score(gateway, job_dir, result["weights"], model, eval_set),
                          attempts=attempts, failed=attempts - 1, wasted_s=wasted, detail={"attempts": history})
        wasted += seconds
        if failure.cause == "oom":
            memory_mb += memory_step_mb
        elif failure.cause == "timeout":
            timeout_ms += timeout_step_ms
        else:
            raise RuntimeError(f"retry strategy: unexpected failure {failure.message}")
    raise RuntimeError(f"retry strategy gave up after {attempts} attempts: {history}")


def concurrent_peak(series: dict[str, list[tuple[float, int]]]) -> int:
    """Largest sum of the series' latest samples at any sample time (step-wise)."""
    events = sorted((t, name, b) for name, samples in series.items() for t, b in samples)
    current: dict[str, int] = {}
    best = 0
    for _, name, value in events:
        current[name] = value
        best = max(best, sum(current.values()))
    return best
