"""A node's container memory is shared among tenants: one namespace flooding its action, whose
containers fill the node, does not keep another namespace's first container waiting for the whole
flood (the gateway runs warm activations from the loop, where a container that frees goes straight
to its action's next activation)."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

from owx.platform.embedded.memory_shares import MemoryWait, first_waiting
from owx.platform.types import SUCCESS, ActionSpec, tenant_of
from platform_helpers import SLEEP, request
from tests.fixtures.polling import wait_for

from owx.platform.embedded.container_limits import MB

FLOOD_S = 6.0
WORKERS = 8  # the flood's activations in flight: four times what the node holds


def _flood_then_another_tenant(platform) -> tuple[list, float, object]:  # type: ignore[no-untyped-def]
    """Tenant guest floods its action on the node (room for two of its containers) from the loop, as
    the gateway's warm invokes come; 0.5 s in, tenant other asks for its action once (cold: a thread,
    as the gateway sends it). The flood's outcomes, the seconds other's activation took, its outcome."""
    flooded = ActionSpec(key="guest/flood@1", kind="python:3", code=SLEEP, memory_mb=256)
    other = ActionSpec(key="other/first@1", kind="python:3", code=SLEEP, memory_mb=256)

    async def one(action: ActionSpec, seconds: float):  # type: ignore[no-untyped-def]
        warm = await platform.run_warm(action, request(s=seconds))
        return warm if warm is not None else await asyncio.to_thread(platform.run, action, request(s=seconds))

    async def scenario():  # type: ignore[no-untyped-def]
        end = time.monotonic() + FLOOD_S
        outcomes: list = []

        async def worker() -> None:
            while time.monotonic() < end:
                outcomes.append(await one(flooded, 0.2))

        workers = [asyncio.ensure_future(worker()) for _ in range(WORKERS)]
        await asyncio.sleep(0.5)
        asked = time.monotonic()
        outcome = await one(other, 0)
        took = time.monotonic() - asked
        await asyncio.gather(*workers)
        return outcomes, took, outcome

    return platform.loop.submit(scenario()).result(60)


def test_another_tenants_first_container_waits_for_a_run_of_the_flood_not_for_all_of_it(make_platform) -> None:
    platform = make_platform(user_memory_mb=512)
    outcomes, took, outcome = _flood_then_another_tenant(platform)
    assert outcome.status == SUCCESS and outcome.init_ms is not None  # its own container, started cold
    assert took < 3.0  # a 0.2 s run of the flood freed one, then a cold start; not the 5.5 s left of the flood
    assert len(outcomes) > 20 and all(o.status == SUCCESS for o in outcomes)  # the flood went on meanwhile


def test_a_flood_does_not_evict_a_smaller_tenants_idle_container_for_a_while(make_platform) -> None:
    """The small tenant's next call stays warm however the big one floods (``fair_keep_idle_s``)."""
    platform = make_platform(user_memory_mb=512, fair_keep_idle_s=30)
    small = ActionSpec(key="other/small@1", kind="python:3", code=SLEEP, memory_mb=256)
    first = platform.run(small, request(s=0))
    flooded = ActionSpec(key="guest/flood@1", kind="python:3", code=SLEEP, memory_mb=256)

    async def flood() -> list:
        async def one():  # type: ignore[no-untyped-def]
            warm = await platform.run_warm(flooded, request(s=0.1))
            return warm if warm is not None else await asyncio.to_thread(platform.run, flooded, request(s=0.1))
        return await asyncio.gather(*(one() for _ in range(WORKERS * 3)))

    outcomes = platform.loop.submit(flood()).result(60)
    assert all(o.status == SUCCESS for o in outcomes)
    again = platform.run(small, request(s=0))
    assert again.init_ms is None and again.container_id == first.container_id  # warm, its own container


def test_a_busy_actions_next_activations_wait_on_the_loop_when_the_only_idle_memory_is_kept_for_another(
        make_platform) -> None:
    """The node full, the flooded action's one container busy and the rest of the memory another
    tenant's idle container that it may not evict (``fair_keep_idle_s``): its next activations wait
    on the loop for its own container to free (none is sent to a thread to wait there for memory)."""
    platform = make_platform(user_memory_mb=512, fair_keep_idle_s=30)
    small = ActionSpec(key="other/small@1", kind="python:3", code=SLEEP, memory_mb=256)
    kept = platform.run(small, request(s=0))
    flooded = ActionSpec(key="guest/flood@1", kind="python:3", code=SLEEP, memory_mb=256)
    assert platform.run(flooded, request(s=0)).status == SUCCESS  # warm: the node is full

    async def flood() -> list:
        return await asyncio.gather(*(platform.run_warm(flooded, request(s=0.1)) for _ in range(WORKERS)))

    outcomes = platform.loop.submit(flood()).result(60)
    assert [o is not None and o.status == SUCCESS for o in outcomes] == [True] * WORKERS  # each on the loop
    assert len({o.container_id for o in outcomes}) == 1
    again = platform.run(small, request(s=0))
    assert again.init_ms is None and again.container_id == kept.container_id  # still kept for its tenant


def test_another_tenants_call_of_a_published_action_runs_for_the_caller(make_platform) -> None:
    """Its container is the caller's, not the owner's: its memory, the loop's reading of its output, its
    gid and its directory (what it writes there comes of the caller's input)."""
    platform = make_platform()
    published = ActionSpec(key="owner/pkg/printer@1#caller", kind="python:3", code=SLEEP, memory_mb=256)
    outcome = platform.run(published, request(s=0))
    pool = platform.node("node0").pool
    container = pool.container(outcome.container_id)
    assert container is not None and container.tenant == "caller" and container.namespace == "caller"
    assert pool.held_by_tenant() == {"caller": 256 * 1024 * 1024}


def test_the_tenant_holding_least_is_served_first_and_a_published_action_counts_for_its_caller() -> None:
    old, poor = MemoryWait("rich", 256), MemoryWait("poor", 256)
    assert first_waiting([old, poor], {"rich": 1024}) is poor
    assert first_waiting([old, poor], {}) is old  # equals: the oldest
    assert tenant_of("owner/pkg/action@3-ab#caller") == "caller"
    assert tenant_of("owner/pkg/action@3-ab") == "owner"


def test_a_node_over_its_budget_is_paid_by_the_largest_holders_idle_containers_not_a_smaller_tenants(
        make_platform) -> None:
    """A forced hold (Escra growing a tenant's containers) puts the node over its budget while the big
    tenant's containers are busy: the small tenant's idle container stays warm (a probe's memory hog
    had it evicted and the next call waited 1.8 s); the big tenant's own idle ones go as they did."""
    platform = make_platform(user_memory_mb=768)
    small = ActionSpec(key="other/small@1", kind="python:3", code=SLEEP, memory_mb=256)
    big = ActionSpec(key="guest/big@1", kind="python:3", code=SLEEP, memory_mb=256)
    first = platform.run(small, request(s=0))
    pool = platform.node("node0").pool

    async def busy() -> list:
        return await asyncio.gather(*(asyncio.to_thread(platform.run, big, request(s=3)) for _ in range(2)))

    running = platform.loop.submit(busy())
    wait_for(lambda: pool.held_by_tenant().get("guest") == 512 * MB, what="the big tenant's two containers")
    platform.ledger.hold("escra-reserve:node0", "node0", 128 * MB, force=True)
    time.sleep(2.0)  # the reaper looks at least once a second
    assert pool.container(first.container_id) is not None
    assert all(o.status == SUCCESS for o in running.result(30))
    wait_for(lambda: platform.ledger.free("node0") >= 0, what="one of the big tenant's idle containers evicted")
    again = platform.run(small, request(s=0))
    assert again.init_ms is None and again.container_id == first.container_id  # warm, its own container


def test_memory_reserved_for_a_tenant_counts_as_its_own_and_a_smaller_tenants_idle_container_is_kept_a_while(
        make_platform) -> None:
    """A Canary job's reservations (memory held for its containers before they start) are its tenant's:
    placed over another tenant's idle container, they leave that container warm for
    ``fair_keep_idle_s`` (a probe's job of four 512 MB functions had it evicted at once and the other
    tenant's next call wait 28 s for the whole job); then the node fits its budget again."""
    platform = make_platform(user_memory_mb=768, fair_keep_idle_s=4)
    small = ActionSpec(key="other/small@1", kind="python:3", code=SLEEP, memory_mb=256)
    first = platform.run(small, request(s=0))
    pool = platform.node("node0").pool
    reservations = [f"function:{n}" for n in range(3)]
    placed = platform.ledger.place_all(reservations, 256 * MB, ["node0"], tenant="guest")
    caller = ThreadPoolExecutor(1)  # evicted, its call would wait for the reservations' end
    try:
        assert placed is not None and platform.ledger.free("node0") == -256 * MB  # the idle container counted as room
        assert pool.held_by_tenant() == {"guest": 768 * MB, "other": 256 * MB}
        time.sleep(2.0)  # the reaper looks at least once a second
        again = caller.submit(platform.run, small, request(s=0)).result(timeout=10)
        assert again.container_id == first.container_id  # warm, its own container
        wait_for(lambda: platform.ledger.free("node0") == 0, timeout=15, what="the idle container evicted once kept long")
        assert pool.container(first.container_id) is None
    finally:
        for holder in reservations:
            platform.ledger.release(holder)
        caller.shutdown()
