"""Escra's per-period CPU quota algorithm (paper §2.4.4.1) over user-space telemetry.

The paper's kernel hook reports, per CFS period, the quota, the unused runtime
and whether the group was throttled.  Here one agent sample covers about one
period (100 ms): ``used_us`` comes from ``cpuacct.usage``, the throttle flag
from the ``nr_throttled`` delta and the throttled time from ``throttled_time``,
all normalised to one 100 ms period.

How the extracted formulas are read (units: runtime in µs per 100 ms period):

* **Raise** (throttled in period t): ``q + (Σth/n) · (Υ/100) · (Ωl − Σq)``.
  ``Ωl − Σq`` is the application's unallocated runtime and ``Σth/n`` the
  share of the last n periods that were throttled (0..1).  Υ = 20 is read as a
  *percentage*: a container throttled in every period of its window claims 20%
  of what is unallocated per period, one throttle in a 10-period window 2%.
  Read as a plain factor, Υ = 20 makes a single throttle in a 10-period window
  claim 2× the unallocated runtime, i.e. all of it, so the limit would jump to
  the application's whole budget on any throttle (a sawtooth, not the paper's
  figure 2.2 where the limit stays just above usage).  Sustained throttling
  grows the raise each period (the ratio climbs towards 1), so a step in
  demand is followed within about a second.
* **Lower** (the unused runtime of period t, ``q[t] − u[t]``, exceeds γ):
  ``q − κ · Σ(q − u)/n``, applied in every such period.  γ = 0.2 is read as a
  *fraction of the quota* (lower once more than 20% of the quota went unused),
  like κ a dimensionless share; read in the stated unit of runtime (0.2 ms) it
  would fire on every period with any unused runtime at all.  The paper gives
  no lower bound; the quota is not cut below the usage just measured nor below
  ``min_quota_us`` (by default the kernel's own minimum, 1 ms), because the
  windowed mean lags behind a shrinking quota and would otherwise overshoot
  below a steady load.
* **Fair share** (owx's addition, ``fair_share``): a throttled container whose
  quota is below its equal split of the application's limit (eq. 2.1's initial
  quota) gets, at once, the runtime it asked for in that period (used plus
  throttled time) up to that split, as far as unallocated runtime allows; the
  allocator takes the rest back from containers above their split (never below
  it), so a hog that grew while the budget was free cannot starve a newcomer.
  The raise above claims a few percent of the unallocated runtime per period,
  so a container whose requests clump stays for several periods below what a
  static split would have given it, and its tail latency is worse than
  static's; with this rule Escra never holds a busy container below the static
  split while runtime is free, still gives idle ones almost nothing, and a
  container throttled by a hair is not handed its whole split.
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
    last_wanted_us: float = 0.0  # ... plus the time it spent throttled: the runtime it asked for

    def push(self, sample: Sample, quota_us: int) -> None:
        periods = max(1, sample.periods)
        used = sample.used_us * CFS_PERIOD_US / sample.interval_us
        self.last_used_us = used
        self.last_wanted_us = used + sample.throttled_us * CFS_PERIOD_US / sample.interval_us
        self.throttles.append(min(1.0, sample.throttled_periods / periods))
        self.unused_us.append(max(0.0, quota_us - used))
        while len(self.throttles) > self.size:
            self.throttles.popleft()
            self.unused_us.popleft()

    @property
    def throttled_now(self) -> bool:
        return bool(self.throttles) and self.throttles[-1] > 0

    @property
    def last_unused_us(self) -> float:
        """q[t] − u[t]: runtime left unused in the latest period, µs."""
        return self.unused_us[-1] if self.unused_us else 0.0

    @property
    def throttle_ratio(self) -> float:
        """Σ th[t] / n: the share of the last n periods that were throttled (0..1)."""
        return sum(self.throttles) / self.size

    @property
    def mean_unused_us(self) -> float:
        """Σ (q[t] − u[t]) / n: average runtime left unused per period, µs."""
        return sum(self.unused_us) / self.size


def fair_target_us(quota_us: int, window: CpuWindow, params: AllocatorParams, fair_us: int) -> int:
    """What the fair share lifts a throttled container below its equal split ``fair_us`` to: the
    runtime it asked for in the latest period, up to the split; 0 where the rule does not apply."""
    if not (params.fair_share and window.throttled_now and quota_us < fair_us):
        return 0
    return min(fair_us, int(window.last_wanted_us))


def next_quota(quota_us: int, window: CpuWindow, unallocated_us: int, params: AllocatorParams,
               fair_us: int = 0) -> int:
    """The quota for the next period, in µs per 100 ms period (see the module docstring);
    ``fair_us`` is the container's equal split of its application's limit."""
    if window.throttled_now:
        if unallocated_us <= 0:
            return quota_us
        share = min(1.0, window.throttle_ratio * params.upsilon / 100)
        raised = quota_us + int(share * unallocated_us)
        return max(raised, min(fair_target_us(quota_us, window, params, fair_us), quota_us + unallocated_us))
    if window.last_unused_us > params.gamma * quota_us:
        floor = max(params.min_quota_us, int(window.last_used_us))
        return min(quota_us, max(floor, int(quota_us - params.kappa * window.mean_unused_us)))
    return quota_us
