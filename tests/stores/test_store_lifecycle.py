"""Opening, restarting and losing the database: persistence, ownership, unreachable CouchDB."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from owx.settings import Settings
from owx.gateway.inline import NeedsThread, on_loop
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
    activations = SQLiteActivationStore(tmp_path / "activations.db")
    with pytest.raises(StoreUnavailable, match="in use"):
        SQLiteActivationStore(tmp_path / "activations.db")
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

    entities, activations = open_stores(Settings(data_dir=tmp_path / "data", gateway={"store": "sqlite"}))
    assert activations.get("guest", record["activationId"]) == record
    entities.close()
    activations.close()

    settings = Settings(gateway={"store": "couchdb", "couchdb_url": couchdb_url, "couchdb_prefix": couch_prefix})
    entities, activations = open_stores(settings)
    assert isinstance(entities, CouchEntityStore) and isinstance(activations, CouchActivationStore)
    entities.close()
    activations.close()


def test_unreachable_couchdb_is_a_clear_error() -> None:
    url = f"http://admin:secret@127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match="unreachable") as caught:
        open_stores(Settings(gateway={"store": "couchdb", "couchdb_url": url}))
    assert "secret" not in str(caught.value)
    with pytest.raises(StoreUnavailable):
        CouchActivationStore(url, "owx_")
    assert time.monotonic() - started < 10


def test_couchdb_going_down_and_coming_back(tmp_path: Path) -> None:
    port = free_port()
    with pouchdb_server(port, data_dir=tmp_path / "couch") as url:
        entities = CouchEntityStore(url, "owx_", cache_ttl_s=0, timeout_s=2)
        activations = CouchActivationStore(url, "owx_", timeout_s=2, read_flush_timeout_s=1)
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


def test_a_database_that_stays_down_fails_puts_once_the_queue_is_full_and_close_says_what_is_lost() -> None:
    with pouchdb_server() as url:
        # submit waits long enough that the writer has tried the dead database (a slow machine took
        # over 0.2 s for its first attempt) so the error can name why
        options = WriterOptions(max_pending=3, submit_wait_s=3.0, close_wait_s=1)
        activations = CouchActivationStore(url, "owx_", timeout_s=1, writer=options)
    for start in range(3):
        assert not activations.backlogged()
        activations.put(activation("guest", "hello", start))
    assert activations.backlogged()
    with on_loop(), pytest.raises(NeedsThread):  # the gateway's event loop never waits for room
        activations.put(activation("guest", "hello", 3))
    with pytest.raises(StoreUnavailable, match="3 activation records wait to be written.*unreachable"):
        activations.put(activation("guest", "hello", 3))
    with pytest.raises(StoreUnavailable, match="3 activation records could not be written"):
        activations.close()


def test_large_records_a_database_cannot_take_are_bounded_in_bytes_not_only_in_count() -> None:
    """Records of 1 MiB each (a tenant's large results) fill the queue by bytes long before its row
    count: then puts wait and fail instead of holding gigabytes."""
    with pouchdb_server() as url:
        options = WriterOptions(max_pending=50_000, max_pending_bytes=4 * 1024 * 1024, submit_wait_s=0.2,
                                close_wait_s=1)
        activations = CouchActivationStore(url, "owx_", timeout_s=1, writer=options)
    big = "x" * (1024 * 1024)
    for start in range(4):
        assert not activations.backlogged()
        activations.put(activation("guest", "hello", start, logs=[big]))
    assert activations.backlogged()
    with pytest.raises(StoreUnavailable, match="4 activation records wait to be written"):
        activations.put(activation("guest", "hello", 4))
    with pytest.raises(StoreUnavailable, match="4 activation records could not be written"):
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
