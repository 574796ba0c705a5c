"""The CouchDB stores (OpenWhisk's own database), through the ``couchdb`` package.

Layout: database ``<prefix>entities`` holds every entity as ``{_id: "coll/ns/name",
namespace, collection, name, updated, doc}`` (the caller's doc nested, so its keys never
clash with CouchDB's ``_`` members); database ``<prefix>activations`` holds
``{_id: activationId, namespace, name, start, summary, record}``. Design document
``_design/owx`` in each carries the views (plain map/reduce views, which CouchDB and the
pouchdb-server used by the tests both serve).

Caching: entity reads are cached in-process for ``cache_ttl_s`` (default 1 s); this
process's own writes invalidate at once, so only writes by *other* gateway processes
sharing the database can be seen up to ``cache_ttl_s`` late. ``cache_ttl_s=0`` disables it.

Numbers: integers beyond +-2**53 may come back rounded (CouchDB's views and pouchdb-server
are JavaScript); the SQLite store keeps them exact.
"""

from __future__ import annotations

import builtins
import contextlib
import http.client
import json
import logging
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import couchdb
import couchdb.http

from owx.common.urls import redact
from owx.gateway.stores.activation_log import ActivationLog
from owx.gateway.stores.activations import ActivationRow, summary, to_accepted
from owx.gateway.stores.base import (
    AUTH_COLLECTION,
    AUTH_UUID_FIELD,
    Conflict,
    Entity,
    InvalidInput,
    StoreError,
    StoreUnavailable,
    check_quota,
)
from owx.gateway.stores.cache import EntityCache
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
from owx.gateway.stores.writebehind import WriterOptions, WrittenBehind

log = logging.getLogger(__name__)

_DB_NAME = re.compile(r"[a-z][a-z0-9_$()+/-]*")
_DESIGN = "owx"
ACCEPTED_PREFIX = "accepted:"  # ids of the accepted-activation entries older versions kept here
DOCUMENT_MARGIN_BYTES = 64 * 1024  # an activation document's fields besides its record (the summary)
LOGS_CUT = "Logs were cut to keep the activation record within the store's document limit of {limit} bytes."

_ENTITY_VIEWS = {
    "by_updated": {
        "map": "function (doc) { if (doc.collection) { emit([doc.namespace, doc.collection, doc.updated], doc.name); } }"
    },
    # a namespace's entities' bytes (its key aside): ``size`` as written (a document written before
    # sizes were kept: its JSON's length in JavaScript's characters)
    "bytes_by_namespace": {
        "map": "function (doc) { if (doc.collection && doc.collection !== " + json.dumps(AUTH_COLLECTION)
        + ") { emit(doc.namespace, doc.size || JSON.stringify(doc.doc).length); } }",
        "reduce": "_sum",
    },
    "by_auth_uuid": {
        "map": "function (doc) { if (doc.collection === "
        + json.dumps(AUTH_COLLECTION)
        + " && doc.doc && typeof doc.doc[FIELD] === 'string') { emit(doc.doc[FIELD], null); } }".replace(
            "FIELD", json.dumps(AUTH_UUID_FIELD)
        )
    },
}

# One view (pouchdb-server builds each view separately and slowly): every record is
# emitted under [ns, null, start] for unfiltered lists and [ns, name, start] for name filters
# (null collates before every string, so the two ranges never mix).
_ACTIVATION_VIEWS = {
    "by_start": {
        "map": "function (doc) { if (doc.record) { emit([doc.namespace, null, doc.start], doc.summary); "
        "emit([doc.namespace, doc.name, doc.start], doc.summary); } }",
        "reduce": "_count",
    }
}


class _NoHttpCache:
    """Replaces couchdb-python's ETag cache, which is not thread-safe; the stores cache themselves."""

    def get(self, url: str) -> None:
        return None

    def put(self, url: str, response: object) -> None:
        pass

    def remove(self, url: str) -> None:
        pass


class CouchDatabase:
    """One CouchDB database of the stores: created with its views if missing, errors mapped."""

    def __init__(self, url: str, name: str, views: dict[str, Any], timeout_s: float) -> None:
        if not _DB_NAME.fullmatch(name):
            raise InvalidInput(f"CouchDB database name {name!r} is invalid (check couchdb_prefix)")
        self.where = f"{redact(url).rstrip('/')}/{name}"
        self._session = couchdb.http.Session(timeout=timeout_s)
        self._session.cache = _NoHttpCache()
        server = couchdb.Server(url, session=self._session)
        with self.errors():
            try:
                self.db = server.create(name)
            except couchdb.http.PreconditionFailed:  # exists already
                self.db = server[name]
            self._install_views(views)

    def _install_views(self, views: dict[str, Any]) -> None:
        design_id = f"_design/{_DESIGN}"
        current = self.db.get(design_id)
        if current is not None and current.get("views") == views:
            return
        design = current or {"_id": design_id, "language": "javascript"}
        design["views"] = views
        try:
            self.db.save(design)
        except couchdb.http.ResourceConflict:
            pass  # another process installed it at the same moment

    @contextlib.contextmanager
    def errors(self) -> Iterator[None]:
        """Map transport and server failures to `StoreUnavailable` (conflicts are handled by callers)."""
        try:
            yield
        except (StoreError, couchdb.http.ResourceConflict):
            raise
        except (OSError, http.client.HTTPException) as err:  # refused, reset, timed out
            raise StoreUnavailable(f"CouchDB at {self.where} is unreachable: {err}") from err
        except (couchdb.http.Unauthorized, couchdb.http.Forbidden) as err:
            raise StoreUnavailable(f"CouchDB at {self.where} refused access: {err}") from err
        except couchdb.http.ResourceNotFound as err:
            raise StoreUnavailable(f"CouchDB database {self.where} is missing: {err}") from err
        except couchdb.http.HTTPError as err:
            raise StoreUnavailable(f"CouchDB at {self.where} failed: {err}") from err

    def close(self) -> None:
        pool = self._session.connection_pool
        with pool.lock:
            for conns in pool.conns.values():
                for conn in conns:
                    conn.close()
            pool.conns.clear()


def _entity_id(key: tuple[str, str, str]) -> str:
    namespace, collection, name = key
    return f"{collection}/{namespace}/{name}"


def _to_entity(body: dict[str, Any]) -> Entity:
    return Entity(body["namespace"], body["collection"], body["name"], body["_rev"], body["updated"], body["doc"])


class CouchEntityStore:
    """`EntityStore` in CouchDB database ``<prefix>entities``; a namespace's entities (not its key)
    take at most ``max_namespace_bytes`` (0: no bound), as their JSON (gateways sharing the database
    may together pass it by the writes they make at the same moment)."""

    def __init__(self, url: str, prefix: str, cache_ttl_s: float = 1.0, timeout_s: float = 30.0,
                 max_namespace_bytes: int = 0) -> None:
        self._couch = CouchDatabase(url, f"{prefix}entities", _ENTITY_VIEWS, timeout_s)
        self._max_namespace_bytes = max_namespace_bytes
        self._db = self._couch.db
        self._cache = EntityCache(ttl_s=cache_ttl_s)
        self._clock = UpdateClock()
        self._closed = False

    @contextlib.contextmanager
    def _call(self) -> Iterator[None]:
        if self._closed:
            raise StoreUnavailable("entity store is closed")
        with self._couch.errors():
            yield

    def _fetch(self, key: tuple[str, str, str]) -> dict[str, Any] | None:
        with self._call():
            return self._db.get(_entity_id(key))

    def get(self, namespace: str, collection: str, name: str) -> Entity | None:
        key = check_key(namespace, collection, name)
        if (hit := self._cache.get(key)) is not None:
            return hit
        generation = self._cache.generation()
        body = self._fetch(key)
        if body is None:
            return None
        entity = _to_entity(body)
        self._cache.store(entity, json.dumps(entity.doc), generation)
        return entity

    def put(self, namespace: str, collection: str, name: str, doc: dict[str, Any], rev: str | None) -> Entity:
        key = check_key(namespace, collection, name)
        # refuse what CouchDB would refuse or mangle, before sending anything
        text = encode_doc(doc)
        if rev is not None and not is_valid_rev(rev):
            if self._fetch(key) is None:
                raise Conflict(f"{describe(key)} does not exist (revision {rev!r:.80} given)")
            raise Conflict(f"{describe(key)} is at another revision than {rev!r:.80}")
        size = len(text.encode())
        if self._max_namespace_bytes and collection != AUTH_COLLECTION:
            current = self._fetch(key) if rev is not None else None
            check_quota(self._max_namespace_bytes, key[0], self._held_bytes(key[0]), (current or {}).get("size", 0), size)
        updated = self._clock.next()
        body: dict[str, Any] = {
            "_id": _entity_id(key),
            "namespace": key[0],
            "collection": key[1],
            "name": key[2],
            "updated": updated,
            "size": size,
            "doc": doc,
        }
        if rev is not None:
            body["_rev"] = rev
        try:
            with self._call():
                _, new_rev = self._db.save(body)
        except couchdb.http.ResourceConflict:
            what = "already exists" if rev is None else f"is not at revision {rev!r:.80}"
            raise Conflict(f"{describe(key)} {what}") from None
        finally:
            self._cache.invalidate(key, auth=collection == AUTH_COLLECTION)
        return Entity(*key, new_rev, updated, json.loads(text))

    def _held_bytes(self, namespace: str) -> int:
        with self._call():
            rows = self._db.view(f"{_DESIGN}/bytes_by_namespace", key=namespace, group=True).rows
        return int(rows[0].value) if rows else 0

    def delete(self, namespace: str, collection: str, name: str, rev: str | None = None) -> bool:
        key = check_key(namespace, collection, name)
        try:
            for _ in range(5 if rev is None else 1):
                current = self._fetch(key)
                if current is None:
                    return False
                if rev is not None and rev != current["_rev"]:
                    break
                try:
                    with self._call():
                        self._db.delete({"_id": current["_id"], "_rev": current["_rev"]})
                    return True
                except couchdb.http.ResourceConflict:
                    continue  # updated meanwhile: look again
                except StoreUnavailable as err:
                    if isinstance(err.__cause__, couchdb.http.ResourceNotFound):
                        return False  # deleted meanwhile
                    raise
        finally:
            self._cache.invalidate(key, auth=collection == AUTH_COLLECTION)
        raise Conflict(f"{describe(key)} is not at revision {rev!r:.80}" if rev else f"{describe(key)} keeps changing")

    def _names(self, namespace: str, collection: str, prefix: str) -> builtins.list[tuple[int, str]]:
        """(updated, name) of the collection's entities under ``prefix``, newest first.

        Filtered here, not by view key ranges, because CouchDB collates view keys with
        ICU (case-insensitive prefixes) while the contract is exact string prefixes."""
        with self._call():
            rows = self._db.view(
                f"{_DESIGN}/by_updated", startkey=[namespace, collection], endkey=[namespace, collection, {}]
            ).rows
        found = [
            (row.key[2], row.value)
            for row in rows
            if row.key[0] == namespace and row.key[1] == collection and row.value.startswith(prefix)
        ]
        found.sort(reverse=True)
        return found

    def list(
        self, namespace: str, collection: str, prefix: str = "", skip: int = 0, limit: int = 0
    ) -> builtins.list[Entity]:
        ns, coll = check_scope(namespace, collection)
        prefix = check_prefix(prefix)
        skip, limit = check_page(skip, limit)
        page = self._names(ns, coll, prefix)[skip : skip + limit if limit else None]
        if not page:
            return []
        with self._call():
            rows = self._db.view(
                "_all_docs", keys=[_entity_id((ns, coll, name)) for _, name in page], include_docs=True
            )
            return [_to_entity(row.doc) for row in rows if row.doc is not None]  # skip ones deleted meanwhile

    def count(self, namespace: str, collection: str, prefix: str = "") -> int:
        ns, coll = check_scope(namespace, collection)
        return len(self._names(ns, coll, check_prefix(prefix)))

    def find_namespace_by_key(self, uuid: str) -> Entity | None:
        if not isinstance(uuid, str) or not uuid:
            return None
        key = self._cache.get_uuid(uuid)
        if key is not None:
            entity = self.get(*key)
            if entity is not None and entity.doc.get(AUTH_UUID_FIELD) == uuid:
                return entity
        generation = self._cache.generation()
        with self._call():
            rows = self._db.view(f"{_DESIGN}/by_auth_uuid", key=uuid, include_docs=True).rows
        matches = [row.doc for row in rows if row.doc is not None and row.doc["doc"].get(AUTH_UUID_FIELD) == uuid]
        if not matches:
            return None
        entity = _to_entity(max(matches, key=lambda body: body["updated"]))
        self._cache.store(entity, json.dumps(entity.doc), generation)
        self._cache.store_uuid(uuid, (entity.namespace, entity.collection, entity.name), generation)
        return entity

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._couch.close()


def logs_cut_to(record: dict[str, Any], size: int) -> dict[str, Any]:
    """``record`` with as many of its first log lines as keep its JSON within ``size`` bytes, and a
    last line saying the rest was cut (a record over the server's document limit would be refused,
    and lost)."""
    note = LOGS_CUT.format(limit=size)
    logs = list(record.get("logs") or [])
    excess = len(encode_doc(record).encode()) + len(json.dumps(note)) + 1 - size
    while logs and excess > 0:
        excess -= len(json.dumps(logs.pop(), ensure_ascii=False).encode()) + 1
    return {**record, "logs": [*logs, note]}


class CouchActivationStore(WrittenBehind):
    """`ActivationStore` in CouchDB database ``<prefix>activations``, written behind with ``_bulk_docs``;
    rows are durable once in the activation log (a directory, or an `ActivationLog`), which is this
    gateway's own even when several share the database."""

    def __init__(
        self,
        url: str,
        prefix: str,
        activation_log: ActivationLog | Path,
        timeout_s: float = 30.0,
        read_flush_timeout_s: float = 30.0,
        writer: WriterOptions | None = None,
        max_document_bytes: int = 8_000_000,
    ) -> None:
        self._couch = CouchDatabase(url, f"{prefix}activations", _ACTIVATION_VIEWS, timeout_s)
        self._max_document_bytes = max_document_bytes
        self._db = self._couch.db
        self._read_flush_timeout_s = read_flush_timeout_s
        self._closed = False
        self._close_lock = threading.Lock()
        self._start_writer(f"owx-activations-{prefix}", activation_log, writer, self._couch.close)

    def _take_old_journal(self) -> None:
        """Move the ``accepted:`` documents older versions kept (those without a record) into the
        activation log, then delete them: once, at the first open by this version."""
        with self._couch.errors():
            rows = self._db.view("_all_docs", startkey=ACCEPTED_PREFIX, endkey=ACCEPTED_PREFIX + "\ufff0",
                                 include_docs=True).rows
            if not rows:
                return
            entries = [row.doc["accepted"] for row in rows]
            recorded = {row.id for row in self._db.view("_all_docs", keys=[e["activationId"] for e in entries]).rows
                        if row.value and not row.value.get("deleted")}
            self._writer.adopt([to_accepted(e) for e in entries if e["activationId"] not in recorded])
            self._db.update([{"_id": row.id, "_rev": row.value["rev"], "_deleted": True} for row in rows])

    def _commit(self, records: builtins.list[ActivationRow]) -> None:
        docs = []
        for row in records:
            record = json.loads(row.text)
            if len(row.text.encode()) > self._max_document_bytes - DOCUMENT_MARGIN_BYTES:
                record = logs_cut_to(record, self._max_document_bytes - DOCUMENT_MARGIN_BYTES)
            docs.append({"_id": row.activation_id, "namespace": row.namespace, "name": row.name,
                         "start": row.start, "summary": summary(record), "record": record})
        with self._couch.errors():
            for ok, doc_id, detail in self._db.update(docs):
                if not ok and not isinstance(detail, couchdb.http.ResourceConflict):  # a conflict is a duplicate id
                    log.error("CouchDB refused activation document %s: %s; it is dropped", doc_id, detail)

    @contextlib.contextmanager
    def _call(self) -> Iterator[None]:
        if self._closed:
            raise StoreUnavailable("activation store is closed")
        with self._couch.errors():
            yield

    def _fetch(self, activation_id: str) -> tuple[str, bytes] | None:
        with self._call():
            body = self._db.get(activation_id)
        return (body["namespace"], encode_doc(body["record"]).encode()) if body is not None else None

    def _range(
        self, namespace: str, name: str | None, since: int | None, upto: int | None
    ) -> tuple[list[Any], list[Any]]:
        """(low, high) keys of view ``by_start`` holding the records matching the filters."""
        scope: list[Any] = [check_namespace(namespace), check_name_filter(name)]
        since, upto = check_time(since, "since"), check_time(upto, "upto")
        low: list[Any] = [*scope, since]  # null sorts before every number
        high: list[Any] = [*scope, upto if upto is not None else {}]
        return low, high

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
        low, high = self._range(namespace, name, since, upto)
        skip, limit = check_page(skip, limit)
        options: dict[str, Any] = {"skip": skip, "include_docs": bool(docs)}
        if limit:
            options["limit"] = limit
        self._writer.flush(self._read_flush_timeout_s)
        with self._call():
            rows = self._db.view(
                f"{_DESIGN}/by_start", startkey=high, endkey=low, descending=True, reduce=False, **options
            ).rows
        return [row.doc["record"] for row in rows] if docs else [row.value for row in rows]

    def count(self, namespace: str, name: str | None = None, since: int | None = None, upto: int | None = None) -> int:
        low, high = self._range(namespace, name, since, upto)
        self._writer.flush(self._read_flush_timeout_s)
        with self._call():
            rows = self._db.view(f"{_DESIGN}/by_start", startkey=low, endkey=high, reduce=True).rows
        return rows[0].value if rows else 0

    def flush(self, timeout: float | None = None) -> None:
        self._writer.flush(timeout)

    def close(self) -> None:
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._writer.close()
        finally:
            self._couch.close()
