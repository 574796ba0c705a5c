"""Fault injection and cost metering for ``owx bench canary``.

:class:`FaultInjector` kills chosen activations with SIGKILL at a chosen fraction of their
expected duration after they announced themselves (:class:`Announcements`, in
:mod:`owx.bench.canary.containers`: sandboxed actions name their container, whose cgroup's
processes are killed). The choice
of victims and moments comes from a seeded RNG per failure rate, so every strategy faces
the same failures. The injector shares the cores with the workload, so it looks for
announcements a few times a second and sleeps until each kill moment: polling every few
milliseconds cost the killed runs 8% of a core that the failure-free run did not pay.

:class:`CostMeter` integrates GB-seconds of what a FaaS provider bills: containers
executing an activation, and replicas / standbys held warm for it.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass
from typing import Protocol

PRICE_PER_GB_S = 0.000017
SAMPLE_S = 0.05
POLL_MIN_S, POLL_MAX_S = 0.005, 0.1


@dataclass
class Target:
    activation_id: str
    fraction: float  # of the expected duration, after the activation announced itself
    expected_s: float
    killed_at: float | None = None
    started_at: float | None = None  # when the killed execution announced itself


def choose_targets(count: int, rate: float, seed: int) -> list[float | None]:
    """For each of ``count`` invocations: None (spared) or the fraction of its run at which it dies."""
    rng = random.Random(seed * 1009 + round(rate * 1000))
    return [rng.uniform(0.15, 0.85) if rng.random() < rate else None for _ in range(count)]


class Announcements(Protocol):
    """Where running activations said they run, and how to kill them there."""

    def announced(self, activation_id: str) -> float | None:
        """When the activation's current execution announced itself (None: not running)."""

    def kill(self, activation_id: str) -> bool:
        """SIGKILL the activation's current execution; False if it was gone already."""


class FaultInjector:
    """Kills each target's container once, at its moment."""

    def __init__(self, announcements: Announcements, targets: list[Target]) -> None:
        self.announcements = announcements
        self.targets = targets
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="fault-injector", daemon=True)

    def start(self) -> "FaultInjector":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        pending = list(self.targets)
        while pending:
            poll_s = self._poll_s(pending)
            due = [(announced + t.fraction * t.expected_s, announced, t) for t in pending
                   for announced in [self.announcements.announced(t.activation_id)] if announced is not None]
            if not due:
                if self._stop.wait(poll_s):
                    return
                continue
            moment, announced, target = min(due, key=lambda d: d[0])
            wait_s = moment - time.time()
            if wait_s > 0:
                if self._stop.wait(min(wait_s, poll_s)):
                    return
                if wait_s > poll_s:
                    continue  # look again: an execution may have ended or re-announced meanwhile
            pending.remove(target)
            at = time.time()  # the first SIGKILL; the kill returns once the container is empty
            if self.announcements.kill(target.activation_id):  # else finished before its moment
                target.killed_at, target.started_at = at, announced

    @staticmethod
    def _poll_s(pending: list[Target]) -> float:
        """How often to look for announcements: a quarter of the earliest kill moment, 5–100 ms."""
        earliest = min(t.fraction * t.expected_s for t in pending)
        return min(POLL_MAX_S, max(POLL_MIN_S, earliest / 4))


class CostMeter:
    """Samples the platform's containers and sums billed GB-seconds."""

    def __init__(self, platform) -> None:
        self.platform = platform
        self.gb_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="cost-meter", daemon=True)

    def start(self) -> "CostMeter":
        self._thread.start()
        return self

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.gb_s * PRICE_PER_GB_S

    def _loop(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(SAMPLE_S):
            now = time.monotonic()
            billed = sum(c.memory_bytes for c in self.platform.containers()
                         if c.in_flight > 0 or c.state in ("replica", "claimed"))
            self.gb_s += billed / 2**30 * (now - last)
            last = now
