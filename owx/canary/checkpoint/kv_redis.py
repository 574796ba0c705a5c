"""Redis KV tier (``redis://`` / ``rediss://``); needs the ``redis`` package, imported here only."""

from __future__ import annotations

import inspect
import socket
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from types import ModuleType
from typing import Any, cast

from owx.canary.checkpoint.errors import StoreUnavailable
from owx.canary.checkpoint.files import Chunk
from owx.canary.checkpoint.kv import KV
from owx.common.urls import redact

READ_SIZE = 1 << 20
MAX_HEADER = 64

#: why a tenant's user may be refused a command it is allowed (owx.canary.store_quota)
OVER_BUDGET = "a namespace whose checkpoints hold more than its budget may only read and delete until it deletes"
#: every command this client sends: what a tenant's Redis user is allowed (owx.canary.redis_tenants)
COMMANDS = ("get", "set", "del", "incrby", "ping", "watch", "unwatch", "multi", "exec", "discard")


class RedisKV(KV):
    """Checkpoint keys under one prefix. Compare-and-set is an optimistic transaction (WATCH, GET,
    MULTI/EXEC), not a Lua script: a tenant's user may run no script, as Lua is where Redis' sandbox
    escapes have been."""

    def __init__(self, url: str, prefix: str, timeout: float) -> None:
        try:
            import redis
        except ImportError as exc:
            raise StoreUnavailable("the redis checkpoint store needs the 'redis' package (pip install redis)") from exc
        super().__init__(f"redis checkpoint store {redact(url)}")
        self.errors = (redis.RedisError,)
        self._refused = redis.exceptions.NoPermissionError
        self._changed = redis.WatchError
        self._prefix = prefix
        with self.guard("connecting"):
            self._redis = redis.Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout,
                                               **_no_client_info(redis))
            self._redis.ping()

    @contextmanager
    def guard(self, action: str) -> Iterator[None]:
        """As :meth:`KV.guard`; a refused command says why a tenant's user may be refused one."""
        try:
            with super().guard(action):
                yield
        except StoreUnavailable as exc:
            if isinstance(exc.__cause__, self._refused):
                raise StoreUnavailable(f"{exc} ({OVER_BUDGET})") from exc.__cause__
            raise

    def get(self, key: str) -> bytes | None:
        with self.guard("get"):
            return cast("bytes | None", self._redis.get(self._prefix + key))

    def put(self, key: str, value: bytes) -> None:
        with self.guard("put"):
            self._redis.set(self._prefix + key, value)

    def get_buffer(self, key: str) -> bytes | bytearray | None:
        """``GET`` read from the socket straight into a bytearray of the value's size. Through the
        client library a 10 MB checkpoint is fed to the reply parser in 32 KB pieces, copied into a
        bytes object, and copied once more to be writable for the arrays restored from it."""
        with self.guard("get"), self._raw_connection() as connection:
            connection.send_command("GET", self._prefix + key)
            try:
                return _read_bulk(connection._sock)  # a connection just taken: nothing is buffered on it
            except (OSError, ValueError) as exc:
                raise StoreUnavailable(f"{self.description}: get failed: {exc}") from exc

    def put_chunks(self, key: str, chunks: Sequence[Chunk]) -> None:
        """``SET`` written as the protocol's bytes around the chunks themselves: a 10 MB checkpoint
        is not copied twice more (joined, then packed by the client library) before it is sent."""
        name = (self._prefix + key).encode()
        size = sum(memoryview(chunk).nbytes for chunk in chunks)
        header = b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n" % (len(name), name, size)
        with self.guard("put"), self._raw_connection() as connection:
            connection.send_packed_command([header, *chunks, b"\r\n"])
            connection.read_response()

    @contextmanager
    def _raw_connection(self) -> Iterator[Any]:
        """A connection of the pool for one exchange written or read by hand; dropped if it fails part
        way (a half-sent command or half-read reply must not meet the next caller)."""
        pool = self._redis.connection_pool
        connection = pool.get_connection()
        try:
            yield connection
        except BaseException:
            connection.disconnect()
            raise
        finally:
            pool.release(connection)

    def delete(self, keys: Iterable[str]) -> None:
        names = [self._prefix + k for k in keys]
        if names:
            with self.guard("delete"):
                self._redis.delete(*names)

    def cas(self, key: str, expected: bytes | None, new: bytes | None) -> bool:
        name = self._prefix + key
        with self.guard("compare-and-set"), self._redis.pipeline() as transaction:
            transaction.watch(name)
            if transaction.get(name) != expected:
                return False  # leaving the pipeline unwatches
            transaction.multi()
            if new is None:
                transaction.delete(name)
            else:
                transaction.set(name, new)
            try:
                transaction.execute()
            except self._changed:  # written by someone else since the GET
                return False
            return True

    def incr(self, key: str) -> int:
        with self.guard("increment"):
            return int(self._redis.incr(self._prefix + key))

    def close(self) -> None:
        self._redis.close()


def _no_client_info(redis: ModuleType) -> dict[str, None]:
    """Options that skip ``CLIENT SETINFO`` on connect: a recovering function's first connection
    then neither looks up the client library's version in the installed packages (~5 ms in a fresh
    process) nor waits for two more round trips. ``driver_info`` in newer redis-py, the ``lib_*``
    options (deprecated there) in older ones."""
    parameters = inspect.signature(redis.connection.AbstractConnection.__init__).parameters
    return {"driver_info": None} if "driver_info" in parameters else {"lib_name": None, "lib_version": None}


def _read_bulk(sock: socket.socket) -> bytearray | None:
    """One bulk-string reply read from ``sock``: ``$<n>\\r\\n<n bytes>\\r\\n``; None for no value
    (``$-1\\r\\n``, or ``_\\r\\n`` in RESP3)."""
    head = bytearray()
    while (end := head.find(b"\r\n")) < 0:
        if len(head) > MAX_HEADER:
            raise ConnectionError("the checkpoint store answered no bulk reply")
        piece = sock.recv(READ_SIZE)
        if not piece:
            raise ConnectionError("the checkpoint store closed the connection")
        head += piece
    kind, size = head[:1], int(head[1:end] or b"0") if head[:1] == b"$" else -2
    if kind in (b"-", b"!"):  # an error (RESP2, RESP3)
        raise ValueError(head[1:end].decode(errors="replace"))
    if size == -1 or kind == b"_":  # no such key (RESP2, RESP3)
        return None
    if size < 0:
        raise ConnectionError(f"unexpected reply {bytes(head[:end][:80])!r} to GET")
    value = bytearray(size + 2)
    view = memoryview(value)
    got = len(head) - end - 2
    view[:got] = head[end + 2:]
    while got < size + 2:
        read = sock.recv_into(view[got:])
        if not read:
            raise ConnectionError("the checkpoint store closed the connection mid-reply")
        got += read
    view.release()
    del value[size:]  # the trailing CRLF
    return value
