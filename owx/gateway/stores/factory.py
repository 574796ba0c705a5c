"""Open the configured pair of stores."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from owx.settings import Settings
from owx.gateway.stores.base import ActivationStore, EntityStore
from owx.gateway.stores.couch import CouchActivationStore, CouchEntityStore
from owx.gateway.stores.sqlite import SQLiteActivationStore, SQLiteEntityStore

ACTIVATIONS_DB = "activations.db"
MB = 1024 * 1024
ACTIVATION_LOG = "activation-log"


def open_stores(settings: Settings) -> tuple[EntityStore, ActivationStore]:
    """(entities, activations) for ``settings.gateway.store``: SQLite files ``settings.entity_db``
    and ``<data_dir>/activations.db``, or CouchDB databases ``<couchdb_prefix>entities``
    and ``<couchdb_prefix>activations`` at ``settings.gateway.couchdb_url``.

    Either way activation records and accepted entries are durable once in the activation log
    ``<data_dir>/activation-log``, before the database has them. It is this gateway's own, also
    when several gateways share one CouchDB: a gateway that died leaves its unwritten records and
    unfinished activations there, and its next start (on the same data directory) writes them.

    Raises `StoreUnavailable` when the database cannot be used (CouchDB unreachable,
    data directory owned by another process)."""
    open_entities: Callable[[], EntityStore]
    open_activations: Callable[[], ActivationStore]
    gateway = settings.gateway
    activation_log = settings.data_dir / ACTIVATION_LOG
    if gateway.store == "couchdb":
        open_entities = partial(CouchEntityStore, gateway.couchdb_url, gateway.couchdb_prefix,
                                max_namespace_bytes=gateway.entity_mb_per_namespace * MB)
        open_activations = partial(CouchActivationStore, gateway.couchdb_url, gateway.couchdb_prefix, activation_log,
                                   max_document_bytes=gateway.couchdb_max_document_bytes)
    else:
        open_entities = partial(SQLiteEntityStore, settings.entity_db, max_namespace_bytes=gateway.entity_mb_per_namespace * MB)
        open_activations = partial(SQLiteActivationStore, settings.data_dir / ACTIVATIONS_DB, activation_log,
                                   max_namespace_bytes=gateway.activation_mb_per_namespace * MB)
    entities = open_entities()
    try:
        return entities, open_activations()
    except BaseException:
        entities.close()
        raise
