"""Run slots: how many activations run at once, shared fairly between namespaces, on the event loop.

At most ``total`` activations run at a time, whatever the namespaces' limits, and no namespace
holds more than ``per_key`` of the slots, nor more than its share with room for one more: with
others holding slots, ``total // (others + 2)``. So long-running activations of a few namespaces
never take every slot (two holding half each left a third namespace's warm invoke waiting 43 s for
one to end): a namespace that holds none finds one free. Slots held are never taken back; a
namespace over its share gets no more until it is under. Activations beyond wait as futures, not
threads: a flood costs memory per activation, not a thread. A freed slot goes to the namespaces
that wait in turn (FIFO within one), so one namespace's backlog never delays another's. Use from
the loop's thread only.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque


class RunSlots:
    """``total`` slots, at most ``per_key`` per key, handed to waiting keys round-robin."""

    def __init__(self, total: int, per_key: int) -> None:
        self.total = total
        self.per_key = per_key
        self._running = 0
        self._busy: dict[str, int] = {}
        self._waiting: OrderedDict[str, deque[asyncio.Future[None]]] = OrderedDict()

    def load(self) -> tuple[int, int]:
        """(slots held, activations waiting for one)."""
        return self._running, sum(len(queue) for queue in self._waiting.values())

    async def take(self, key: str) -> None:
        """Hold a slot for ``key`` (give it back with :meth:`give_back`); waits for its turn if needed."""
        if key not in self._waiting and self._running < self.total and self._busy.get(key, 0) < self._share(key):
            self._hold(key)
            return
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(key, deque()).append(turn)
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():  # granted as it was cancelled: pass it on
                self.give_back(key)
            raise

    def give_back(self, key: str) -> None:
        self._running -= 1
        held = self._busy[key] - 1
        if held:
            self._busy[key] = held
        else:
            del self._busy[key]
        if self._waiting:
            self._grant()

    def _share(self, key: str) -> int:
        """The most slots ``key`` may hold now: room is left for a namespace that holds none."""
        others = len(self._busy) - (key in self._busy)
        return min(self.per_key, max(1, self.total // (others + 2)))

    def _hold(self, key: str) -> None:
        self._running += 1
        self._busy[key] = self._busy.get(key, 0) + 1

    def _grant(self) -> None:
        """Hand free slots to waiting keys in turn."""
        while self._running < self.total:
            key = next((k for k in self._waiting if self._busy.get(k, 0) < self._share(k)), None)
            if key is None:
                return
            queue = self._waiting[key]
            turn = queue.popleft()
            if not queue:
                del self._waiting[key]
            else:
                self._waiting.move_to_end(key)  # the next key takes the next turn
            if turn.cancelled():
                continue
            self._hold(key)
            turn.set_result(None)
