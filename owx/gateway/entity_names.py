"""The entity collections of a namespace, and the one set of names they share.

In OpenWhisk an action, a package, a trigger and a rule are each one document ``namespace/name``:
a name taken in one collection cannot be created in another (409), and asking one collection for a
name another holds is a 409 too, not a 404. Actions in a package (``pkg/name``) have names of their
own. The checks cost store reads only when a name is missing or new.

Entities are written through :func:`put`: creating a name checks the other collections and writes
in one step for all of this process's threads (concurrent creates of one name in two collections:
one wins, the other gets the 409). Gateways sharing one CouchDB do not share that step.
"""

from __future__ import annotations

import threading
from typing import Any

from owx.gateway import errors
from owx.gateway.errors import ApiError, not_found
from owx.gateway.stores import Entity, EntityStore

ACTIONS = "actions"
PACKAGES = "packages"
TRIGGERS = "triggers"
RULES = "rules"
COLLECTIONS = (ACTIONS, PACKAGES, TRIGGERS, RULES)
_CREATING = tuple(threading.Lock() for _ in range(64))  # by namespace and name: creates of others go on


def _held_elsewhere(store: EntityStore, namespace: str, collection: str, name: str) -> bool:
    if "/" in name:  # an action in a package
        return False
    return any(store.get(namespace, other, name) is not None for other in COLLECTIONS if other != collection)


def absent(store: EntityStore, namespace: str, collection: str, name: str) -> ApiError:
    """The error for ``name`` missing from its owner's ``collection``: OpenWhisk's 409 when another
    collection holds the name, else 404."""
    if _held_elsewhere(store, namespace, collection, name):
        return ApiError(409, errors.NOT_IN_COLLECTION)
    return not_found()


def check_free(store: EntityStore, namespace: str, collection: str, name: str) -> None:
    """Before ``name`` is created in ``collection``: OpenWhisk's 409 when another collection holds it."""
    if _held_elsewhere(store, namespace, collection, name):
        raise ApiError(409, errors.NOT_IN_COLLECTION)


def put(store: EntityStore, namespace: str, collection: str, name: str, doc: dict[str, Any],
        rev: str | None) -> Entity:
    """``store.put``; a create (``rev`` None) checks and writes as one step (see the module docstring)."""
    if rev is not None:
        return store.put(namespace, collection, name, doc, rev)
    with _CREATING[hash((namespace, name)) % len(_CREATING)]:
        check_free(store, namespace, collection, name)
        return store.put(namespace, collection, name, doc, None)
