"""Where the embedded checkpoint store lives, so that actions can reach it.

Actions of the local backend run as the unprivileged action user (``nobody``), and
checkpoints are written by the action itself. The default store is SQLite plus a blob
directory under ``<data_dir>/canary``, owned by the action user. When the data dir is
not reachable by that user (``/root/.owx``, a private temp dir), the store goes to
``/var/tmp/owx-canary-<hash of the data dir>`` instead — same machine, stable across restarts.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import stat
import threading
from pathlib import Path

from owx.canary.settings import CanarySettings
from owx.settings import Settings

DB_NAME = "checkpoints.db"


def action_ids(user: str) -> tuple[int, int] | None:
    """(uid, gid) actions run as, or None when they run as this process's user."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        return None
    return entry.pw_uid, entry.pw_gid


def reachable(path: Path, uid: int) -> bool:
    """Whether ``uid`` may traverse every ancestor directory of ``path``."""
    for parent in path.resolve().parents:
        info = parent.stat()
        if info.st_uid != uid and not info.st_mode & stat.S_IXOTH:
            return False
    return True


def default_store_dir(settings: Settings, canary: CanarySettings, ids: tuple[int, int] | None) -> Path:
    if canary.store_dir is not None:
        return canary.store_dir
    preferred = settings.data_dir.resolve() / "canary"
    if ids is None or reachable(preferred, ids[0]):
        return preferred
    tag = hashlib.sha256(str(preferred).encode()).hexdigest()[:12]
    return Path("/var/tmp") / f"owx-canary-{tag}"


class StoreLocation:
    """The checkpoint store URL actions get; the default store's files are made on first use
    (a gateway that never runs a stateful action leaves nothing behind)."""

    def __init__(self, settings: Settings, canary: CanarySettings) -> None:
        self._ids = action_ids(settings.platform.action_user)
        self._directory = None if canary.store_url else default_store_dir(settings, canary, self._ids)
        self.url = canary.store_url or self._default_url()
        self._ready = canary.store_url is not None
        self._lock = threading.Lock()

    def _default_url(self) -> str:
        assert self._directory is not None
        return f"sqlite://{self._directory / DB_NAME}?blobs={self._directory / 'blobs'}"

    def prepare(self) -> None:
        """Create the default store's directory and database file for the action user (once)."""
        with self._lock:
            if self._ready:
                return
            assert self._directory is not None
            spool = self._directory / "blobs" / ".spool"  # the store's default staging directory
            spool.mkdir(parents=True, exist_ok=True)
            db = self._directory / DB_NAME
            db.touch(exist_ok=True)  # an empty file is an empty SQLite database; SQLite (as root) gives its
            if self._ids is not None:  # -wal and -shm files the owner of the database file
                for path in (self._directory, db, *self._directory.rglob("*")):
                    os.chown(path, *self._ids)
            self._ready = True
