"""A bounded set of worker threads that take queued work round-robin by namespace.

Activations run on these threads (a platform call blocks for the activation's duration). Their
number is fixed, whatever the namespaces' limits, so a flood queues instead of growing threads;
one namespace's backlog never delays another's (each takes its turn), and no namespace holds more
than ``per_key`` of the threads at once, so long-running activations of one cannot take them all.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Work:
    """One queued call and its future."""

    key: str
    call: Callable[[], Any]
    future: Future[Any]


class FairWorkers:
    """``workers`` threads serving per-key FIFO queues in turn, at most ``per_key`` at once per key."""

    def __init__(self, workers: int, name: str, per_key: int | None = None) -> None:
        self._queues: OrderedDict[str, deque[Work]] = OrderedDict()
        self._per_key = per_key or workers
        self._busy: dict[str, int] = {}
        self._cond = threading.Condition()
        self._closed = False
        self._running = 0
        self._queued = 0
        self._threads = [threading.Thread(target=self._serve, name=f"{name}-{i}", daemon=True) for i in range(workers)]
        for thread in self._threads:
            thread.start()

    def submit(self, key: str, call: Callable[[], Any]) -> Future[Any]:
        """Queue ``call`` under ``key``; its result (or exception) arrives on the future."""
        work = Work(key, call, Future())
        with self._cond:
            if self._closed:
                raise RuntimeError("the workers are shutting down")
            self._queues.setdefault(key, deque()).append(work)
            self._queued += 1
            self._cond.notify()
        return work.future

    def load(self) -> tuple[int, int]:
        """(calls running, calls queued)."""
        with self._cond:
            return self._running, self._queued

    def shutdown(self, wait_s: float) -> None:
        """Take no more work, cancel what never started, wait up to ``wait_s`` for what runs."""
        with self._cond:
            self._closed = True
            left = [work for queue in self._queues.values() for work in queue]
            self._queues.clear()
            self._queued = 0
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._running == 0, wait_s)
        for work in left:
            work.future.cancel()

    def _ready(self) -> str | None:
        """The first key in turn with queued work and a free share of threads."""
        return next((key for key in self._queues if self._busy.get(key, 0) < self._per_key), None)

    def _next(self) -> Work | None:
        with self._cond:
            self._cond.wait_for(lambda: self._ready() is not None or self._closed)
            key = self._ready()
            if key is None:
                return None
            queue = self._queues[key]
            work = queue.popleft()
            self._queues.move_to_end(key)  # the next key takes the next turn
            if not queue:
                del self._queues[key]
            self._queued -= 1
            self._running += 1
            self._busy[key] = self._busy.get(key, 0) + 1
            return work

    def _serve(self) -> None:
        while (work := self._next()) is not None:
            if work.future.set_running_or_notify_cancel():
                try:
                    work.future.set_result(work.call())
                except BaseException as exc:  # noqa: BLE001 - the caller gets it through the future
                    work.future.set_exception(exc)
            with self._cond:
                self._running -= 1
                self._busy[work.key] -= 1
                if not self._busy[work.key]:
                    del self._busy[work.key]
                if self._closed and not self._running:
                    self._cond.notify_all()  # shutdown waits for this
                # no wake-up otherwise: this thread takes the next work itself, including what the
                # share it just freed lets run (waking every idle worker per call cost milliseconds)
