"""How many bytes of activation records a namespace keeps in the SQLite store: its newest, within a bound.

Records are never deleted otherwise, and an action may print 10 MB per activation: one tenant
invoking such an action in a loop filled the data disk every tenant's stores are on at 8 MB/s.
With a bound, a namespace past it loses its oldest records until it holds 90% of the bound (the
rest of the bound is room before the next trim); other namespaces' records are untouched. The
records of its web actions' outside callers go first (``outsider``: without a key, or another
namespace's): anyone may call a web action, and a flood of such calls made the owner lose the
records of its own invocations. Each record's size is kept in its row (``size``) and indexed
with its age, so finding the oldest to delete reads no record.

A trim goes a chunk per commit of the store's one writer thread: at most ``TRIM_ROWS`` records
beyond the bytes the commit's own batch added to the namespace (so it never holds more than its
bound after a commit), chosen and deleted by two statements. Deleting a tenant's 10% at once took
the writer seconds at the default bound (190,000 small records), while every tenant's activation
lists waited for it and each row read handed the interpreter lock to the event loop and back.
The bytes each namespace holds are counted as batches commit, exactly: a batch holding records
the database had (replayed from the activation log after a restart) has its namespaces counted
again, and a batch that does not commit changes no count.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field

KEPT_AFTER_TRIM = 0.9  # of the bound
_TRIM_ORDER_INDEX = ("CREATE INDEX IF NOT EXISTS activations_by_trim_order "
           "ON activations (namespace, outsider DESC, start, activation_id, size)")
_OLD_INDEXES = ("activations_by_age",)  # of older versions, replaced by the one above
TRIM_ROWS = 250  # records a commit deletes at most beyond what offsets its own batch (about 15 ms here)
_DOOMED = """
WITH doomed AS (
  SELECT activation_id, size FROM (
    SELECT activation_id, size,
           sum(size) OVER (ORDER BY outsider DESC, start, activation_id ROWS UNBOUNDED PRECEDING) - size AS before
    FROM (SELECT activation_id, size, outsider, start FROM activations WHERE namespace = ?1
          ORDER BY outsider DESC, start, activation_id LIMIT ?2))
  WHERE before < ?3)
"""  # the oldest of ?1's first ?2 records in trimming order, as many as free ?3 bytes
_COUNT_DOOMED = _DOOMED + "SELECT count(*), coalesce(sum(size), 0) FROM doomed"
_DELETE_DOOMED = _DOOMED + "DELETE FROM activations WHERE activation_id IN (SELECT activation_id FROM doomed)"


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


@dataclass
class Trimmed:
    """What a batch's transaction did to the namespaces' bytes; the counts once it commits."""

    held: dict[str, int] = field(default_factory=dict)  # bytes of the namespaces the batch touched or trimmed
    trimming: set[str] = field(default_factory=set)  # namespaces still above KEPT_AFTER_TRIM of the bound


class NamespaceBound:
    """The bytes of records each namespace holds, and the trimming of a namespace past ``max_bytes``
    (used by the store's one writer thread)."""

    def __init__(self, conn: sqlite3.Connection, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._held: dict[str, int] = dict(
            conn.execute("SELECT namespace, sum(size) FROM activations GROUP BY namespace").fetchall())
        self._trimming = {namespace for namespace, held in self._held.items() if held > max_bytes}

    def trim(self, conn: sqlite3.Connection, added: dict[str, int], recount: Iterable[str] = ()) -> Trimmed:
        """In a batch's transaction, after its records are inserted: ``added`` bytes by namespace
        (``recount``: namespaces whose batch held records the database had, counted afresh). Each
        namespace past the bound, or still trimming, loses its oldest records: those that offset
        what the batch added to it, and up to ``TRIM_ROWS`` more, until it holds ``KEPT_AFTER_TRIM``
        of the bound. Give the result to :meth:`settle` once the transaction commits."""
        done = Trimmed({namespace: self._held.get(namespace, 0) + size for namespace, size in added.items()},
                       set(self._trimming))
        if recounted := list(recount):
            done.held.update(conn.execute(
                f"SELECT namespace, sum(size) FROM activations WHERE namespace IN ({', '.join('?' * len(recounted))}) "
                "GROUP BY namespace", recounted).fetchall())
        done.trimming.update(namespace for namespace, held in done.held.items() if held > self.max_bytes)
        kept = int(self.max_bytes * KEPT_AFTER_TRIM)
        for namespace in sorted(done.trimming):
            held = done.held.get(namespace, self._held.get(namespace, 0))
            records, freed = _delete_oldest(conn, namespace, held - kept, added.get(namespace, 0))
            done.held[namespace] = held - freed
            if held - freed <= kept or records == 0:
                done.trimming.discard(namespace)
        return done

    def settle(self, done: Trimmed) -> None:
        """The batch of ``done`` committed: its counts are the namespaces' from now on."""
        self._held.update(done.held)
        self._trimming = done.trimming


def _delete_oldest(conn: sqlite3.Connection, namespace: str, excess: int, offset: int) -> tuple[int, int]:
    """Delete ``namespace``'s oldest records (its outside callers' first): up to ``TRIM_ROWS`` within
    ``excess`` bytes, more while fewer than ``offset`` bytes (a batch's) are freed; (records, bytes)."""
    records = freed = 0
    while freed < excess:
        params = (namespace, TRIM_ROWS, excess - freed)
        count, size = conn.execute(_COUNT_DOOMED, params).fetchone()
        if not count:
            break
        conn.execute(_DELETE_DOOMED, params)
        records, freed = records + count, freed + size
        if freed >= min(excess, offset):
            break
    return records, freed
