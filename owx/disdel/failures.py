"""Failure manager: why an action failed, and the limits that should avoid it next time.

The cause comes from the activation record: OpenWhisk's messages for a container that
ran out of memory or time, the ``timeout`` annotation, and the container's resource
usage (duration against the time limit).  Out-of-memory raises the memory (up to the
platform maximum); out-of-time raises the timeout.  Both are recorded in the history so
the next run of the same job starts with limits that work.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from owx.disdel.action_bounds import ActionBounds

OOM_TEXT = "exhausted its memory"
TIMEOUT_TEXT = "exceeded its time limits"

Cause = Literal["oom", "timeout", "error"]


@dataclass(frozen=True)
class Failure:
    cause: Cause
    message: str


@dataclass(frozen=True)
class Adjustment:
    memory_mb: int
    timeout_ms: int


class LimitsExhausted(RuntimeError):
    """The failure would need more than the platform allows."""


def _annotation(record: dict[str, Any], key: str) -> Any:
    for item in record.get("annotations") or []:
        if item.get("key") == key:
            return item.get("value")
    return None


def classify(record: dict[str, Any]) -> Failure | None:
    """None for a successful activation; else what went wrong."""
    response = record.get("response") or {}
    if response.get("success"):
        return None
    result = response.get("result")
    message = str(result.get("error", result) if isinstance(result, dict) else result)
    if OOM_TEXT in message:
        return Failure("oom", message)
    if TIMEOUT_TEXT in message or _annotation(record, "timeout") is True:
        return Failure("timeout", message)
    limits = _annotation(record, "limits") or {}
    if limits.get("timeout") and record.get("duration", 0) >= limits["timeout"]:
        return Failure("timeout", message)
    return Failure("error", message)


class FailureManager:
    def __init__(self, limits: ActionBounds, oom_growth: float = 1.5, timeout_growth: float = 2.0) -> None:
        self.limits = limits
        self.oom_growth = oom_growth
        self.timeout_growth = timeout_growth

    def adjust(self, failure: Failure, memory_mb: int, timeout_ms: int) -> Adjustment:
        """New limits after ``failure``; raises :class:`LimitsExhausted` when already at the maximum."""
        if failure.cause == "oom":
            if memory_mb >= self.limits.action_cap_mb:
                hint = self.limits.raise_hint(math.ceil(memory_mb * self.oom_growth))
                raise LimitsExhausted(f"out of memory at the most an action can have here, {memory_mb} MB: "
                                      f"{hint}, or use more actions")
            return Adjustment(self.limits.clamp_memory(math.ceil(memory_mb * self.oom_growth)), timeout_ms)
        if failure.cause == "timeout":
            if timeout_ms >= self.limits.timeout_max_ms:
                raise LimitsExhausted(f"out of time at the platform's maximum of {timeout_ms} ms; "
                                      "raise OWX_LIMITS__TIMEOUT_MS__MAX or use more actions")
            return Adjustment(memory_mb, self.limits.clamp_timeout(math.ceil(timeout_ms * self.timeout_growth)))
        raise LimitsExhausted(f"the action failed for a reason other limits cannot fix: {failure.message}")
