"""The state of a job as it runs: one JSON file per job, rewritten on every change.

``<shared dir>/jobs/<job id>/state.json`` is what ``owx disdel status`` and
:meth:`JobHandle.status` read; every activation's full result (with its memory
samples) is appended to ``activations.jsonl`` next to it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from owx.disdel.planner import Plan

JobStatus = Literal["planning", "running", "succeeded", "failed"]
ActionStatus = Literal["pending", "running", "retrying", "succeeded", "failed"]


class ActionState(BaseModel):
    """One training action (``t<i>``, across rounds) or aggregator (``a<level>.<group>``)."""

    key: str
    role: Literal["train", "aggregate"]
    status: ActionStatus = "pending"
    epoch: int = 0
    epochs: int = 0
    loss: float | None = None
    activation_id: str | None = None
    attempts: int = 0
    peak_bytes: int | None = None


class ActivationInfo(BaseModel):
    """One invocation: which action, limits, outcome and timing."""

    key: str
    round: int
    role: Literal["train", "aggregate"]
    action: Literal["train", "aggregate"] = Field(description="the action that ran it (a final aggregation may run on train)")
    activation_id: str
    memory_mb: int
    timeout_ms: int
    start: int | None = None
    end: int | None = None
    duration_ms: int | None = None
    success: bool = False
    failure: str | None = None
    peak_bytes: int | None = None
    samples: int | None = None


class JobResult(BaseModel):
    model_path: str | None
    weights_path: str
    eval_loss: float | None
    eval_accuracy: float | None
    train_loss: float | None
    epochs_run: int
    rounds_run: int
    job_time_s: float = Field(description="from submission to the stored model")
    prepare_s: float = Field(description="of which data split, profiling and planning")
    failed_activations: int
    round_train_losses: list[float]


class JobState(BaseModel):
    job_id: str
    name: str
    status: JobStatus = "planning"
    message: str = ""
    created: float = Field(default_factory=time.time)
    updated: float = Field(default_factory=time.time)
    job: dict[str, Any]
    plan: Plan | None = None
    round: int = 0
    actions: dict[str, ActionState] = Field(default_factory=dict)
    activations: list[ActivationInfo] = Field(default_factory=list)
    result: JobResult | None = None

    @property
    def done(self) -> bool:
        return self.status in ("succeeded", "failed")


class JobPaths:
    """Files of one job under the shared directory."""

    def __init__(self, root: Path, job_id: str) -> None:
        self.root = root
        self.job_id = job_id
        self.dir = root / "jobs" / job_id

    def create(self) -> "JobPaths":
        for path in (self.dir, self.weights, self.progress_dir, self.model_file.parent):
            path.mkdir(parents=True, exist_ok=True)
            os.chmod(path, 0o777)  # actions may run as another user and write here
        return self

    @property
    def state(self) -> Path:
        return self.dir / "state.json"

    @property
    def activations(self) -> Path:
        return self.dir / "activations.jsonl"

    @property
    def weights(self) -> Path:
        return self.dir / "weights"

    @property
    def progress_dir(self) -> Path:
        return self.dir / "progress"

    @property
    def eval_set(self) -> Path:
        return self.dir / "eval.npz"

    @property
    def checkpoint_store(self) -> str:
        return f"sqlite://{self.dir / 'checkpoints.db'}"

    @property
    def model_file(self) -> Path:
        return self.root / "models" / f"{self.job_id}.keras"

    def progress(self, key: str) -> Path:
        return self.progress_dir / f"{key}.json"


def save_state(path: Path, state: JobState) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(state.model_dump_json(indent=1))
    os.replace(tmp, path)


def load_state(root: Path, job_id: str) -> JobState:
    """The latest saved state of ``job_id``; FileNotFoundError names the job when unknown."""
    path = JobPaths(root, job_id).state
    if not path.exists():
        raise FileNotFoundError(f"no DiSDeL job {job_id!r} under {root / 'jobs'}")
    return JobState.model_validate_json(path.read_text())


def append_result(path: Path, doc: dict[str, Any]) -> None:
    with open(path, "a") as handle:
        handle.write(json.dumps(doc) + "\n")
