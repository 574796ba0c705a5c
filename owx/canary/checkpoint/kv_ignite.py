"""Apache Ignite KV tier (``ignite://host:port[,host:port...]``) through the ``pyignite``
thin client: one REPLICATED, TRANSACTIONAL cache of byte-array values.

Compare-and-set runs in a PESSIMISTIC / REPEATABLE_READ thin-client transaction (Ignite
2.8+): the read locks the key, the comparison happens here, so it does not depend on how
the server compares byte arrays. An existing cache of the same name must be
TRANSACTIONAL too. Written against pyignite's documented API (``Client.connect``,
``get_or_create_cache``, ``tx_start``); CI has no Ignite server, so this backend only runs
when a test is pointed at one. The thin client is not thread-safe: calls are serialized.
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
            from pyignite.datatypes.prop_codes import (
                PROP_CACHE_ATOMICITY_MODE,
                PROP_CACHE_MODE,
                PROP_NAME,
            )
            from pyignite.datatypes.transactions import (
                TransactionConcurrency,
                TransactionIsolation,
            )
        except ImportError as exc:
            raise StoreUnavailable("the ignite checkpoint store needs the 'pyignite' package (pip install pyignite)") from exc
        super().__init__(f"ignite checkpoint store {','.join(f'{h}:{p}' for h, p in nodes)}/{cache}")
        self.errors = (
            OSError, EOFError, ignite_errors.ReconnectError, ignite_errors.CacheError,
            ignite_errors.SocketError, ignite_errors.AuthenticationError, ignite_errors.ParameterError,
        )
        self._bytes = ByteArrayObject
        self._tx = {
            "concurrency": TransactionConcurrency.PESSIMISTIC,
            "isolation": TransactionIsolation.REPEATABLE_READ,
            "timeout": int(timeout * 1000),
        }
        self._lock = threading.Lock()
        auth = {"username": username, "password": password} if username else {}
        self._client = Client(timeout=timeout, handshake_timeout=timeout, **auth)
        with self.guard("connecting"):
            self._client.connect(nodes)
            self._cache = self._client.get_or_create_cache({
                PROP_NAME: cache,
                PROP_CACHE_MODE: CacheMode.REPLICATED,
                PROP_CACHE_ATOMICITY_MODE: CacheAtomicityMode.TRANSACTIONAL,
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
        with self._lock, self.guard("compare-and-set"), self._client.tx_start(**self._tx) as tx:
            current = self._cache.get(key)
            if (None if current is None else bytes(current)) != expected:
                return False  # leaving the block rolls the transaction back
            if new is None:
                self._cache.remove_key(key)
            else:
                self._cache.put(key, new, value_hint=self._bytes)
            tx.commit()
            return True

    def close(self) -> None:
        with self._lock:
            self._client.close()
