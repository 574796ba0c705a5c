"""Write-behind of activation records: callers queue, one writer thread commits batches.

A queued record stays readable until its batch is committed, so reads see
every record put before them. Failed commits are retried with backoff; the queue is
bounded, so a database that stays down turns into `StoreUnavailable` at `submit`
instead of unbounded memory.
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from owx.gateway.stores.activations import ActivationRow
from owx.gateway.stores.base import StoreUnavailable

log = logging.getLogger(__name__)

Commit = Callable[[list[ActivationRow]], None]
Fetch = Callable[[str], "tuple[str, dict[str, Any]] | None"]


@dataclass(frozen=True)
class WriterOptions:
    """Bounds of the write-behind queue."""

    max_pending: int = 50_000  # queued records before `put` waits, then fails
    max_batch: int = 500  # records per commit
    submit_wait_s: float = 5.0  # how long `put` waits for room in a full queue
    close_wait_s: float = 30.0  # how long `close` keeps retrying to write what is queued


class WriteBehind:
    """A bounded queue of `ActivationRow` drained by one thread calling ``commit(batch)``.

    ``commit`` must be idempotent per row (rows whose ``activation_id`` exists are
    skipped), since a batch whose commit raised is retried whole.
    """

    def __init__(self, commit: Commit, name: str, options: WriterOptions | None = None) -> None:
        self._commit = commit
        options = options or WriterOptions()
        self._max_pending = options.max_pending
        self._max_batch = options.max_batch
        self._submit_wait_s = options.submit_wait_s
        self._close_wait_s = options.close_wait_s
        self._pending: dict[str, tuple[int, ActivationRow]] = {}
        self._cond = threading.Condition()
        self._seq = 0
        self._committed = 0
        self._last_error: BaseException | None = None
        self._closing = False
        self._close_deadline = float("inf")
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, row: ActivationRow) -> None:
        """Queue ``row`` unless a row with its id is already queued (first write wins)."""
        with self._cond:
            if not self._cond.wait_for(
                lambda: len(self._pending) < self._max_pending or self._closing, self._submit_wait_s
            ):
                raise StoreUnavailable(
                    f"{len(self._pending)} activation records wait to be written; last error: {self._last_error}"
                )
            if self._closing:
                raise StoreUnavailable("activation store is closed")
            if row.activation_id in self._pending:
                return
            self._seq += 1
            self._pending[row.activation_id] = (self._seq, row)
            self._cond.notify_all()

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
        entry = self._pending.get(activation_id)
        return None if entry is None else (entry[1].namespace, json.loads(entry[1].text))

    def flush(self, timeout: float | None = None) -> None:
        """Wait until everything submitted before this call is committed."""
        with self._cond:
            target = self._seq
            if not self._cond.wait_for(lambda: self._committed >= target, timeout):
                raise StoreUnavailable(
                    f"{target - self._committed} activation records not yet written within {timeout} s; "
                    f"last error: {self._last_error}"
                )

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
        left = len(self._pending)
        if left:
            raise StoreUnavailable(f"{left} activation records could not be written: {self._last_error}")

    def _next_batch(self) -> list[tuple[int, ActivationRow]] | None:
        with self._cond:
            self._cond.wait_for(lambda: self._pending or self._closing)
            if not self._pending:
                return None  # closing and drained
            return list(itertools.islice(self._pending.values(), self._max_batch))

    def _run(self) -> None:
        backoff = 0.0
        while (batch := self._next_batch()) is not None:
            try:
                self._commit([row for _, row in batch])
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
                for _, row in batch:
                    self._pending.pop(row.activation_id, None)
                self._committed = batch[-1][0]
                self._last_error = None
                self._cond.notify_all()
