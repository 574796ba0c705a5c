"""The store interfaces: `EntityStore` (namespaces, actions, packages, canary and
disdel tables) and `ActivationStore` (activation records), their value type and errors.

Both are used from many threads at once; every implementation is thread-safe.
"""

from __future__ import annotations

import builtins
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

#: Collection of auth records. ``doc["uuid"]`` of these is indexed for `find_namespace_by_key`.
AUTH_COLLECTION = "namespaces"
AUTH_UUID_FIELD = "uuid"


class StoreError(Exception):
    """Base class of every error a store raises."""


class Conflict(StoreError):
    """The entity exists (create) or its current revision differs from the one given."""


class StoreUnavailable(StoreError):
    """The backing database cannot be reached or used (CouchDB down, data dir locked, ...)."""


class InvalidInput(StoreError, ValueError):
    """A key, revision or document the store refuses; nothing was written."""


class QuotaExceeded(StoreError):
    """The write would make a namespace's entities take more than the store lets one; nothing was written."""


def check_quota(max_bytes: int, namespace: str, held: int, old: int, new: int) -> None:
    """Raise `QuotaExceeded` if replacing ``old`` bytes of ``namespace``'s entities (which take
    ``held``) by ``new`` passes ``max_bytes`` (0: no bound). A write that grows nothing always passes,
    so a namespace past its bound can still shrink and delete."""
    if max_bytes and new > old and held - old + new > max_bytes:
        raise QuotaExceeded(f"The namespace's entities would take {held - old + new} bytes, more than its limit of "
                            f"{max_bytes} bytes: delete or shrink some first.")


@dataclass(frozen=True)
class Entity:
    """One stored entity. ``doc`` is the caller's own copy: mutating it changes nothing stored."""

    namespace: str
    collection: str
    name: str
    rev: str
    updated: int  # epoch ms of the last put, strictly increasing within one store instance
    doc: dict[str, Any]


@runtime_checkable
class EntityStore(Protocol):
    """Schema-agnostic JSON documents addressed by (namespace, collection, name).

    * ``namespace``: non-empty, no ``/``; ``collection``: ``[a-z][a-z0-9_.-]*`` (``actions``,
      ``packages``, ``namespaces``, ``canary.job_info``, ``disdel.history``, ...); ``name``:
      non-empty, may contain ``/`` (``pkg/action``). Bad keys raise `InvalidInput`.
    * Optimistic concurrency: every put returns a new ``rev``; a later put or delete must name it.
    * Lists are ordered by ``updated`` descending (most recently written first, as OpenWhisk
      lists entities), ties by name descending.
    """

    def get(self, namespace: str, collection: str, name: str) -> Entity | None:
        """The entity, or None."""

    def put(self, namespace: str, collection: str, name: str, doc: dict[str, Any], rev: str | None) -> Entity:
        """Create (``rev=None``; `Conflict` if it exists) or replace the revision ``rev``
        (`Conflict` unless it is the current one). Docs up to `MAX_DOC_BYTES` of JSON."""

    def delete(self, namespace: str, collection: str, name: str, rev: str | None = None) -> bool:
        """Delete; False when absent. With ``rev``, `Conflict` unless it is the current one."""

    def list(
        self, namespace: str, collection: str, prefix: str = "", skip: int = 0, limit: int = 0
    ) -> builtins.list[Entity]:
        """Entities whose name starts with ``prefix``, newest update first; ``limit=0``: all."""

    def count(self, namespace: str, collection: str, prefix: str = "") -> int:
        """How many entities `list` would return without skip and limit."""

    def find_namespace_by_key(self, uuid: str) -> Entity | None:
        """The auth record (collection `AUTH_COLLECTION`) whose ``doc["uuid"]`` is ``uuid``.

        Meant for every request's Basic-auth check: one indexed lookup, cached in-process."""

    def close(self) -> None:
        """Release connections and files. Idempotent."""

DURABLE: Future[None] = Future()  # what `ActivationStore.put` answers for a record durable already
DURABLE.set_result(None)


@runtime_checkable
class ActivationStore(Protocol):
    """OpenWhisk activation records. Writes are durable once appended to the gateway's activation
    log (a write-ahead log in its data directory), and a single writer thread commits them to the
    database behind, in batches. Reads see every record put before them."""

    def put(self, doc: dict[str, Any], outsider: bool = False) -> Future[None]:
        """Take one record (``activationId``, ``namespace``, ``name``, ``start`` required), never
        waiting (``outsider``: a web action's caller other than its owner started it, see
        :mod:`owx.gateway.stores.retention`); the future completes once it is durable: `DURABLE`
        when the activation log took it (its accepted entry, if any, is then closed), else once the
        database has committed it.

        Records are immutable: a second put of the same ``activationId`` is ignored (the
        first write wins, which exactly-once commits rely on). Bad records raise
        `InvalidInput` here, synchronously. Records of accepted activations are taken even when
        the store is behind (the log holds them); raises `StoreUnavailable` only once closed."""

    def accept(self, entry: dict[str, Any]) -> Future[None]:
        """Journal an activation owx answers for but has not recorded yet (``activationId``,
        ``namespace`` and what a failed record needs), in the activation log: the future is complete
        on return. Raises `StoreUnavailable` at once, without waiting, when the store is behind
        (`backlogged`) or the log cannot take it: the activation must not start then."""

    def check_room(self) -> None:
        """Raise `StoreUnavailable` at once when the store is behind (`backlogged`), as `accept` would:
        for an activation journalled only once it has started."""

    def backlogged(self) -> bool:
        """Whether the records waiting for the database are at the queue's bound, so that `accept`
        refuses new activations."""

    def unfinished(self) -> builtins.list[dict[str, Any]]:
        """Journalled entries whose activation has no record yet, from the activation log: at open,
        those a gateway that died left (no database query: a record enters the log before the database)."""

    def last_alive_ms(self) -> int | None:
        """When the gateway that ran on this activation log before was last known alive (epoch ms,
        within a second: the log's heartbeat), None if it left no log."""

    def get(self, namespace: str, activation_id: str) -> dict[str, Any] | None:
        """The full record if it belongs to ``namespace``, else None."""

    def get_json(self, namespace: str, activation_id: str) -> bytes | None:
        """:meth:`get`'s record as the UTF-8 JSON it is stored as: served without parsing and encoding
        it again (records hold up to tens of MB of logs, and either holds the interpreter lock throughout)."""

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
        """Records of ``namespace``, newest ``start`` first. ``name`` is the action name or
        ``pkg/action`` for packaged actions (from the ``path`` annotation, as OpenWhisk's
        filter view); ``since``/``upto`` bound ``start`` inclusively (epoch ms);
        ``limit=0``: all. ``docs=False`` gives OpenWhisk's summaries (no ``response``, no
        ``logs``; ``statusCode``, ``duration`` and ``end`` when the activation ended)."""

    def count(self, namespace: str, name: str | None = None, since: int | None = None, upto: int | None = None) -> int:
        """How many records `list` would return without skip and limit."""

    def flush(self, timeout: float | None = None) -> None:
        """Block until every record put before this call is committed.

        Raises `StoreUnavailable` if that does not happen within ``timeout`` seconds."""

    def close(self) -> None:
        """Flush (trying for a while), stop the writer, release connections. Records the database
        did not take stay in the activation log for the next start (a warning says how many);
        raises `StoreUnavailable` for those the log could not take either. Idempotent."""
