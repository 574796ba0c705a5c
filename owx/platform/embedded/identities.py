"""Who local containers run as: a uid of their own, their namespace's gid, their namespace's directory.

Uids are drawn per container from a high range (never 0, never a host user; the instance's own
block of it, :mod:`owx.platform.embedded.uid_block`) and given back when the container is gone.
Gids are per namespace and kept in ``<state_dir>/namespaces.json``, so files a namespace's
containers made stay theirs across restarts. A namespace directory,
``<state_dir>/namespaces/<gid>``, is made on first request (Canary's checkpoint store lives there),
owned by root and the namespace's group, mode 2770; only that namespace's containers get it mounted.
With ``sandbox.namespace_dir_mb`` it is a volume of that size of its own
(:mod:`owx.platform.embedded.namespace_volume`).
"""

from __future__ import annotations

import json
import logging
import os
import random
import threading
from pathlib import Path

from owx.platform.embedded import namespace_volume
from owx.platform.settings import SandboxSettings

log = logging.getLogger(__name__)

DIRECTORY_MODE = namespace_volume.DIRECTORY_MODE


class Identities:
    """The uid and gid allocations of one platform instance."""

    def __init__(self, state_dir: Path, sandbox: SandboxSettings, uids: range | None = None) -> None:
        self.sandbox = sandbox
        self.uids = uids if uids is not None else range(sandbox.uid_base, sandbox.uid_base + sandbox.uid_count)
        self.record = state_dir / "namespaces.json"
        self.directories = state_dir / "namespaces"
        self._gids: dict[str, int] = json.loads(self.record.read_text()) if self.record.exists() else {}
        self._uids: set[int] = set()
        self._lock = threading.Lock()
        self._ready: set[int] = set()  # gids whose directory is made (and mounted) in this run
        self._making = threading.Lock()  # held while one is made: mkfs takes a moment, others go on

    def take_uid(self) -> int:
        """A uid no live container of this instance has."""
        with self._lock:
            if len(self._uids) >= len(self.uids):
                raise RuntimeError("every container uid is in use")
            while (uid := random.choice(self.uids)) in self._uids:
                pass
            self._uids.add(uid)
            return uid

    def give_back(self, uid: int) -> None:
        with self._lock:
            self._uids.discard(uid)

    def gid(self, namespace: str) -> int:
        """The namespace's gid (allocated and recorded on first use)."""
        with self._lock:
            gid = self._gids.get(namespace)
            if gid is None:
                if len(self._gids) >= self.sandbox.gid_count:
                    raise RuntimeError("every namespace gid is in use")
                gid = self.sandbox.gid_base + len(self._gids)
                self._gids[namespace] = gid
                partial = self.record.with_suffix(".tmp")
                partial.write_text(json.dumps(self._gids))
                partial.chmod(0o600)
                partial.replace(self.record)
            return gid

    def directory(self, namespace: str, create: bool = False) -> Path | None:
        """The namespace's directory; None if it has none (``create``: make it now)."""
        gid = self.gid(namespace)
        path = self.directories / str(gid)
        if gid not in self._ready and (create or self._image(gid).exists()):
            with self._making:
                if gid not in self._ready:
                    self._make(path, gid)
                    self._ready.add(gid)
        return path if path.is_dir() else None

    def close(self) -> None:
        """Detach the namespaces' volumes, those a killed predecessor left mounted too (their images
        stay, for the next start)."""
        with self._making:
            if self.sandbox.namespace_dir_mb and self.directories.is_dir():
                for path in self.directories.iterdir():
                    if os.path.ismount(path):
                        namespace_volume.detach(path)
            self._ready.clear()

    def _make(self, path: Path, gid: int) -> None:
        self.directories.mkdir(mode=0o711, exist_ok=True)
        if not self.sandbox.namespace_dir_mb:
            if not path.is_dir():
                path.mkdir(exist_ok=True)
                os.chown(path, 0, gid)
                path.chmod(DIRECTORY_MODE)
        elif path.is_dir() and not os.path.ismount(path) and any(path.iterdir()):
            log.warning("namespace directory %s holds files from before volumes: kept as it is, without a quota", path)
        else:
            namespace_volume.mount(self._image(gid), path, self.sandbox.namespace_dir_mb, gid)

    def _image(self, gid: int) -> Path:
        return self.directories / f"{gid}.img"
