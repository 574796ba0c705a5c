"""The containers of one node's pool, by id and by the action revision they serve.

An invocation looks for a warm container of its action among that action's containers only, so
its cost does not grow with the containers other actions (other tenants) keep warm on the node.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, ValuesView
from dataclasses import dataclass, field

from owx.platform.embedded.container import Container
from owx.platform.ledger import container_holder
from owx.platform.types import ContainerState


@dataclass(eq=False)
class Slot:
    """One container and its place in the pool (its ``key``: the action revision it serves, set
    through :meth:`SlotTable.serve` once the slot is in a table)."""

    container: Container
    state: ContainerState
    key: str | None
    concurrency: int = 1
    in_flight: int = 0
    last_used: float = field(default_factory=time.monotonic)
    cpu_shares: int | None = None  # what the pool last gave its cgroup (:mod:`.cpu_shares`)

    @property
    def holder(self) -> str:
        return container_holder(self.container.id)

    @property
    def idle(self) -> bool:
        return self.in_flight == 0


class SlotTable:
    """Slots by container id, indexed by key (not thread-safe: the pool's lock guards it)."""

    def __init__(self) -> None:
        self._by_id: dict[str, Slot] = {}
        self._by_key: dict[str, dict[str, Slot]] = {}

    def add(self, slot: Slot) -> None:
        self._by_id[slot.container.id] = slot
        if slot.key is not None:
            self._by_key.setdefault(slot.key, {})[slot.container.id] = slot

    def remove(self, container_id: str) -> Slot | None:
        """Take the slot of ``container_id`` out (None if it is not here)."""
        slot = self._by_id.pop(container_id, None)
        if slot is not None and slot.key is not None:
            keyed = self._by_key[slot.key]
            del keyed[container_id]
            if not keyed:
                del self._by_key[slot.key]
        return slot

    def serve(self, slot: Slot, key: str) -> None:
        """``slot`` serves ``key`` from now on (a stem cell made an action's container)."""
        mine = self._by_id.get(slot.container.id) is slot
        if mine:
            self.remove(slot.container.id)
        slot.key = key
        if mine:
            self.add(slot)

    def of(self, key: str) -> Iterable[Slot]:
        """The slots serving ``key``."""
        keyed = self._by_key.get(key)
        return () if keyed is None else keyed.values()

    def get(self, container_id: str | None) -> Slot | None:
        return None if container_id is None else self._by_id.get(container_id)

    def values(self) -> ValuesView[Slot]:
        return self._by_id.values()

    def clear(self) -> None:
        self._by_id.clear()
        self._by_key.clear()
