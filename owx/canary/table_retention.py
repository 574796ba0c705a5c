"""How long Canary's rows stay: a namespace keeps the newest ``table_rows`` of each of its tables.

Every stateful activation leaves rows in the namespace's tables (its job, its function, its
checkpoints, its commit), which count against the namespace's entity bound as its actions do: kept
forever, a busy namespace's history would fill that bound, and then its deploys fail. After a
function ends, its namespace's tables are trimmed (in the next pass of a thread of their own, one
every ``PRUNE_EVERY_S``): beyond each table's newest ``table_rows`` by update, rows at least ``table_min_age_s``
old are deleted, a chunk per pass. A younger row stays whatever their number: a commit must outlive
every attempt of its function, or a late one could commit again.
"""

from __future__ import annotations

import logging
import threading
import time

from owx.canary.commits import COLLECTION as COMMITS
from owx.canary.tables import collection
from owx.gateway.stores import Conflict, EntityStore, StoreError

log = logging.getLogger(__name__)

COLLECTIONS = (*(collection(t) for t in ("job_info", "function_info", "checkpoint_info", "replication_info")),
               COMMITS)
PRUNE_EVERY_S = 10.0  # a pass over the namespaces whose functions ended since the last
CHUNK = 500  # rows listed at once
MAX_PER_PASS = 5000  # rows one pass deletes from one table at most: the rest go in the next


class TableRetention:
    """Trims each namespace's Canary tables to ``keep_rows`` rows, sparing rows younger than ``min_age_s``."""

    def __init__(self, store: EntityStore, keep_rows: int, min_age_s: float) -> None:
        self.store = store
        self.keep_rows = keep_rows
        self.min_age_s = min_age_s
        self._pending: set[str] = set()  # namespaces whose functions ended since the last pass
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="owx-canary-retention", daemon=True)
        self._thread.start()

    def function_ended(self, namespace: str) -> None:
        """Trim ``namespace``'s tables in the next pass (one every ``PRUNE_EVERY_S``)."""
        with self._lock:
            self._pending.add(namespace)

    def trim(self, namespace: str) -> int:
        """Trim ``namespace``'s tables now; the number of rows deleted."""
        cutoff_ms = int((time.time() - self.min_age_s) * 1000)
        return sum(self._trim_table(namespace, name, cutoff_ms) for name in COLLECTIONS)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5.0)

    def _trim_table(self, namespace: str, name: str, cutoff_ms: int) -> int:
        """Delete the table's oldest rows past its newest ``keep_rows``, a chunk at a time from the oldest
        end (rows are listed newest first), until one is younger than the cutoff: young rows are never read."""
        deleted = 0
        while deleted < MAX_PER_PASS:
            past = self.store.count(namespace, name) - self.keep_rows
            if past <= 0:
                break
            oldest = self.store.list(namespace, name, skip=self.keep_rows + max(0, past - CHUNK), limit=CHUNK)
            old = [row for row in oldest if row.updated < cutoff_ms]
            for row in old:
                try:
                    deleted += self.store.delete(namespace, name, row.name, row.rev)  # False: gone already
                except Conflict:  # written since it was listed: young now
                    pass
            if len(old) < len(oldest) or not old:  # the rest is younger than the cutoff
                break
        return deleted

    def _run(self) -> None:
        while not self._stop.wait(PRUNE_EVERY_S):
            with self._lock:
                pending, self._pending = self._pending, set()
            for namespace in sorted(pending):
                try:
                    trimmed = self.trim(namespace)
                except StoreError as exc:  # its next function's end tries again
                    log.warning("canary tables of namespace %s not trimmed: %s", namespace, exc)
                    continue
                if trimmed:
                    log.info("canary tables of namespace %s: %d old rows deleted", namespace, trimmed)
