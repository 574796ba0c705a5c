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
        """From ``GET /api/v1``'s ``limits`` (sizes in bytes, as OpenWhisk reports them)."""
        limits = info["limits"]
        return cls(
            memory_min_mb=int(limits["min_action_memory"]) // MB,
            memory_max_mb=int(limits["max_action_memory"]) // MB,
            timeout_min_ms=int(limits["min_action_duration"]),
            timeout_max_ms=int(limits["max_action_duration"]),
            pool_memory_mb=pool_memory_mb,
        )

    @classmethod
    def from_settings(cls) -> "PlatformLimits":
        """From owx's settings (``OWX_LIMITS__MEMORY_MB__MAX`` etc.), when no gateway is asked."""
        from owx.settings import Settings

        settings = Settings()
        limits, platform = settings.limits, settings.platform
        return cls(limits.memory_mb.min, limits.memory_mb.max, limits.timeout_ms.min,
                   limits.timeout_ms.max, platform.user_memory_mb * platform.nodes)

    def clamp_memory(self, mb: int) -> int:
        return max(self.memory_min_mb, min(self.memory_max_mb, mb))

    def clamp_timeout(self, ms: int) -> int:
        return max(self.timeout_min_ms, min(self.timeout_max_ms, ms))
