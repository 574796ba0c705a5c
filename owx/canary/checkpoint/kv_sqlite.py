"""SQLite KV tier: the embedded default (one file, WAL, a connection per thread).

Commits do not fsync (``synchronous=NORMAL`` in WAL mode syncs only at WAL checkpoints):
a published checkpoint survives the crash of any process, and the database stays
consistent; a power loss may lose the most recent commits.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterable
from pathlib import Path

from owx.canary.checkpoint.errors import StoreUnavailable
from owx.canary.checkpoint.files import make_dirs
from owx.canary.checkpoint.kv import KV

_SCHEMA = "CREATE TABLE IF NOT EXISTS checkpoint_kv (key TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID"


class SqliteKV(KV):
    default_staging = "spool"
    errors = (sqlite3.Error,)

    def __init__(self, path: Path) -> None:
        super().__init__(f"sqlite checkpoint store {path}")
        self.path = path
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        try:
            make_dirs(path.parent)
            created = not path.exists()
        except OSError as exc:
            raise StoreUnavailable(f"{self.description}: cannot create its directory: {exc}") from exc
        with self.guard("opening"):
            self._conn().execute(_SCHEMA)
        if created and os.geteuid() == 0:
            # owned like its directory, so actions running as another user can write it
            # (SQLite gives its -wal and -shm files the database file's owner)
            owner = path.parent.stat()
            os.chown(path, owner.st_uid, owner.st_gid)

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        return conn

    def get(self, key: str) -> bytes | None:
        with self.guard("get"):
            row = self._conn().execute("SELECT value FROM checkpoint_kv WHERE key = ?", (key,)).fetchone()
        return None if row is None else bytes(row[0])

    def put(self, key: str, value: bytes) -> None:
        with self.guard("put"):
            self._conn().execute("INSERT OR REPLACE INTO checkpoint_kv (key, value) VALUES (?, ?)", (key, value))

    def delete(self, keys: Iterable[str]) -> None:
        with self.guard("delete"):
            self._conn().executemany("DELETE FROM checkpoint_kv WHERE key = ?", [(k,) for k in keys])

    def cas(self, key: str, expected: bytes | None, new: bytes | None) -> bool:
        conn = self._conn()
        with self.guard("compare-and-set"):
            conn.execute("BEGIN IMMEDIATE")
            try:
                row = conn.execute("SELECT value FROM checkpoint_kv WHERE key = ?", (key,)).fetchone()
                if (None if row is None else bytes(row[0])) != expected:
                    return False
                if new is None:
                    conn.execute("DELETE FROM checkpoint_kv WHERE key = ?", (key,))
                else:
                    conn.execute("INSERT OR REPLACE INTO checkpoint_kv (key, value) VALUES (?, ?)", (key, new))
            finally:
                conn.execute("COMMIT")
        return True

    def incr(self, key: str) -> int:
        with self.guard("increment"):
            row = self._conn().execute(
                "INSERT INTO checkpoint_kv (key, value) VALUES (?, CAST('1' AS BLOB)) "
                "ON CONFLICT (key) DO UPDATE SET value = CAST(CAST(CAST(value AS TEXT) AS INTEGER) + 1 AS BLOB) "
                "RETURNING value",
                (key,),
            ).fetchone()
        return int(bytes(row[0]))

    def close(self) -> None:
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
        self._local = threading.local()
