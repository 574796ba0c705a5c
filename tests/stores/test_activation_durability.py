"""Activation stores over the activation log: what was put or accepted survives the process's death
before any commit, rotation, a full disk, and the journals older versions kept in the database."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import sqlite3
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import couchdb
import pytest

from owx.gateway.stores import ActivationStore, StoreUnavailable
from owx.gateway.stores.activation_log import ActivationLog, decode
from owx.gateway.stores.couch import ACCEPTED_PREFIX, CouchActivationStore
from owx.gateway.stores.sqlite import SQLiteActivationStore
from owx.gateway.stores.writebehind import WriterOptions
from tests.fixtures.couchdb import free_port, pouchdb_server
from tests.stores.conftest import activation

PREFIX = "owx_"

# The schema of the activation store before the activation log: a journal table of accepted entries.
OLD_SQLITE_SCHEMA = """
CREATE TABLE activations (activation_id TEXT PRIMARY KEY, namespace TEXT NOT NULL, name TEXT NOT NULL,
                          start INTEGER NOT NULL, record TEXT NOT NULL);
CREATE INDEX activations_by_start ON activations (namespace, start DESC, activation_id DESC);
CREATE INDEX activations_by_name ON activations (namespace, name, start DESC, activation_id DESC);
CREATE TABLE accepted (activation_id TEXT PRIMARY KEY, entry TEXT NOT NULL);
"""


def open_store(where: tuple[str, ...], log: Path, segment_bytes: int = 64 * 1024 * 1024) -> ActivationStore:
    """An SQLite store (``("sqlite", file)``) or a CouchDB one (``("couchdb", url)``) on ``log``."""
    activation_log = ActivationLog(log, segment_bytes)
    if where[0] == "sqlite":
        return SQLiteActivationStore(Path(where[1]), activation_log)
    return CouchActivationStore(where[1], PREFIX, activation_log, timeout_s=2)


def entry(activation_id: str) -> dict[str, Any]:
    return {"activationId": activation_id, "namespace": "guest", "name": "hello"}


def killed_gateway(where: tuple[str, ...], log: str, segment_bytes: int, steps: list[tuple[str, Any]],
                   pipe: Any) -> None:
    """A child process: open a store, wait for the word, run ``steps`` (``accept``, ``put``,
    ``flush``, ``segments``), send back whether each future was done on return (or the segment
    files), and die by SIGKILL, without closing anything."""
    store = open_store(where, Path(log), segment_bytes)
    pipe.send("open")
    pipe.recv()
    results: list[Any] = []
    for step, argument in steps:
        if step == "accept":
            results.append(store.accept(argument).done())
        elif step == "put":
            results.append(store.put(argument).done())
        elif step == "flush":
            store.flush(30)
        else:
            results.append([(p.name, p.stat().st_size) for p in sorted(Path(log).glob("*.log"))])
    pipe.send(results)
    os.kill(os.getpid(), signal.SIGKILL)


def run_killed(where: tuple[str, ...], log: Path, steps: list[tuple[str, Any]], segment_bytes: int = 64 * 1024 * 1024,
               when_open: Any = lambda: None) -> list[Any]:
    """Run `killed_gateway` in a fresh process (``when_open`` runs once its store is open); its results."""
    context = multiprocessing.get_context("spawn")
    here, there = context.Pipe()
    child = context.Process(target=killed_gateway, args=(where, str(log), segment_bytes, steps, there))
    child.start()
    try:
        assert here.poll(60) and here.recv() == "open"
        when_open()
        here.send("go")
        assert here.poll(120), "the child did not run its steps"
        results = here.recv()
    finally:
        child.join(30)
    assert child.exitcode == -signal.SIGKILL
    return results


class SQLiteDatabase:
    """The SQLite file of a store, and a lock on it that makes every commit of the store wait."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / "activations.db"
        self.where = ("sqlite", str(self.path))
        self._lock: sqlite3.Connection | None = None

    def block(self) -> None:
        self._lock = sqlite3.connect(self.path, isolation_level=None)
        self._lock.execute("BEGIN EXCLUSIVE")

    def unblock(self) -> None:
        assert self._lock is not None
        self._lock.execute("ROLLBACK")
        self._lock.close()

    def stored_ids(self) -> set[str]:
        with sqlite3.connect(self.path) as conn:
            return {aid for (aid,) in conn.execute("SELECT activation_id FROM activations")}


class CouchServer:
    """A pouchdb-server of its own, with its data on disk, that `block` stops and `unblock` restarts."""

    def __init__(self, directory: Path, stack: ExitStack) -> None:
        self._port, self._data, self._stack = free_port(), directory / "couch", stack
        self._running = ExitStack()
        stack.callback(self._running.close)
        self.where = ("couchdb", self._running.enter_context(pouchdb_server(self._port, data_dir=self._data)))

    def block(self) -> None:
        self._running.close()

    def unblock(self) -> None:
        self._running.enter_context(pouchdb_server(self._port, data_dir=self._data))

    def stored_ids(self) -> set[str]:
        rows = couchdb.Server(self.where[1])[PREFIX + "activations"].view("_all_docs").rows
        return {row.id for row in rows if not row.id.startswith("_")}


@contextmanager
def database(kind: str, directory: Path) -> Iterator[SQLiteDatabase | CouchServer]:
    with ExitStack() as stack:
        yield SQLiteDatabase(directory) if kind == "sqlite" else CouchServer(directory, stack)


@pytest.mark.parametrize("kind", ["sqlite", "couchdb"])
def test_what_was_put_or_accepted_survives_a_kill_before_any_commit(kind: str, tmp_path: Path) -> None:
    """The child's database takes no commit (SQLite locked, CouchDB stopped) and it dies by SIGKILL:
    the records and entries it was answered for at once are all there at the next open, once each."""
    records = [activation("guest", "hello", start) for start in range(1, 11)]
    left = ["left-1", "left-2"]  # accepted, never recorded
    duplicate = dict(records[0], response={"status": "success", "success": True, "result": {"second": True}})
    steps = [("accept", entry(r["activationId"])) for r in records[:4]] + [("accept", entry(aid)) for aid in left]
    steps += [("put", r) for r in records] + [("put", duplicate)]
    with database(kind, tmp_path) as db:
        done = run_killed(db.where, tmp_path / "log", steps, when_open=db.block)
        assert all(done), "a future was not complete on return"
        db.unblock()
        assert db.stored_ids() == set()  # the child committed nothing: all that follows comes from the log

        store = open_store(db.where, tmp_path / "log")
        try:
            for record in records:  # readable at once
                assert store.get("guest", record["activationId"]) == record
            assert sorted(e["activationId"] for e in store.unfinished()) == left
            store.flush(30)
            assert store.list("guest", docs=True) == records[::-1]  # each once, the first write of each
            assert db.stored_ids() == {r["activationId"] for r in records}
        finally:
            store.close()


def test_segments_rotate_and_go_while_open_entries_survive_a_kill(tmp_path: Path) -> None:
    segment_bytes = 4096
    early = [f"early-{i}" for i in range(3)]
    records = [activation("guest", "hello", start) for start in range(200)]
    steps: list[tuple[str, Any]] = [("accept", entry(aid)) for aid in early]
    for i, record in enumerate(records):
        steps += [("accept", entry(record["activationId"])), ("put", record)]
        if i % 50 == 49:
            steps += [("flush", None), ("segments", None)]
    db = SQLiteDatabase(tmp_path)
    results = run_killed(db.where, tmp_path / "log", steps, segment_bytes)

    listings = [r for r in results if isinstance(r, list)]
    assert all(len(files) == 1 for files in listings), listings  # all committed: only the current segment is left
    assert all(size < segment_bytes + 2048 for files in listings for _, size in files)
    assert int(Path(listings[-1][0][0]).stem) > 20  # it rotated all along
    store = open_store(db.where, tmp_path / "log", segment_bytes)
    try:
        assert sorted(e["activationId"] for e in store.unfinished()) == early
        assert store.count("guest") == len(records)
    finally:
        store.close()


def test_when_the_log_cannot_take_a_row_new_activations_are_refused_and_records_wait_for_the_database(
        tmp_path: Path, full_disk: Path) -> None:
    db = SQLiteDatabase(tmp_path)
    store = SQLiteActivationStore(db.path, full_disk / "log")
    try:
        db.block()
        durable, pending = [], None
        for start in range(10):  # records of 20 KB: the fourth does not fit in the log's 64 KiB
            record = activation("guest", "hello", start, logs=["x" * 20_000])
            assert store.accept(entry(record["activationId"])).done()
            stored = store.put(record)
            if not stored.done():
                pending = (record, stored)
                break
            durable.append(record["activationId"])
        assert pending is not None and len(durable) == 3
        with pytest.raises(StoreUnavailable, match="activation log"):
            store.accept(dict(entry("refused"), padding="x" * 8192))
        (segment,) = (full_disk / "log").glob("*.log")
        data = segment.read_bytes()
        assert data.endswith(b"\n")  # the failed appends left nothing behind
        rows = [decode(line) for line in data.split(b"\n")[:-1]]
        assert [r.activation_id for r in rows[1::2]] == durable
        time.sleep(0.5)
        assert not pending[1].done()  # only the database can make it durable, and it is locked
        db.unblock()
        pending[1].result(30)
        assert store.get("guest", pending[0]["activationId"]) == pending[0]
        assert store.unfinished() == []  # its accepted entry is closed by the commit
    finally:
        store.close()


def test_close_fails_the_records_neither_the_log_nor_the_database_took(
        tmp_path: Path, full_disk: Path, caplog: pytest.LogCaptureFixture) -> None:
    with pouchdb_server() as url:
        store = CouchActivationStore(url, PREFIX, full_disk / "log", timeout_s=1,
                                     writer=WriterOptions(close_wait_s=1))
    assert store.put(activation("guest", "hello", 1)).done()  # in the log
    filler = os.open(full_disk / "filler", os.O_WRONLY | os.O_CREAT)
    with pytest.raises(OSError):
        while True:
            os.write(filler, b"x" * 4096)
    os.close(filler)
    lost = store.put(activation("guest", "hello", 2, logs=["x" * 8192]))
    assert not lost.done()
    with pytest.raises(StoreUnavailable, match="1 activation records could not be written"):
        store.close()
    assert isinstance(lost.exception(0), StoreUnavailable)
    assert "1 activation records stay in the activation log" in caplog.text


def test_the_accepted_table_of_an_older_sqlite_store_moves_into_the_log(tmp_path: Path) -> None:
    done, left = activation("guest", "hello", 1), activation("guest", "hello", 2)
    with sqlite3.connect(tmp_path / "activations.db") as conn:
        conn.executescript(OLD_SQLITE_SCHEMA)
        conn.execute("INSERT INTO activations VALUES (?, 'guest', 'hello', 1, ?)",
                     (done["activationId"], json.dumps(done)))
        conn.executemany("INSERT INTO accepted VALUES (?, ?)",
                         [(r["activationId"], json.dumps(entry(r["activationId"]))) for r in (done, left)])
    conn.close()
    for _ in range(2):  # migrated, then from the log
        store = SQLiteActivationStore(tmp_path / "activations.db", tmp_path / "log")
        try:
            assert store.unfinished() == [entry(left["activationId"])]
            assert store.get("guest", done["activationId"]) == done
        finally:
            store.close()
        with sqlite3.connect(tmp_path / "activations.db") as conn:
            assert conn.execute("SELECT name FROM sqlite_master WHERE name='accepted'").fetchall() == []
        conn.close()


def test_the_accepted_documents_of_an_older_couchdb_store_move_into_the_log(tmp_path: Path, couchdb_url: str,
                                                                            couch_prefix: str) -> None:
    CouchActivationStore(couchdb_url, couch_prefix, tmp_path / "log").close()  # the database, with its views
    db = couchdb.Server(couchdb_url)[couch_prefix + "activations"]
    done, left = activation("guest", "hello", 1), activation("guest", "hello", 2)
    db.update([{"_id": done["activationId"], "namespace": "guest", "name": "hello", "start": 1, "record": done,
                "summary": {}},
               *({"_id": ACCEPTED_PREFIX + r["activationId"], "namespace": "guest",
                  "accepted": entry(r["activationId"])} for r in (done, left))])
    for _ in range(2):  # migrated, then from the log
        store = CouchActivationStore(couchdb_url, couch_prefix, tmp_path / "log")
        try:
            assert store.unfinished() == [entry(left["activationId"])]
            assert store.get("guest", done["activationId"]) == done
        finally:
            store.close()
        assert [row.id for row in db.view("_all_docs").rows if row.id.startswith(ACCEPTED_PREFIX)] == []
