"""An in-process read cache of entities, shared by the store backends.

Values are kept as JSON text and decoded on every hit, so callers always get their own
dicts. Writes invalidate; a read that raced with a write never re-inserts stale data
(each insert carries the write generation seen before the read).
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

from owx.gateway.stores.base import Entity

Key = tuple[str, str, str]


@dataclass(frozen=True)
class _Cached:
    entity: Entity  # with an empty doc; the doc lives in ``text``
    text: str
    expires: float


class EntityCache:
    """LRU of entities and of auth uuid -> key, with an optional time-to-live.

    ``ttl_s=None`` keeps entries until a write (right when this process is the only
    writer, as with SQLite); a number bounds staleness from other writers (CouchDB);
    ``0`` disables caching.
    """

    def __init__(self, ttl_s: float | None, max_entries: int = 4096, max_doc_chars: int = 256 * 1024) -> None:
        self._ttl = ttl_s
        self._max_entries = max_entries
        self._max_doc_chars = max_doc_chars
        self._entities: OrderedDict[Key, _Cached] = OrderedDict()
        self._uuids: dict[str, tuple[Key, float]] = {}
        self._generation = 0
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self._ttl is None or self._ttl > 0

    def generation(self) -> int:
        """Take before reading the database; pass to `store`/`store_uuid`."""
        return self._generation

    def _expiry(self) -> float:
        return float("inf") if self._ttl is None else time.monotonic() + self._ttl

    def get(self, key: Key) -> Entity | None:
        with self._lock:
            hit = self._entities.get(key)
            if hit is None:
                return None
            if hit.expires < time.monotonic():
                del self._entities[key]
                return None
            self._entities.move_to_end(key)
        e = hit.entity
        return Entity(e.namespace, e.collection, e.name, e.rev, e.updated, json.loads(hit.text))

    def store(self, entity: Entity, text: str, generation: int) -> None:
        if not self.enabled or len(text) > self._max_doc_chars:
            return
        key = (entity.namespace, entity.collection, entity.name)
        bare = Entity(entity.namespace, entity.collection, entity.name, entity.rev, entity.updated, {})
        with self._lock:
            if generation != self._generation:
                return
            self._entities[key] = _Cached(bare, text, self._expiry())
            self._entities.move_to_end(key)
            while len(self._entities) > self._max_entries:
                self._entities.popitem(last=False)

    def get_uuid(self, uuid: str) -> Key | None:
        with self._lock:
            hit = self._uuids.get(uuid)
            if hit is None or hit[1] < time.monotonic():
                self._uuids.pop(uuid, None)
                return None
            return hit[0]

    def store_uuid(self, uuid: str, key: Key, generation: int) -> None:
        if not self.enabled:
            return
        with self._lock:
            if generation != self._generation:
                return
            if len(self._uuids) >= self._max_entries:
                self._uuids.clear()
            self._uuids[uuid] = (key, self._expiry())

    def invalidate(self, key: Key, auth: bool) -> None:
        """Forget ``key`` (and every uuid mapping when it is an auth record)."""
        with self._lock:
            self._generation += 1
            self._entities.pop(key, None)
            if auth:
                self._uuids.clear()
