"""Activation and transaction ids: 32 lower-case hex digits, as OpenWhisk's."""

from __future__ import annotations

import os
import threading

_POOL_BYTES = 4096  # random bytes read at once: one system call per 256 ids
_ID_BYTES = 16
_lock = threading.Lock()
_pool = b""
_used = 0


def new_id() -> str:
    """A fresh random id: 128 bits from the kernel's random source (as ``secrets``), read a pool at a
    time; a forked child never hands out its parent's (its pool is dropped at the fork)."""
    global _pool, _used
    with _lock:
        if _used + _ID_BYTES > len(_pool):
            _pool, _used = os.urandom(_POOL_BYTES), 0
        start = _used
        _used += _ID_BYTES
        return _pool[start:start + _ID_BYTES].hex()


def _drop_pool() -> None:
    global _pool, _used
    _pool, _used = b"", 0


os.register_at_fork(after_in_child=_drop_pool)
