"""One memory ledger per platform: every byte a node's budget gives out, and to whom.

Holders are named by what holds the memory:

* ``container:<id>`` — a container, at its current memory limit (pools; Escra's resizes change it);
* ``starting:<n>`` — a container being made or destroyed (pools);
* a reservation for an activation that has not started yet (Canary's gang admission holds one per
  function); the activation's first new container takes its bytes over (:meth:`MemoryLedger.take`);
* ``escra-reserve:<node>`` — memory an Escra agent keeps for OOM rescues, in no container.

A node's *reclaimable* memory is what its pool could free by evicting idle containers; admission
that plans ahead (:meth:`place_all`) counts it as free, and a node pushed over its budget by a
forced hold is told (``on_change``) so that its pool evicts idle containers until it fits.
Callbacks run after the ledger's lock is released.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass


def container_holder(container_id: str) -> str:
    """The holder name of a container's memory."""
    return f"container:{container_id}"


@dataclass
class _Node:
    budget: int
    reclaimable: Callable[[], int]
    on_change: Callable[[], None]


class MemoryLedger:
    """Per-node budgets and the holds against them; thread-safe."""

    def __init__(self) -> None:
        self._nodes: dict[str, _Node] = {}
        self._held: dict[str, tuple[str, int]] = {}  # holder -> (node, bytes)
        self._tenants: dict[str, str] = {}  # holder -> the tenant a reservation is for (see `reserved_by_tenant`)
        self._lock = threading.Lock()

    # -- nodes ---------------------------------------------------------------------------------
    def add_node(self, node: str, budget_bytes: int, reclaimable: Callable[[], int] = lambda: 0,
                 on_change: Callable[[], None] = lambda: None) -> None:
        """Give ``node`` a budget; ``reclaimable()`` tells what evicting idle containers would free,
        ``on_change()`` is called whenever the node's holds change (outside the ledger's lock)."""
        with self._lock:
            self._nodes[node] = _Node(budget_bytes, reclaimable, on_change)

    def budget(self, node: str) -> int:
        with self._lock:
            return self._nodes[node].budget

    def used(self, node: str) -> int:
        with self._lock:
            return self._used(node)

    def free(self, node: str) -> int:
        """Budget not held by anyone (negative while a forced hold overcommits the node)."""
        with self._lock:
            return self._nodes[node].budget - self._used(node)

    # -- holds ---------------------------------------------------------------------------------
    def hold(self, holder: str, node: str, nbytes: int, force: bool = False, tenant: str | None = None) -> bool:
        """Hold ``nbytes`` on ``node`` for ``holder`` (replacing what it held); without ``force``
        only if the node has that much free; ``tenant``: a reservation's, counted as that tenant's
        (`reserved_by_tenant`) until it ends or is taken. True if held."""
        with self._lock:
            previous = self._held.get(holder)
            freed = previous[1] if previous and previous[0] == node else 0
            if not force and self._nodes[node].budget - self._used(node) + freed < nbytes:
                return False
            self._held[holder] = (node, nbytes)
            if tenant is not None:
                self._tenants[holder] = tenant
        self._changed(node, previous[0] if previous else None)
        return True

    def place_all(self, holders: list[str], nbytes: int, nodes: Iterable[str],
                  prefer: Iterable[str] = (), tenant: str | None = None) -> dict[str, str] | None:
        """Hold ``nbytes`` for every holder on one of ``nodes`` (all or none), spreading them over
        the nodes with the most room (free + reclaimable), ``prefer``'d nodes first on ties
        (``tenant``: as `hold`'s). Their nodes, or None if they do not all fit."""
        preferred = set(prefer)
        candidates = list(nodes)
        reclaimable = {n: self._nodes[n].reclaimable() for n in candidates if n in self._nodes}  # pools' locks
        with self._lock:
            room = {n: self._nodes[n].budget - self._used(n) + reclaimable[n] for n in reclaimable}
            chosen: dict[str, str] = {}
            for holder in holders:
                fits = [n for n in room if room[n] >= nbytes]
                if not fits:
                    return None
                node = max(fits, key=lambda n: (room[n], n in preferred, -candidates.index(n)))
                room[node] -= nbytes
                chosen[holder] = node
            for holder, node in chosen.items():
                self._held[holder] = (node, nbytes)
                if tenant is not None:
                    self._tenants[holder] = tenant
        for node in set(chosen.values()):
            self._changed(node)
        return chosen

    def resize(self, holder: str, nbytes: int) -> bool:
        """A holder's amount changed (a container resized); False if it holds nothing."""
        with self._lock:
            held = self._held.get(holder)
            if held is None:
                return False
            self._held[holder] = (held[0], nbytes)
        self._changed(held[0])
        return True

    def move(self, holder: str, node: str) -> None:
        """The holder's memory is now on ``node`` (a function recovered elsewhere)."""
        with self._lock:
            held = self._held.get(holder)
            if held is None or held[0] == node:
                return
            self._held[holder] = (node, held[1])
        self._changed(node, held[0])

    def take(self, holder: str, node: str) -> int:
        """End ``holder``'s hold if it is on ``node`` and return its bytes (0 otherwise), for a new
        holder to take over at once: the caller holds them again under its own name."""
        with self._lock:
            held = self._held.get(holder)
            if held is None or held[0] != node:
                return 0
            del self._held[holder]
            self._tenants.pop(holder, None)
            return held[1]

    def release(self, holder: str) -> int:
        """End ``holder``'s hold; the bytes it held (0 if none)."""
        with self._lock:
            held = self._held.pop(holder, None)
            self._tenants.pop(holder, None)
        if held is None:
            return 0
        self._changed(held[0])
        return held[1]

    def reserved_by_tenant(self, node: str) -> dict[str, int]:
        """The bytes each tenant's reservations hold on ``node`` (memory held in advance for containers
        not made yet: a Canary job's), which share the node as its containers do."""
        reserved: dict[str, int] = {}
        with self._lock:
            for holder, tenant in self._tenants.items():
                held_on, nbytes = self._held[holder]
                if held_on == node:
                    reserved[tenant] = reserved.get(tenant, 0) + nbytes
        return reserved

    def node_of(self, holder: str) -> str | None:
        with self._lock:
            held = self._held.get(holder)
            return held[0] if held else None

    def held(self, holder: str) -> int:
        with self._lock:
            held = self._held.get(holder)
            return held[1] if held else 0

    # -- internals -------------------------------------------------------------------------------
    def _used(self, node: str) -> int:
        return sum(nbytes for n, nbytes in self._held.values() if n == node)

    def _changed(self, *nodes: str | None) -> None:
        for node in dict.fromkeys(n for n in nodes if n is not None):
            entry = self._nodes.get(node)
            if entry is not None:
                entry.on_change()


class NodeLedger:
    """One node's view of the ledger, as Escra's allocator uses it (:class:`owx.escra_agent.ledger.PoolLedger`)."""

    def __init__(self, ledger: MemoryLedger, node: str) -> None:
        self.ledger = ledger
        self.node = node

    def on_resize(self, container_id: str, memory_bytes: int) -> None:
        """Escra wrote a container's limit itself; 0: it no longer tracks the container."""
        if memory_bytes > 0:
            self.ledger.resize(container_holder(container_id), memory_bytes)

    def on_hold(self, holder: str, memory_bytes: int) -> None:
        if memory_bytes > 0:
            self.ledger.hold(holder, self.node, memory_bytes, force=True)
        else:
            self.ledger.release(holder)

    def free_bytes(self) -> int:
        return max(0, self.ledger.free(self.node))
