"""The bounds DiSDeL plans within: the platform's action limits and its memory."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MB = 1024 * 1024


@dataclass(frozen=True)
class ActionBounds:
    """Action memory / timeout bounds (MB, ms), one node's memory (the most one action can hold) and
    all nodes' memory (what actions running at once share)."""

    memory_min_mb: int
    memory_max_mb: int
    timeout_min_ms: int
    timeout_max_ms: int
    node_memory_mb: int
    pool_memory_mb: int | None = None  # None: one node

    @property
    def total_memory_mb(self) -> int:
        return self.pool_memory_mb if self.pool_memory_mb is not None else self.node_memory_mb

    @classmethod
    def from_api(cls, info: dict[str, Any], fallback_memory_mb: int) -> "ActionBounds":
        """From ``GET /api/v1``'s ``limits`` (bytes, as OpenWhisk reports them); owx adds ``node_memory``
        and ``pool_memory``, an OpenWhisk without them is taken to have ``fallback_memory_mb``."""
        limits = info["limits"]
        node = int(limits.get("node_memory") or fallback_memory_mb * MB) // MB
        pool = int(limits.get("pool_memory") or node * MB) // MB
        return cls(
            memory_min_mb=int(limits["min_action_memory"]) // MB,
            memory_max_mb=int(limits["max_action_memory"]) // MB,
            timeout_min_ms=int(limits["min_action_duration"]),
            timeout_max_ms=int(limits["max_action_duration"]),
            node_memory_mb=node,
            pool_memory_mb=pool,
        )

    @classmethod
    def from_settings(cls) -> "ActionBounds":
        """From owx's settings (``OWX_LIMITS__MEMORY_MB__MAX`` etc.), when no gateway is asked."""
        from owx.settings import Settings

        settings = Settings()
        limits, platform = settings.limits, settings.platform
        return cls(limits.memory_mb.min, limits.memory_mb.max, limits.timeout_ms.min, limits.timeout_ms.max,
                   platform.user_memory_mb, platform.user_memory_mb * platform.nodes)

    @property
    def action_cap_mb(self) -> int:
        """The most memory one action can get: the action maximum, within one node's memory."""
        return min(self.memory_max_mb, self.node_memory_mb)

    def raise_hint(self, need_mb: int) -> str:
        """Which settings to raise, and to what, for an action of ``need_mb`` to fit."""
        hints = []
        if self.memory_max_mb < need_mb and self.memory_max_mb < self.node_memory_mb:
            hints.append(f"OWX_LIMITS__MEMORY_MB__MAX (now {self.memory_max_mb}) to {need_mb}")
        elif self.memory_max_mb < need_mb:  # the gateway reports its maximum capped at one node's memory
            hints.append(f"OWX_LIMITS__MEMORY_MB__MAX to {need_mb} if it is lower")
        if self.node_memory_mb < need_mb:
            hints.append(f"OWX_PLATFORM__USER_MEMORY_MB, one node's container memory (now {self.node_memory_mb}), "
                         f"to {need_mb}")
        return "raise " + " and ".join(hints) if hints else "it fits"

    def clamp_memory(self, mb: int) -> int:
        return max(self.memory_min_mb, min(self.action_cap_mb, mb))

    def clamp_timeout(self, ms: int) -> int:
        return max(self.timeout_min_ms, min(self.timeout_max_ms, ms))
