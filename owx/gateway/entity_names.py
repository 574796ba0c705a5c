"""The entity collections of a namespace, and the one set of names they share.

In OpenWhisk an action, a package, a trigger and a rule are each one document ``namespace/name``:
a name taken in one collection cannot be created in another (409), and asking one collection for a
name another holds is a 409 too, not a 404. Actions in a package (``pkg/name``) have names of their
own. The checks cost store reads only when a name is missing or new.

Entities are written through :func:`put` and deleted through :func:`delete`. Creating a top-level
name first claims it for its collection: a document ``names/namespace/name`` in the store, made
only if absent or held by the same collection (the store refuses a second create of a document), so
gateways sharing one CouchDB agree on which collection holds a name, and concurrent creates of one
name in two collections, through any gateways, give one 200 and one 409. A claim whose entity is
gone and which is older than ``CLAIM_GRACE_S`` (a gateway died between the two writes) passes to
the next create; a delete, or a create the store refused, gives its claim back. Within one
process, creates of one name also take one lock, so they do not race for the claim.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from owx.gateway import errors
from owx.gateway.errors import ApiError, not_found
from owx.gateway.stores import Conflict, Entity, EntityStore

ACTIONS = "actions"
PACKAGES = "packages"
TRIGGERS = "triggers"
RULES = "rules"
COLLECTIONS = (ACTIONS, PACKAGES, TRIGGERS, RULES)
NAMES = "names"  # the claims: which collection holds a top-level name
CLAIM_GRACE_S = 120.0  # longer than a create takes between its claim and its entity (store timeouts included)
CLAIM_ATTEMPTS = 3
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
    """``store.put``; a create (``rev`` None) claims the name first (see the module docstring)."""
    if rev is not None:
        return store.put(namespace, collection, name, doc, rev)
    with _CREATING[hash((namespace, name)) % len(_CREATING)]:
        claimed = "/" not in name and _claim(store, namespace, collection, name)
        try:
            check_free(store, namespace, collection, name)  # entities created before claims existed
            return store.put(namespace, collection, name, doc, None)
        except Conflict:  # the collection holds the name already (created meanwhile): the claim is right
            raise
        except Exception:  # refused, or the store failed: the name stays free for every collection
            if claimed:
                _release(store, namespace, collection, name)
            raise


def delete(store: EntityStore, namespace: str, collection: str, name: str, rev: str | None) -> bool:
    """``store.delete``, giving the name's claim back."""
    deleted = store.delete(namespace, collection, name, rev)
    if deleted and "/" not in name:
        _release(store, namespace, collection, name)
    return deleted


def _claim(store: EntityStore, namespace: str, collection: str, name: str) -> bool:
    """Make ``collection`` the holder of ``name``; True if this made the claim (False: it held it).
    OpenWhisk's 409 when another collection holds it."""
    for _ in range(CLAIM_ATTEMPTS):
        claim = store.get(namespace, NAMES, name)
        if claim is not None and claim.doc.get("collection") == collection:
            return False
        if claim is not None and not _stale(store, namespace, name, claim):
            break
        try:
            store.put(namespace, NAMES, name, {"collection": collection, "claimed": time.time()},
                      claim.rev if claim is not None else None)
            return True
        except Conflict:
            continue  # claimed or changed meanwhile (through another gateway): read it again
    raise ApiError(409, errors.NOT_IN_COLLECTION)


def _stale(store: EntityStore, namespace: str, name: str, claim: Entity) -> bool:
    claimed = claim.doc.get("claimed")
    old = not isinstance(claimed, (int, float)) or time.time() - claimed > CLAIM_GRACE_S
    holder = claim.doc.get("collection")
    return old and (holder not in COLLECTIONS or store.get(namespace, holder, name) is None)


def _release(store: EntityStore, namespace: str, collection: str, name: str) -> None:
    """Give ``collection``'s claim of ``name`` back (if another create took it meanwhile, it stays)."""
    claim = store.get(namespace, NAMES, name)
    if claim is not None and claim.doc.get("collection") == collection:
        try:
            store.delete(namespace, NAMES, name, claim.rev)
        except Conflict:
            pass
