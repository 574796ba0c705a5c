"""The store contract runs against every backend: SQLite in a temp dir, CouchDB on pouchdb-server."""

from __future__ import annotations

import contextlib
import os
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import couchdb
import pytest

from owx.gateway.stores import ActivationStore, EntityStore, StoreError
from owx.gateway.stores.couch import CouchActivationStore, CouchEntityStore
from owx.gateway.stores.sqlite import SQLiteActivationStore, SQLiteEntityStore


class Backend:
    """Opens stores of one backend on one private location, any number of times."""

    def __init__(
        self, name: str, open_entities: Callable[..., EntityStore], open_activations: Callable[..., ActivationStore]
    ):
        self.name = name
        self._open_entities = open_entities
        self._open_activations = open_activations
        self._opened: list[Any] = []

    def entities(self, **options: Any) -> EntityStore:
        store = self._open_entities(**options)
        self._opened.append(store)
        return store

    def activations(self, **options: Any) -> ActivationStore:
        store = self._open_activations(**options)
        self._opened.append(store)
        return store

    def close_all(self) -> None:
        for store in self._opened:
            with contextlib.suppress(StoreError):
                store.close()


@pytest.fixture
def couch_prefix(couchdb_url: str) -> Iterator[str]:
    """A database-name prefix of its own on the test CouchDB; its databases are dropped afterwards."""
    prefix = f"t{uuid.uuid4().hex[:12]}_"
    yield prefix
    server = couchdb.Server(couchdb_url)
    for db in ("entities", "activations"):
        with contextlib.suppress(couchdb.http.ResourceNotFound):
            del server[prefix + db]


@pytest.fixture(params=["sqlite", "couchdb"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    activation_log = tmp_path / "activation-log"
    if request.param == "sqlite":
        yield from _closing(
            Backend(
                "sqlite",
                lambda **kw: SQLiteEntityStore(tmp_path / "owx.db", **kw),
                lambda log=activation_log, **kw: SQLiteActivationStore(tmp_path / "activations.db", log, **kw),
            )
        )
    else:
        url, prefix = (request.getfixturevalue("couchdb_url"), request.getfixturevalue("couch_prefix"))
        yield from _closing(
            Backend(
                "couchdb",
                lambda **kw: CouchEntityStore(url, prefix, **kw),
                lambda log=activation_log, **kw: CouchActivationStore(url, prefix, log, **kw),
            )
        )


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A directory on a tmpfs of 64 KiB."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "tiny"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "--lazy", str(mount)], check=True)


def _closing(backend: Backend) -> Iterator[Backend]:
    try:
        yield backend
    finally:
        backend.close_all()


@pytest.fixture
def entities(backend: Backend) -> EntityStore:
    return backend.entities()


@pytest.fixture
def activations(backend: Backend) -> ActivationStore:
    return backend.activations()


def activation(namespace: str, name: str, start: int, **fields: Any) -> dict[str, Any]:
    """An OpenWhisk-shaped activation record that ended successfully after 5 ms."""
    record: dict[str, Any] = {
        "activationId": uuid.uuid4().hex,
        "namespace": namespace,
        "name": name,
        "subject": "tester",
        "version": "0.0.1",
        "publish": False,
        "start": start,
        "end": start + 5,
        "duration": 5,
        "response": {"status": "success", "statusCode": 0, "success": True, "result": {"n": start}},
        "logs": [f"2024-01-01T00:00:00.000000Z stdout: run {start}"],
        "annotations": [{"key": "path", "value": f"{namespace}/{name}"}, {"key": "kind", "value": "python:3"}],
    }
    record.update(fields)
    return record
