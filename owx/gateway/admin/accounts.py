"""Tenants' upstream accounts as the operator sets them (``owx admin account``): kept in the entity
store, applied to the platform at start and at once by the gateway whose admin socket is used, and
within ``FOLLOW_S`` by the other gateways sharing its CouchDB (each reads the stored accounts again
that often).

An account is an upstream OpenWhisk namespace of the tenant's own (its ``uuid:key``): the tenant's
invocations run there, throttled apart from everyone else's (see
:mod:`owx.platform.openwhisk.accounts`). Accounts given at start (``upstream.accounts``) win over
stored ones and cannot be changed here. Listing shows uuids, never secrets.
"""

from __future__ import annotations

import logging
import threading

from owx.gateway.admin.users import AdminError, check_name, parse_auth
from owx.gateway.identity import SYSTEM_NAMESPACE
from owx.gateway.stores import Conflict, EntityStore
from owx.platform.interface import TenantAccounts

COLLECTION = "upstream-accounts"
FOLLOW_S = 2.0
log = logging.getLogger(__name__)

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
        self._applied: dict[str, str] = {}  # namespace -> key, as the platform has it from the store
        self._lock = threading.Lock()  # one change at a time: a read of the store never undoes a later write
        self._stop = threading.Event()

    def apply(self) -> None:
        """Give the platform every stored account the settings do not override, and take back those no
        longer stored (at start, then every ``FOLLOW_S`` while following)."""
        if self.platform is None:
            return
        with self._lock:
            stored = {entity.name: entity.doc["auth"] for entity in self.store.list(SYSTEM_NAMESPACE, COLLECTION)
                      if entity.name not in self.configured}
            for namespace in self._applied.keys() - stored.keys():
                self.platform.assign(namespace, None)
            for namespace, auth in stored.items():
                if self._applied.get(namespace) != auth:
                    self.platform.assign(namespace, auth)
            self._applied = stored

    def follow(self) -> None:
        """Apply the changes other gateways sharing the store make, every ``FOLLOW_S`` until :meth:`close`."""
        if self.platform is not None:
            threading.Thread(target=self._following, name="owx-accounts", daemon=True).start()

    def _following(self) -> None:
        while not self._stop.wait(FOLLOW_S):
            try:
                self.apply()
            except Exception:  # noqa: BLE001 - a store that is away for a moment must not end following
                log.exception("reading the stored upstream accounts failed; trying again in %s s", FOLLOW_S)

    def close(self) -> None:
        self._stop.set()

    def set(self, namespace: str, auth: str) -> str:
        """Run ``namespace``'s invocations in the upstream namespace of ``auth``; its uuid."""
        self._changeable(namespace)
        key_uuid, secret = parse_auth(auth)
        auth = f"{key_uuid}:{secret}"
        with self._lock:
            current = self.store.get(SYSTEM_NAMESPACE, COLLECTION, namespace)
            try:
                self.store.put(SYSTEM_NAMESPACE, COLLECTION, namespace, {"auth": auth}, current.rev if current else None)
            except Conflict:
                raise AdminError(f"the account of {namespace!r} was changed at the same time: try again") from None
            if self.platform is not None:
                self.platform.assign(namespace, auth)
                self._applied[namespace] = auth
        return key_uuid

    def unset(self, namespace: str) -> None:
        """``namespace`` shares owx's upstream key again."""
        self._changeable(namespace)
        with self._lock:
            if not self.store.delete(SYSTEM_NAMESPACE, COLLECTION, namespace):
                raise AdminError(f"namespace {namespace!r} has no upstream account")
            if self.platform is not None:
                self.platform.assign(namespace, None)
                self._applied.pop(namespace, None)

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
