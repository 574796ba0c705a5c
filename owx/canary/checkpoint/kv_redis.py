"""Redis KV tier (``redis://`` / ``rediss://``); needs the ``redis`` package, imported here only."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import cast

from owx.canary.checkpoint.errors import StoreUnavailable
from owx.canary.checkpoint.files import Chunk
from owx.canary.checkpoint.kv import KV

# KEYS[1]; ARGV: expect-absent flag, expected value, delete flag, new value
_CAS = """
local current = redis.call('GET', KEYS[1])
if ARGV[1] == '1' then
  if current then return 0 end
elseif current ~= ARGV[2] then
  return 0
end
if ARGV[3] == '1' then redis.call('DEL', KEYS[1]) else redis.call('SET', KEYS[1], ARGV[4]) end
return 1
"""


class RedisKV(KV):
    def __init__(self, url: str, prefix: str, timeout: float) -> None:
        try:
            import redis
        except ImportError as exc:
            raise StoreUnavailable("the redis checkpoint store needs the 'redis' package (pip install redis)") from exc
        super().__init__(f"redis checkpoint store {url}")
        self.errors = (redis.RedisError,)
        self._prefix = prefix
        with self.guard("connecting"):
            self._redis = redis.Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout)
            self._redis.ping()
            self._cas = self._redis.register_script(_CAS)

    def get(self, key: str) -> bytes | None:
        with self.guard("get"):
            return cast("bytes | None", self._redis.get(self._prefix + key))

    def put(self, key: str, value: bytes) -> None:
        with self.guard("put"):
            self._redis.set(self._prefix + key, value)

    def put_chunks(self, key: str, chunks: Sequence[Chunk]) -> None:
        """``SET`` written as the protocol's bytes around the chunks themselves: a 10 MB checkpoint
        is not copied twice more (joined, then packed by the client library) before it is sent."""
        name = (self._prefix + key).encode()
        size = sum(memoryview(chunk).nbytes for chunk in chunks)
        header = b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n" % (len(name), name, size)
        pool = self._redis.connection_pool
        with self.guard("put"):
            connection = pool.get_connection()
            try:
                connection.send_packed_command([header, *chunks, b"\r\n"])
                connection.read_response()
            except BaseException:
                connection.disconnect()  # a half-sent command must not be followed on this connection
                raise
            finally:
                pool.release(connection)

    def delete(self, keys: Iterable[str]) -> None:
        names = [self._prefix + k for k in keys]
        if names:
            with self.guard("delete"):
                self._redis.delete(*names)

    def cas(self, key: str, expected: bytes | None, new: bytes | None) -> bool:
        args = ["1" if expected is None else "0", expected or b"", "1" if new is None else "0", new or b""]
        with self.guard("compare-and-set"):
            return bool(self._cas(keys=[self._prefix + key], args=args))

    def incr(self, key: str) -> int:
        with self.guard("increment"):
            return int(self._redis.incr(self._prefix + key))

    def close(self) -> None:
        self._redis.close()
