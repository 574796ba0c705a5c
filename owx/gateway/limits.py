"""Action limits: validated against the configured bounds, merged per field on update."""

from __future__ import annotations

from owx.config import Bound, Settings
from owx.gateway.errors import bad_request
from owx.gateway.models import LimitsBody

# (field in the body, settings attribute, what OpenWhisk calls it, unit in messages)
_FIELDS = (
    ("timeout", "timeout_ms", "duration", "milliseconds"),
    ("memory", "memory_mb", "memory", "MB"),
    ("logs", "logs_mb", "log size", "MB"),
    ("concurrency", "concurrency", "concurrency", ""),
)


def _check(value: int, bound: Bound, label: str, unit: str) -> int:
    suffix = f" {unit}" if unit else ""
    if value < bound.min:
        raise bad_request(f"{label} {value}{suffix} below allowed threshold of {bound.min}{suffix}")
    if value > bound.max:
        raise bad_request(f"{label} {value}{suffix} exceeds allowed threshold of {bound.max}{suffix}")
    return value


def merge_limits(current: dict[str, int] | None, body: LimitsBody | None, settings: Settings) -> dict[str, int]:
    """Limits after an update: given fields replace, absent ones keep ``current`` or the default."""
    given = body.model_dump(exclude_none=True) if body else {}
    merged: dict[str, int] = {}
    for field, attr, label, unit in _FIELDS:
        bound: Bound = getattr(settings, attr)
        if field in given:
            merged[field] = _check(given[field], bound, label, unit)
        else:
            merged[field] = (current or {}).get(field, bound.default)
    return merged


def system_limits(settings: Settings) -> dict[str, int]:
    """The ``limits`` object of ``GET /api/v1`` (bytes for sizes, as OpenWhisk reports them)."""
    mb = 1024 * 1024
    return {
        "actions_per_minute": settings.invocations_per_minute,
        "concurrent_actions": settings.concurrent_invocations,
        "min_action_duration": settings.timeout_ms.min,
        "max_action_duration": settings.timeout_ms.max,
        "min_action_memory": settings.memory_mb.min * mb,
        "max_action_memory": settings.memory_mb.max * mb,
        "container_pool_memory": settings.user_memory_mb * mb,  # one node's budget (owx's addition)
        "min_action_logs": settings.logs_mb.min * mb,
        "max_action_logs": settings.logs_mb.max * mb,
        "max_action_concurrency": settings.concurrency.max,
        "sequence_length": 50,
        "max_payload_bytes": settings.max_payload_bytes,
    }
