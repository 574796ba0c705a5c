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


def _waits(poll: BusyPoll, loop: EventLoopThread, wait_s: float, hinted: bool = True) -> float:
    """``TUNE_EVERY`` answers that each come ``wait_s`` after their hint (none without ``hinted``);
    the budget after them."""
    def answers() -> float:
        for _ in range(poll.TUNE_EVERY):
            if hinted:
                poll.answer_due()
            time.sleep(wait_s)
            poll.arrived()
        return poll.budget_s

    async def on_loop() -> float:
        return answers()

    return loop.submit(on_loop()).result(30)


def test_the_budget_follows_how_long_answers_take_on_this_machine() -> None:
    """Answers that take 40 ms after their hint make a 10 ms poll last about 50 ms (1.25 times their
    90th percentile), and the loop then polls that long; quick answers bring it back to 10 ms."""
    thread = EventLoopThread("test-busy-poll-tuned", busy_poll_s=0.01)
    try:
        poll = _poll(thread)
        assert poll.max_budget_s == pytest.approx(0.1)
        assert 0.05 <= _waits(poll, thread, 0.04) <= 0.1
        assert _loop_cpu_after(thread, poll.answer_due, 0.2) > 0.035  # it polls past the least budget
        assert _waits(poll, thread, 0.0) == pytest.approx(0.01)
    finally:
        thread.close()


def test_the_budget_ignores_pauses_and_unannounced_data() -> None:
    """A client that pauses longer than the greatest budget is not an answer due, and data that came
    without a hint says nothing about one: neither lengthens the poll."""
    thread = EventLoopThread("test-busy-poll-pauses", busy_poll_s=0.0005)
    try:
        poll = _poll(thread)
        assert _waits(poll, thread, 0.01) == pytest.approx(0.0005)  # 10 ms: beyond its 5 ms at most
        assert _waits(poll, thread, 0.002, hinted=False) == pytest.approx(0.0005)
    finally:
        thread.close()


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
