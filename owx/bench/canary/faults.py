"""Fault injection and cost metering for ``owx bench canary``.

:class:`FaultInjector` kills the runtime process of chosen activations with SIGKILL at a
chosen fraction of their expected duration (the workloads announce their pid in
``<dir>/pids/<activation id>``). The choice of victims and moments comes from a seeded
RNG per failure rate, so every strategy faces the same failures.

:class:`CostMeter` integrates GB-seconds of what a FaaS provider bills: containers
executing an activation, and replicas / standbys held warm for it.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

PRICE_PER_GB_S = 0.000017
SAMPLE_S = 0.05


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


class FaultInjector:
    """Kills each target's container once, at its moment."""

    def __init__(self, pid_dir: Path, targets: list[Target]) -> None:
        self.pid_dir = pid_dir
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
        while pending and not self._stop.wait(0.005):
            now = time.time()
            for target in list(pending):
                path = self.pid_dir / target.activation_id
                try:
                    announced = path.stat().st_mtime
                except FileNotFoundError:
                    continue
                if now < announced + target.fraction * target.expected_s:
                    continue
                pending.remove(target)
                try:
                    os.kill(int(path.read_text()), signal.SIGKILL)
                    target.killed_at, target.started_at = time.time(), announced
                except (ProcessLookupError, ValueError, FileNotFoundError):
                    pass  # finished before its moment: not a failure


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
