"""Apache Ignite KV tier (``ignite://host:port[,host:port...]``) through the ``pyignite``
thin client: one REPLICATED, ATOMIC cache of byte-array values.

Written against pyignite's documented API (``Client.connect``, ``get_or_create_cache``
with ``PROP_CACHE_MODE``, ``put_if_absent``, ``replace_if_equals``, ``remove_if_equals``);
CI has no Ignite server, so this backend only runs when a test is pointed at one.
The thin client is not thread-safe, so calls are serialized.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from owx.canary.checkpoint.errors import StoreUnavailable
from owx.canary.checkpoint.kv import KV


class IgniteKV(KV):
    def __init__(
        self, nodes: list[tuple[str, int]], cache: str, timeout: float,
        username: str | None = None, password: str | None = None,
    ) -> None:
        try:
            from pyignite import Client
            from pyignite import exceptions as ignite_errors
            from pyignite.datatypes import ByteArrayObject
            from pyignite.datatypes.cache_config import CacheAtomicityMode, CacheMode
            from pyignite.datatypes.prop_codes import PROP_CACHE_ATOMICITY_MODE, PROP_CACHE_MODE, PROP_NAME
        except ImportError as exc:
            raise StoreUnavailable("the ignite checkpoint store needs the 'pyignite' package (pip install pyignite)") from exc
        super().__init__(f"ignite checkpoint store {','.join(f'{h}:{p}' for h, p in nodes)}/{cache}")
        self.errors = (
            OSError, EOFError, ignite_errors.ReconnectError, ignite_errors.CacheError,
            ignite_errors.SocketError, ignite_errors.AuthenticationError, ignite_errors.ParameterError,
        )
        self._bytes = ByteArrayObject
        self._lock = threading.Lock()
        auth = {"username": username, "password": password} if username else {}
        self._client = Client(timeout=timeout, handshake_timeout=timeout, **auth)
        with self.guard("connecting"):
            self._client.connect(nodes)
            self._cache = self._client.get_or_create_cache({
                PROP_NAME: cache,
                PROP_CACHE_MODE: CacheMode.REPLICATED,
                PROP_CACHE_ATOMICITY_MODE: CacheAtomicityMode.ATOMIC,
            })

    def get(self, key: str) -> bytes | None:
        with self._lock, self.guard("get"):
            value = self._cache.get(key)
        return None if value is None else bytes(value)

    def put(self, key: str, value: bytes) -> None:
        with self._lock, self.guard("put"):
            self._cache.put(key, value, value_hint=self._bytes)

    def delete(self, keys: Iterable[str]) -> None:
        names = list(keys)
        if names:
            with self._lock, self.guard("delete"):
                self._cache.remove_keys(names)

    def cas(self, key: str, expected: bytes | None, new: bytes | None) -> bool:
        with self._lock, self.guard("compare-and-set"):
            if expected is None and new is None:
                return self._cache.get(key) is None
            if expected is None:
                return bool(self._cache.put_if_absent(key, new, value_hint=self._bytes))
            if new is None:
                return bool(self._cache.remove_if_equals(key, expected, sample_hint=self._bytes))
            return bool(self._cache.replace_if_equals(
                key, expected, new, sample_hint=self._bytes, value_hint=self._bytes
            ))

    def close(self) -> None:
        with self._lock:
            self._client.close()
