"""One process owns a store's files: an exclusive lock file next to them says so."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from owx.gateway.stores.base import StoreUnavailable


def own(lock: Path, what: str) -> int:
    """Create ``lock``'s directory (0700) and hold an exclusive ``flock`` on ``lock``, so that two
    processes never write the same files; returns its descriptor (closing it releases the lock, as
    the process's death does). Raises `StoreUnavailable` if the directory cannot be used or another
    process owns ``what``."""
    try:
        lock.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as err:
        raise StoreUnavailable(f"cannot use data directory {lock.parent}: {err}") from err
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StoreUnavailable(f"{what} is in use by another owx store (one process owns a data directory)") from None
    return fd
