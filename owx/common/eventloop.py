"""One uvloop event loop on a thread of its own, for everything a process waits on.

The gateway serves HTTP, talks to warm runtimes and reads their output on this one loop, so a
warm invocation never hands work between threads (each hand-off costs a wake-up and a turn of
the interpreter lock). Other threads reach the loop only through :meth:`EventLoopThread.call`
and :meth:`EventLoopThread.submit`. A loop may poll for a short while instead of sleeping when
an answer is due at once (:class:`BusyPoll`).
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import threading
import time
import weakref
from collections.abc import Callable, Coroutine
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

import uvloop

T = TypeVar("T")
STOP_WAIT_S = 5.0
MAX_BUDGET_FACTOR = 10  # a busy poll's budget grows to at most this many times its least (see BusyPoll)
PR_SET_NAME = 15


class BusyPoll:
    """Keeps an event loop polling its descriptors, instead of sleeping in the kernel, for a short
    while after it sent something whose answer is due within microseconds: a warm runtime's answer
    to ``/run``, a keep-alive client's next request.

    Waking a thread that sleeps costs more than such an answer takes on a VM whose idle vCPUs halt
    at once (tens of microseconds: ``owx bench invoke``'s ``no-busy-poll`` control shows it at one
    connection). Polling costs CPU instead, so it is bounded: never longer than the budget after the
    last hint; only while the loop and the requests it serves (or the runtimes whose answers it
    awaits) fit on the machine's cores, that is at low load (beyond that the loop has work enough,
    and a polling loop would take the core a runtime or a client needs); and never while the loop
    awaits work it gave a thread (:func:`run_on_thread`): a polling loop holds the interpreter
    lock that thread needs. Its users count what they serve and await in ``serving``,
    ``awaited`` and ``on_threads``, and say when what a hint announced came (:meth:`arrived`).

    The budget follows the machine: how long answers take after their hint differs two- to
    threefold between machines, so every ``TUNE_EVERY`` arrivals it becomes ``TUNE_MARGIN`` times
    the 90th percentile of their waits, at least ``budget_s`` and at most ``MAX_BUDGET_FACTOR`` times that
    (waits beyond that are a client's pauses, not answers due, and are not counted). Use it from its
    loop's thread only.
    """

    TUNE_EVERY = 64
    TUNE_MARGIN = 1.25

    def __init__(self, loop: asyncio.AbstractEventLoop, budget_s: float) -> None:
        self.loop = loop
        self.min_budget_s = budget_s
        self.max_budget_s = MAX_BUDGET_FACTOR * budget_s
        self.budget_s = budget_s  # the poll's length now (tuned, see the class docstring)
        self.cores = len(os.sched_getaffinity(0))  # the cores this process may use
        self.serving = 0  # requests being answered
        self.awaited = 0  # exchanges whose answers are awaited
        self.on_threads = 0  # calls the loop awaits from threads
        self._until = 0.0
        self._hinted = 0.0  # when the last hint came (0: what it announced has come)
        self._waits: list[float] = []
        self.polling = False

    def answer_due(self) -> None:
        """An answer is due soon (a kept connection's next request, an awaited exchange's answer)."""
        if not self._affordable():
            return
        self._hinted = now = time.perf_counter()
        self._until = now + self.budget_s
        if not self.polling:
            self.polling = True
            self.loop.call_soon(self._poll)

    def arrived(self) -> None:
        """Something the last hint announced has come: its wait tunes the budget."""
        if not self._hinted:
            return
        wait = time.perf_counter() - self._hinted
        self._hinted = 0.0
        if wait > self.max_budget_s:
            return
        waits = self._waits
        waits.append(wait)
        if len(waits) >= self.TUNE_EVERY:
            waits.sort()
            typical = waits[len(waits) * 9 // 10] * self.TUNE_MARGIN
            self.budget_s = min(self.max_budget_s, max(self.min_budget_s, typical))
            waits.clear()

    def _affordable(self) -> bool:
        return self.on_threads == 0 and self.serving < self.cores and self.awaited < self.cores

    def _poll(self) -> None:
        # one turn of the loop: it looks at its descriptors without sleeping, runs what is ready, and
        # comes back here while polling is worth it
        if self._affordable() and time.perf_counter() < self._until:
            self.loop.call_soon(self._poll)
        else:
            self.polling = False

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop) -> "BusyPoll | None":
        """The busy poll of ``loop`` (an :class:`EventLoopThread`'s), if it has one."""
        return _busy_polls.get(loop)


_busy_polls: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, BusyPoll] = weakref.WeakKeyDictionary()


async def run_on_thread(executor: Executor | None, function: Callable[..., T], *args: Any) -> T:
    """``function(*args)`` on one of ``executor``'s threads (None: the loop's default executor),
    awaited from the running loop, which does not busy-poll meanwhile (see :class:`BusyPoll`)."""
    loop = asyncio.get_running_loop()
    poll = _busy_polls.get(loop)
    if poll is not None:
        poll.on_threads += 1
    try:
        return await loop.run_in_executor(executor, function, *args)
    finally:
        if poll is not None:
            poll.on_threads -= 1


class EventLoopThread:
    """A running event loop on a daemon thread; ``close`` stops it. With ``busy_poll_s`` > 0 the loop
    polls that long when an answer is due (:class:`BusyPoll`)."""

    def __init__(self, name: str = "owx-loop", busy_poll_s: float = 0.0) -> None:
        self.loop = uvloop.new_event_loop()
        if busy_poll_s > 0:
            _busy_polls[self.loop] = BusyPoll(self.loop, busy_poll_s)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._started = threading.Event()
        self._thread.start()
        self._started.wait()

    def _run(self) -> None:
        _name_native_thread(self._thread.name)
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._started.set)
        self.loop.run_forever()
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.close()

    @property
    def on_loop(self) -> bool:
        """Whether the caller runs on the loop's thread."""
        return threading.get_ident() == self._thread.ident

    def call(self, function: Callable[..., Any], *args: Any) -> None:
        """Run ``function(*args)`` on the loop soon (directly if called from the loop)."""
        if self.on_loop:
            function(*args)
        else:
            self.loop.call_soon_threadsafe(function, *args)

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> Future[T]:
        """Run ``coroutine`` on the loop; its result arrives on the returned future."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def close(self) -> None:
        """Stop the loop (what is scheduled is dropped) and wait for its thread. Idempotent."""
        if self.loop.is_closed() or not self._thread.is_alive():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        if not self.on_loop:
            self._thread.join(STOP_WAIT_S)


def call_on(loop: asyncio.AbstractEventLoop, function: Callable[[], Any]) -> None:
    """Run ``function()`` on ``loop``: at once when called from it, else soon, from any thread."""
    if asyncio._get_running_loop() is loop:
        function()
    else:
        loop.call_soon_threadsafe(function)


def _name_native_thread(name: str) -> None:
    """Give the calling thread ``name`` in the kernel too (``top -H``, ``/proc/PID/task/TID/comm``:
    what ``owx bench invoke`` reads the loop's CPU from); at most 15 bytes are kept."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_NAME, name.encode()[:15], 0, 0, 0)
    except (OSError, AttributeError):  # no libc prctl: the name is cosmetic
        pass
