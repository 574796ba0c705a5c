"""Canary's core state: the five tables of the paper, kept in the gateway's entity store.

Each table is an entity-store collection ``canary.<table>``; a row is one entity named
by its id. Job, function, checkpoint and replication rows live in the namespace that
owns the job; ``worker_info`` describes the platform and lives in :data:`PLATFORM_NS`.
Updates are read-modify-write with the entity store's revisions, retried on conflict.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict

from owx.gateway.stores import Conflict, EntityStore

PLATFORM_NS = "owx.canary"
TABLES = ("worker_info", "job_info", "function_info", "checkpoint_info", "replication_info")


def now_ms() -> int:
    return int(time.time() * 1000)


class Row(BaseModel):
    model_config = ConfigDict(extra="forbid")


class WorkerInfo(Row):
    """A worker (node of the embedded platform): role, resources, liveness. Every tenant reads it: it
    names no path of the host."""

    worker_id: str
    role: Literal["invoker"] = "invoker"
    alive: bool = True
    memory_mb: int
    cpus: int
    backend: str
    updated: int


class JobInfo(Row):
    """A submitted job: its functions, options and progress."""

    job_id: str
    action: str
    runtime: str
    function_ids: list[str]
    functions: int
    state: Literal["queued", "running", "done"] = "queued"
    checkpoint: str
    interval_s: float
    replication: str
    fault_tolerance: str
    memory_mb: int
    submitted: int
    admitted: int | None = None
    finished: int | None = None
    succeeded: int = 0
    failed: int = 0


class FunctionInfo(Row):
    """One function (an activation of a stateful action) and where it runs."""

    function_id: str
    job_id: str
    action: str
    runtime: str
    runtime_key: str
    worker: str | None = None
    container: str | None = None
    state: Literal["queued", "running", "recovering", "succeeded", "failed"] = "queued"
    attempts: int = 0
    started: int | None = None
    ended: int | None = None


class CheckpointInfo(Row):
    """The checkpoints of one function as the core last saw them (the data is in the checkpoint store)."""

    function_id: str
    job_id: str
    latest_seq: int | None
    latest_state: str | None
    latest_size: int | None
    latest_time: float | None
    kept: list[int]
    restored: list[int] = []
    updated: int


class ReplicationInfo(Row):
    """One replicated runtime: a warm, initialised container ready to take over a function."""

    replica_id: str
    runtime: str
    runtime_key: str
    job_id: str
    worker: str
    state: Literal["warm", "used", "retired", "lost"] = "warm"
    created: int
    used_by: str | None = None
    ended: int | None = None


MODELS: dict[str, type[Row]] = {
    "worker_info": WorkerInfo,
    "job_info": JobInfo,
    "function_info": FunctionInfo,
    "checkpoint_info": CheckpointInfo,
    "replication_info": ReplicationInfo,
}
KEYS = {"worker_info": "worker_id", "job_info": "job_id", "function_info": "function_id",
        "checkpoint_info": "function_id", "replication_info": "replica_id"}


def collection(table: str) -> str:
    return f"canary.{table}"


class CoreTables:
    """Typed access to the five tables over an :class:`EntityStore`."""

    def __init__(self, store: EntityStore) -> None:
        self.store = store

    def put(self, namespace: str, row: Row) -> None:
        """Write ``row`` (create or replace, whatever the current revision)."""
        table = _table_of(row)
        name = getattr(row, KEYS[table])
        doc = row.model_dump()
        for _ in range(20):
            current = self.store.get(namespace, collection(table), name)
            try:
                self.store.put(namespace, collection(table), name, doc, current.rev if current else None)
                return
            except Conflict:
                continue
        raise Conflict(f"{table} {name} keeps changing")

    def update(self, namespace: str, table: str, name: str, change: Callable[[Any], None]) -> Row | None:
        """Apply ``change(row)`` to the stored row and write it back; None if there is no such row."""
        model = MODELS[table]
        for _ in range(20):
            current = self.store.get(namespace, collection(table), name)
            if current is None:
                return None
            row = model.model_validate(current.doc)
            change(row)
            try:
                self.store.put(namespace, collection(table), name, row.model_dump(), current.rev)
                return row
            except Conflict:
                continue
        raise Conflict(f"{table} {name} keeps changing")

    def get(self, namespace: str, table: str, name: str) -> Row | None:
        entity = self.store.get(namespace, collection(table), name)
        return None if entity is None else MODELS[table].model_validate(entity.doc)

    def list(self, namespace: str, table: str, prefix: str = "", skip: int = 0, limit: int = 0) -> list[dict[str, Any]]:
        return [e.doc for e in self.store.list(namespace, collection(table), prefix, skip, limit)]

    def count(self, namespace: str, table: str) -> int:
        return self.store.count(namespace, collection(table))


def _table_of(row: Row) -> str:
    for table, model in MODELS.items():
        if type(row) is model:
            return table
    raise TypeError(f"not a canary table row: {type(row).__name__}")
