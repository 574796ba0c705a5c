"""Which upstream namespace each owx tenant runs in: its own account, or owx's shared key.

OpenWhisk throttles per namespace, so tenants that share owx's key share its limits; a tenant given
an account of its own (``upstream.accounts`` at start, ``owx admin account set`` while owx runs) is
deployed and run in that namespace, throttled alone.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from owx.platform.interface import TenantAccounts
from owx.platform.openwhisk.client import UpstreamClient
from owx.platform.openwhisk.deployments import Deployments
from owx.platform.settings import UpstreamSettings


class UpstreamAccounts(TenantAccounts):
    """The deployments of every upstream key owx uses, and which namespace uses which; reading is
    lock-free (the event loop), assigning takes a lock (the admin)."""

    def __init__(self, settings: UpstreamSettings, deployments: Callable[[UpstreamClient], Deployments]) -> None:
        assert settings.auth is not None
        self._settings = settings
        self._deployments = deployments
        self.shared = deployments(UpstreamClient(settings))  # owx's own key: every tenant without an account
        self._by_key: dict[str, Deployments] = {settings.auth: self.shared}
        self._by_namespace: dict[str, Deployments] = {}
        self._lock = threading.Lock()
        for namespace, auth in settings.accounts.items():
            self.assign(namespace, auth)

    def of(self, namespace: str) -> Deployments:
        """Where ``namespace``'s callers deploy and run upstream."""
        return self._by_namespace.get(namespace, self.shared)

    def every(self) -> list[Deployments]:
        """The deployments of every key in use (an action may be deployed under each)."""
        return list(self._by_key.values())

    def assign(self, namespace: str, auth: str | None) -> None:
        with self._lock:
            by_namespace = dict(self._by_namespace)
            if auth is None:
                by_namespace.pop(namespace, None)
            else:
                if auth not in self._by_key:  # kept once made: activations in flight may still use it
                    # the key's own namespace, whichever one owx's key is given (upstream.namespace)
                    client = UpstreamClient(self._settings.model_copy(update={"auth": auth, "namespace": "_"}))
                    self._by_key = {**self._by_key, auth: self._deployments(client)}
                by_namespace[namespace] = self._by_key[auth]
            self._by_namespace = by_namespace  # one swap: readers see the old map or the new

    def close(self) -> None:
        for deployments in self.every():
            deployments.client.close()
