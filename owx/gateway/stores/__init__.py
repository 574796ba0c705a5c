"""Persistence of owx: `EntityStore` and `ActivationStore`, on SQLite (embedded default)
or CouchDB. `open_stores(settings)` gives the configured pair."""

from owx.gateway.stores.base import (
    AUTH_COLLECTION,
    AUTH_UUID_FIELD,
    DURABLE,
    ActivationStore,
    Conflict,
    Entity,
    EntityStore,
    InvalidInput,
    QuotaExceeded,
    StoreError,
    StoreUnavailable,
)
from owx.gateway.stores.factory import open_stores
from owx.gateway.stores.validation import MAX_DOC_BYTES
from owx.gateway.stores.writebehind import WriterOptions

__all__ = [
    "AUTH_COLLECTION",
    "AUTH_UUID_FIELD",
    "DURABLE",
    "MAX_DOC_BYTES",
    "ActivationStore",
    "Conflict",
    "Entity",
    "EntityStore",
    "InvalidInput",
    "QuotaExceeded",
    "StoreError",
    "StoreUnavailable",
    "WriterOptions",
    "open_stores",
]
