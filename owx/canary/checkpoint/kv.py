"""The KV tier's interface: a handful of atomic operations every backend provides.

Everything above it (index, publish, pruning, flushing) is written once in
:mod:`owx.canary.checkpoint.store` against these operations, so a backend is one small
module. Backends raise :class:`StoreUnavailable` for every failure of the store itself.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager

from owx.canary.checkpoint.errors import StoreUnavailable
from owx.canary.checkpoint.files import Chunk


class KV(ABC):
    """A byte-string key-value store with compare-and-set."""

    #: the staging area this backend uses for large values unless the URL says otherwise
    default_staging: str = "kv"
    #: exceptions of the client library that mean the store failed
    errors: tuple[type[BaseException], ...] = ()

    def __init__(self, description: str) -> None:
        self.description = description

    @contextmanager
    def guard(self, action: str) -> Iterator[None]:
        """Translate the client library's failures into :class:`StoreUnavailable`."""
        try:
            yield
        except self.errors as exc:
            raise StoreUnavailable(f"{self.description}: {action} failed: {exc}") from exc

    @abstractmethod
    def get(self, key: str) -> bytes | None:
        """The value of ``key``, or None."""

    def get_buffer(self, key: str) -> bytes | bytearray | None:
        """The value of ``key`` for a large read (backends that can read it straight into a writable
        buffer skip the copies), or None."""
        return self.get(key)

    @abstractmethod
    def put(self, key: str, value: bytes) -> None:
        """Set ``key`` unconditionally."""

    def put_chunks(self, key: str, chunks: Sequence[Chunk]) -> None:
        """Set ``key`` to the concatenation of ``chunks`` (backends that can send them as they are
        skip the copy)."""
        self.put(key, b"".join(chunks))

    @abstractmethod
    def delete(self, keys: Iterable[str]) -> None:
        """Remove ``keys``; missing ones are ignored."""

    @abstractmethod
    def cas(self, key: str, expected: bytes | None, new: bytes | None) -> bool:
        """Atomically set ``key`` to ``new`` (None: delete) if its value is ``expected``
        (None: absent); True if it was set."""

    def incr(self, key: str) -> int:
        """Atomically add one to the decimal counter at ``key`` and return the new value."""
        while True:
            current = self.get(key)
            value = int(current or b"0") + 1
            if self.cas(key, current, str(value).encode()):
                return value

    @abstractmethod
    def close(self) -> None:
        """Release connections."""
