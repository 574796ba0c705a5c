"""EntityStore contract, run against SQLite and CouchDB (pouchdb-server)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from owx.gateway.stores import (
    AUTH_COLLECTION,
    MAX_DOC_BYTES,
    Conflict,
    Entity,
    EntityStore,
    InvalidInput,
    QuotaExceeded,
)
from owx.gateway.stores.sqlite import SQLiteEntityStore
from tests.stores.conftest import Backend

ODD_NAMES = [
    "pkg/hello",
    "a b%20c?d#e&f=g",
    "ünïçødé/名前 ✓",
    "..",
    "_leading_underscore",
    'quote"and\\backslash',
    "x" * 1024,
]


def test_create_get_round_trip(entities: EntityStore) -> None:
    doc = {"exec": {"kind": "python:3", "code": "def main(a): return a"}, "limits": {"memory": 256}, "_id": "mine"}
    created = entities.put("guest", "actions", "hello", doc, None)
    assert isinstance(created, Entity)
    assert (created.namespace, created.collection, created.name, created.doc) == ("guest", "actions", "hello", doc)
    assert created.rev and abs(created.updated - time.time() * 1000) < 60_000
    assert entities.get("guest", "actions", "hello") == created
    assert entities.get("guest", "actions", "other") is None
    assert entities.get("guest", "packages", "hello") is None
    assert entities.get("other", "actions", "hello") is None


def test_create_existing_is_a_conflict_and_keeps_the_stored_doc(entities: EntityStore) -> None:
    entities.put("guest", "actions", "a", {"v": 1}, None)
    with pytest.raises(Conflict):
        entities.put("guest", "actions", "a", {"v": 2}, None)
    assert entities.get("guest", "actions", "a").doc == {"v": 1}


def test_update_needs_the_current_revision(entities: EntityStore) -> None:
    first = entities.put("guest", "actions", "a", {"v": 1}, None)
    second = entities.put("guest", "actions", "a", {"v": 2}, first.rev)
    assert second.rev != first.rev and second.updated > first.updated
    for stale in (first.rev, "1-0123456789abcdef", "not a rev", ""):
        with pytest.raises(Conflict):
            entities.put("guest", "actions", "a", {"v": 3}, stale)
    assert entities.get("guest", "actions", "a").doc == {"v": 2}
    with pytest.raises(Conflict):
        entities.put("guest", "actions", "absent", {"v": 1}, second.rev)
    assert entities.get("guest", "actions", "absent") is None


def test_delete(entities: EntityStore) -> None:
    assert entities.delete("guest", "actions", "a") is False
    first = entities.put("guest", "actions", "a", {"v": 1}, None)
    second = entities.put("guest", "actions", "a", {"v": 2}, first.rev)
    with pytest.raises(Conflict):
        entities.delete("guest", "actions", "a", first.rev)
    assert entities.get("guest", "actions", "a").doc == {"v": 2}
    assert entities.delete("guest", "actions", "a", second.rev) is True
    assert entities.get("guest", "actions", "a") is None
    assert entities.delete("guest", "actions", "a", second.rev) is False
    # re-create after delete
    again = entities.put("guest", "actions", "a", {"v": 3}, None)
    assert entities.delete("guest", "actions", "a") is True
    assert entities.get("guest", "actions", "a") is None and again.doc == {"v": 3}


def test_returned_docs_are_copies(entities: EntityStore) -> None:
    doc = {"nested": {"list": [1, 2]}}
    created = entities.put("guest", "actions", "a", doc, None)
    doc["nested"]["list"].append(3)
    created.doc["nested"]["list"].append(4)
    fetched = entities.get("guest", "actions", "a")
    fetched.doc["nested"]["list"].append(5)
    assert entities.get("guest", "actions", "a").doc == {"nested": {"list": [1, 2]}}


@pytest.mark.parametrize("name", ODD_NAMES)
def test_odd_names_and_unicode_docs_round_trip(entities: EntityStore, name: str) -> None:
    doc = {
        "text": "ünïçødé 名前 ✓ \U0001f600",
        "quote": '"\\',
        "none": None,
        "float": 1.5,
        "big": 2**53 - 1,
        "neg": -(2**53) + 1,
        "_rev": "x",
    }
    entities.put("guest", "actions", name, doc, None)
    assert entities.get("guest", "actions", name).doc == doc
    assert [e.name for e in entities.list("guest", "actions")] == [name]
    assert entities.delete("guest", "actions", name) is True


def test_large_doc(entities: EntityStore) -> None:
    doc = {"exec": {"code": "# filler\n" * 400_000}}  # 4 MB
    entities.put("guest", "actions", "big", doc, None)
    assert entities.get("guest", "actions", "big").doc == doc
    with pytest.raises(InvalidInput, match="limit"):
        entities.put("guest", "actions", "huge", {"code": "x" * (MAX_DOC_BYTES + 1)}, None)
    assert entities.get("guest", "actions", "huge") is None


@pytest.mark.parametrize(
    "key",
    [
        ("", "actions", "a"),
        ("gu/est", "actions", "a"),
        ("guest", "", "a"),
        ("guest", "Actions", "a"),
        ("guest", "act/ions", "a"),
        ("guest", "actions", ""),
        ("guest", "actions", "a\x00b"),
        ("guest", "actions", "bad\udc80surrogate"),
        ("guest", "actions", None),
        ("guest", "actions", "x" * 1025),
    ],
)
def test_bad_keys_are_refused(entities: EntityStore, key: tuple) -> None:
    with pytest.raises(InvalidInput):
        entities.put(*key, {"v": 1}, None)
    with pytest.raises(InvalidInput):
        entities.get(*key)
    with pytest.raises(InvalidInput):
        entities.delete(*key)


@pytest.mark.parametrize(
    "doc", [["not", "a", "dict"], {"nan": float("nan")}, {"obj": object()}, {"s": "lone \ud800 surrogate"}, "text"]
)
def test_bad_docs_are_refused_and_damage_nothing(entities: EntityStore, doc: object) -> None:
    stored = entities.put("guest", "actions", "a", {"v": 1}, None)
    with pytest.raises(InvalidInput):
        entities.put("guest", "actions", "a", doc, stored.rev)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        entities.put("guest", "actions", "b", doc, None)  # type: ignore[arg-type]
    assert entities.get("guest", "actions", "a") == stored
    assert entities.get("guest", "actions", "b") is None


def test_list_newest_update_first_with_skip_limit_and_count(entities: EntityStore) -> None:
    for name in ["c", "a", "b", "pkg/x", "pkg/y", "pkgz"]:
        entities.put("guest", "actions", name, {"name": name}, None)
    b = entities.get("guest", "actions", "b")
    entities.put("guest", "actions", "a", {"name": "a", "v": 2}, entities.get("guest", "actions", "a").rev)
    entities.put("guest", "packages", "pkg", {}, None)
    entities.put("other", "actions", "a", {}, None)

    names = [e.name for e in entities.list("guest", "actions")]
    assert names == ["a", "pkgz", "pkg/y", "pkg/x", "b", "c"]
    listed = entities.list("guest", "actions")
    assert all(isinstance(e, Entity) for e in listed)
    assert listed[-2] == b and listed[0].doc == {"name": "a", "v": 2}
    assert [e.name for e in entities.list("guest", "actions", skip=1, limit=2)] == ["pkgz", "pkg/y"]
    assert [e.name for e in entities.list("guest", "actions", skip=5, limit=10)] == ["c"]
    assert entities.list("guest", "actions", skip=6) == []
    assert [e.name for e in entities.list("guest", "actions", prefix="pkg/")] == ["pkg/y", "pkg/x"]
    assert [e.name for e in entities.list("guest", "actions", prefix="pkg/", limit=1)] == ["pkg/y"]
    # prefixes are exact, case included
    assert entities.list("guest", "actions", prefix="PKG/") == []
    assert entities.count("guest", "actions") == 6
    assert entities.count("guest", "actions", prefix="pkg") == 3
    assert entities.count("guest", "actions", prefix="pkg/") == 2
    assert entities.count("guest", "actions", prefix="zzz") == 0
    assert entities.count("guest", "packages") == 1 and entities.count("other", "actions") == 1
    assert entities.count("nobody", "actions") == 0 and entities.list("nobody", "actions") == []
    with pytest.raises(InvalidInput):
        entities.list("guest", "actions", skip=-1)
    with pytest.raises(InvalidInput):
        entities.list("guest", "actions", limit="5")  # type: ignore[arg-type]


def test_arbitrary_collections_like_canary_and_disdel_tables(entities: EntityStore) -> None:
    for coll in ("canary.worker_info", "canary.job_info", "canary.function_info", "canary.checkpoint_info",
                 "canary.replication_info", "disdel.history"):  # fmt: skip
        row = entities.put("guest", coll, "job-1/fn-0", {"table": coll, "state": "running"}, None)
        entities.put("guest", coll, "job-1/fn-0", {"table": coll, "state": "done"}, row.rev)
        assert [e.doc["state"] for e in entities.list("guest", coll, prefix="job-1/")] == ["done"]
    assert entities.count("guest", "actions") == 0


def test_find_namespace_by_key(entities: EntityStore) -> None:
    assert entities.find_namespace_by_key("u-1") is None
    guest = entities.put("guest", AUTH_COLLECTION, "guest", {"uuid": "u-1", "key": "k-1"}, None)
    entities.put("other", AUTH_COLLECTION, "other", {"uuid": "u-2", "key": "k-2"}, None)
    entities.put("guest", "actions", "not-auth", {"uuid": "u-3"}, None)
    for _ in range(3):  # the cached path answers the same
        assert entities.find_namespace_by_key("u-1") == guest
    assert entities.find_namespace_by_key("u-2").namespace == "other"
    # only auth records are indexed
    assert entities.find_namespace_by_key("u-3") is None
    assert entities.find_namespace_by_key("U-1") is None
    assert entities.find_namespace_by_key("") is None
    rotated = entities.put("guest", AUTH_COLLECTION, "guest", {"uuid": "u-9", "key": "k-9"}, guest.rev)
    assert entities.find_namespace_by_key("u-1") is None
    assert entities.find_namespace_by_key("u-9") == rotated
    entities.delete("guest", AUTH_COLLECTION, "guest")
    assert entities.find_namespace_by_key("u-9") is None


def test_concurrent_read_modify_write_loses_no_update(entities: EntityStore) -> None:
    entities.put("guest", "canary.job_info", "counter", {"n": 0}, None)
    threads, increments = 6, 15

    def bump() -> None:
        for _ in range(increments):
            while True:
                current = entities.get("guest", "canary.job_info", "counter")
                try:
                    doc = {"n": current.doc["n"] + 1}
                    entities.put("guest", "canary.job_info", "counter", doc, current.rev)
                    break
                except Conflict:
                    continue

    with ThreadPoolExecutor(threads) as pool:
        for done in [pool.submit(bump) for _ in range(threads)]:
            done.result()  # re-raises what a worker raised
    counter = entities.get("guest", "canary.job_info", "counter")
    assert counter.doc == {"n": threads * increments}


def test_concurrent_creates_of_one_name_have_one_winner(entities: EntityStore) -> None:
    results: list[str] = []
    barrier = threading.Barrier(8)

    def create(i: int) -> None:
        barrier.wait()
        try:
            entities.put("guest", "actions", "race", {"by": i}, None)
            results.append("created")
        except Conflict:
            results.append("conflict")

    workers = [threading.Thread(target=create, args=(i,)) for i in range(8)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert sorted(results) == ["conflict"] * 7 + ["created"]


def test_a_namespaces_entities_take_at_most_its_bound_and_others_are_untouched(backend: Backend) -> None:
    """One tenant creating 13 MB actions in a loop filled the disk every tenant's stores are on. A
    write that would take its namespace's entities past the bound is refused; shrinking, deleting,
    other namespaces and keys still go; a new store (a restart) counts what is there."""
    store = backend.entities(max_namespace_bytes=100_000)
    doc = {"exec": {"kind": "python:3", "code": "#" * 30_000}}
    saved = [store.put("flood", "actions", f"a{n}", doc, None) for n in range(3)]
    with pytest.raises(QuotaExceeded, match="limit of 100000 bytes"):
        store.put("flood", "actions", "a3", doc, None)
    with pytest.raises(QuotaExceeded):
        store.put("flood", "triggers", "t", {"parameters": [{"key": "k", "value": "v" * 30_000}]}, None)
    assert store.get("flood", "actions", "a3") is None
    store.put("other", "actions", "a0", doc, None)
    store.put("flood", AUTH_COLLECTION, "key", {"uuid": "u", "key": "k" * 30_000}, None)
    smaller = store.put("flood", "actions", "a0", {"exec": {"kind": "python:3", "code": "#"}}, saved[0].rev)
    store.put("flood", "actions", "a3", doc, None)  # room again
    with pytest.raises(QuotaExceeded):
        store.put("flood", "actions", "a0", doc, smaller.rev)  # growing back is not
    store.close()
    again = backend.entities(max_namespace_bytes=100_000)
    with pytest.raises(QuotaExceeded):
        again.put("flood", "actions", "a4", doc, None)
    assert again.delete("flood", "actions", "a1")
    again.put("flood", "actions", "a4", doc, None)
    again.close()
    unbounded = backend.entities()
    unbounded.put("flood", "actions", "a5", doc, None)  # the control: without a bound it goes


def test_sqlite_reads_do_not_wait_for_a_write_nor_one_namespaces_writes_for_anothers(tmp_path) -> None:
    """One tenant overwriting 12 MB actions in a loop made every tenant's reads and key lookups wait
    behind its writes (one lock for both), and its queued writes ahead of another's. A read takes a
    connection of its own; writes take turns by namespace."""
    store = SQLiteEntityStore(tmp_path / "owx.db")
    store.put("victim", "actions", "small", {"exec": {"code": "x"}}, None)
    big = {"exec": {"code": "#" + "x" * (12 << 20)}}
    written, current_rev = [], store._current_rev

    def noted(key):  # type: ignore[no-untyped-def]  # called inside the write lock: the order writes go in
        written.append(key[0])
        return current_rev(key)

    store._current_rev = noted  # type: ignore[method-assign]
    with store._writes.hold("attacker"):  # a write of the attacker's in progress
        read = ThreadPoolExecutor(1).submit(lambda: store.list("victim", "actions"))
        assert [e.name for e in read.result(5)] == ["small"]  # not held behind it
        queued = [threading.Thread(target=store.put, args=("attacker", "actions", f"big{i}", big, None))
                  for i in range(3)]
        for thread in queued:
            thread.start()
        while sum(len(t) for t in store._writes._waiting.values()) < 3:
            time.sleep(0.005)
        victims = ThreadPoolExecutor(1).submit(store.put, "victim", "actions", "second", {"exec": {"code": "y"}}, None)
        while sum(len(t) for t in store._writes._waiting.values()) < 4:
            time.sleep(0.005)
    victims.result(30)
    for thread in queued:
        thread.join(30)
    assert written == ["attacker", "victim", "attacker", "attacker"]  # after one of the three queued before it
    assert store.count("attacker", "actions") == 3
    store.close()
