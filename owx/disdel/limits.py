"""The platform's action limits as DiSDeL plans with them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MB = 1024 * 1024


@dataclass(frozen=True)
class PlatformLimits:
    """Action memory / timeout bounds and the container pool's memory (MB, ms)."""

    memory_min_mb: int
    memory_max_mb: int
    timeout_min_ms: int
    timeout_max_ms: int
    pool_memory_mb: int

    @classmethod
    def from_api(cls, info: dict[str, Any], pool_memory_mb: int) -> "PlatformLimits":
        """From ``GET /api/v1``'s ``limits`` (sizes in bytes, as OpenWhisk reports them); the node's
        container pool from owx's ``container_pool_memory``, else ``pool_memory_mb``."""
        limits = info["limits"]
        if limits.get("container_pool_memory"):
            pool_memory_mb = int(limits["container_pool_memory"]) // MB
        return cls(
            memory_min_mb=int(limits["min_action_memory"]) // MB,
            memory_max_mb=int(limits["max_action_memory"]) // MB,
            timeout_min_ms=int(limits["min_action_duration"]),
            timeout_max_ms=int(limits["max_action_duration"]),
            pool_memory_mb=pool_memory_mb,
        )

    @classmethod
    def from_settings(cls) -> "PlatformLimits":
        """From owx's settings (``OWX_MEMORY_MB__MAX`` etc.), when no gateway is asked."""
        from owx.config import Settings

        settings = Settings()
        return cls(settings.memory_mb.min, settings.memory_mb.max, settings.timeout_ms.min,
                   settings.timeout_ms.max, settings.user_memory_mb * settings.nodes)

    @property
    def action_cap_mb(self) -> int:
        """The most memory one action can get: the action maximum, within one node's pool."""
        return min(self.memory_max_mb, self.pool_memory_mb)

    def raise_hint(self, need_mb: int) -> str:
        """Which settings to raise, and to what, for an action of ``need_mb`` to fit."""
        hints = []
        if self.memory_max_mb < need_mb:
            hints.append(f"OWX_MEMORY_MB__MAX (now {self.memory_max_mb}) to {need_mb}")
        if self.pool_memory_mb < need_mb:
            hints.append(f"OWX_USER_MEMORY_MB, the node's container pool (now {self.pool_memory_mb}), to {need_mb}")
        return "raise " + " and ".join(hints) if hints else "it fits"

    def clamp_memory(self, mb: int) -> int:
        return max(self.memory_min_mb, min(self.action_cap_mb, mb))

    def clamp_timeout(self, ms: int) -> int:
        return max(self.timeout_min_ms, min(self.timeout_max_ms, ms))
