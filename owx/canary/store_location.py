"""Where each namespace's checkpoints live, so that its actions, and only its actions, reach them.

Checkpoints are written by the action itself. The default store is one SQLite file plus a blob
directory per namespace, in the directory the platform gives that namespace
(:meth:`Platform.namespace_dir`): the embedded platform mounts it, at the same path, into that
namespace's containers and no other's, and its files belong to the namespace's group.

A configured Redis ``store_url`` with a password serves every namespace through a user of its own
(:class:`~owx.canary.redis_tenants.RedisTenants`), which reaches that namespace's keys only. Its blob
tier is the namespace's directory where the platform has one; elsewhere (Docker, an upstream
OpenWhisk) there is none and large values stay in Redis, so tenants share no directory. A ``blobs=``
in the URL, a Redis without a password, an Ignite URL or ``store_dir`` are one store shared by every
namespace, as configured (for tenants that trust each other). In a store with a user per namespace,
each namespace's checkpoints are kept within ``store_quota_mb`` (:mod:`~owx.canary.store_quota`).

The gateway reads a store whose files are in a namespace's directory only through that namespace's
worker (:mod:`~owx.canary.store_worker`), which also makes the store's directories: the namespace's
actions write there, and what they leave is never opened by root.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from owx.canary.checkpoint import CheckpointError, CheckpointStore, open_checkpoint_store
from owx.canary.checkpoint.url import store_ports
from owx.canary.redis_tenants import RedisTenants
from owx.canary.settings import CanarySettings
from owx.canary.store_quota import QuotaProcess
from owx.canary.store_worker import DB_NAME, StoreWorker, make_store_directories
from owx.common.urls import redact
from owx.platform import Platform
from owx.settings import Settings

MiB = 1024 * 1024
GRANT_EVERY_S = 5.0  # how long a restarted Redis may refuse a namespace's actions before owx defines its user again

log = logging.getLogger(__name__)


class StoreLocation:
    """The checkpoint store URL of each namespace; the default store's files are made on first use
    (a gateway that never runs a stateful action leaves nothing behind)."""

    def __init__(self, settings: Settings, canary: CanarySettings, platform: Platform) -> None:
        self._url = canary.store_url
        self._shared_dir = canary.store_dir
        self._fallback = settings.data_dir.resolve() / "canary"
        self._platform = platform
        for port in store_ports(self._url) if self._url is not None else ():
            platform.open_host_port(port)  # the actions write their checkpoints themselves
        self._configured_blobs = self._url is not None and "blobs" in parse_qs(urlsplit(self._url).query)
        isolated = self._url is not None and RedisTenants.isolates(self._url)
        self._tenants = RedisTenants(self._url) if isolated else None
        self._quota = QuotaProcess(self._tenants, canary.store_quota_mb * MiB, canary.store_client_memory_mb * MiB) \
            if self._tenants is not None and canary.store_quota_mb else None
        if self._url is not None and (not isolated or self._configured_blobs):
            log.warning("the checkpoint store %s is shared by every namespace: each tenant's actions can reach the "
                        "others' checkpoints (a Redis URL with a password and no blobs= keeps them apart)",
                        redact(self._url))
        self._ready: set[Path] = set()
        self._opened: dict[str, CheckpointStore | StoreWorker] = {}  # by namespace
        self._lock = threading.Lock()
        self._granted: dict[str, float] = {}  # namespace -> when its user is defined again

    def url_for(self, namespace: str) -> str:
        """The store URL ``namespace``'s actions and the core use."""
        if self._url is None:
            directory = self._directory(namespace)
            return f"sqlite://{directory / DB_NAME}?blobs={directory / 'blobs'}"
        url = self._tenants.url_for(namespace) if self._tenants is not None else self._url
        blobs = self._own_blobs(namespace)
        return f"{url}{'&' if '?' in url else '?'}blobs={blobs}" if blobs is not None else url

    def _own_blobs(self, namespace: str) -> Path | None:
        """The blob tier of a configured store_url: the namespace's directory where the platform gives
        one and the URL names none; else None (the URL's blobs=, or large values kept in the KV)."""
        if self._configured_blobs or self._shared_dir is not None:
            return None
        directory = self._platform.namespace_dir(namespace)
        return directory / "canary" / "blobs" if directory is not None else None

    def prepare(self, namespace: str) -> None:
        """Create the namespace's store directory (and default database file) once: through its
        worker where it is in the namespace's directory."""
        if self._url is not None and self._own_blobs(namespace) is None:
            return
        if self._identity(namespace) is not None:
            self.grant(namespace)  # the worker logs in as the namespace's user
            try:
                self.open(namespace)
            except CheckpointError as exc:
                log.warning("the checkpoint store of namespace %s is not ready: %s", namespace, exc)
            return
        directory = self._directory(namespace)  # only root reaches it, or operator-shared among trusted tenants
        with self._lock:
            if directory not in self._ready:
                make_store_directories(directory, database=self._url is None)
                self._ready.add(directory)

    def open(self, namespace: str) -> CheckpointStore | StoreWorker:
        """The namespace's store as the gateway reads it (opened once): through the namespace's worker
        where its files are in the namespace's directory, else here. Raises `CheckpointError`."""
        with self._lock:
            store = self._opened.get(namespace)
            if store is None or (isinstance(store, StoreWorker) and not store.alive):
                identity, url = self._identity(namespace), self.url_for(namespace)
                if identity is None:
                    store = open_checkpoint_store(url)
                else:
                    directory = self._platform.namespace_dir(namespace)
                    store = StoreWorker(url, directory, directory / "canary", identity)
                self._opened[namespace] = store
            return store

    def _identity(self, namespace: str) -> tuple[int, int] | None:
        """Who the namespace's worker runs as, if the store's files are in the namespace's directory."""
        in_namespace_dir = self._shared_dir is None and (self._url is None or self._own_blobs(namespace) is not None)
        return self._platform.namespace_identity(namespace) if in_namespace_dir else None

    def grant(self, namespace: str) -> None:
        """Let the namespace's actions into a store with a user per namespace: before an attempt, once
        in ``GRANT_EVERY_S`` (a restarted Redis forgot its users). One round trip to the store."""
        if self._tenants is None:
            return
        now = time.monotonic()
        with self._lock:
            if now < self._granted.get(namespace, 0.0):
                return
        if self._tenants.ensure(namespace):
            with self._lock:
                self._granted[namespace] = now + GRANT_EVERY_S

    def close(self) -> None:
        with self._lock:
            opened, self._opened = list(self._opened.values()), {}
        for store in opened:
            store.close(timeout=5)
        if self._quota is not None:
            self._quota.close()
        if self._tenants is not None:
            self._tenants.close()

    def _directory(self, namespace: str) -> Path:
        if self._shared_dir is not None:
            return self._shared_dir
        shared = self._platform.namespace_dir(namespace)
        if shared is not None:
            return shared / "canary"
        return self._fallback / hashlib.sha256(namespace.encode()).hexdigest()[:16]
