"""Warm runs from the platform's event loop: an idle warm container runs an activation with no thread;
when every warm container of the action is busy and no new one fits, activations wait on the loop for
the first that frees (FIFO), and are sent to a thread (None) when a new container could start or when
the busy one dies."""

from __future__ import annotations

import asyncio
import threading

from owx.platform.embedded.platform import EmbeddedPlatform
from owx.platform.types import SUCCESS
from platform_helpers import ECHO, SLEEP, request, spec


def _on_loop(platform: EmbeddedPlatform, coroutine):  # type: ignore[no-untyped-def]
    return platform.loop.submit(coroutine).result(60)


def test_busy_warm_containers_are_waited_for_on_the_loop_when_no_new_one_fits(make_platform) -> None:
    platform = make_platform(user_memory_mb=256)  # room for one 256 MB container
    action = spec(ECHO, memory_mb=256)
    assert platform.run(action, request(n=-1)).status == SUCCESS  # the cold start, on this thread
    threads_before = threading.active_count()

    async def many() -> list:
        return await asyncio.gather(*(platform.run_warm(action, request(n=n)) for n in range(20)))

    outcomes = _on_loop(platform, many())
    assert all(o is not None and o.status == SUCCESS for o in outcomes)  # none was sent to a thread
    assert [o.result["echo"]["n"] for o in outcomes] == list(range(20))  # in the order they came
    assert [o.logs[0].endswith(f"echo {{'n': {n}}}") for n, o in enumerate(outcomes)] == [True] * 20
    assert len({o.container_id for o in outcomes}) == 1
    assert threading.active_count() == threads_before


def test_a_new_container_that_fits_is_left_to_a_thread(make_platform) -> None:
    platform = make_platform(user_memory_mb=1024)  # room for four
    action = spec(SLEEP, memory_mb=256)
    assert platform.run(action, request(s=0)).status == SUCCESS

    async def two() -> list:
        return await asyncio.gather(platform.run_warm(action, request(s=0.5)), platform.run_warm(action, request(s=0)))

    first, second = _on_loop(platform, two())
    assert first is not None and first.status == SUCCESS  # the idle warm container took the first
    assert second is None  # the second should start a container of its own: a thread's job


def test_waiting_activations_go_to_a_thread_when_the_busy_container_dies(make_platform) -> None:
    platform = make_platform(user_memory_mb=256)
    action = spec(SLEEP, memory_mb=256, timeout_ms=20_000)
    assert platform.run(action, request(s=0)).status == SUCCESS

    async def scenario() -> tuple:
        running = asyncio.ensure_future(platform.run_warm(action, request(s=10)))
        await asyncio.sleep(0.3)
        waiting = asyncio.ensure_future(platform.run_warm(action, request(s=0)))
        await asyncio.sleep(0.3)
        assert not waiting.done()  # it waits for the busy container
        [container] = [c for c in platform.containers() if c.action_key == action.key]
        await asyncio.get_running_loop().run_in_executor(None, platform.node(container.node).pool.container(
            container.id).kill, "exited")
        return await asyncio.wait_for(running, 10), await asyncio.wait_for(waiting, 10)

    killed, waited = _on_loop(platform, scenario())
    assert killed is not None and killed.status != SUCCESS
    assert waited is None  # told to run on a thread instead of waiting for ever
