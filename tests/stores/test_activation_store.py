"""ActivationStore contract, run against SQLite and CouchDB (pouchdb-server)."""

from __future__ import annotations

import sqlite3
import threading
import uuid

import pytest

from owx.gateway.stores import ActivationStore, InvalidInput, StoreUnavailable, retention
from owx.gateway.stores.activation_log import ActivationLog
from owx.gateway.stores.activations import to_row
from owx.gateway.stores.couch import DOCUMENT_MARGIN_BYTES, LOGS_CUT, CouchActivationStore
from owx.gateway.stores.sqlite import SQLiteActivationStore
from owx.gateway.stores.validation import encode_doc
from tests.stores.conftest import Backend, activation

SUMMARY_KEYS = {
    "namespace",
    "name",
    "version",
    "publish",
    "annotations",
    "activationId",
    "start",
    "end",
    "duration",
    "statusCode",
}


def test_put_then_get_sees_the_record_before_and_after_flush(activations: ActivationStore) -> None:
    record = activation("guest", "hello", 1000, logs=["ünïçødé ✓"])
    activations.put(record)
    # still queued, or already written
    assert activations.get("guest", record["activationId"]) == record
    activations.flush(10)
    assert activations.get("guest", record["activationId"]) == record
    assert activations.get("other", record["activationId"]) is None
    assert activations.get("guest", uuid.uuid4().hex) is None


def test_the_stored_record_is_a_snapshot(activations: ActivationStore) -> None:
    record = activation("guest", "hello", 1000)
    activations.put(record)
    record["response"]["result"] = {"changed": True}
    activations.get("guest", record["activationId"])["logs"].append("mutated")
    activations.flush(10)
    stored = activations.get("guest", record["activationId"])
    assert stored["response"]["result"] == {"n": 1000} and len(stored["logs"]) == 1


def test_list_is_newest_first_with_read_your_writes(activations: ActivationStore) -> None:
    records = [activation("guest", "hello", start) for start in (3000, 1000, 2000)]
    for r in records:
        activations.put(r)
    activations.put(activation("other", "hello", 5000))
    # no flush: list must see the queued records
    listed = activations.list("guest", docs=True)
    assert [r["start"] for r in listed] == [3000, 2000, 1000]
    assert listed[0] == records[0]
    assert activations.count("guest") == 3 and activations.count("other") == 1 and activations.count("none") == 0


def test_summaries_without_docs_follow_openwhisk(activations: ActivationStore) -> None:
    ok = activation("guest", "hello", 1000)
    failed = activation(
        "guest", "hello", 2000, response={"status": "application error", "success": False, "result": {"error": "x"}}
    )
    running = activation("guest", "hello", 3000, end=0)
    del running["duration"]
    for r in (ok, failed, running):
        activations.put(r)
    by_id = {s["activationId"]: s for s in activations.list("guest")}
    assert set(by_id[ok["activationId"]]) == SUMMARY_KEYS
    assert by_id[ok["activationId"]]["statusCode"] == 0 and by_id[ok["activationId"]]["duration"] == 5
    assert by_id[failed["activationId"]]["statusCode"] == 1
    assert set(by_id[running["activationId"]]) == SUMMARY_KEYS - {"end", "duration", "statusCode"}
    for summary in by_id.values():
        assert "response" not in summary and "logs" not in summary and "subject" not in summary


def test_filters_name_since_upto_skip_limit(activations: ActivationStore) -> None:
    for start in range(1000, 11000, 1000):  # 10 of "hello"
        activations.put(activation("guest", "hello", start))
    for start in (1500, 5500):
        activations.put(activation("guest", "bye", start))
    packaged = activation("guest", "hello", 7500, annotations=[{"key": "path", "value": "guest/pkg/hello"}])
    activations.put(packaged)
    bound = activation("guest", "hello", 8500, annotations=[{"key": "path", "value": "other/shared/hello"},
                                                            {"key": "binding", "value": "guest/mine"}])
    activations.put(bound)

    def starts(**kw: object) -> list[int]:
        return [r["start"] for r in activations.list("guest", **kw)]

    assert starts(name="hello") == list(range(10000, 0, -1000))
    assert starts(name="bye") == [5500, 1500]
    assert starts(name="pkg/hello") == [7500]  # packaged actions filter as pkg/action, like OpenWhisk
    assert starts(name="mine/hello") == [8500]  # invoked through a binding: binding/action, like OpenWhisk
    assert starts(name="shared/hello") == []
    assert starts(name="nope") == []
    assert starts(since=5000, upto=7500) == [7500, 7000, 6000, 5500, 5000]  # both bounds inclusive
    assert starts(name="hello", since=9000) == [10000, 9000]
    assert starts(name="hello", upto=2000) == [2000, 1000]
    assert starts(skip=2, limit=3) == [8500, 8000, 7500]
    assert starts(name="hello", skip=8, limit=5) == [2000, 1000]
    assert starts(skip=20) == []
    assert activations.count("guest") == 14
    assert activations.count("guest", name="hello") == 10
    assert activations.count("guest", name="mine/hello") == 1
    assert activations.count("guest", name="hello", since=3000, upto=6000) == 4
    assert activations.count("guest", since=11000) == 0
    with pytest.raises(InvalidInput):
        activations.list("guest", since="yesterday")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        activations.list("guest", limit=-1)


def test_first_write_wins(activations: ActivationStore) -> None:
    first = activation("guest", "hello", 1000)
    second = dict(first, response={"status": "success", "success": True, "result": {"dup": True}})
    activations.put(first)
    activations.put(second)  # while the first is possibly still queued
    activations.flush(10)
    activations.put(second)  # after it is written
    assert activations.get("guest", first["activationId"]) == first
    assert activations.count("guest") == 1


@pytest.mark.parametrize(
    "change",
    [
        {"activationId": ""},
        {"activationId": "../etc"},
        {"activationId": "_design"},
        {"activationId": 7},
        {"namespace": ""},
        {"namespace": "a/b"},
        {"namespace": "a\tb"},
        {"name": None},
        {"name": "hel\nlo"},
        {"annotations": [{"key": "path", "value": "guest/pk\tg/hello"}]},
        {"start": "now"},
        {"start": -1},
        {"response": {"result": float("inf")}},
        {"logs": ["lone \udc80"]},
    ],
)
def test_bad_records_are_refused_at_put(activations: ActivationStore, change: dict) -> None:
    with pytest.raises(InvalidInput):
        activations.put({**activation("guest", "hello", 1000), **change})
    activations.put(good := activation("guest", "hello", 2000))
    assert [r["activationId"] for r in activations.list("guest")] == [good["activationId"]]


def test_missing_fields_and_non_dicts_are_refused(activations: ActivationStore) -> None:
    for bad in ({}, {"activationId": uuid.uuid4().hex}, ["x"], None):
        with pytest.raises(InvalidInput):
            activations.put(bad)  # type: ignore[arg-type]
    assert activations.count("guest") == 0


def test_large_record(activations: ActivationStore) -> None:
    # 3 MB of logs
    record = activation("guest", "hello", 1000, logs=["x" * 1000] * 3000)
    activations.put(record)
    activations.flush(30)
    assert activations.get("guest", record["activationId"]) == record


def test_concurrent_writers_lose_nothing(activations: ActivationStore) -> None:
    threads, each = 8, 40
    ids: list[list[str]] = [[] for _ in range(threads)]

    def write(t: int) -> None:
        for i in range(each):
            record = activation("guest", f"fn{t}", t * 10_000 + i)
            activations.put(record)
            ids[t].append(record["activationId"])
            assert activations.get("guest", record["activationId"]) is not None

    workers = [threading.Thread(target=write, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert activations.count("guest") == threads * each
    assert activations.count("guest", name="fn3") == each
    listed = {r["activationId"] for r in activations.list("guest")}
    assert listed == {i for chunk in ids for i in chunk}


def test_close_writes_everything_queued(backend: Backend) -> None:
    store = backend.activations()
    records = [activation("guest", "hello", start) for start in range(1, 301)]
    for r in records:
        store.put(r)
    store.close()
    with pytest.raises(StoreUnavailable):
        store.put(activation("guest", "hello", 5000))
    reopened = backend.activations()
    assert reopened.count("guest") == 300
    assert reopened.get("guest", records[-1]["activationId"]) == records[-1]


def test_accepted_activations_are_unfinished_until_recorded_even_after_a_restart(backend: Backend) -> None:
    store = backend.activations()
    done, left = activation("guest", "hello", 1), activation("guest", "hello", 2)
    for record in (done, left):
        store.accept({"activationId": record["activationId"], "namespace": "guest", "name": "hello"}).result(10)
    store.put(done).result(10)  # durable once the future completes
    assert [e["activationId"] for e in store.unfinished()] == [left["activationId"]]
    store.close()
    reopened = backend.activations()
    assert [e["activationId"] for e in reopened.unfinished()] == [left["activationId"]]
    assert reopened.get("guest", done["activationId"]) == done
    reopened.put(left).result(10)
    assert reopened.unfinished() == []


def test_a_couchdb_record_past_the_document_limit_is_stored_with_its_first_log_lines(
        tmp_path, couchdb_url: str, couch_prefix: str) -> None:
    """CouchDB 3 refuses documents past its max_document_size (8,000,000 bytes by default) and a
    record may carry 10 MB of logs: refused, it would be lost after its 200. It keeps the log lines
    that fit, and says so. (pouchdb-server, which the tests run, has no such limit: the test sets a
    smaller one and checks what is written.)"""
    limit = 1_000_000
    store = CouchActivationStore(couchdb_url, couch_prefix, tmp_path / "log", max_document_bytes=limit)
    logs = [f"2024-01-01T00:00:00.000000Z stdout: line {n:05d} ünï " + "x" * 100 for n in range(20_000)]
    record = activation("guest", "chatty", 1000, logs=logs)
    try:
        store.put(record)
        store.flush(30)
        stored = store.get("guest", record["activationId"])
    finally:
        store.close()
    assert stored is not None
    assert stored["logs"][-1] == LOGS_CUT.format(limit=limit - DOCUMENT_MARGIN_BYTES)
    kept = stored["logs"][:-1]
    assert kept == logs[:len(kept)]
    assert limit - DOCUMENT_MARGIN_BYTES - 400 < len(encode_doc(stored).encode()) <= limit - DOCUMENT_MARGIN_BYTES
    assert {k: v for k, v in stored.items() if k != "logs"} == {k: v for k, v in record.items() if k != "logs"}


def _flood_and_quiet(store: SQLiteActivationStore, starts: range) -> list[dict]:
    """Records of ``flood`` with 2 KB of logs each, for ``starts``; and three of ``quiet``, written first."""
    for start in range(3):
        store.put(activation("quiet", "q", start))
    flood = [activation("flood", "f", start, logs=["x" * 2000]) for start in starts]
    for record in flood:
        store.put(record)
    store.flush(30)
    return flood


def test_a_namespace_keeps_its_newest_records_within_its_bound_and_others_keep_theirs(tmp_path) -> None:
    """One tenant printing megabytes per activation in a loop filled the disk every tenant's records
    are on. With a bound, that namespace loses its oldest records, nobody else's, across a restart too;
    with none (the control) every record stays."""
    bound = 200_000
    store = SQLiteActivationStore(tmp_path / "a.db", tmp_path / "log", max_namespace_bytes=bound)
    flood = _flood_and_quiet(store, range(1000, 1500))  # about 1.2 MB
    store.close()
    store = SQLiteActivationStore(tmp_path / "a.db", tmp_path / "log", max_namespace_bytes=bound)
    flood += _flood_and_quiet(store, range(2000, 2300))
    try:
        kept = store.list("flood", limit=0, docs=True)
        assert 0.8 * bound < sum(len(encode_doc(r).encode()) for r in kept) <= bound
        assert [r["activationId"] for r in kept] == [r["activationId"] for r in reversed(flood[-len(kept):])]
        assert store.get("flood", flood[0]["activationId"]) is None
        assert store.count("quiet") == 6
    finally:
        store.close()
    unbounded = SQLiteActivationStore(tmp_path / "b.db", tmp_path / "log-b")
    try:
        _flood_and_quiet(unbounded, range(1000, 1500))
        assert unbounded.count("flood") == 500
    finally:
        unbounded.close()


def test_a_namespace_past_its_bound_is_trimmed_a_chunk_per_commit_and_never_holds_more(tmp_path, monkeypatch) -> None:
    """Trimming a namespace's oldest tenth at once held the store's one writer for seconds at the
    default bound (every tenant's activation lists waited for it). Each commit now deletes at most
    ``TRIM_ROWS`` records beyond what its own batch added, and after every commit the namespace
    still holds no more than its bound; commits go on trimming it, others' included, to 90%."""
    monkeypatch.setattr(retention, "TRIM_ROWS", 4)
    bound = 400_000  # about 170 records of 2.3 KB: a tenth is 17 records, more than a chunk of 4
    store = SQLiteActivationStore(tmp_path / "a.db", tmp_path / "log", max_namespace_bytes=bound)
    try:
        def held() -> tuple[int, int]:
            kept = store.list("flood", limit=0, docs=True)
            return len(kept), sum(len(encode_doc(r).encode()) for r in kept)

        for start in range(160):  # under the bound, in one batch
            store.put(activation("flood", "f", start, logs=["x" * 2000]))
        store.flush(30)
        count, size = held()
        for start in range(160, 200):  # one record per commit, until one crosses the bound
            store.put(activation("flood", "f", start, logs=["x" * 2000]))
            store.flush(30)
            before, (count, size) = count, held()
            assert size <= bound
            assert before + 1 - count <= 4 + 1, "more than a chunk deleted in one commit"
            if count <= before:
                break
        assert count <= before and size > 0.9 * bound  # trimmed, by a chunk
        for start in range(20):  # another namespace's commits carry the trim on
            store.put(activation("quiet", "q", start))
            store.flush(30)
        assert held()[1] <= 0.9 * bound
        assert store.count("quiet") == 20
    finally:
        store.close()


def test_records_an_older_version_stored_are_counted_against_the_bound(tmp_path) -> None:
    """Its table had no sizes: they are worked out at the first open, so its records are trimmed too."""
    conn = sqlite3.connect(tmp_path / "old.db")
    conn.execute("CREATE TABLE activations (activation_id TEXT PRIMARY KEY, namespace TEXT NOT NULL, "
                 "name TEXT NOT NULL, start INTEGER NOT NULL, record TEXT NOT NULL)")
    old = [activation("flood", "f", start, logs=["x" * 2000]) for start in range(100)]
    conn.executemany("INSERT INTO activations VALUES (?, ?, ?, ?, ?)",
                     [(r["activationId"], "flood", "f", r["start"], encode_doc(r)) for r in old])
    conn.commit()
    conn.close()
    store = SQLiteActivationStore(tmp_path / "old.db", tmp_path / "log", max_namespace_bytes=100_000)
    try:
        store.put(new := activation("flood", "f", 500))
        store.flush(30)
        assert store.get("flood", new["activationId"]) == new
        assert 30 < store.count("flood") < 45  # of 101 records of about 2.3 KB
    finally:
        store.close()


def test_a_web_actions_outside_callers_records_go_before_the_owners_own(tmp_path) -> None:
    """Anyone may call a web action, and its records are its owner's: a flood of such calls made the
    owner lose the records of its own invocations, oldest first. Outside callers' records are trimmed
    first, the mark kept across a restart whether the database or only the activation log had them."""
    bound = 200_000
    store = SQLiteActivationStore(tmp_path / "a.db", tmp_path / "log", max_namespace_bytes=bound)
    own = [activation("site", "page", start, logs=["o" * 2000]) for start in range(40)]  # about 90 KB
    for record in own:
        store.put(record)
    store.flush(30)
    store.close()
    outside = [activation("site", "page", start, logs=["x" * 2000]) for start in range(1000, 1300)]
    died = ActivationLog(tmp_path / "log")  # what a gateway that died before its writer's commits left
    died.replay()
    for record in outside[:150]:
        died.append(to_row(record, outsider=True))
    died.close()
    store = SQLiteActivationStore(tmp_path / "a.db", tmp_path / "log", max_namespace_bytes=bound)
    try:
        for record in outside[150:]:
            store.put(record, outsider=True)
        store.flush(30)
        kept = {r["activationId"] for r in store.list("site", limit=0)}
        assert {r["activationId"] for r in own} <= kept
        assert outside[-1]["activationId"] in kept and outside[0]["activationId"] not in kept
        assert sum(len(encode_doc(r).encode()) for r in store.list("site", limit=0, docs=True)) <= bound
    finally:
        store.close()
