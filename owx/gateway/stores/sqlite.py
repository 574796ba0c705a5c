"""The embedded stores: SQLite files in the data directory (WAL, synchronous=NORMAL).

One process owns each file (an exclusive lock file next to it says so), which makes the
in-process entity cache exact: every write goes through this process and invalidates it.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import json
import os
import secrets
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from owx.gateway.stores import retention
from owx.gateway.stores.activation_log import ActivationLog
from owx.gateway.stores.activations import ActivationRow, summary, to_accepted
from owx.gateway.stores.base import (
    AUTH_COLLECTION,
    AUTH_UUID_FIELD,
    Conflict,
    Entity,
    StoreUnavailable,
    check_quota,
)
from owx.gateway.stores.cache import EntityCache
from owx.gateway.stores.ownership import own
from owx.gateway.stores.validation import (
    UpdateClock,
    check_key,
    check_name_filter,
    check_namespace,
    check_page,
    check_prefix,
    check_scope,
    check_time,
    describe,
    encode_doc,
    is_valid_rev,
)
from owx.gateway.stores.turn_lock import TurnLock
from owx.gateway.stores.writebehind import WriterOptions, WrittenBehind

_ENTITY_SCHEMA = """
CREATE TABLE IF NOT EXISTS entities (
    namespace  TEXT NOT NULL,
    collection TEXT NOT NULL,
    name       TEXT NOT NULL,
    rev        TEXT NOT NULL,
    updated    INTEGER NOT NULL,
    auth_uuid  TEXT,
    doc        TEXT NOT NULL,
    size       INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (namespace, collection, name)
);
CREATE INDEX IF NOT EXISTS entities_by_updated ON entities (namespace, collection, updated DESC, name DESC);
CREATE INDEX IF NOT EXISTS entities_by_auth_uuid ON entities (auth_uuid) WHERE auth_uuid IS NOT NULL;
"""

_ACTIVATION_SCHEMA = """
CREATE TABLE IF NOT EXISTS activations (
    activation_id TEXT PRIMARY KEY,
    namespace     TEXT NOT NULL,
    name          TEXT NOT NULL,
    start         INTEGER NOT NULL,
    record        TEXT NOT NULL,
    size          INTEGER NOT NULL DEFAULT 0,
    outsider      INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS activations_by_start ON activations (namespace, start DESC, activation_id DESC);
CREATE INDEX IF NOT EXISTS activations_by_name ON activations (namespace, name, start DESC, activation_id DESC);
"""


@contextlib.contextmanager
def _sqlite_errors(path: Path) -> Iterator[None]:
    """Turn SQLite failures (locked, disk full, corrupt file) into `StoreUnavailable`."""
    try:
        yield
    except sqlite3.Error as err:
        raise StoreUnavailable(f"SQLite store {path}: {err}") from err


class _OwnedDatabase:
    """A SQLite file opened by this process only: lock file, schema, connections."""

    def __init__(self, path: Path, schema: str) -> None:
        self.path = path
        self._lock_fd = own(Path(f"{path}.lock"), str(path))
        try:
            with _sqlite_errors(path):
                conn = self.connect()
                conn.executescript(schema)
                conn.close()
        except BaseException:
            self.release()
            raise

    def connect(self) -> sqlite3.Connection:
        """A connection usable from any thread (callers serialise its use); the files are the owner's only."""
        os.close(os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600))
        for name in (self.path, f"{self.path}-wal", f"{self.path}-shm"):  # SQLite gives these the database's mode
            with contextlib.suppress(FileNotFoundError):
                os.chmod(name, 0o600)
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=10.0)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    def release(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # drops the flock
            self._lock_fd = -1


@contextlib.contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:  # SQLite rolls back by itself after some errors (a full disk)
            conn.execute("ROLLBACK")
        raise


def _next_rev(current: str | None) -> str:
    generation = int(current.split("-", 1)[0]) + 1 if current else 1
    return f"{generation}-{secrets.token_hex(16)}"


class SQLiteEntityStore:
    """`EntityStore` in one SQLite file, with an exact in-process read cache; a namespace's entities
    (not its key) take at most ``max_namespace_bytes`` (0: no bound), as their JSON.

    Reads go through connections of their own, several at once (the file is in WAL mode): a read
    waits for no write and for no other read, so one tenant overwriting 12 MB actions in a loop no
    longer holds every tenant's reads and key lookups; writes take turns by namespace
    (:class:`TurnLock`). Each row keeps its document's size, so a write counts the bytes it replaces
    without reading them."""

    def __init__(self, path: Path, max_namespace_bytes: int = 0) -> None:
        self._db = _OwnedDatabase(path, _ENTITY_SCHEMA)
        self._conn = self._db.connect()
        self._writes = TurnLock()  # namespaces take turns
        self._readers = _ReadConnections(self._db)
        self._closed = False
        self._max_namespace_bytes = max_namespace_bytes
        self._held: dict[str, int] = {}  # bytes of a namespace's entities, once a write looked (under the lock)
        self._cache = EntityCache(ttl_s=None)
        with _sqlite_errors(path):
            _add_size_column(self._conn)
        (newest,) = self._query("SELECT COALESCE(MAX(updated), 0) FROM entities", ())[0]
        self._clock = UpdateClock(after=newest)  # keeps list order right even if the clock went back

    def _query(self, sql: str, args: tuple[Any, ...]) -> builtins.list[tuple[Any, ...]]:
        with _sqlite_errors(self._db.path), self._readers.one() as conn:
            return conn.execute(sql, args).fetchall()

    def get(self, namespace: str, collection: str, name: str) -> Entity | None:
        key = check_key(namespace, collection, name)
        if (hit := self._cache.get(key)) is not None:
            return hit
        generation = self._cache.generation()
        rows = self._query("SELECT rev, updated, doc FROM entities WHERE namespace=? AND collection=? AND name=?", key)
        if not rows:
            return None
        rev, updated, text = rows[0]
        entity = Entity(*key, rev, updated, json.loads(text))
        self._cache.store(entity, text, generation)
        return entity

    def put(self, namespace: str, collection: str, name: str, doc: dict[str, Any], rev: str | None) -> Entity:
        key = check_key(namespace, collection, name)
        text = encode_doc(doc)
        uuid = doc.get(AUTH_UUID_FIELD) if collection == AUTH_COLLECTION else None
        bounded = self._max_namespace_bytes and collection != AUTH_COLLECTION
        with self._writes.hold(key[0]), _sqlite_errors(self._db.path):
            if self._closed:
                raise StoreUnavailable("entity store is closed")
            with _transaction(self._conn):
                current = self._current_rev(key)
                _check_rev(key, current, rev)
                if bounded:
                    old, new = self._size(key) if current else 0, len(text.encode())
                    check_quota(self._max_namespace_bytes, key[0], self._held_bytes(key[0]), old, new)
                new_rev, updated = _next_rev(current), self._clock.next()
                self._conn.execute(
                    "INSERT OR REPLACE INTO entities (namespace, collection, name, rev, updated, auth_uuid, doc, size) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (*key, new_rev, updated, uuid if isinstance(uuid, str) else None, text, len(text.encode())),
                )
            if bounded:
                self._held[key[0]] += new - old
            self._cache.invalidate(key, auth=collection == AUTH_COLLECTION)
        return Entity(*key, new_rev, updated, json.loads(text))

    def _size(self, key: tuple[str, str, str]) -> int:
        row = self._conn.execute("SELECT size FROM entities WHERE namespace=? AND collection=? AND name=?",
                                 key).fetchone()
        return row[0] if row else 0

    def _held_bytes(self, namespace: str) -> int:
        """Bytes of ``namespace``'s entities (its key aside): summed at its first write, then kept."""
        if namespace not in self._held:
            (self._held[namespace],) = self._conn.execute(
                "SELECT coalesce(sum(size), 0) FROM entities WHERE namespace=? AND collection!=?",
                (namespace, AUTH_COLLECTION)).fetchone()
        return self._held[namespace]

    def _current_rev(self, key: tuple[str, str, str]) -> str | None:
        row = self._conn.execute(
            "SELECT rev FROM entities WHERE namespace=? AND collection=? AND name=?", key
        ).fetchone()
        return row[0] if row else None

    def delete(self, namespace: str, collection: str, name: str, rev: str | None = None) -> bool:
        key = check_key(namespace, collection, name)
        with self._writes.hold(key[0]), _sqlite_errors(self._db.path):
            if self._closed:
                raise StoreUnavailable("entity store is closed")
            with _transaction(self._conn):
                current = self._current_rev(key)
                if current is None:
                    return False
                if rev is not None:
                    _check_rev(key, current, rev)
                freed = self._size(key) if key[0] in self._held and collection != AUTH_COLLECTION else 0
                self._conn.execute("DELETE FROM entities WHERE namespace=? AND collection=? AND name=?", key)
            if freed:
                self._held[key[0]] -= freed
            self._cache.invalidate(key, auth=collection == AUTH_COLLECTION)
        return True

    def list(
        self, namespace: str, collection: str, prefix: str = "", skip: int = 0, limit: int = 0
    ) -> builtins.list[Entity]:
        ns, coll = check_scope(namespace, collection)
        prefix = check_prefix(prefix)
        skip, limit = check_page(skip, limit)
        rows = self._query(
            "SELECT name, rev, updated, doc FROM entities WHERE namespace=? AND collection=?"
            " AND substr(name, 1, ?) = ? ORDER BY updated DESC, name DESC LIMIT ? OFFSET ?",
            (ns, coll, len(prefix), prefix, limit or -1, skip),
        )
        return [Entity(ns, coll, name, rev, updated, json.loads(text)) for name, rev, updated, text in rows]

    def count(self, namespace: str, collection: str, prefix: str = "") -> int:
        ns, coll = check_scope(namespace, collection)
        prefix = check_prefix(prefix)
        rows = self._query(
            "SELECT COUNT(*) FROM entities WHERE namespace=? AND collection=? AND substr(name, 1, ?) = ?",
            (ns, coll, len(prefix), prefix),
        )
        return rows[0][0]

    def find_namespace_by_key(self, uuid: str) -> Entity | None:
        if not isinstance(uuid, str) or not uuid:
            return None
        key = self._cache.get_uuid(uuid)
        if key is None:
            generation = self._cache.generation()
            rows = self._query(
                "SELECT namespace, collection, name FROM entities WHERE auth_uuid=? ORDER BY updated DESC LIMIT 1",
                (uuid,),
            )
            if not rows:
                return None
            key = rows[0]
            self._cache.store_uuid(uuid, key, generation)
        entity = self.get(*key)
        return entity if entity is not None and entity.doc.get(AUTH_UUID_FIELD) == uuid else None

    def close(self) -> None:
        with self._writes.hold(""):
            if self._closed:
                return
            self._closed = True
            self._readers.close()
            self._conn.close()
            self._db.release()


class _ReadConnections:
    """Connections for reads, one per read at a time, up to ``MAX_READERS`` (then a read waits for one)."""

    def __init__(self, db: _OwnedDatabase) -> None:
        self._db = db
        self._idle: builtins.list[sqlite3.Connection] = []
        self._made = 0
        self._closed = False
        self._cond = threading.Condition()

    @contextlib.contextmanager
    def one(self) -> Iterator[sqlite3.Connection]:
        with self._cond:
            while not self._idle and self._made >= MAX_READERS and not self._closed:
                self._cond.wait()
            if self._closed:
                raise StoreUnavailable("entity store is closed")
            if self._idle:
                conn = self._idle.pop()
            else:
                conn, self._made = self._db.connect(), self._made + 1
        try:
            yield conn
        finally:
            with self._cond:
                if self._closed:
                    conn.close()
                else:
                    self._idle.append(conn)
                self._cond.notify()

    def close(self) -> None:
        """Close the idle connections now and the others as their reads end."""
        with self._cond:
            self._closed = True
            for conn in self._idle:
                conn.close()
            self._idle.clear()
            self._cond.notify_all()


def _add_size_column(conn: sqlite3.Connection) -> None:
    """Give a table older versions made its ``size`` column (each document's bytes), once."""
    if "size" not in {row[1] for row in conn.execute("PRAGMA table_info(entities)")}:
        with _transaction(conn):
            conn.execute("ALTER TABLE entities ADD COLUMN size INTEGER NOT NULL DEFAULT 0")
            conn.execute("UPDATE entities SET size = length(CAST(doc AS BLOB))")


ROWS_PER_STATEMENT = 500  # 2,500 parameters, within SQLite's 32,766
MAX_READERS = 8  # entity reads at once, each with its connection (more wait for one)


@functools.lru_cache(maxsize=64)
def _insert_rows(rows: int) -> str:
    return ("INSERT OR IGNORE INTO activations (activation_id, namespace, name, start, record, size, outsider) "
            "VALUES " + ", ".join(["(?, ?, ?, ?, ?, ?, ?)"] * rows))


def _check_rev(key: tuple[str, str, str], current: str | None, rev: str | None) -> None:
    """Raise `Conflict` unless ``rev`` is what a write to an entity at ``current`` must name."""
    what = describe(key)
    if rev is None:
        if current is not None:
            raise Conflict(f"{what} already exists")
    elif current is None:
        raise Conflict(f"{what} does not exist (revision {rev!r:.80} given)")
    elif not is_valid_rev(rev) or rev != current:
        raise Conflict(f"{what} is at another revision than {rev!r:.80}")


class SQLiteActivationStore(WrittenBehind):
    """`ActivationStore` in one SQLite file, written behind by one thread; rows are durable once
    in the activation log (a directory, or an `ActivationLog`)."""

    def __init__(self, path: Path, activation_log: ActivationLog | Path, read_flush_timeout_s: float = 10.0,
                 writer: WriterOptions | None = None, max_namespace_bytes: int = 0) -> None:
        """``max_namespace_bytes``: the records a namespace keeps, its newest (see
        :mod:`owx.gateway.stores.retention`); 0: all of them."""
        self._db = _OwnedDatabase(path, _ACTIVATION_SCHEMA)
        self._lock = threading.Lock()
        self._read_flush_timeout_s = read_flush_timeout_s
        self._closed = False
        try:
            self._read_conn = self._db.connect()
            self._write_conn = self._db.connect()
            with _sqlite_errors(path):
                retention.add_columns(self._write_conn, indexed=bool(max_namespace_bytes))
                self._bound = retention.NamespaceBound(self._write_conn, max_namespace_bytes) \
                    if max_namespace_bytes else None
        except BaseException:
            self._db.release()
            raise
        self._start_writer(f"owx-activations-{path.name}", activation_log, writer, self._db.release)

    def _take_old_journal(self) -> None:
        """Move the entries of the ``accepted`` table older versions kept (those without a record)
        into the activation log, then drop the table: once, at the first open by this version."""
        if not self._query("SELECT 1 FROM sqlite_master WHERE type='table' AND name='accepted'", ()):
            return  # the writer thread runs already: this uses the connection of reads
        rows = self._query("SELECT entry FROM accepted WHERE activation_id NOT IN "
                           "(SELECT activation_id FROM activations)", ())
        self._writer.adopt([to_accepted(json.loads(text)) for (text,) in rows])
        self._query("DROP TABLE accepted", ())

    def _commit(self, records: builtins.list[ActivationRow]) -> None:
        """One statement per batch, not one per record: the sqlite3 module lets go of the interpreter
        lock for every statement it steps and takes it again after, and each such hand-over stalls
        the gateway's event loop, which holds the lock whenever it runs (per record, that was most of
        what a commit cost a warm invocation)."""
        sizes = [len(r.text.encode()) for r in records]
        values = [field for r, size in zip(records, sizes)
                  for field in (r.activation_id, r.namespace, r.name, r.start, r.text, size, r.outsider)]
        conn, trimmed = self._write_conn, None
        with _sqlite_errors(self._db.path), _transaction(conn):
            changes_before = conn.total_changes
            for first in range(0, len(records), ROWS_PER_STATEMENT):
                rows = min(ROWS_PER_STATEMENT, len(records) - first)
                conn.execute(_insert_rows(rows), values[first * 7:(first + rows) * 7])
            if self._bound is not None:
                added: dict[str, int] = {}
                for record, size in zip(records, sizes):
                    added[record.namespace] = added.get(record.namespace, 0) + size
                replayed = conn.total_changes - changes_before < len(records)  # some were in the database
                trimmed = self._bound.trim(conn, added, recount=added if replayed else ())
        if trimmed is not None:
            self._bound.settle(trimmed)

    def _query(self, sql: str, args: tuple[Any, ...]) -> builtins.list[tuple[Any, ...]]:
        with self._lock, _sqlite_errors(self._db.path):
            if self._closed:
                raise StoreUnavailable("activation store is closed")
            return self._read_conn.execute(sql, args).fetchall()

    def _fetch(self, activation_id: str) -> tuple[str, bytes] | None:
        # as a BLOB: its bytes as stored (UTF-8), no text object made of tens of MB
        rows = self._query("SELECT namespace, CAST(record AS BLOB) FROM activations WHERE activation_id=?",
                           (activation_id,))
        return (rows[0][0], rows[0][1]) if rows else None

    def list(
        self,
        namespace: str,
        name: str | None = None,
        since: int | None = None,
        upto: int | None = None,
        skip: int = 0,
        limit: int = 0,
        docs: bool = False,
    ) -> builtins.list[dict[str, Any]]:
        where, args = _activation_filter(namespace, name, since, upto)
        skip, limit = check_page(skip, limit)
        self._writer.flush(self._read_flush_timeout_s)
        # without docs, SQLite drops the logs and the result (up to 10 MB and 1 MB a record) before Python sees them
        record = "record" if docs else "json_remove(record, '$.logs', '$.response.result')"
        rows = self._query(
            f"SELECT {record} FROM activations WHERE {where} ORDER BY start DESC, activation_id DESC LIMIT ? OFFSET ?",
            (*args, limit or -1, skip),
        )
        records = [json.loads(text) for (text,) in rows]
        return records if docs else [summary(r) for r in records]

    def count(self, namespace: str, name: str | None = None, since: int | None = None, upto: int | None = None) -> int:
        where, args = _activation_filter(namespace, name, since, upto)
        self._writer.flush(self._read_flush_timeout_s)
        return self._query(f"SELECT COUNT(*) FROM activations WHERE {where}", args)[0][0]

    def flush(self, timeout: float | None = None) -> None:
        self._writer.flush(timeout)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._writer.close()
        finally:
            self._read_conn.close()
            self._write_conn.close()
            self._db.release()


def _activation_filter(
    namespace: str, name: str | None, since: int | None, upto: int | None
) -> tuple[str, tuple[Any, ...]]:
    clauses: list[str] = ["namespace = ?"]
    args: list[Any] = [check_namespace(namespace)]
    if (name := check_name_filter(name)) is not None:
        clauses.append("name = ?")
        args.append(name)
    for clause, value in (("start >= ?", check_time(since, "since")), ("start <= ?", check_time(upto, "upto"))):
        if value is not None:
            clauses.append(clause)
            args.append(value)
    return " AND ".join(clauses), tuple(args)
