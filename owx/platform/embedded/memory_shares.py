"""Fair shares of a node's container memory among tenants (max-min), for the pool's admission.

A pool that serves its memory queue first come first served lets one namespace keep every other
namespace's first container waiting: flood an action whose containers fill the node, and each
container that frees goes straight to the flood's next activation, so the queue never moves for
anyone else. Three rules stop that:

- the request served first is the one of the tenant holding the least memory on the node (the
  oldest among equals), not the oldest of all;
- a container that frees is not handed to its own action's next activation when a request of
  another tenant waits for memory and that tenant, once served, would still hold no more than the
  container's tenant without it: the container stays idle, so the waiting request evicts it;
- a request does not evict another tenant's idle container when that tenant, without it, would hold
  less than the request's tenant once served, unless it has been idle for ``fair_keep_idle_s``:
  the small tenant's next call finds its container warm instead of starting it again;
- while forced holds keep the node over its budget (Escra growing a tenant's containers, a
  reserved start), only the idle containers of the tenant holding the most, or idle for
  ``fair_keep_idle_s``, are evicted: another tenant's growth is not paid with a smaller tenant's
  warm container (a probe's memory hog, its containers grown, evicted the other tenant's idle one
  and held its next call cold for 1.8 s); the node stays over its budget meanwhile.

Memory held in advance for a tenant's containers (a Canary job's reservations) counts as that
tenant's (a probe's job of four 512 MB functions, counted as nobody's, had another tenant's idle
container evicted and its next call wait 28 s for the job's end).

A tenant is whom a container runs for (:func:`owx.platform.types.tenant_of`): the namespace that
invokes, even another one's published action.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from owx.platform.embedded.slots import Slot
from owx.platform.ledger import MemoryLedger
from owx.platform.types import tenant_of


@dataclass(eq=False)
class MemoryWait:
    """A request waiting for memory for a new container: whose, and how much it needs."""

    tenant: str
    need_bytes: int


def held_by_tenant(slots: Iterable[Slot], ledger: MemoryLedger, node: str) -> dict[str, int]:
    """The bytes each tenant's containers and reservations hold on ``node`` (stem cells belong to nobody)."""
    held = ledger.reserved_by_tenant(node)
    for slot in slots:
        if slot.key is not None:
            tenant = tenant_of(slot.key)
            held[tenant] = held.get(tenant, 0) + ledger.held(slot.holder)
    return held


def first_waiting(queue: Sequence[MemoryWait], held: dict[str, int]) -> MemoryWait:
    """The request to serve first: its tenant holds the least; the oldest among equals."""
    return min(queue, key=lambda wait: held.get(wait.tenant, 0))  # min keeps the first of equals


def yields(slot: Slot, queue: Sequence[MemoryWait], held: dict[str, int], slot_bytes: int) -> bool:
    """Whether ``slot`` (holding ``slot_bytes``), free, should go to the first waiting request rather
    than to another activation of its own action: the waiting tenant, served, would hold no more than
    the slot's tenant would without it (so shares converge and never swap back and forth)."""
    if not queue or slot.key is None:
        return False
    waiting = first_waiting(queue, held)
    return _richer(tenant_of(slot.key), slot_bytes, waiting.tenant, waiting.need_bytes, held)


def may_evict(victim: Slot, victim_bytes: int, tenant: str, need_bytes: int, held: dict[str, int],
              idle_s: float, keep_idle_s: float) -> bool:
    """Whether a request of ``tenant`` needing ``need_bytes`` may evict the idle ``victim`` (holding
    ``victim_bytes``, idle for ``idle_s``): a stem cell, its own tenant's, one idle for ``keep_idle_s``,
    or one whose tenant would still hold no less than ``tenant`` once served."""
    if victim.key is None or idle_s >= keep_idle_s:
        return True
    owner = tenant_of(victim.key)
    return owner == tenant or _richer(owner, victim_bytes, tenant, need_bytes, held)


def overcommit_victims(idle: Iterable[Slot], over_bytes: int, held: dict[str, int],
                       holds: Callable[[Slot], int], kept_since: float) -> list[Slot]:
    """The ``idle`` containers to evict while the node is ``over_bytes`` over its budget: stem cells
    first, then, least recently used first, those of the tenant holding the most (``held``; asked
    again after each eviction) and those idle since before ``kept_since`` (`may_evict`'s keep),
    until the node fits or no such container is left. ``holds(slot)``: the bytes evicting ``slot``
    frees."""
    left, held, victims = sorted(idle, key=lambda s: (s.key is not None, s.last_used)), dict(held), []
    while over_bytes > 0:
        most = max(held.values(), default=0)
        victim = next((s for s in left if s.key is None or s.last_used < kept_since
                       or held.get(tenant_of(s.key), 0) >= most), None)
        if victim is None:
            break
        left.remove(victim)
        victims.append(victim)
        freed = holds(victim)
        over_bytes -= freed
        if victim.key is not None:
            held[tenant_of(victim.key)] -= freed
    return victims


def _richer(owner: str, owner_gives: int, taker: str, taker_gets: int, held: dict[str, int]) -> bool:
    """Whether ``owner``, giving ``owner_gives`` bytes, still holds at least what ``taker`` would
    hold with ``taker_gets`` more (different tenants)."""
    return owner != taker and held.get(taker, 0) + taker_gets <= held.get(owner, 0) - owner_gives
