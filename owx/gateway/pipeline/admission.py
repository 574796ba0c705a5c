"""Per-namespace throttles: invocations per minute and invocations in flight (429 when exceeded)."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Iterator

from owx.gateway.errors import TOO_MANY_CONCURRENT, TOO_MANY_REQUESTS, ApiError

WINDOW_S = 60


class _RateWindow:
    """Counts events in the last minute with one bucket per second."""

    def __init__(self) -> None:
        self.buckets = [0] * WINDOW_S
        self.stamps = [0] * WINDOW_S

    def count(self, now_s: int) -> int:
        return sum(n for n, stamp in zip(self.buckets, self.stamps) if now_s - stamp < WINDOW_S)

    def add(self, now_s: int) -> None:
        slot = now_s % WINDOW_S
        if self.stamps[slot] != now_s:
            self.stamps[slot], self.buckets[slot] = now_s, 0
        self.buckets[slot] += 1


class Throttle:
    """OpenWhisk's entitlement checks: rate per minute and concurrency per namespace."""

    def __init__(self, per_minute: int, concurrent: int) -> None:
        self.per_minute = per_minute
        self.concurrent = concurrent
        self._rates: dict[str, _RateWindow] = {}
        self._in_flight: dict[str, int] = {}
        self._lock = threading.Lock()

    def admit(self, namespace: str) -> None:
        """Count one invocation or raise 429; pair with :meth:`release`."""
        now_s = int(time.time())
        with self._lock:
            window = self._rates.setdefault(namespace, _RateWindow())
            recent = window.count(now_s)
            if recent >= self.per_minute:
                raise ApiError(429, TOO_MANY_REQUESTS.format(count=recent + 1, allowed=self.per_minute))
            running = self._in_flight.get(namespace, 0)
            if running >= self.concurrent:
                raise ApiError(429, TOO_MANY_CONCURRENT.format(count=running + 1, allowed=self.concurrent))
            window.add(now_s)
            self._in_flight[namespace] = running + 1

    def release(self, namespace: str) -> None:
        with self._lock:
            self._in_flight[namespace] = max(0, self._in_flight.get(namespace, 1) - 1)

    @contextmanager
    def admitted(self, namespace: str) -> Iterator[None]:
        self.admit(namespace)
        try:
            yield
        finally:
            self.release(namespace)
