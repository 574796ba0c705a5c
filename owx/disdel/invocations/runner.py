"""The runner of actions annotated for estimation: learned limits in, measurements out, one raise
and re-run for an activation that ran out of the limit it was given."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from owx.disdel.invocations.annotation import ANNOTATION, AUTO, Estimated
from owx.disdel.invocations.history import LimitHistory, Measurements, size_class
from owx.disdel.settings import DisdelSettings
from owx.gateway.catalog import ResolvedAction
from owx.gateway.pipeline.invoke import Runner
from owx.gateway.settings import ActionLimits
from owx.platform.types import ActionSpec, RunOutcome, RunRequest

log = logging.getLogger(__name__)


class EstimatingRunner:
    """Runs activations of annotated actions on ``platform`` with limits from ``history``, within
    ``bounds()`` (the limits actions may have here)."""

    def __init__(self, platform: Runner, history: LimitHistory, bounds: Callable[[], ActionLimits],
                 settings: DisdelSettings) -> None:
        self.platform = platform
        self.history = history
        self.bounds = bounds
        self.settings = settings
        self._estimated: dict[str, Estimated] = {}  # by container key, filled by accepts()

    def accepts(self, resolved: ResolvedAction) -> bool:
        estimated = Estimated.of(resolved.doc)
        if estimated.any:
            self._estimated[resolved.container_key] = estimated
        return estimated.any

    def run(self, spec: ActionSpec, request: RunRequest) -> RunOutcome:
        estimated = self._estimated.get(spec.key, Estimated(memory=AUTO, timeout=AUTO))
        action, size = spec.key.split("#", 1)[0], size_class(request.value)
        namespace = request.namespace  # the invoking one: another tenant's calls never move the owner's limits
        known = self.history.get(namespace, action, size)
        memory, timeout = self._limits(spec, estimated, known)
        first = self._attempt(spec, request, memory, timeout)
        raised = self._raise(first, estimated, memory, timeout)
        self._learn(namespace, action, size, first, memory, timeout)
        if raised is None:
            return _annotated(first, memory, timeout, attempts=1, learned=len(known.peaks))
        memory, timeout = raised
        log.info("activation %s ran out of its %s: run once more with %d MB, %d ms", request.activation_id,
                 first.failure, memory, timeout)
        second = self._attempt(spec, request, memory, timeout)
        self._learn(namespace, action, size, second, memory, timeout)
        return _annotated(second, memory, timeout, attempts=2, learned=len(known.peaks), first_failure=first.failure)

    def _limits(self, spec: ActionSpec, estimated: Estimated, known: Measurements) -> tuple[int, int]:
        bounds, settings = self.bounds(), self.settings
        memory, timeout = spec.memory_mb, spec.timeout_ms
        if estimated.memory:
            memory = known.memory_mb(settings.invocation_memory_margin, settings.oom_growth) or memory
        if estimated.timeout:
            timeout = known.timeout_ms(settings.history_margin, settings.timeout_growth,
                                       settings.invocation_min_timeout_ms) or timeout
        return _within(memory, bounds.memory_mb.min, bounds.memory_mb.max), \
            _within(timeout, bounds.timeout_ms.min, bounds.timeout_ms.max)

    def _raise(self, outcome: RunOutcome, estimated: Estimated, memory: int, timeout: int) -> tuple[int, int] | None:
        """The limits of a second attempt, if ``outcome`` failed for an estimated limit that can grow."""
        bounds = self.bounds()
        if outcome.failure == "oom" and estimated.memory and memory < bounds.memory_mb.max:
            return _within(round(memory * self.settings.oom_growth), memory + 1, bounds.memory_mb.max), timeout
        if outcome.failure == "timeout" and estimated.timeout and timeout < bounds.timeout_ms.max:
            return memory, _within(round(timeout * self.settings.timeout_growth), timeout + 1, bounds.timeout_ms.max)
        return None

    def _attempt(self, spec: ActionSpec, request: RunRequest, memory: int, timeout: int) -> RunOutcome:
        sized = dataclasses.replace(spec, memory_mb=memory, timeout_ms=timeout,
                                    key=spec.key if memory == spec.memory_mb else f"{spec.key}~{memory}m")
        return self.platform.run(sized, request)

    def _learn(self, namespace: str, action: str, size: int, outcome: RunOutcome, memory: int, timeout: int) -> None:
        if outcome.failure == "oom":
            self.history.learn(namespace, action, size, failed_memory_mb=memory)
        elif outcome.failure == "timeout":
            self.history.learn(namespace, action, size, failed_timeout_ms=timeout)
        elif outcome.failure is None:
            self.history.learn(namespace, action, size, peak_bytes=outcome.memory_peak_bytes,
                               duration_ms=outcome.duration_ms)


def _annotated(outcome: RunOutcome, memory: int, timeout: int, *, attempts: int, learned: int,
               first_failure: str | None = None) -> RunOutcome:
    note: dict[str, Any] = {"memory": memory, "timeout": timeout, "attempts": attempts, "learnedFrom": learned}
    if first_failure:
        note["raisedAfter"] = first_failure
    applied = {"key": "limits", "value": {"memory": memory, "timeout": timeout}}  # the record's, as OpenWhisk's
    return dataclasses.replace(outcome, annotations=[*outcome.annotations, {"key": ANNOTATION, "value": note}, applied])


def _within(value: int, low: int, high: int) -> int:
    return max(low, min(high, int(value)))
