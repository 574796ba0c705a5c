"""Timeout manager: a time limit for each action before it runs.

In order of preference:
1. history of the same (model, data, batch): start-up + seconds per sample-epoch x the
   action's samples and epochs, times a margin (and at least a timeout that a past
   time-out proved necessary);
2. the user's expected cost e_cost: e_time = (e_cost / c_d) / (μ x m_e), μ being the
   price of one GB-second and m_e the action's memory in GB;
3. the platform's maximum.
Always clamped to the platform's bounds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from owx.disdel.history import HistoryRecord
from owx.disdel.action_bounds import ActionBounds

Source = Literal["history", "expected cost", "platform maximum"]


@dataclass(frozen=True)
class TimeoutChoice:
    ms: int
    source: Source


class TimeoutManager:
    def __init__(self, limits: ActionBounds, unit_price_gb_s: float, margin: float = 1.5, minimum_ms: int = 30_000) -> None:
        self.limits = limits
        self.unit_price = unit_price_gb_s
        self.margin = margin
        self.minimum_ms = minimum_ms

    def _bounded(self, ms: float, source: Source) -> TimeoutChoice:
        return TimeoutChoice(self.limits.clamp_timeout(max(self.minimum_ms, math.ceil(ms))), source)

    def training(self, history: HistoryRecord | None, samples: int, epochs: int, actions: int, memory_mb: int,
                 expected_cost: float | None) -> TimeoutChoice:
        """Limit for one training action on ``samples`` samples for ``epochs`` epochs."""
        if history is not None and history.sec_per_sample_epoch is not None:
            seconds = (history.startup_s or 0.0) + history.sec_per_sample_epoch * samples * epochs
            choice = self._bounded(1000 * self.margin * seconds, "history")
            if history.timeout_floor_ms and history.timeout_floor_ms > choice.ms:
                choice = self._bounded(history.timeout_floor_ms, "history")
            return choice
        if expected_cost is not None:
            seconds = (expected_cost / actions) / (self.unit_price * memory_mb / 1024)
            return self._bounded(1000 * seconds, "expected cost")
        return TimeoutChoice(self.limits.timeout_max_ms, "platform maximum")

    def aggregation(self, history: HistoryRecord | None) -> TimeoutChoice:
        """Limit for one aggregation action."""
        if history is not None and history.aggregate_s is not None:
            return self._bounded(1000 * self.margin * history.aggregate_s, "history")
        return TimeoutChoice(self.limits.timeout_max_ms, "platform maximum")
