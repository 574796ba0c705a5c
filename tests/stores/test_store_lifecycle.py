"""Opening, restarting and losing the database: persistence, ownership, unreachable CouchDB."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from owx.settings import Settings
from owx.gateway.stores import AUTH_COLLECTION, StoreUnavailable, open_stores
from owx.gateway.stores.couch import CouchActivationStore, CouchEntityStore
from owx.gateway.stores.sqlite import SQLiteActivationStore, SQLiteEntityStore
from owx.gateway.stores.writebehind import WriterOptions
from tests.fixtures.couchdb import free_port, pouchdb_server
from tests.stores.conftest import Backend, activation


def test_close_and_reopen_keeps_everything(backend: Backend) -> None:
    entities, activations = backend.entities(), backend.activations()
    entities.put("guest", AUTH_COLLECTION, "guest", {"uuid": "u-1", "key": "k"}, None)
    first = entities.put("guest", "actions", "first", {"v": 1}, None)
    second = entities.put("guest", "actions", "pkg/second", {"v": 2}, None)
    records = [activation("guest", "hello", start) for start in (1, 2, 3)]
    for r in records:
        activations.put(r)
    entities.close()
    activations.close()

    entities, activations = backend.entities(), backend.activations()
    assert entities.list("guest", "actions") == [second, first]
    assert entities.find_namespace_by_key("u-1").name == "guest"
    assert activations.list("guest", docs=True) == records[::-1]
    # revisions carry over
    updated = entities.put("guest", "actions", "first", {"v": 3}, first.rev)
    assert entities.list("guest", "actions")[0] == updated


def test_closed_stores_refuse_work(backend: Backend) -> None:
    entities, activations = backend.entities(), backend.activations()
    entities.close()
    activations.close()
    entities.close()  # idempotent
    activations.close()
    with pytest.raises(StoreUnavailable):
        entities.get("guest", "actions", "a")
    with pytest.raises(StoreUnavailable):
        activations.put(activation("guest", "hello", 1))


def test_sqlite_file_is_owned_by_one_store(tmp_path: Path) -> None:
    entities = SQLiteEntityStore(tmp_path / "owx.db")
    with pytest.raises(StoreUnavailable, match="in use"):
        SQLiteEntityStore(tmp_path / "owx.db")
    activations = SQLiteActivationStore(tmp_path / "activations.db", tmp_path / "log")
    with pytest.raises(StoreUnavailable, match="in use"):
        SQLiteActivationStore(tmp_path / "activations.db", tmp_path / "other-log")
    with pytest.raises(StoreUnavailable, match="activation log .* in use"):
        SQLiteActivationStore(tmp_path / "other.db", tmp_path / "log")
    entities.close()
    activations.close()
    SQLiteEntityStore(tmp_path / "owx.db").close()  # free again once closed


def test_sqlite_unusable_data_dir(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(StoreUnavailable, match="data directory"):
        SQLiteEntityStore(tmp_path / "file" / "owx.db")
    (tmp_path / "garbage.db").write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreUnavailable, match="garbage.db"):
        SQLiteEntityStore(tmp_path / "garbage.db")
    assert (tmp_path / "garbage.db").read_bytes() == b"this is not a database" * 100


def test_open_stores_from_settings(tmp_path: Path, couchdb_url: str, couch_prefix: str) -> None:
    entities, activations = open_stores(Settings(data_dir=tmp_path / "data", gateway={"store": "sqlite"}))
    assert isinstance(entities, SQLiteEntityStore) and isinstance(activations, SQLiteActivationStore)
    activations.put(record := activation("guest", "hello", 1))
    entities.close()
    activations.close()
    assert {p.name for p in (tmp_path / "data").glob("*.db")} == {"owx.db", "activations.db"}
    assert (tmp_path / "data" / "activation-log").is_dir()

    entities, activations = open_stores(Settings(data_dir=tmp_path / "data", gateway={"store": "sqlite"}))
    assert activations.get("guest", record["activationId"]) == record
    entities.close()
    activations.close()

    settings = Settings(data_dir=tmp_path / "gateway", gateway={"store": "couchdb", "couchdb_url": couchdb_url,
                                                                 "couchdb_prefix": couch_prefix})
    entities, activations = open_stores(settings)
    assert isinstance(entities, CouchEntityStore) and isinstance(activations, CouchActivationStore)
    entities.close()
    activations.close()
    assert {p.name for p in (tmp_path / "gateway").iterdir()} == {"activation-log"}  # the gateway's own log


def test_unreachable_couchdb_is_a_clear_error(tmp_path: Path) -> None:
    url = f"http://admin:secret@127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match="unreachable") as caught:
        open_stores(Settings(gateway={"store": "couchdb", "couchdb_url": url}))
    assert "secret" not in str(caught.value)
    with pytest.raises(StoreUnavailable):
        CouchActivationStore(url, "owx_", tmp_path / "log")
    assert time.monotonic() - started < 10


def test_couchdb_going_down_and_coming_back(tmp_path: Path) -> None:
    port = free_port()
    with pouchdb_server(port, data_dir=tmp_path / "couch") as url:
        entities = CouchEntityStore(url, "owx_", cache_ttl_s=0, timeout_s=2)
        activations = CouchActivationStore(url, "owx_", tmp_path / "log", timeout_s=2, read_flush_timeout_s=1)
        entities.put("guest", "actions", "a", {"v": 1}, None)
        written = activation("guest", "hello", 1)
        activations.put(written)
        activations.flush(10)

    # the server is down: entity calls fail clearly, activation puts are kept in memory
    with pytest.raises(StoreUnavailable, match="unreachable"):
        entities.get("guest", "actions", "a")
    with pytest.raises(StoreUnavailable):
        entities.put("guest", "actions", "b", {"v": 1}, None)
    queued = activation("guest", "hello", 2)
    activations.put(queued)
    assert activations.get("guest", queued["activationId"]) == queued
    with pytest.raises(StoreUnavailable):
        activations.flush(0.5)
    with pytest.raises(StoreUnavailable):
        activations.list("guest")

    with pouchdb_server(port, data_dir=tmp_path / "couch"):  # back, with its data
        activations.flush(20)  # the writer retried and got through
        assert entities.get("guest", "actions", "a").doc == {"v": 1}
        assert [r["activationId"] for r in activations.list("guest")] == [
            queued["activationId"],
            written["activationId"],
        ]
        entities.close()
        activations.close()


def test_a_database_that_stays_down_refuses_new_activations_once_the_queue_is_full_and_loses_no_record(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with pouchdb_server() as url:
        activations = CouchActivationStore(url, "owx_", tmp_path / "log", timeout_s=1,
                                           writer=WriterOptions(max_pending=3, close_wait_s=1))
    records = [activation("guest", "hello", start) for start in range(4)]
    for record in records[:3]:
        assert not activations.backlogged()
        assert activations.put(record).done()  # durable in the activation log at once
    assert activations.backlogged()
    with pytest.raises(StoreUnavailable, match="unreachable"):
        activations.flush(5)  # the writer has tried the dead database, so the refusal can say why
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match="behind: 3 activation records wait to be written.*unreachable"):
        activations.accept({"activationId": "refused", "namespace": "guest"})  # at once: the event loop calls it
    assert time.monotonic() - started < 0.5
    assert activations.put(records[3]).done()  # the record of an accepted activation is always taken
    assert activations.unfinished() == []  # the refused activation was not journalled
    activations.close()  # what the database did not take stays in the log: nothing is lost
    assert "4 activation records stay in the activation log" in caplog.text

    with pouchdb_server() as url:  # the next start writes them
        reopened = CouchActivationStore(url, "owx_", tmp_path / "log")
        reopened.flush(30)
        assert reopened.list("guest", docs=True) == records[::-1]
        reopened.close()


def test_large_records_a_database_cannot_take_are_bounded_in_bytes_not_only_in_count(tmp_path: Path) -> None:
    """Records of 1 MiB each (a tenant's large results) fill the queue by bytes long before its row
    count: then new activations are refused instead of the queue holding gigabytes."""
    with pouchdb_server() as url:
        options = WriterOptions(max_pending=50_000, max_pending_bytes=4 * 1024 * 1024, close_wait_s=1)
        activations = CouchActivationStore(url, "owx_", tmp_path / "log", timeout_s=1, writer=options)
    big = "x" * (1024 * 1024)
    for start in range(4):
        assert not activations.backlogged()
        activations.put(activation("guest", "hello", start, logs=[big]))
    assert activations.backlogged()
    with pytest.raises(StoreUnavailable, match="4 activation records wait to be written"):
        activations.accept({"activationId": "refused", "namespace": "guest"})
    activations.close()


def test_couchdb_cache_staleness_is_bounded_by_its_ttl(couchdb_url: str, couch_prefix: str) -> None:
    writer = CouchEntityStore(couchdb_url, couch_prefix, cache_ttl_s=0)
    reader = CouchEntityStore(couchdb_url, couch_prefix, cache_ttl_s=0.3)
    first = writer.put("guest", "actions", "a", {"v": 1}, None)
    assert reader.get("guest", "actions", "a").doc == {"v": 1}
    writer.put("guest", "actions", "a", {"v": 2}, first.rev)
    assert writer.get("guest", "actions", "a").doc == {"v": 2}
    time.sleep(0.35)
    assert reader.get("guest", "actions", "a").doc == {"v": 2}
    writer.close()
    reader.close()
