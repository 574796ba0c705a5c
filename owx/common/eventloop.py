"""One uvloop event loop on a thread of its own, for everything a process waits on.

The gateway serves HTTP, talks to warm runtimes and reads their output on this one loop, so a
warm invocation never hands work between threads (each hand-off costs a wake-up and a turn of
the interpreter lock). Other threads reach the loop only through :meth:`EventLoopThread.call`
and :meth:`EventLoopThread.submit`.
"""

from __future__ import annotations

import asyncio
import ctypes
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

import uvloop

T = TypeVar("T")
STOP_WAIT_S = 5.0
PR_SET_NAME = 15


class EventLoopThread:
    """A running event loop on a daemon thread; ``close`` stops it."""

    def __init__(self, name: str = "owx-loop") -> None:
        self.loop = uvloop.new_event_loop()
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
