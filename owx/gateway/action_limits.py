"""Action limits: validated against the configured bounds and the platform, merged per field on update.

The largest memory an action may ask for is the configured maximum, or the platform's largest node
budget when that is smaller: an action that no node can hold is refused when it is created (400),
never accepted and then failed at every invoke.
"""

from __future__ import annotations

from owx.gateway.errors import bad_request
from owx.gateway.models import LimitsBody
from owx.gateway.settings import ActionLimits, Bound, GatewaySettings
from owx.platform.types import PlatformLimits

MB = 1024 * 1024

# (field in the body, settings attribute, what OpenWhisk calls it, unit in messages)
_FIELDS = (
    ("timeout", "timeout_ms", "duration", "milliseconds"),
    ("memory", "memory_mb", "memory size", "MB"),
    ("logs", "logs_mb", "log size", "MB"),
    ("concurrency", "concurrency", "concurrency", ""),
)


def effective(limits: ActionLimits, platform: PlatformLimits) -> ActionLimits:
    """``limits`` with the memory maximum lowered to what the platform's largest node holds."""
    node_mb = platform.max_action_memory_bytes // MB
    memory = limits.memory_mb
    if memory.max <= node_mb or node_mb < memory.min:
        return limits
    capped = Bound(min=memory.min, max=node_mb, default=min(memory.default, node_mb))
    return limits.model_copy(update={"memory_mb": capped})


def _check(value: int, bound: Bound, label: str, unit: str) -> int:
    suffix = f" {unit}" if unit else ""
    if value < bound.min:
        raise bad_request(f"{label} {value}{suffix} below allowed threshold of {bound.min}{suffix}")
    if value > bound.max:
        raise bad_request(f"{label} {value}{suffix} exceeds allowed threshold of {bound.max}{suffix}")
    return value


def merge_limits(current: dict[str, int] | None, body: LimitsBody | None, limits: ActionLimits) -> dict[str, int]:
    """Limits after an update: given fields replace, absent ones keep ``current`` or the default."""
    given = body.model_dump(exclude_none=True) if body else {}
    merged: dict[str, int] = {}
    for field, attr, label, unit in _FIELDS:
        bound: Bound = getattr(limits, attr)
        if field in given:
            merged[field] = _check(given[field], bound, label, unit)
        else:
            merged[field] = (current or {}).get(field, bound.default)
    return merged


def system_limits(limits: ActionLimits, gateway: GatewaySettings, platform: PlatformLimits) -> dict[str, int]:
    """The ``limits`` object of ``GET /api/v1`` (bytes for sizes, as OpenWhisk reports them), with the
    platform's memory: ``node_memory`` (the largest node budget) and ``pool_memory`` (all live nodes)."""
    return {
        "actions_per_minute": gateway.invocations_per_minute,
        "concurrent_actions": gateway.concurrent_invocations,
        "triggers_per_minute": gateway.trigger_fires_per_minute,
        "min_action_duration": limits.timeout_ms.min,
        "max_action_duration": limits.timeout_ms.max,
        "min_action_memory": limits.memory_mb.min * MB,
        "max_action_memory": limits.memory_mb.max * MB,
        "min_action_logs": limits.logs_mb.min * MB,
        "max_action_logs": limits.logs_mb.max * MB,
        "max_action_concurrency": limits.concurrency.max,
        "sequence_length": 50,
        "max_payload_bytes": gateway.max_payload_bytes,
        "node_memory": platform.max_action_memory_bytes,
        "pool_memory": platform.total_memory_bytes,
    }
