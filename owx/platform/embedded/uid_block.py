"""This instance's share of the container uid range: a block no other live instance on the machine holds.

Instances on one machine share the configured range (``sandbox.uid_base``, ``uid_count``). The host
firewall (:mod:`owx.platform.embedded.host_firewall`) tells one instance's containers from every
other process by uid, so two live instances never draw from the same block. A block is held by an
exclusive lock on ``/run/owx/uid-blocks/<first uid>``: the kernel drops the lock when its holder
ends, however it ends, so no block outlives its instance.
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass

from owx.platform.embedded.instance import RUN_DIR
from owx.platform.interface import PlatformUnavailable
from owx.platform.settings import SandboxSettings

BLOCK_UIDS = 4096  # containers one instance can have at once
LOCK_DIR = RUN_DIR / "uid-blocks"


@dataclass(frozen=True)
class UidBlock:
    """Uids ``first`` .. ``last``, held while the lock descriptor is open."""

    first: int
    count: int
    lock_fd: int

    @property
    def last(self) -> int:
        return self.first + self.count - 1

    @classmethod
    def lease(cls, sandbox: SandboxSettings) -> UidBlock:
        """The first block of the range no live instance holds."""
        size = min(BLOCK_UIDS, sandbox.uid_count)
        LOCK_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
        for first in range(sandbox.uid_base, sandbox.uid_base + sandbox.uid_count - size + 1, size):
            fd = _take_lock(first, create=True)
            if fd is not None:
                return cls(first, size, fd)
        raise PlatformUnavailable(f"every block of {size} container uids from {sandbox.uid_base} is held by a "
                                  "live owx instance on this machine")

    def release(self) -> None:
        os.close(self.lock_fd)


def held(first: int) -> bool:
    """Whether a live instance holds the block that starts at ``first`` (a dead one's lock is gone)."""
    try:
        fd = _take_lock(first, create=False)
    except FileNotFoundError:
        return False
    if fd is None:
        return True
    os.close(fd)
    return False


def _take_lock(first: int, create: bool) -> int | None:
    """The locked descriptor of block ``first``'s lock file; None while a live instance holds it."""
    fd = os.open(LOCK_DIR / str(first), os.O_RDWR | os.O_CLOEXEC | (os.O_CREAT if create else 0), 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd
