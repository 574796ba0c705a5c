"""One stateful function on its way through Canary, and what its executions went through."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from owx.canary.options import CanaryOptions
from owx.platform.types import ActionSpec, RunOutcome


@dataclass
class Function:
    """One admitted function (an activation of a stateful action) on its way through Canary."""

    namespace: str
    function_id: str
    job_id: str
    options: CanaryOptions
    spec: ActionSpec
    node: str
    holders: list[str]
    admitted_ms: int
    attempts: list[RunOutcome] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    restored: list[int] = field(default_factory=list)
    discarded: int = 0
    background: list[Future[Any]] = field(default_factory=list)  # executions still running after the answer

    @property
    def checkpointed(self) -> bool:
        """Whether its executions get the checkpoint store: only an action of the caller's own. A
        published action another namespace calls runs the owner's code, which must not hold the
        caller's store login (it reads and fills the caller's checkpoints with it, for good): it runs
        without checkpoints, and a death restarts it from its start."""
        return self.spec.namespace == self.namespace

    def annotations(self) -> list[dict[str, Any]]:
        """What the activation record tells about this function's executions."""
        recovery = sum(f["recoveryMs"] for f in self.failures)
        detail = {
            "jobId": self.job_id, "functionId": self.function_id,
            "faultTolerance": self.options.fault_tolerance, "attempts": len(self.attempts),
            "failures": self.failures, "duplicatesDiscarded": self.discarded,
        }
        annotations = [
            {"key": "attempts", "value": len(self.attempts)},
            {"key": "checkpointRestored", "value": self.restored[-1] if self.restored else None},
            {"key": "recoveryTime", "value": recovery},
            {"key": "canary", "value": detail},
        ]
        if self.warnings:
            annotations.append({"key": "canaryWarnings", "value": list(dict.fromkeys(self.warnings))})
        return annotations


@dataclass(frozen=True)
class Failure:
    """Why an attempt ended with a dead container."""

    reason: str
    node: str
    container: str
    detected_at: float
