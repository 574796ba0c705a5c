"""Activation and transaction ids: 32 lower-case hex digits, as OpenWhisk's.

An id starts with the millisecond it was made (12 digits) and ends with 80 random bits: ids made
later sort later, so the stores' indexes by id grow at their end. Random ids touched a page of the
index anywhere for each record: one database commit wrote about as many pages as it held records.
"""

from __future__ import annotations

import os
import re
import threading
import time

_POOL_BYTES = 4000  # random bytes read at once: one system call per 400 ids
_ID_BYTES = 10
_CALLER_ID = re.compile(r"[0-9A-Za-z][0-9A-Za-z._:-]{0,127}", re.ASCII)  # a token safe in headers and logs
SYSTEM_PREFIX = "sid_"  # OpenWhisk's own transaction ids, never taken from a caller
_lock = threading.Lock()
_pool = b""
_used = 0


def new_id() -> str:
    """A fresh id: the epoch millisecond, then 80 bits from the kernel's random source (as
    ``secrets``), read a pool at a time; a forked child never hands out its parent's (its pool is
    dropped at the fork)."""
    global _pool, _used
    with _lock:
        if _used + _ID_BYTES > len(_pool):
            _pool, _used = os.urandom(_POOL_BYTES), 0
        start = _used
        _used += _ID_BYTES
        return f"{time.time_ns() // 1_000_000:012x}{_pool[start:start + _ID_BYTES].hex()}"


def transaction_id(given: str | None) -> str:
    """A request's transaction id: the caller's ``X-Request-ID``, as OpenWhisk takes it (tracing through
    proxies and clients), unless it is missing, one of the system's own (``sid_``) or not a short
    token; else a fresh id."""
    if given and _CALLER_ID.fullmatch(given) and not given.startswith(SYSTEM_PREFIX):
        return given
    return new_id()


def _drop_pool() -> None:
    global _pool, _used
    _pool, _used = b"", 0


os.register_at_fork(after_in_child=_drop_pool)
