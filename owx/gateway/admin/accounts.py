"""Tenants' upstream accounts as the operator sets them (``owx admin account``): kept in the entity
store, applied to the platform at start and at once by the gateway whose admin socket is used
(other gateways sharing its CouchDB at their next start).

An account is an upstream OpenWhisk namespace of the tenant's own (its ``uuid:key``): the tenant's
invocations run there, throttled apart from everyone else's (see
:mod:`owx.platform.openwhisk.accounts`). Accounts given at start (``upstream.accounts``) win over
stored ones and cannot be changed here. Listing shows uuids, never secrets.
"""

from __future__ import annotations

from owx.gateway.admin.users import AdminError, check_name, parse_auth
from owx.gateway.identity import SYSTEM_NAMESPACE
from owx.gateway.stores import Conflict, EntityStore
from owx.platform.interface import TenantAccounts

COLLECTION = "upstream-accounts"
NOT_UPSTREAM = ("owx runs activations on its own containers: upstream accounts apply only in front of an "
                "OpenWhisk (owx up --upstream URL)")


class StoredAccounts:
    """The stored accounts, and the running platform's (``platform``), which gets each change. Without
    a ``platform`` (owx is not running) changes wait in the store for its next start; a running owx
    whose platform has no accounts (``running=True``) refuses them. ``configured``: the accounts the
    settings gave at start."""

    def __init__(self, store: EntityStore, platform: TenantAccounts | None = None,
                 configured: dict[str, str] | None = None, running: bool = False) -> None:
        self.store = store
        self.platform = platform
        self.configured = configured or {}
        self._refused = running and platform is None

    def apply(self) -> None:
        """Give the platform every stored account the settings do not override (at start)."""
        if self.platform is not None:
            for entity in self.store.list(SYSTEM_NAMESPACE, COLLECTION):
                if entity.name not in self.configured:
                    self.platform.assign(entity.name, entity.doc["auth"])

    def set(self, namespace: str, auth: str) -> str:
        """Run ``namespace``'s invocations in the upstream namespace of ``auth``; its uuid."""
        self._changeable(namespace)
        key_uuid, secret = parse_auth(auth)
        current = self.store.get(SYSTEM_NAMESPACE, COLLECTION, namespace)
        try:
            self.store.put(SYSTEM_NAMESPACE, COLLECTION, namespace, {"auth": f"{key_uuid}:{secret}"},
                           current.rev if current else None)
        except Conflict:
            raise AdminError(f"the account of {namespace!r} was changed at the same time: try again") from None
        if self.platform is not None:
            self.platform.assign(namespace, f"{key_uuid}:{secret}")
        return key_uuid

    def unset(self, namespace: str) -> None:
        """``namespace`` shares owx's upstream key again."""
        self._changeable(namespace)
        if not self.store.delete(SYSTEM_NAMESPACE, COLLECTION, namespace):
            raise AdminError(f"namespace {namespace!r} has no upstream account")
        if self.platform is not None:
            self.platform.assign(namespace, None)

    def uuids(self) -> dict[str, str]:
        """Every namespace with an account, and its uuid: stored ones and those the settings gave."""
        stored = {e.name: e.doc["auth"].partition(":")[0] for e in self.store.list(SYSTEM_NAMESPACE, COLLECTION)}
        return {**stored, **{ns: auth.partition(":")[0] for ns, auth in self.configured.items()}}

    def _changeable(self, namespace: str) -> None:
        if self._refused:
            raise AdminError(NOT_UPSTREAM)
        check_name("namespace", namespace)
        if namespace in self.configured:
            raise AdminError(f"namespace {namespace!r} has its account in the settings (upstream.accounts): "
                             "change it there")
