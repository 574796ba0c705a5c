"""The event loop's busy poll: it keeps the loop awake only as long as its budget allows and only
while the awaited runtimes and the loop fit on the machine's cores; an idle gateway burns no CPU."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from owx.common.async_http import AnswerReader, AsyncKeepAlivePool
from owx.common.eventloop import BusyPoll, EventLoopThread, run_on_thread
from owx.common.keepalive import AnswerTimeout

BUDGET_S = 0.2


@pytest.fixture
def loop() -> Iterator[EventLoopThread]:
    thread = EventLoopThread("test-busy-poll", busy_poll_s=BUDGET_S)
    yield thread
    thread.close()


def _poll(loop: EventLoopThread) -> BusyPoll:
    poll = BusyPoll.of(loop.loop)
    assert poll is not None
    return poll


def _loop_cpu_after(loop: EventLoopThread, hint, wait_s: float) -> float:  # type: ignore[no-untyped-def]
    """CPU seconds the loop's thread used in the ``wait_s`` after ``hint()`` ran on it."""
    async def cpu() -> float:
        return time.thread_time()

    before = loop.submit(cpu()).result(5)
    loop.call(hint)
    time.sleep(wait_s)
    return loop.submit(cpu()).result(5) - before


def test_an_answer_due_keeps_the_loop_awake_for_the_budget_then_it_sleeps(loop: EventLoopThread) -> None:
    poll = _poll(loop)
    polled = _loop_cpu_after(loop, poll.answer_due, BUDGET_S)
    assert polled > BUDGET_S / 2  # it polled instead of sleeping
    assert not poll.polling
    idle = _loop_cpu_after(loop, lambda: None, 0.3)
    assert idle < 0.02  # past the budget it sleeps: an idle loop costs nothing


@pytest.mark.parametrize("load", ["serving", "awaited"])
def test_no_poll_at_load_the_cores_beside_the_loop_are_needed_for(loop: EventLoopThread, load: str) -> None:
    """As many requests in hand, or runtimes' answers awaited, as the machine has cores: the loop
    has work enough, and the cores are the runtimes' and the clients'."""
    poll = _poll(loop)
    setattr(poll, load, poll.cores)
    assert _loop_cpu_after(loop, poll.answer_due, BUDGET_S) < 0.03
    setattr(poll, load, 0)


def test_no_poll_while_the_loop_awaits_a_thread(loop: EventLoopThread) -> None:
    """A polling loop would hold the interpreter lock a thread it waits for needs."""
    poll = _poll(loop)

    async def loop_cpu_while_a_thread_works() -> float:
        work = asyncio.ensure_future(run_on_thread(None, time.sleep, BUDGET_S))
        await asyncio.sleep(0)  # the thread has its work
        before = time.thread_time()
        poll.answer_due()
        await work
        return time.thread_time() - before

    assert loop.submit(loop_cpu_while_a_thread_works()).result(5) < 0.03
    assert poll.on_threads == 0


def test_a_loop_without_a_budget_has_no_busy_poll() -> None:
    thread = EventLoopThread("test-no-busy-poll")
    try:
        assert BusyPoll.of(thread.loop) is None
    finally:
        thread.close()


def test_the_pool_counts_awaited_answers_until_they_come_or_time_out(loop: EventLoopThread) -> None:
    """A runtime's exchange counts while its answer is awaited, and only then: answered or timed
    out, it no longer keeps the loop polling."""
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while request := await reader.readuntil(b"\r\n\r\n"):
            if b"/slow" not in request:
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")

    async def scenario() -> list[int]:
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        host, port = server.sockets[0].getsockname()[:2]

        async def connect() -> AnswerReader:
            return (await asyncio.get_running_loop().create_connection(AnswerReader, host, port))[1]

        pool, poll = AsyncKeepAlivePool(connect), _poll(loop)
        seen = [(await pool.request(b"GET /fast HTTP/1.1\r\nHost: x\r\n\r\n", 5)).status, poll.awaited]
        slow = asyncio.ensure_future(pool.request(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n", 0.3))
        await asyncio.sleep(0.1)
        seen.append(poll.awaited)
        with pytest.raises(AnswerTimeout):
            await slow
        seen.append(poll.awaited)
        server.close()
        return seen

    assert loop.submit(scenario()).result(10) == [200, 0, 1, 0]
