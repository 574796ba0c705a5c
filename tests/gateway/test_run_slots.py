"""Run slots: a namespace's share is capped, others are not delayed behind it, a freed slot goes to the
namespaces that wait in turn (FIFO within one), and no hand-over is lost, however waits end."""

from __future__ import annotations

import asyncio

from owx.gateway.pipeline.slots import RunSlots


async def _holder(slots: RunSlots, key: str, log: list[str], release: asyncio.Event) -> None:
    await slots.take(key)
    log.append(key)
    await release.wait()
    slots.give_back(key)


async def _holders(slots: RunSlots, key: str, count: int, log: list[str], release: asyncio.Event) -> list[asyncio.Task]:
    """``count`` holders of ``key``, once the loop had a moment to start them."""
    tasks = [asyncio.create_task(_holder(slots, key, log, release)) for _ in range(count)]
    await asyncio.sleep(0.01)
    return tasks


def test_a_namespace_over_its_share_waits_while_another_runs_at_once() -> None:
    async def scenario() -> None:
        slots = RunSlots(total=4, per_key=1)
        release = asyncio.Event()
        started: list[str] = []
        a = await _holders(slots, "a", 3, started, release)
        assert started == ["a"] and slots.load() == (1, 2)  # a's share (1) is taken, two wait
        b = await _holders(slots, "b", 1, started, release)
        assert started == ["a", "b"]  # b is not behind a's backlog
        release.set()
        await asyncio.gather(*a, *b)
        assert started == ["a", "b", "a", "a"] and slots.load() == (0, 0)

    asyncio.run(scenario())


def test_freed_slots_go_to_waiting_namespaces_in_turn() -> None:
    async def scenario() -> None:
        slots = RunSlots(total=1, per_key=1)
        order: list[str] = []
        await slots.take("x")  # the only slot: everybody below waits

        async def one(key: str) -> None:
            await slots.take(key)
            order.append(key)
            slots.give_back(key)

        waiting = [asyncio.create_task(one(key)) for key in ("a", "a", "a", "b", "c")]
        await asyncio.sleep(0.01)
        slots.give_back("x")
        await asyncio.gather(*waiting)
        assert order == ["a", "b", "c", "a", "a"]  # round-robin by namespace, FIFO within one

    asyncio.run(scenario())


def test_a_wait_cancelled_as_its_slot_arrives_passes_the_slot_on() -> None:
    async def scenario() -> None:
        slots = RunSlots(total=1, per_key=1)
        await slots.take("x")
        first = asyncio.create_task(slots.take("a"))
        second = asyncio.create_task(slots.take("b"))
        await asyncio.sleep(0.01)
        slots.give_back("x")  # grants a's turn ...
        first.cancel()  # ... whose task is cancelled before it resumes
        await asyncio.wait_for(second, 1)  # b got the slot a never used
        assert slots.load() == (1, 0)
        slots.give_back("b")
        assert slots.load() == (0, 0)

    asyncio.run(scenario())


def test_no_namespace_ever_holds_more_than_its_share() -> None:
    async def scenario() -> None:
        slots = RunSlots(total=6, per_key=3)
        running = {"a": 0, "b": 0}
        most = {"a": 0, "b": 0}

        async def job(key: str) -> None:
            await slots.take(key)
            running[key] += 1
            most[key] = max(most[key], running[key])
            await asyncio.sleep(0.002)
            running[key] -= 1
            slots.give_back(key)

        await asyncio.gather(*(job(key) for _ in range(20) for key in ("a", "a", "b")))
        assert most["a"] == 3 and most["b"] <= 3  # a had work for every slot: per_key bounds it
        assert slots.load() == (0, 0)

    asyncio.run(scenario())


def test_a_namespace_that_holds_no_slot_finds_one_free_however_long_the_others_run() -> None:
    """Two namespaces with long activations held half the slots each (per_key) and a third one's warm
    invoke waited 43 s for one of them to end: a namespace's share leaves room for one more."""
    async def scenario() -> None:
        slots = RunSlots(total=6, per_key=3)
        release = asyncio.Event()
        started: list[str] = []
        a = await _holders(slots, "a", 5, started, release)
        b = await _holders(slots, "b", 5, started, release)
        assert started.count("a") == 3 and started.count("b") == 2  # alone: half; beside one more: a third
        c = await _holders(slots, "c", 1, started, release)
        assert started[-1] == "c"  # at once, while a and b still run
        release.set()
        await asyncio.gather(*a, *b, *c)
        assert slots.load() == (0, 0)

    asyncio.run(scenario())
