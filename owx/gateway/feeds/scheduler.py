"""A thread that fires alarms when they are due; the fires themselves run on a small pool.

``on_due(alarm)`` fires one alarm and answers the alarm as it is afterwards (its count of fires
and status updated), or None when it must never fire again. Alarms are keyed by trigger, so
adding one for a trigger replaces the one it had.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from owx.gateway.feeds.schedule import Alarm

log = logging.getLogger(__name__)
FIRE_THREADS = 4
MAX_WAIT_S = 3600.0  # the longest one wait for the next due alarm (a condition's wait takes no year-long timeout)
OnDue = Callable[[Alarm], Alarm | None]


class AlarmScheduler:
    """Due times in a heap; entries of replaced or removed alarms are skipped when they come up."""

    def __init__(self, on_due: OnDue) -> None:
        self.on_due = on_due
        self._alarms: dict[str, Alarm] = {}
        self._generation: dict[str, int] = {}
        self._heap: list[tuple[float, int, str, int]] = []
        self._order = itertools.count()
        self._cond = threading.Condition()
        self._closed = False
        self._pool = ThreadPoolExecutor(FIRE_THREADS, thread_name_prefix="owx-alarm-fire")
        self._thread = threading.Thread(target=self._loop, name="owx-alarms", daemon=True)
        self._thread.start()

    def put(self, alarm: Alarm, after_s: float | None = None) -> None:
        """Schedule ``alarm`` (replacing its trigger's earlier one) from ``after_s`` (default: now)."""
        with self._cond:
            self._schedule(alarm, time.time() if after_s is None else after_s)

    def remove(self, key: str) -> Alarm | None:
        with self._cond:
            return self._drop(key)

    def _schedule(self, alarm: Alarm, after_s: float) -> None:
        generation = self._generation.get(alarm.key, 0) + 1
        self._generation[alarm.key] = generation
        self._alarms[alarm.key] = alarm
        due = alarm.next_fire(after_s)
        if due is not None:
            heapq.heappush(self._heap, (due, next(self._order), alarm.key, generation))
        self._cond.notify()

    def _drop(self, key: str) -> Alarm | None:
        self._generation[key] = self._generation.get(key, 0) + 1
        return self._alarms.pop(key, None)

    def get(self, key: str) -> Alarm | None:
        with self._cond:
            return self._alarms.get(key)

    def scheduled(self) -> int:
        """Alarms that will fire again."""
        with self._cond:
            return sum(1 for alarm in self._alarms.values() if alarm.active)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout=5)
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._closed and (not self._heap or self._heap[0][0] > time.time()):
                    self._cond.wait(min(self._heap[0][0] - time.time(), MAX_WAIT_S) if self._heap else None)
                if self._closed:
                    return
                due, _, key, generation = heapq.heappop(self._heap)
                if self._generation.get(key) != generation:
                    continue
                alarm = self._alarms[key]
            self._pool.submit(self._fire, alarm, due, generation)

    def _fire(self, alarm: Alarm, due: float, generation: int) -> None:
        try:
            after = self.on_due(alarm)
        except Exception:  # noqa: BLE001 - one failed fire must not stop the schedule
            log.exception("alarm of %s failed to fire", alarm.key)
            after = alarm
        with self._cond:
            if self._generation.get(alarm.key) != generation:
                return  # replaced or removed while it fired
            if after is None:
                self._drop(alarm.key)
            else:
                self._schedule(after, due)
