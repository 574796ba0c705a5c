"""Container output and exits, read on the platform's event loop as they happen.

Everything is file descriptors registered with the loop: output pipes or attach sockets
(readable -> bytes for the log reader), pidfds (readable -> the process exited) and cgroup OOM
eventfds. No polling and no thread of its own: in the gateway this is the loop that serves HTTP
and talks to warm runtimes, so an activation's output is read by the thread that answers it.
Callbacks run on the loop and must not block.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable

from owx.common.eventloop import EventLoopThread

log = logging.getLogger(__name__)

# Takes a chunk (b"" means end of stream); answers whose turns the stream waits in before its next
# chunk is read (its tenant's: its writer prints much, or what it prints is dropped, see
# LogCollector.held), or None to read on
ReadCallback = Callable[[bytes], "str | None"]
EventCallback = Callable[[], None]
CHUNK = 65536
UNWATCH_WAIT_S = 5.0
# Held streams are read one chunk per turn, the next turn at least HELD_TURN_S and HELD_SPACING
# times the last held chunk's reading after it: together they take at most a tenth of the loop (and
# 500 chunks, 32 MB, a second), however many containers print and however short their lines, and
# their writers wait for their own pipes meanwhile. Turns go round the tenants, and round each
# tenant's streams: a tenant printing in many containers at once gets no more turns than one
# printing in one.
HELD_TURN_S = 0.002
HELD_SPACING = 9.0


class FdWatcher:
    """Dispatches readiness of registered descriptors to callbacks on ``loop``. Thread-safe."""

    def __init__(self, loop: EventLoopThread) -> None:
        self._loop = loop
        self._fds: set[int] = set()  # touched on the loop only
        self._held: dict[str, dict[int, ReadCallback]] = {}  # streams waiting for their turn, by tenant, in turn
        self._tenant_of: dict[int, str] = {}  # each held stream's tenant
        self._turn: asyncio.TimerHandle | None = None

    def watch_stream(self, fd: int, on_data: ReadCallback) -> None:
        """Call ``on_data(chunk)`` for everything readable on ``fd`` (non-blocking); ``b""`` once at EOF
        (then it is unwatched). When it answers a tenant, ``fd`` waits for its turn among that
        tenant's held streams (``HELD_TURN_S``) before its next chunk is read: its writer blocks on
        its full pipe meanwhile."""
        self._loop.call(self._add, fd, self._stream, fd, on_data)

    def watch_event(self, fd: int, on_event: EventCallback, once: bool = True) -> None:
        """Call ``on_event()`` when ``fd`` becomes readable (a pidfd: the process exited; an eventfd:
        its count is consumed first). ``once``: unwatched after the first call."""
        self._loop.call(self._add, fd, self._event, fd, on_event, once)

    def unwatch(self, fd: int) -> None:
        """Stop watching ``fd``; once this returns the loop no longer uses it, so it may be closed."""
        if self._loop.on_loop:
            self._remove(fd)
            return
        done = threading.Event()
        self._loop.call(lambda: (self._remove(fd), done.set()))
        if not done.wait(UNWATCH_WAIT_S):
            log.error("the event loop did not release descriptor %d within %.0f s", fd, UNWATCH_WAIT_S)

    def close(self) -> None:
        """Stop watching everything (the descriptors stay open: their owners close them)."""
        done = threading.Event()

        def remove_all() -> None:
            for fd in list(self._fds):
                self._remove(fd)
            done.set()

        self._loop.call(remove_all)
        if not self._loop.on_loop:
            done.wait(UNWATCH_WAIT_S)

    def _add(self, fd: int, callback: Callable[..., None], *args: object) -> None:
        self._fds.add(fd)
        self._loop.loop.add_reader(fd, callback, *args)

    def _remove(self, fd: int) -> None:
        if fd in self._fds:
            self._fds.discard(fd)
            tenant = self._tenant_of.pop(fd, None)
            if tenant is None:
                self._loop.loop.remove_reader(fd)
                return
            streams = self._held[tenant]  # a held stream has no reader until its turn
            del streams[fd]
            if not streams:
                del self._held[tenant]

    def _stream(self, fd: int, on_data: ReadCallback) -> None:
        started = time.perf_counter()
        try:
            chunk = os.read(fd, CHUNK)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._remove(fd)
        tenant = _safe(on_data, chunk)
        if isinstance(tenant, str) and chunk and fd in self._fds:
            self._hold(fd, on_data, tenant, time.perf_counter() - started)

    def _hold(self, fd: int, on_data: ReadCallback, tenant: str, spent_s: float) -> None:
        """Stop reading ``fd`` until its turn comes (one held stream per turn, round the tenants and
        round each tenant's streams), and put the next turn off until reading this chunk
        (``spent_s``) is paid for."""
        loop = self._loop.loop
        loop.remove_reader(fd)
        self._held.setdefault(tenant, {})[fd] = on_data  # a tenant with no stream held joins the round last
        self._tenant_of[fd] = tenant
        delay = max(HELD_TURN_S, HELD_SPACING * spent_s)
        if self._turn is None or self._turn.when() < loop.time() + delay:
            if self._turn is not None:
                self._turn.cancel()
            self._turn = loop.call_later(delay, self._next_turn)

    def _next_turn(self) -> None:
        self._turn = None
        if not self._held:
            return
        tenant, streams = next(iter(self._held.items()))
        fd, on_data = next(iter(streams.items()))
        del streams[fd], self._tenant_of[fd], self._held[tenant]
        if streams:
            self._held[tenant] = streams  # its next stream waits for the tenant's next round
        self._loop.loop.add_reader(fd, self._stream, fd, on_data)
        if self._held:
            self._turn = self._loop.loop.call_later(HELD_TURN_S, self._next_turn)

    def _event(self, fd: int, on_event: EventCallback, once: bool) -> None:
        if once:
            self._remove(fd)
        else:
            try:
                os.read(fd, 4096)  # consume the eventfd count
            except OSError:
                pass
        _safe(on_event)


def _safe(callback: Callable[..., object], *args: object) -> object:
    """``callback(*args)``, or None when it raised (logged)."""
    try:
        return callback(*args)
    except Exception:  # a faulty callback must not stop log reading for every other container
        log.exception("fd watcher callback failed")
        return None
