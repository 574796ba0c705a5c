"""How many bytes of activation records a namespace keeps in the SQLite store: its newest, within a bound.

Records are never deleted otherwise, and an action may print 10 MB per activation: one tenant
invoking such an action in a loop filled the data disk every tenant's stores are on at 8 MB/s.
With a bound, a namespace past it loses its oldest records until it holds 90% of the bound (the
rest of the bound is room before the next trim); other namespaces' records are untouched. The
records of its web actions' outside callers go first (``outsider``: without a key, or another
namespace's): anyone may call a web action, and a flood of such calls made the owner lose the
records of its own invocations. Each record's size is kept in its row (``size``) and indexed
with its age, so finding the oldest to delete reads no record.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from owx.gateway.stores.activations import ActivationRow

KEPT_AFTER_TRIM = 0.9  # of the bound
_TRIM_ORDER_INDEX = ("CREATE INDEX IF NOT EXISTS activations_by_trim_order "
           "ON activations (namespace, outsider DESC, start, activation_id, size)")
_OLD_INDEXES = ("activations_by_age",)  # of older versions, replaced by the one above
_DELETE_CHUNK = 500


def add_columns(conn: sqlite3.Connection, indexed: bool) -> None:
    """Give a table older versions made its ``size`` (each record's bytes) and ``outsider`` columns;
    with ``indexed`` (records are trimmed) the index of sizes in trimming order too, which costs
    every insert a few µs."""
    columns = {row[1] for row in conn.execute("PRAGMA table_info(activations)")}
    if "size" not in columns:
        conn.execute("ALTER TABLE activations ADD COLUMN size INTEGER NOT NULL DEFAULT 0")
        conn.execute("UPDATE activations SET size = length(CAST(record AS BLOB))")
    if "outsider" not in columns:
        conn.execute("ALTER TABLE activations ADD COLUMN outsider INTEGER NOT NULL DEFAULT 0")
    for old in _OLD_INDEXES:
        conn.execute(f"DROP INDEX IF EXISTS {old}")
    if indexed:
        conn.execute(_TRIM_ORDER_INDEX)


class NamespaceBound:
    """The bytes of records each namespace holds (kept up to date by the store's one writer thread),
    and the trimming of a namespace past ``max_bytes``."""

    def __init__(self, conn: sqlite3.Connection, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._held: dict[str, int] = dict(
            conn.execute("SELECT namespace, sum(size) FROM activations GROUP BY namespace").fetchall())

    def added(self, rows: Iterable[tuple[ActivationRow, int]]) -> list[str]:
        """Count committed ``(row, size)``s in; the namespaces that may now be past the bound (a row
        the store already had, replayed after a restart, is counted again: `trim` counts exactly)."""
        touched = set()
        for row, size in rows:
            self._held[row.namespace] = self._held.get(row.namespace, 0) + size
            touched.add(row.namespace)
        return [namespace for namespace in touched if self._held[namespace] > self.max_bytes]

    def trim(self, conn: sqlite3.Connection, namespace: str) -> int:
        """Delete ``namespace``'s oldest records, its outside callers' first, until it holds
        ``KEPT_AFTER_TRIM`` of the bound (the caller's transaction); the records deleted."""
        (held,) = conn.execute("SELECT coalesce(sum(size), 0) FROM activations WHERE namespace=?",
                               (namespace,)).fetchone()
        self._held[namespace] = held
        if held <= self.max_bytes:
            return 0
        excess = held - int(self.max_bytes * KEPT_AFTER_TRIM)
        doomed, freed = [], 0
        cursor = conn.execute("SELECT activation_id, size FROM activations WHERE namespace=? "
                              "ORDER BY outsider DESC, start, activation_id", (namespace,))
        try:
            for activation_id, size in cursor:
                if freed >= excess:
                    break
                doomed.append(activation_id)
                freed += size
        finally:
            cursor.close()
        for first in range(0, len(doomed), _DELETE_CHUNK):
            chunk = doomed[first:first + _DELETE_CHUNK]
            conn.execute(f"DELETE FROM activations WHERE activation_id IN ({', '.join('?' * len(chunk))})", chunk)
        self._held[namespace] -= freed
        return len(doomed)
