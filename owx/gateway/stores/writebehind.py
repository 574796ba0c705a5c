"""Write-behind of activation records: the activation log makes each row durable at once, one
writer thread commits the records to the database in batches.

``submit`` appends the row to the `ActivationLog` (one ``os.write``) and returns a completed
future: an answer may name the row now, and the database commit (tens of µs and a thread
hand-off per record) is off its path. Records are queued for the writer, which commits them in
batches, retries failed commits with backoff, and tells the log what the database holds so that
it deletes old segments. A queued record stays readable until its batch is committed, so reads see
every record put before them. Accepted-activation entries (the crash journal) live in the log only.

The queue is bounded in rows and in bytes: past the bound the store is *behind* and refuses new
activations at once (`accept` raises `StoreUnavailable`; its callers run on an event loop and never
wait), while the records of activations already accepted are always taken, the log holding them.
So the queue exceeds its bound by at most the activations in flight. If the log cannot take a
record (a full disk), its future completes when the database has it, as before the log existed.
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
from pathlib import Path
from typing import Any

from owx.gateway.stores.activation_log import ActivationLog
from owx.common import jsonvalues
from owx.gateway.stores.activations import AcceptedRow, ActivationRow, Row, to_accepted, to_row
from owx.gateway.stores.base import DURABLE, StoreUnavailable
from owx.gateway.stores.validation import check_activation_id, check_namespace

log = logging.getLogger(__name__)
HEARTBEAT_S = 1.0  # how often the writer marks the log alive (`ActivationLog.beat`) when it has nothing to do

Commit = Callable[[list[ActivationRow]], None]
Fetch = Callable[[str], "tuple[str, bytes] | None"]  # an activation id -> (namespace, record as UTF-8 JSON)
# (position in the queue's order, record, its sequence in the activation log, or the future of a
# record the log could not take)
_Queued = tuple[int, ActivationRow, int | None, Future[None] | None]


@dataclass(frozen=True)
class WriterOptions:
    """Bounds of the write-behind queue."""

    max_pending: int = 50_000  # queued records past which `accept` is refused
    max_pending_bytes: int = 256 * 1024 * 1024  # queued JSON text past which `accept` is refused
    max_batch: int = 500  # records per commit
    linger_s: float = 0.01  # how long the writer gathers records before a commit nobody waits for
    close_wait_s: float = 30.0  # how long `close` keeps retrying to write what is queued


class WriteBehind:
    """Rows journalled in an activation log, records queued for one thread calling ``commit(batch)``.

    ``commit`` must be idempotent per record (records whose ``activation_id`` exists are skipped):
    a batch whose commit raised is retried whole, and the log replays records the database may
    have committed already. ``activation_log`` is a directory or an `ActivationLog` (owned from
    now on); what it holds from an earlier run is queued at once, so it is readable at once.
    """

    def __init__(self, commit: Commit, name: str, activation_log: ActivationLog | Path,
                 options: WriterOptions | None = None) -> None:
        self._commit = commit
        options = options or WriterOptions()
        self._max_pending = options.max_pending
        self._max_pending_bytes = options.max_pending_bytes
        self._pending_bytes = 0
        self._max_batch = options.max_batch
        self._linger_s = options.linger_s
        self._close_wait_s = options.close_wait_s
        self._flushing = 0  # callers of `flush` waiting
        self._awaited = 0  # queued records whose callers wait for the commit (the log did not take them)
        self._queue: deque[_Queued] = deque()
        self._records: dict[str, ActivationRow] = {}  # queued records, readable until committed
        self._lock = threading.RLock()  # held alone where nobody waits (cheaper than the condition's own enter)
        self._cond = threading.Condition(self._lock)
        self._seq = 0
        self._committed = 0
        self._last_error: BaseException | None = None
        self._closing = False
        self._close_deadline = float("inf")
        self._log = activation_log if isinstance(activation_log, ActivationLog) else ActivationLog(activation_log)
        try:
            replayed = self._log.replay()
        except BaseException:
            self._log.close()
            raise
        self.last_alive_ms = replayed.last_alive_ms  # of the run before this one
        self._beaten = time.monotonic()
        with self._cond:
            for seq, row in replayed.records:
                self._enqueue(row, seq, None)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, row: Row) -> Future[None]:
        """Journal ``row`` in the activation log and queue it if it is a record; the future is
        complete on return (the row is durable) unless the log could not take a record, which then
        completes when the database has it. A record whose id is queued is ignored (first write wins).

        Raises `StoreUnavailable` when closed, and for an accepted entry when the store is behind
        (see `backlogged`) or the log cannot take it: a new activation must not start then."""
        with self._lock:  # appends in the queue's order: `committed(seq)` then covers every record before seq
            if self._closing:
                raise StoreUnavailable("activation store is closed")
            if isinstance(row, AcceptedRow):
                self._journal(row)
            elif row.activation_id not in self._records:
                try:
                    seq = self._log.append(row)
                except OSError as err:
                    log.warning("the activation log cannot take record %s (%s): it is durable once committed",
                                row.activation_id, err)
                    done: Future[None] = Future()
                    self._enqueue(row, None, done)
                    return done
                self._enqueue(row, seq, None)
        return DURABLE

    def check_room(self) -> None:
        """Raise `StoreUnavailable` when the store is behind (see `backlogged`), as `submit` refuses an
        accepted entry then."""
        if self.backlogged():
            raise StoreUnavailable(f"the activation store is behind: {len(self._queue)} activation records wait "
                                   f"to be written ({self._pending_bytes} bytes); "
                                   f"last database error: {self._last_error}")

    def _journal(self, entry: AcceptedRow) -> None:
        self.check_room()
        try:
            self._log.append(entry)
        except OSError as err:
            raise StoreUnavailable(f"the activation store is behind: its activation log fails: {err}") from err

    def _enqueue(self, row: ActivationRow, seq: int | None, done: Future[None] | None) -> None:
        self._seq += 1
        self._records[row.activation_id] = row
        self._queue.append((self._seq, row, seq, done))
        self._pending_bytes += len(row.text)
        if done is not None:
            self._awaited += 1
        elif len(self._queue) != 1 and len(self._queue) != self._max_batch:
            return  # the writer is awake already, gathering: no wake-up per record
        self._cond.notify_all()

    def adopt(self, entries: list[AcceptedRow]) -> None:
        """Journal accepted entries whatever the queue's bound (an older store's journal, taken over
        at open). Raises `StoreUnavailable` if the log cannot take them."""
        try:
            for entry in entries:
                self._log.append(entry)
        except OSError as err:
            raise StoreUnavailable(f"cannot journal accepted activations in {self._log.directory}: {err}") from err

    def backlogged(self) -> bool:
        """Whether `submit` now refuses accepted entries: the queue is at its bound (a record larger
        than the byte bound still gets in when the queue is below it)."""
        return len(self._queue) >= self._max_pending or self._pending_bytes >= self._max_pending_bytes

    def open_accepted(self) -> list[AcceptedRow]:
        """Accepted entries without a record: at open, those a gateway that died left."""
        return self._log.open_accepted()

    def read(self, activation_id: str, fetch: Fetch) -> tuple[str, bytes] | None:
        """(namespace, record as UTF-8 JSON) of ``activation_id``: the committed one first (first write
        wins), else the queued one, else ``fetch`` again in case it was committed meanwhile.
        While the database is unavailable, queued records are still readable."""
        try:
            found = fetch(activation_id)
        except StoreUnavailable:
            if (queued := self._queued(activation_id)) is None:
                raise
            return queued
        return found or self._queued(activation_id) or fetch(activation_id)

    def _queued(self, activation_id: str) -> tuple[str, bytes] | None:
        row = self._records.get(activation_id)
        return None if row is None else (row.namespace, row.text.encode())

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every record submitted before this call is in the database (the writer commits
        at once, without gathering more)."""
        with self._cond:
            target = self._seq
            self._flushing += 1
            self._cond.notify_all()
            try:
                if not self._cond.wait_for(lambda: self._committed >= target, timeout):
                    raise StoreUnavailable(
                        f"{target - self._committed} activation records not yet written within {timeout} s; "
                        f"last error: {self._last_error}")
            finally:
                self._flushing -= 1

    def close(self) -> None:
        """Refuse new rows, commit the queued records (trying for up to ``close_wait_s``), stop.

        Records still queued then stay in the activation log, and the next start writes them.
        Raises `StoreUnavailable` for records the log could not take either: they are lost."""
        with self._cond:
            if self._closing:
                return
            self._closing = True
            self._close_deadline = time.monotonic() + self._close_wait_s
            self._cond.notify_all()
        # a commit in progress may take its own timeout
        self._thread.join(self._close_wait_s + 15.0)
        with self._cond:
            left = list(self._queue)
        self._log.close()
        if kept := sum(1 for _, _, seq, _ in left if seq is not None):
            log.warning("%d activation records stay in the activation log %s for the next start; last error: %s",
                        kept, self._log.directory, self._last_error)
        if lost := [done for _, _, _, done in left if done is not None]:
            error = StoreUnavailable(f"{len(lost)} activation records could not be written: {self._last_error}")
            if not self._thread.is_alive():  # else a commit still in progress may complete them
                for done in lost:
                    done.set_exception(error)
            raise error

    def _next_batch(self) -> list[_Queued] | None:
        """The next records to commit: those that came within ``linger_s`` of the first (one commit and
        one wake-up of this thread for many records), at once when a batch is full or someone waits;
        none after ``HEARTBEAT_S`` without any."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._queue or self._closing, HEARTBEAT_S):
                return []
            self._cond.wait_for(self._commit_now, self._linger_s)
            if not self._queue:
                return None  # closing and drained
            return [self._queue[i] for i in range(min(self._max_batch, len(self._queue)))]

    def _beat(self) -> None:
        """Mark the log alive, once a heartbeat has passed since the last mark."""
        now = time.monotonic()
        if now - self._beaten >= HEARTBEAT_S:
            self._beaten = now
            try:
                self._log.beat()
            except OSError as err:
                log.warning("could not mark the activation log alive: %s", err)

    def _run(self) -> None:
        backoff = 0.0
        while (batch := self._next_batch()) is not None:
            self._beat()
            if not batch:
                continue
            try:
                self._commit([row for _, row, _, _ in batch])
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
            self._settle(batch)
            with self._cond:
                for _, row, _, _ in batch:
                    self._queue.popleft()
                    self._pending_bytes -= len(row.text)
                    del self._records[row.activation_id]
                self._committed = batch[-1][0]
                self._last_error = None
                self._cond.notify_all()

    def _commit_now(self) -> bool:
        return self._closing or self._flushing > 0 or self._awaited > 0 or len(self._queue) >= self._max_batch

    def _settle(self, batch: list[_Queued]) -> None:
        """Tell the log what the database now holds (before `flush` returns: the log's segments
        are then trimmed); complete the futures of records the log could not take."""
        if logged := [seq for _, _, seq, _ in batch if seq is not None]:
            self._log.committed(logged[-1])
        if unlogged := [(row.activation_id, done) for _, row, _, done in batch if done is not None]:
            self._log.recorded(activation_id for activation_id, _ in unlogged)
            for _, done in unlogged:
                done.set_result(None)
            with self._cond:
                self._awaited -= len(unlogged)


class WrittenBehind:
    """``put``, ``accept``, ``get``, ``get_json``, ``backlogged`` and ``unfinished`` of an activation
    store whose writes go through ``self._writer`` (started by :meth:`_start_writer`)."""

    _writer: WriteBehind

    def _start_writer(self, name: str, activation_log: ActivationLog | Path, options: WriterOptions | None,
                      release: Callable[[], None]) -> None:
        """Start the writer over the store's ``_commit`` and take the journal an older version kept in
        the database (``_take_old_journal``). If the writer cannot start, ``release`` frees what the
        store opened; if the journal cannot be taken, the store is closed."""
        try:
            self._writer = WriteBehind(self._commit, name, activation_log, options)
        except BaseException:
            release()
            raise
        try:
            self._take_old_journal()
        except BaseException:
            self.close()
            raise

    def _commit(self, rows: list[ActivationRow]) -> None:
        """Write ``rows`` to the database (idempotent per record)."""
        raise NotImplementedError

    def _fetch(self, activation_id: str) -> tuple[str, bytes] | None:
        """(namespace, record as UTF-8 JSON) of ``activation_id`` in the database, if it is there."""
        raise NotImplementedError

    def get(self, namespace: str, activation_id: str) -> dict[str, Any] | None:
        stored = self.get_json(namespace, activation_id)
        return None if stored is None else jsonvalues.loads(stored)

    def get_json(self, namespace: str, activation_id: str) -> bytes | None:
        namespace, activation_id = check_namespace(namespace), check_activation_id(activation_id)
        found = self._writer.read(activation_id, self._fetch)
        return found[1] if found is not None and found[0] == namespace else None

    def _take_old_journal(self) -> None:
        """Move accepted entries an older version kept in the database into the activation log."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def put(self, doc: dict[str, Any], outsider: bool = False) -> Future[None]:
        return self._writer.submit(to_row(doc, outsider))

    def accept(self, entry: dict[str, Any]) -> Future[None]:
        return self._writer.submit(to_accepted(entry))

    def backlogged(self) -> bool:
        return self._writer.backlogged()

    def check_room(self) -> None:
        self._writer.check_room()

    def unfinished(self) -> list[dict[str, Any]]:
        return [json.loads(entry.text) for entry in self._writer.open_accepted()]

    def last_alive_ms(self) -> int | None:
        return self._writer.last_alive_ms
