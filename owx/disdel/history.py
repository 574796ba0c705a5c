"""Execution history of DiSDeL jobs, kept in owx's entity store (collection ``disdel.history``).

One document per job signature (model, data, batch): how long training took per sample
and epoch, how long start-up and aggregation took, the measured peaks, and the limits
that failures forced.  The timeout manager, the planner and the failure manager read
and update it.

Where it lives: with the CouchDB store, in the gateway's own entity database; with the
embedded SQLite store, whose file is owned exclusively by the gateway process, in a
disdel-owned SQLite entity store (``<shared dir>/history.db``, same schema and code)
that each update opens and closes, so several controllers can take turns.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Literal, Protocol

from pydantic import BaseModel, Field

COLLECTION = "disdel.history"


class FailureRecord(BaseModel):
    kind: Literal["oom", "timeout"]
    role: Literal["train", "aggregate"]
    memory_mb: int
    timeout_ms: int
    at: float = Field(default_factory=time.time)


class HistoryRecord(BaseModel):
    """What past runs of one (model, data, batch) signature taught."""

    signature: str
    runs: int = 0
    sec_per_sample_epoch: float | None = None
    startup_s: float | None = None
    aggregate_s: float | None = None
    peak_bytes_per_action: int | None = None
    samples_per_action: int | None = None
    memory_floor_mb: int | None = Field(None, description="training memory that an OOM proved necessary")
    aggregate_memory_floor_mb: int | None = None
    timeout_floor_ms: int | None = Field(None, description="training timeout that a time-out proved necessary")
    failures: list[FailureRecord] = Field(default_factory=list)

    def with_failure(self, failure: FailureRecord, new_limit: int) -> "HistoryRecord":
        """This record after ``failure``, remembering the limit that should avoid it."""
        update = self.model_copy(deep=True)
        update.failures = [*update.failures[-19:], failure]
        if failure.kind == "oom" and failure.role == "train":
            update.memory_floor_mb = max(update.memory_floor_mb or 0, new_limit)
        elif failure.kind == "oom":
            update.aggregate_memory_floor_mb = max(update.aggregate_memory_floor_mb or 0, new_limit)
        elif failure.role == "train":
            update.timeout_floor_ms = max(update.timeout_floor_ms or 0, new_limit)
        return update


class HistoryStore(Protocol):
    """Read and update history records by signature."""

    def get(self, signature: str) -> HistoryRecord | None: ...

    def update(self, signature: str, change: Callable[[HistoryRecord], HistoryRecord]) -> HistoryRecord:
        """Apply ``change`` to the current record (a fresh one if none) and store the result."""
        ...


class EntityHistory:
    """History in an `EntityStore` opened per operation by ``open_store`` (optimistic retries)."""

    def __init__(self, open_store: Callable[[], object], namespace: str = "guest") -> None:
        self._open = open_store
        self.namespace = namespace

    @contextmanager
    def _store(self) -> Iterator[object]:
        deadline = time.monotonic() + 10.0
        while True:
            try:
                store = self._open()
                break
            except Exception as exc:  # the file is held by another controller for a moment
                from owx.gateway.stores import StoreUnavailable

                if not isinstance(exc, StoreUnavailable) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        try:
            yield store
        finally:
            store.close()  # type: ignore[attr-defined]

    def get(self, signature: str) -> HistoryRecord | None:
        with self._store() as store:
            entity = store.get(self.namespace, COLLECTION, signature)  # type: ignore[attr-defined]
        return None if entity is None else HistoryRecord.model_validate(entity.doc)

    def update(self, signature: str, change: Callable[[HistoryRecord], HistoryRecord]) -> HistoryRecord:
        from owx.gateway.stores import Conflict

        with self._store() as store:
            for _ in range(20):
                entity = store.get(self.namespace, COLLECTION, signature)  # type: ignore[attr-defined]
                current = HistoryRecord(signature=signature) if entity is None else HistoryRecord.model_validate(entity.doc)
                new = change(current)
                try:
                    store.put(self.namespace, COLLECTION, signature, new.model_dump(mode="json"),  # type: ignore[attr-defined]
                              None if entity is None else entity.rev)
                    return new
                except Conflict:
                    continue
        raise RuntimeError(f"history of {signature} kept changing under this update")


def open_history(root: Path, namespace: str = "guest") -> EntityHistory:
    """The history store for this deployment (see the module docstring)."""
    from owx.settings import Settings

    settings = Settings().gateway
    if settings.store == "couchdb":
        from owx.gateway.stores.couch import CouchEntityStore

        return EntityHistory(lambda: CouchEntityStore(settings.couchdb_url, settings.couchdb_prefix), namespace)
    from owx.gateway.stores.sqlite import SQLiteEntityStore

    root.mkdir(parents=True, exist_ok=True)
    return EntityHistory(lambda: SQLiteEntityStore(root / "history.db"), namespace)
