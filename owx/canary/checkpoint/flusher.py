"""A background thread that moves staged segments to the blob tier, one at a time."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

from owx.canary.checkpoint.errors import CheckpointError

Item = tuple[str, int]


class Flusher:
    """Runs ``flush(function_id, seq)`` for submitted checkpoints, in the background.

    The thread starts with the first submission. Failures are reported to ``on_error``
    and dropped: the staged copy stays readable, and the next reader resubmits it.
    """

    def __init__(self, flush: Callable[[str, int], None], on_error: Callable[[str], None]) -> None:
        self._flush = flush
        self._on_error = on_error
        self._cond = threading.Condition()
        self._queue: deque[Item] = deque()
        self._pending: set[Item] = set()
        self._thread: threading.Thread | None = None
        self._closed = False

    def submit(self, function_id: str, seq: int) -> None:
        item = (function_id, seq)
        with self._cond:
            if self._closed or item in self._pending:
                return
            self._pending.add(item)
            self._queue.append(item)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="owx-checkpoint-flusher", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def forget(self, function_id: str, timeout: float | None = 30.0) -> bool:
        """Drop the queued flushes of ``function_id`` and wait for its flush under way, if any;
        False if that one did not end within ``timeout``."""
        with self._cond:
            dropped = [item for item in self._queue if item[0] == function_id]
            for item in dropped:
                self._queue.remove(item)
                self._pending.discard(item)
            self._cond.notify_all()  # drain() may be waiting for exactly these
            return self._cond.wait_for(lambda: all(item[0] != function_id for item in self._pending), timeout)

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until everything submitted so far is flushed; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._pending, timeout)

    def stop(self, timeout: float | None = None) -> bool:
        """Flush what is queued (up to ``timeout``), then end the thread; True if all was flushed."""
        drained = self.drain(timeout)
        with self._cond:
            self._closed = True
            self._queue.clear()
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout)
        return drained

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._queue or self._closed)
                if self._closed:
                    return
                item = self._queue.popleft()
            try:
                self._flush(*item)
            except CheckpointError as exc:
                self._on_error(f"flushing checkpoint {item[1]} of {item[0]!r} to the blob tier failed: {exc}")
            finally:
                with self._cond:
                    self._pending.discard(item)
                    self._cond.notify_all()
