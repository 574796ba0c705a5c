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

# Takes a chunk (b"" means end of stream); True when the stream's reader may slow down now (its
# writer prints much, or what it prints is dropped: see LogCollector.held)
ReadCallback = Callable[[bytes], "bool | None"]
TenantOf = Callable[[], str]  # whose share of the loop a stream's reading takes (a container's namespace)
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
# Each tenant's reading, held or not, takes at most READ_SHARE of the loop, in bursts of at most
# READ_BURST_S: a tenant past that has its streams read again once its share has paid for it (its
# writers wait for their pipes meanwhile), however many of its containers print at once. Other
# tenants' requests then wait behind little of its reading.
READ_SHARE = 0.25
READ_BURST_S = 0.005
MAX_OWING = 4096  # tenants whose reading is accounted for; those that owe nothing are forgotten beyond


class FdWatcher:
    """Dispatches readiness of registered descriptors to callbacks on ``loop``. Thread-safe."""

    def __init__(self, loop: EventLoopThread) -> None:
        self._loop = loop
        self._fds: set[int] = set()  # touched on the loop only
        # streams not read now, by tenant, in order: held (waiting for their turn), or of a tenant past
        # its share (waiting for it to pay); each such stream's tenant
        self._held: dict[str, dict[int, tuple[ReadCallback, TenantOf]]] = {}
        self._held_by: dict[int, str] = {}
        self._paying: dict[str, dict[int, tuple[ReadCallback, TenantOf]]] = {}
        self._paying_by: dict[int, str] = {}
        self._streams: dict[int, tuple[ReadCallback, TenantOf]] = {}  # the watched streams' readers
        self._owed: dict[str, tuple[float, float]] = {}  # tenant -> (reading beyond its share, as of)
        self._turn: asyncio.TimerHandle | None = None

    def watch_stream(self, fd: int, on_data: ReadCallback, tenant_of: TenantOf) -> None:
        """Call ``on_data(chunk)`` for everything readable on ``fd`` (non-blocking); ``b""`` once at EOF
        (then it is unwatched). When it answers True, ``fd`` waits for its turn among ``tenant_of()``'s
        held streams (``HELD_TURN_S``) before its next chunk is read, and it waits too while that
        tenant's reading is past its share (``READ_SHARE``): its writer blocks on its full pipe
        meanwhile."""
        self._loop.call(self._add_stream, fd, on_data, tenant_of)

    def read_now(self, fd: int) -> None:
        """Read the watched stream ``fd`` once now, from the loop, as its readiness would (unless it is
        held or its tenant is past its share: it is read later)."""
        reader = self._streams.get(fd)
        if reader is not None and fd not in self._held_by and fd not in self._paying_by:
            self._stream(fd, *reader)

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

    def _add_stream(self, fd: int, on_data: ReadCallback, tenant_of: TenantOf) -> None:
        self._streams[fd] = (on_data, tenant_of)
        self._add(fd, self._stream, fd, on_data, tenant_of)

    def _remove(self, fd: int) -> None:
        if fd not in self._fds:
            return
        self._fds.discard(fd)
        self._streams.pop(fd, None)
        for waiting, tenant_of in ((self._held, self._held_by), (self._paying, self._paying_by)):
            tenant = tenant_of.pop(fd, None)
            if tenant is not None:  # a waiting stream has no reader
                streams = waiting[tenant]
                del streams[fd]
                if not streams:
                    del waiting[tenant]
                return
        self._loop.loop.remove_reader(fd)

    def _stream(self, fd: int, on_data: ReadCallback, tenant_of: TenantOf) -> None:
        tenant = tenant_of()
        if self._owing(tenant) > READ_BURST_S:
            self._wait_to_pay(fd, on_data, tenant_of, tenant)
            return
        started = time.perf_counter()
        try:
            chunk = os.read(fd, CHUNK)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._remove(fd)
        hold = _safe(on_data, chunk) is True
        spent_s = time.perf_counter() - started
        owing = self._spend(tenant, spent_s)
        if not chunk or fd not in self._fds:
            return
        if hold:
            self._hold(fd, on_data, tenant_of, tenant, spent_s)
        elif owing > READ_BURST_S:
            self._wait_to_pay(fd, on_data, tenant_of, tenant)

    def _spend(self, tenant: str, spent_s: float) -> float:
        """Count ``spent_s`` of reading against ``tenant``'s share; what it owes now."""
        if len(self._owed) >= MAX_OWING and tenant not in self._owed:
            self._owed = {t: owed for t, owed in self._owed.items() if self._owing(t) > 0}
        owing = self._owing(tenant) + spent_s
        self._owed[tenant] = (owing, self._loop.loop.time())
        return owing

    def _owing(self, tenant: str) -> float:
        """Reading time ``tenant`` took beyond its share, now."""
        owed = self._owed.get(tenant)
        if owed is None:
            return 0.0
        spent_s, since = owed
        return max(0.0, spent_s - (self._loop.loop.time() - since) * READ_SHARE)

    def _wait_to_pay(self, fd: int, on_data: ReadCallback, tenant_of: TenantOf, tenant: str) -> None:
        """Stop reading ``fd`` until ``tenant``'s share has paid for its reading beyond the burst."""
        self._loop.loop.remove_reader(fd)
        first = tenant not in self._paying
        self._paying.setdefault(tenant, {})[fd] = (on_data, tenant_of)
        self._paying_by[fd] = tenant
        if first:
            paid_in = (self._owing(tenant) - READ_BURST_S) / READ_SHARE
            self._loop.loop.call_later(paid_in, self._paid, tenant)

    def _paid(self, tenant: str) -> None:
        for fd, (on_data, tenant_of) in self._paying.pop(tenant, {}).items():
            del self._paying_by[fd]
            self._loop.loop.add_reader(fd, self._stream, fd, on_data, tenant_of)

    def _hold(self, fd: int, on_data: ReadCallback, tenant_of: TenantOf, tenant: str, spent_s: float) -> None:
        """Stop reading ``fd`` until its turn comes (one held stream per turn, round the tenants and
        round each tenant's streams), and put the next turn off until reading this chunk
        (``spent_s``) is paid for."""
        loop = self._loop.loop
        loop.remove_reader(fd)
        self._held.setdefault(tenant, {})[fd] = (on_data, tenant_of)  # a tenant with none held joins the round last
        self._held_by[fd] = tenant
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
        fd, (on_data, tenant_of) = next(iter(streams.items()))
        del streams[fd], self._held_by[fd], self._held[tenant]
        if streams:
            self._held[tenant] = streams  # its next stream waits for the tenant's next round
        self._loop.loop.add_reader(fd, self._stream, fd, on_data, tenant_of)
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
