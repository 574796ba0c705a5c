"""Write-behind of activation records: callers queue, one writer thread commits batches.

What is queued: records (``ActivationRow``) and accepted-activation entries (``AcceptedRow``,
the crash journal). Each write returns a future that completes when its batch is committed,
so a caller can answer only once what it answers for is durable, while one commit serves
many callers (group commit). A queued record stays readable until its batch is committed,
so reads see every record put before them. Failed commits are retried with backoff; the queue
is bounded in rows and in bytes (workers hand records on without waiting for their commit, so a
tenant whose actions return large results faster than the database takes them meets this bound),
so a database that stays behind turns into waits, then `StoreUnavailable`, at `submit` instead of
unbounded memory.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Union

from owx.gateway.stores.activations import AcceptedRow, ActivationRow, to_accepted, to_row
from owx.gateway.stores.base import StoreUnavailable

log = logging.getLogger(__name__)

Row = Union[ActivationRow, AcceptedRow]
Commit = Callable[[list[Row]], None]
Fetch = Callable[[str], "tuple[str, dict[str, Any]] | None"]


@dataclass(frozen=True)
class WriterOptions:
    """Bounds of the write-behind queue."""

    max_pending: int = 50_000  # queued rows before `submit` waits, then fails
    max_pending_bytes: int = 256 * 1024 * 1024  # queued JSON text before `submit` waits, then fails
    max_batch: int = 500  # rows per commit
    submit_wait_s: float = 5.0  # how long `submit` waits for room in a full queue
    close_wait_s: float = 30.0  # how long `close` keeps retrying to write what is queued


class WriteBehind:
    """A bounded queue of rows drained by one thread calling ``commit(batch)``.

    ``commit`` must be idempotent per row (records whose ``activation_id`` exists are skipped,
    accepted entries likewise), since a batch whose commit raised is retried whole. It writes
    a batch's accepted entries before its records and drops the entries of recorded activations.
    """

    def __init__(self, commit: Commit, name: str, options: WriterOptions | None = None) -> None:
        self._commit = commit
        options = options or WriterOptions()
        self._max_pending = options.max_pending
        self._max_pending_bytes = options.max_pending_bytes
        self._pending_bytes = 0
        self._max_batch = options.max_batch
        self._submit_wait_s = options.submit_wait_s
        self._close_wait_s = options.close_wait_s
        self._queue: deque[tuple[int, Row, Future[None]]] = deque()
        self._records: dict[str, ActivationRow] = {}  # queued records, readable until committed
        self._cond = threading.Condition()
        self._seq = 0
        self._committed = 0
        self._last_error: BaseException | None = None
        self._closing = False
        self._close_deadline = float("inf")
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, row: Row) -> Future[None]:
        """Queue ``row``; the future completes when it is committed. A record whose id is already
        queued is not queued again (first write wins): its future completes with the first."""
        with self._cond:
            if not self._cond.wait_for(lambda: not self.backlogged() or self._closing, self._submit_wait_s):
                raise StoreUnavailable(
                    f"{len(self._queue)} activation records wait to be written ({self._pending_bytes} bytes); "
                    f"last error: {self._last_error}")
            if self._closing:
                raise StoreUnavailable("activation store is closed")
            done: Future[None] = Future()
            if isinstance(row, ActivationRow):
                if row.activation_id in self._records:
                    done.set_result(None)
                    return done
                self._records[row.activation_id] = row
            self._seq += 1
            self._queue.append((self._seq, row, done))
            self._pending_bytes += len(row.text)
            self._cond.notify_all()
            return done

    def backlogged(self) -> bool:
        """Whether :meth:`submit` would now wait for room (a row larger than the byte bound still
        gets in when the queue is below it)."""
        return len(self._queue) >= self._max_pending or self._pending_bytes >= self._max_pending_bytes

    def read(self, activation_id: str, fetch: Fetch) -> tuple[str, dict[str, Any]] | None:
        """(namespace, record) of ``activation_id``: the committed one first (first write
        wins), else the queued one, else ``fetch`` again in case it was committed meanwhile.
        While the database is unavailable, queued records are still readable."""
        try:
            found = fetch(activation_id)
        except StoreUnavailable:
            if (queued := self._queued(activation_id)) is None:
                raise
            return queued
        return found or self._queued(activation_id) or fetch(activation_id)

    def _queued(self, activation_id: str) -> tuple[str, dict[str, Any]] | None:
        row = self._records.get(activation_id)
        return None if row is None else (row.namespace, json.loads(row.text))

    def flush(self, timeout: float | None = None) -> None:
        """Wait until everything submitted before this call is committed."""
        with self._cond:
            target = self._seq
            if not self._cond.wait_for(lambda: self._committed >= target, timeout):
                raise StoreUnavailable(
                    f"{target - self._committed} activation records not yet written within {timeout} s; "
                    f"last error: {self._last_error}")

    def close(self) -> None:
        """Refuse new rows, write the queued ones (waiting up to ``close_wait_s``), stop."""
        with self._cond:
            if self._closing:
                return
            self._closing = True
            self._close_deadline = time.monotonic() + self._close_wait_s
            self._cond.notify_all()
        # a commit in progress may take its own timeout
        self._thread.join(self._close_wait_s + 15.0)
        left = len(self._queue)
        if left:
            raise StoreUnavailable(f"{left} activation records could not be written: {self._last_error}")

    def _next_batch(self) -> list[tuple[int, Row, Future[None]]] | None:
        with self._cond:
            self._cond.wait_for(lambda: self._queue or self._closing)
            if not self._queue:
                return None  # closing and drained
            return [self._queue[i] for i in range(min(self._max_batch, len(self._queue)))]

    def _run(self) -> None:
        backoff = 0.0
        while (batch := self._next_batch()) is not None:
            try:
                self._commit([row for _, row, _ in batch])
            except Exception as err:  # noqa: BLE001  the writer must outlive any failure: keep the rows, retry
                with self._cond:
                    self._last_error = err
                if self._closing and time.monotonic() >= self._close_deadline:
                    return
                backoff = min(max(backoff * 2, 0.05), 2.0)
                log.warning("writing %d activation records failed (%s); retrying in %.2f s", len(batch), err, backoff)
                time.sleep(backoff)
                continue
            backoff = 0.0
            with self._cond:
                for _ in batch:
                    self._pending_bytes -= len(self._queue.popleft()[1].text)
                for _, row, _ in batch:
                    if isinstance(row, ActivationRow):
                        self._records.pop(row.activation_id, None)
                self._committed = batch[-1][0]
                self._last_error = None
                self._cond.notify_all()
            for _, _, done in batch:
                done.set_result(None)


class WrittenBehind:
    """``put`` and ``accept`` of an activation store whose writes go through ``self._writer``."""

    _writer: WriteBehind

    def put(self, doc: dict[str, Any]) -> Future[None]:
        return self._writer.submit(to_row(doc))

    def accept(self, entry: dict[str, Any]) -> Future[None]:
        return self._writer.submit(to_accepted(entry))

    def backlogged(self) -> bool:
        return self._writer.backlogged()
