"""Exactly-once results: the first execution to commit an activation's result wins.

A commit is an entity ``canary.commits/<activation id>`` created with ``rev=None``: the
entity store refuses a second create (`Conflict`) atomically, in SQLite and CouchDB
alike, so concurrent executions (a recovered one, request-replication copies, a
standby) cannot both report. The activation record is then written from the winner.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from owx.gateway.stores import Conflict, EntityStore

COLLECTION = "canary.commits"


@dataclass(frozen=True)
class Commit:
    """The committed outcome of one activation."""

    activation_id: str
    attempt: int
    status: str
    container: str
    committed_at: int


class ResultLedger:
    """Compare-and-set commits of activation results, one per activation id."""

    def __init__(self, store: EntityStore) -> None:
        self.store = store

    def commit(self, namespace: str, commit: Commit) -> bool:
        """Record ``commit`` as the activation's only outcome; False if another one was first."""
        doc: dict[str, Any] = {
            "activation_id": commit.activation_id, "attempt": commit.attempt, "status": commit.status,
            "container": commit.container, "committed_at": commit.committed_at,
        }
        try:
            self.store.put(namespace, COLLECTION, commit.activation_id, doc, None)
        except Conflict:
            return False
        return True

    def committed(self, namespace: str, activation_id: str) -> Commit | None:
        entity = self.store.get(namespace, COLLECTION, activation_id)
        return None if entity is None else Commit(**entity.doc)
