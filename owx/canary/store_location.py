"""Where each namespace's checkpoints live, so that its actions, and only its actions, reach them.

Checkpoints are written by the action itself. The default store is one SQLite file plus a blob
directory per namespace, in the directory the platform gives that namespace
(:meth:`Platform.namespace_dir`): the embedded platform mounts it, at the same path, into that
namespace's containers and no other's, and its files belong to the namespace's group. A platform
without namespace directories (Docker, an upstream OpenWhisk) gets ``<data_dir>/canary/<namespace>``,
which its containers cannot reach: use ``store_url`` (Redis, Ignite) there. A configured
``store_url`` or ``store_dir`` is one store shared by every namespace, as configured; a
``store_url`` without ``blobs=`` gets each namespace's own directory as its blob tier (sandboxed
actions write their blobs themselves, and reach no other directory).
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

from owx.canary.checkpoint.url import store_ports
from owx.canary.settings import CanarySettings
from owx.platform import Platform
from owx.settings import Settings

DB_NAME = "checkpoints.db"
DIRECTORY_MODE = 0o2770  # the namespace's group (inherited from the namespace directory) reads and writes
FILE_MODE = 0o660


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
        self._ready: set[Path] = set()
        self._lock = threading.Lock()

    def url_for(self, namespace: str) -> str:
        """The store URL ``namespace``'s actions and the core use."""
        if self._url is not None and not self._own_blobs:
            return self._url
        directory = self._directory(namespace)
        if self._url is not None:
            return f"{self._url}{'&' if '?' in self._url else '?'}blobs={directory / 'blobs'}"
        return f"sqlite://{directory / DB_NAME}?blobs={directory / 'blobs'}"

    @property
    def _own_blobs(self) -> bool:
        """A configured store_url whose blob tier is each namespace's directory."""
        return self._url is not None and "blobs=" not in self._url and self._shared_dir is None

    def prepare(self, namespace: str) -> None:
        """Create the namespace's store directory (and default database file) once."""
        if self._url is not None and not self._own_blobs:
            return
        directory = self._directory(namespace)
        with self._lock:
            if directory in self._ready:
                return
            spool = directory / "blobs" / ".spool"  # the store's default staging directory
            for path in (directory, directory / "blobs", spool):
                path.mkdir(parents=True, exist_ok=True)
                path.chmod(DIRECTORY_MODE)
            if self._url is not None:
                self._ready.add(directory)
                return
            db = directory / DB_NAME
            db.touch(exist_ok=True)  # an empty file is an empty SQLite database; SQLite gives its
            db.chmod(FILE_MODE)  # -wal and -shm files the database file's mode
            self._ready.add(directory)

    def _directory(self, namespace: str) -> Path:
        if self._shared_dir is not None:
            return self._shared_dir
        shared = self._platform.namespace_dir(namespace)
        if shared is not None:
            return shared / "canary"
        return self._fallback / hashlib.sha256(namespace.encode()).hexdigest()[:16]
