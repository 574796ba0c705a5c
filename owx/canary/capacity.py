"""Memory reserved on each node for admitted functions and their replicas (gang admission).

A job is admitted only when every one of its functions has a node with room for it:
the reservation of a whole job is made at once or not at all, so two jobs can never
each hold half the pool while waiting for the rest. Replicas reserve memory only if it
is free; recovery may overcommit (a failed function must not wait behind new jobs —
the node's pool then queues it).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable


class CapacityLedger:
    """Per-node memory bookkeeping; thread-safe."""

    def __init__(self, capacities_mb: dict[str, int]) -> None:
        self._capacity = dict(capacities_mb)
        self._held: dict[str, tuple[str, int]] = {}  # holder id -> (node, mb)
        self._lock = threading.Lock()

    def free_mb(self, node: str) -> int:
        with self._lock:
            return self._free(node)

    def total_mb(self) -> int:
        with self._lock:
            return sum(self._capacity.values())

    def place_all(
        self, holders: list[str], memory_mb: int, live: Iterable[str], prefer: Iterable[str] = ()
    ) -> dict[str, str] | None:
        """Reserve ``memory_mb`` for every holder on ``live`` nodes (all or none); their nodes,
        or None if they do not fit. Functions are spread over the nodes with the most free
        memory, ``prefer``'d nodes first on ties.
        """
        preferred = list(prefer)
        with self._lock:
            free = {node: self._free(node) for node in live if node in self._capacity}
            chosen: dict[str, str] = {}
            for holder in holders:
                fits = [n for n in free if free[n] >= memory_mb]
                if not fits:
                    return None
                node = max(fits, key=lambda n: (free[n], n in preferred, -sorted(free).index(n)))
                free[node] -= memory_mb
                chosen[holder] = node
            for holder, node in chosen.items():
                self._held[holder] = (node, memory_mb)
            return chosen

    def try_hold(self, holder: str, node: str, memory_mb: int) -> bool:
        """Reserve on ``node`` if it has room (replicas)."""
        with self._lock:
            if self._free(node) < memory_mb:
                return False
            self._held[holder] = (node, memory_mb)
            return True

    def force_hold(self, holder: str, node: str, memory_mb: int) -> None:
        """Reserve on ``node`` even past its capacity (recovery of an admitted function)."""
        with self._lock:
            self._held[holder] = (node, memory_mb)

    def move(self, holder: str, node: str) -> None:
        """The holder now runs on ``node`` (e.g. recovered on a replica there)."""
        with self._lock:
            if holder in self._held:
                self._held[holder] = (node, self._held[holder][1])

    def release(self, holder: str) -> bool:
        with self._lock:
            return self._held.pop(holder, None) is not None

    def node_of(self, holder: str) -> str | None:
        with self._lock:
            held = self._held.get(holder)
            return held[0] if held else None

    def _free(self, node: str) -> int:
        used = sum(mb for n, mb in self._held.values() if n == node)
        return self._capacity.get(node, 0) - used
