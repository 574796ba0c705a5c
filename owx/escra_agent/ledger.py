"""The agreement between Escra and a container pool that owns a memory budget.

OpenWhisk's invoker admits containers against ``userMemory`` and never learns
what Escra does to their limits (a limitation the Escra paper names).  Here the
pool hands the allocator an object with these three methods; the allocator
uses the pool's budget as the application's global memory limit and reports
every change, so the pool neither over-admits nor wastes reclaimed memory.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class PoolLedger(Protocol):
    """What a pool implements so that its accounting follows Escra's resizes."""

    def on_resize(self, container_id: str, memory_bytes: int) -> None:
        """Escra set ``container_id``'s memory limit: account it at ``memory_bytes``.

        ``0`` means Escra no longer tracks the container (it is gone); a pool
        that already released it ignores the call.
        """

    def on_hold(self, holder: str, memory_bytes: int) -> None:
        """Escra holds ``memory_bytes`` in no container (an agent's OOM rescue reserve).

        ``holder`` names the reservation (``"escra-reserve:<node>"``); each call
        replaces the previous amount for that holder; ``0`` releases it.
        """

    def free_bytes(self) -> int:
        """Budget not accounted to any container or hold, in bytes."""
