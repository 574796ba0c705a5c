"""Opting in: the ``canary`` annotation of an action, and Canary's own settings.

An action whose annotations hold ``canary`` is stateful and fault tolerant::

    {"key": "canary", "value": {"checkpoint": "explicit", "interval_s": 1.0,
                                "replication": "dynamic"}}

``value: true`` takes every default. Actions without the annotation keep OpenWhisk's
semantics (at most once, no retry). ``fault_tolerance`` selects what happens when a
container dies: ``canary`` (replica + latest checkpoint, the default) or one of the
baselines the benchmark compares with — ``retry`` (from scratch, what OpenWhisk users
do by hand), ``request-replication`` (``copies`` concurrent executions, first answer
wins) and ``active-standby`` (a warm standby takes over, from scratch).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from owx.common.validation_errors import problems

ANNOTATION = "canary"

CheckpointMode = Literal["explicit", "implicit"]
Replication = Literal["dynamic", "aggressive", "lenient"]
FaultTolerance = Literal["canary", "retry", "request-replication", "active-standby"]


class CanaryOptions(BaseModel):
    """The value of an action's ``canary`` annotation."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    checkpoint: CheckpointMode = "implicit"
    interval_s: float = Field(1.0, gt=0, le=3600, description="seconds between implicit checkpoints")
    replication: Replication = "dynamic"
    fault_tolerance: FaultTolerance = "canary"
    copies: int = Field(2, ge=2, le=8, description="concurrent executions under request-replication")
    max_attempts: int = Field(4, ge=1, le=20, description="executions of one activation before it fails")


class BadAnnotation(ValueError):
    """The ``canary`` annotation cannot be read; the message says why."""


def parse_options(value: Any, strict: bool = False) -> CanaryOptions:
    """The options a ``canary`` annotation value asks for; raises :class:`BadAnnotation`. ``strict``
    (an action being stored) takes each option in its own JSON type only: ``"interval_s": "1"`` is
    refused there, and read as 1.0 from an action stored before the check was strict."""
    if value is True:
        return CanaryOptions()
    if not isinstance(value, dict):
        raise BadAnnotation(f"annotation 'canary' must be true or an object, got {value!r:.80}")
    try:
        return CanaryOptions.model_validate(value, strict=strict)
    except ValidationError as exc:
        raise BadAnnotation(f"annotation 'canary' is invalid: {problems(exc)}") from None


def options_of(doc: dict[str, Any]) -> CanaryOptions | None:
    """The options of an action document, or None when it does not opt in (or opts out: false/null)."""
    for item in doc.get("annotations", ()):
        if item.get("key") == ANNOTATION:
            value = item.get("value")
            return None if value in (False, None) else parse_options(value)
    return None
