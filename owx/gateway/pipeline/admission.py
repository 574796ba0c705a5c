"""Per-namespace throttles: invocations per minute and invocations in flight.

Plain invocations over a limit get 429, as in OpenWhisk. Invocations that ask to wait
(Canary's stateful actions and jobs) are queued instead and admitted when the namespace
has room; a queued entry of ``count`` invocations is admitted whole or not at all (gang
admission), in FIFO order within its namespace, so a partly started fan-out can never hold the pool,
and an entry that cannot be admitted holds back its own namespace's later entries, nobody else's.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable

from owx.gateway.errors import TOO_MANY_CONCURRENT, TOO_MANY_REQUESTS, ApiError, bad_request

WINDOW_S = 60


class _RateWindow:
    """Counts events in the last minute with one bucket per second (and their running total, so a
    count costs nothing until the second changes)."""

    def __init__(self) -> None:
        self.buckets = [0] * WINDOW_S
        self.stamps = [0] * WINDOW_S
        self._total = 0
        self._total_at = 0  # the second the total is for

    def count(self, now_s: int) -> int:
        if now_s != self._total_at:
            self._total = sum(n for n, stamp in zip(self.buckets, self.stamps) if now_s - stamp < WINDOW_S)
            self._total_at = now_s
        return self._total

    def add(self, now_s: int) -> None:
        slot = now_s % WINDOW_S
        if self.stamps[slot] != now_s:
            self.stamps[slot], self.buckets[slot] = now_s, 0
        self.buckets[slot] += 1
        if now_s == self._total_at:
            self._total += 1


Reserve = Callable[[], bool]  # an extra all-or-nothing claim (e.g. memory on nodes); True if taken
JOB_TOO_LARGE = "A job of {count} invocations can never run: the namespace allows {allowed} at once."


@dataclass(eq=False)
class _Waiting:
    namespace: str
    count: int
    admitted: Callable[[], None]
    reserve: Reserve | None


class Throttle:
    """OpenWhisk's entitlement checks: rate per minute and concurrency per namespace."""

    def __init__(self, per_minute: int, concurrent: int) -> None:
        self.per_minute = per_minute
        self.concurrent = concurrent
        self._rates: dict[str, _RateWindow] = {}
        self._in_flight: dict[str, int] = {}
        self._waiting: list[_Waiting] = []
        self._lock = threading.Lock()

    def admit(self, namespace: str) -> None:
        """Count one invocation or raise 429; pair with :meth:`release`."""
        now_s = int(time.time())
        with self._lock:
            window = self._count_rate(namespace, 1, now_s)
            running = self._in_flight.get(namespace, 0)
            if running >= self.concurrent:
                raise ApiError(429, TOO_MANY_CONCURRENT.format(count=running, allowed=self.concurrent))
            window.add(now_s)
            self._in_flight[namespace] = running + 1

    def check_rate(self, namespace: str) -> None:
        """429 if ``namespace`` has spent its invocations of the last minute (nothing is counted)."""
        now_s = int(time.time())
        with self._lock:
            self._count_rate(namespace, 1, now_s)

    def count_refused(self, namespace: str) -> None:
        """Count an invoke refused before admission (its body, or its action did not resolve, or not for
        this caller) against the rate, as OpenWhisk's entitlement check counts every attempt: such
        invokes, each a parse of up to a megabyte of JSON or a store read, are not free of the limit."""
        now_s = int(time.time())
        with self._lock:
            self._window(namespace).add(now_s)

    def charge(self, namespace: str, count: int) -> None:
        """Count ``count`` invocations that will wait for admission against the rate, before
        anything of them is journalled: over the rate a 429, a job larger than the concurrency
        limit a 400 (nothing counted either way)."""
        if count > self.concurrent:
            raise bad_request(JOB_TOO_LARGE.format(count=count, allowed=self.concurrent))
        now_s = int(time.time())
        with self._lock:
            window = self._count_rate(namespace, count, now_s)
            for _ in range(count):
                window.add(now_s)

    def enqueue(self, namespace: str, count: int, admitted: Callable[[], None], reserve: Reserve | None = None) -> None:
        """Queue ``count`` invocations (:meth:`charge`d) that start together when the namespace has
        room for all of them and ``reserve()`` succeeds; then ``admitted()`` runs (once, without
        locks held). Each admitted invocation is paired with one :meth:`release`."""
        with self._lock:
            self._waiting.append(_Waiting(namespace, count, admitted, reserve))
        self.pump()

    def queued(self, namespace: str) -> int:
        """Invocations of ``namespace`` waiting for admission."""
        with self._lock:
            return sum(w.count for w in self._waiting if w.namespace == namespace)

    def backlog(self) -> tuple[int, int]:
        """(invocations waiting for admission, invocations admitted and not yet released), all namespaces."""
        with self._lock:
            return sum(w.count for w in self._waiting), sum(self._in_flight.values())

    def release(self, namespace: str) -> bool:
        """One invocation of ``namespace`` ended; True if invocations wait for admission (then call
        :meth:`pump`, on a thread: an entry's reservation may block)."""
        with self._lock:
            self._in_flight[namespace] = max(0, self._in_flight.get(namespace, 1) - 1)
            return bool(self._waiting)

    def pump(self) -> None:
        """Admit waiting entries that fit now, oldest first (call when capacity frees).

        An entry over its namespace's concurrency, or whose ``reserve`` fails, holds back its own
        namespace's later entries only: one tenant's job that does not fit (it asked for a whole
        node, and keeps a container of its own busy) held back every tenant's behind it for good.
        A big job may wait while other namespaces' smaller ones take the memory it waits for.
        """
        ready: list[_Waiting] = []
        with self._lock:
            full: set[str] = set()
            for entry in list(self._waiting):
                if entry.namespace in full:
                    continue
                running = self._in_flight.get(entry.namespace, 0)
                if running + entry.count > self.concurrent:
                    full.add(entry.namespace)
                    continue
                if entry.reserve is not None and not entry.reserve():
                    full.add(entry.namespace)
                    continue
                self._waiting.remove(entry)
                self._in_flight[entry.namespace] = running + entry.count
                ready.append(entry)
        for entry in ready:
            entry.admitted()

    def _window(self, namespace: str) -> _RateWindow:
        window = self._rates.get(namespace)
        if window is None:
            window = self._rates[namespace] = _RateWindow()
        return window

    def _count_rate(self, namespace: str, count: int, now_s: int) -> _RateWindow:
        window = self._window(namespace)
        recent = window.count(now_s)
        if recent + count > self.per_minute:
            raise ApiError(429, TOO_MANY_REQUESTS.format(count=recent + count, allowed=self.per_minute))
        return window

