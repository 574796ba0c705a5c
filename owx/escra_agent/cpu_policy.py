"""Escra's per-period CPU quota algorithm (paper §2.4.4.1) over user-space telemetry.

The paper's kernel hook reports, per CFS period, the quota, the unused runtime
and whether the group was throttled.  Here one agent sample covers about one
period (100 ms): ``used_us`` comes from ``cpuacct.usage`` and the throttle flag
from the ``nr_throttled`` delta, both normalised to one 100 ms period.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from owx.escra_agent.messages import Sample
from owx.escra_agent.settings import CFS_PERIOD_US, AllocatorParams


@dataclass
class CpuWindow:
    """The two sliding statistics of the last ``n`` periods of one container."""

    size: int
    throttles: deque[float] = field(default_factory=deque)
    unused_us: deque[float] = field(default_factory=deque)
    last_used_us: float = 0.0  # CPU used in the latest period, µs per 100 ms

    def push(self, sample: Sample, quota_us: int) -> None:
        periods = max(1, sample.periods)
        used = sample.used_us * CFS_PERIOD_US / sample.interval_us
        self.last_used_us = used
        self.throttles.append(min(1.0, sample.throttled_periods / periods))
        self.unused_us.append(max(0.0, quota_us - used))
        while len(self.throttles) > self.size:
            self.throttles.popleft()
            self.unused_us.popleft()

    @property
    def throttled_now(self) -> bool:
        return bool(self.throttles) and self.throttles[-1] > 0

    @property
    def throttle_ratio(self) -> float:
        """Σ th[t] / n: the share of the last n periods that were throttled (0..1)."""
        return sum(self.throttles) / self.size

    @property
    def mean_unused_us(self) -> float:
        """Σ (q[t] − u[t]) / n: average runtime left unused per period, µs."""
        return sum(self.unused_us) / self.size


def next_quota(quota_us: int, window: CpuWindow, unallocated_us: int, params: AllocatorParams) -> int:
    """The quota for the next period, in µs per 100 ms period.

    Raise (throttled in the last period): ``q + (Σth/n) · Υ · (Ωl − Σq)``.  The
    extracted formula writes the bracket as "Ωl − Σ C(i)q", i.e. the
    application's *unallocated* runtime, and the raise can never exceed it, so
    the result is capped there (with Υ = 20 one throttle in a 10-period window
    claims all unallocated runtime; the shrink rule hands back what is unused).

    Shrink (``Σ(q − u)/n > γ``, γ read in cores, i.e. as a fraction of one
    period): ``q − κ · Σ(q − u)/n``, never below the last period's usage nor
    ``min_quota_us`` — the paper does not say how low a quota may go; not
    cutting below the usage just measured keeps a steady load unthrottled.
    """
    if window.throttled_now:
        if unallocated_us <= 0:
            return quota_us
        raise_us = window.throttle_ratio * params.upsilon * unallocated_us
        return quota_us + int(min(raise_us, unallocated_us))
    unused = window.mean_unused_us
    if unused > params.gamma * CFS_PERIOD_US:
        floor = max(params.min_quota_us, int(window.last_used_us))
        return min(quota_us, max(floor, int(quota_us - params.kappa * unused)))
    return quota_us
