"""OpenWhisk's entitlement to use an action: the caller's own, or one in another namespace's
published package (as ``/whisk.system/alarms/alarm`` is for everyone)."""

from __future__ import annotations

from owx.gateway import errors
from owx.gateway.errors import ApiError
from owx.gateway.identity import Identity
from owx.gateway.names import EntityPath, check_namespace
from owx.gateway.stores import EntityStore

PACKAGES = "packages"


def shared(store: EntityStore, path: EntityPath) -> bool:
    """Whether ``path`` sits in a published package (not a binding) of its namespace."""
    if not path.package:
        return False
    package = store.get(path.namespace, PACKAGES, path.package)
    return package is not None and bool(package.doc.get("publish")) and not package.doc.get("binding")


def require_use(store: EntityStore, identity: Identity, path: EntityPath) -> EntityPath:
    """``path`` if ``identity`` may read and activate it, else OpenWhisk's 403."""
    if path.namespace == identity.namespace or shared(store, path):
        return path
    raise ApiError(403, errors.NOT_AUTHORIZED.format(path.fqn.lstrip("/")))


def requested_namespace(identity: Identity, segment: str) -> str:
    """The namespace a request path names (``_``: the caller's), syntax checked."""
    return identity.namespace if segment == "_" else check_namespace(segment)
