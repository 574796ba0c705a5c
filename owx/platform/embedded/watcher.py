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
# Tenants' reading, held or not, takes at most READ_SHARE of the loop, in bursts of at most
# READ_BURST_S per tenant: a tenant past its share has its streams read again once its share has
# paid for it (its writers wait for their pipes meanwhile), however many of its containers print at
# once. A tenant reading alone has all of READ_SHARE; tenants reading past their shares together
# split it equally, so an attacker printing in many namespaces takes no more of the loop than in one
# (nor do the records of its output, which grow with it). Other tenants' requests then wait behind
# little of their reading.
READ_SHARE = 0.25
READ_BURST_S = 0.005
RECOUNT_S = 0.01  # how often the tenants reading past their shares are counted (and the others forgotten)


class FdWatcher:
    """Dispatches readiness of registered descriptors to callbacks on ``loop``. Thread-safe."""

    def __init__(self, loop: EventLoopThread) -> None:
        self._loop = loop
        self._fds: set[int] = set()  # touched on the loop only
        self._held = _Parked()  # streams waiting for their turn
        self._paying = _Parked()  # streams of tenants past their share, waiting for it to pay
        self._streams: dict[int, tuple[ReadCallback, TenantOf]] = {}  # the watched streams' readers
        self._owed: dict[str, tuple[float, float, float]] = {}  # tenant -> (reading beyond its share, as of, share)
        self._share = READ_SHARE  # each tenant's share of the loop, as last counted
        self._counted_at = 0.0
        self._turn: asyncio.TimerHandle | None = None

    def watch_stream(self, fd: int, on_data: ReadCallback, tenant_of: TenantOf) -> None:
        """Call ``on_data(chunk)`` for everything readable on ``fd`` (non-blocking); ``b""`` once at EOF
        (then it is unwatched). When it answers True, ``fd`` waits for its turn among ``tenant_of()``'s
        held streams (``HELD_TURN_S``) before its next chunk is read, and it waits too while that
        tenant's reading is past its share (``READ_SHARE``, split among the tenants past theirs): its
        writer blocks on its full pipe meanwhile."""
        self._loop.call(self._add_stream, fd, on_data, tenant_of)

    def read_now(self, fd: int) -> None:
        """Read the watched stream ``fd`` once now, from the loop, as its readiness would (unless it is
        held or its tenant is past its share: it is read later)."""
        reader = self._streams.get(fd)
        if reader is not None and fd not in self._held and fd not in self._paying:
            self._stream(fd, *reader)

    def charge(self, tenant: str, seconds: float) -> None:
        """Count ``seconds`` more of the loop against ``tenant``'s share, as if spent reading its output
        (call it on the loop): its streams wait for the share to pay for it."""
        self._spend(tenant, seconds)

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
        if not (self._held.discard(fd) or self._paying.discard(fd)):  # a parked stream has no reader
            self._loop.loop.remove_reader(fd)

    def _stream(self, fd: int, on_data: ReadCallback, tenant_of: TenantOf) -> None:
        tenant = tenant_of()
        if self._owing(tenant) > READ_BURST_S:
            self._wait_to_pay(fd, tenant)
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
            self._hold(fd, tenant, spent_s)
        elif owing > READ_BURST_S:
            self._wait_to_pay(fd, tenant)

    def _spend(self, tenant: str, spent_s: float) -> float:
        """Count ``spent_s`` of reading against ``tenant``'s share (paid from now at the share as
        counted now); what it owes now."""
        now = self._loop.loop.time()
        if now - self._counted_at > RECOUNT_S:
            self._recount(now)
        owing = self._owing(tenant) + spent_s
        self._owed[tenant] = (owing, now, self._share)
        return owing

    def _recount(self, now: float) -> None:
        """Forget the tenants that owe nothing, and share READ_SHARE among those left."""
        self._owed = {tenant: owed for tenant, owed in self._owed.items() if self._owing(tenant) > 0}
        self._share = READ_SHARE / max(1, len(self._owed))
        self._counted_at = now

    def _owing(self, tenant: str) -> float:
        """Reading time ``tenant`` took beyond its share, now."""
        owed = self._owed.get(tenant)
        if owed is None:
            return 0.0
        spent_s, since, share = owed
        return max(0.0, spent_s - (self._loop.loop.time() - since) * share)

    def _wait_to_pay(self, fd: int, tenant: str) -> None:
        """Stop reading ``fd`` until ``tenant``'s share has paid for its reading beyond the burst."""
        first = not self._paying.has(tenant)
        self._park(self._paying, fd, tenant)
        if first:
            paid_in = (self._owing(tenant) - READ_BURST_S) / self._owed[tenant][2]
            self._loop.loop.call_later(paid_in, self._paid, tenant)

    def _paid(self, tenant: str) -> None:
        for fd in self._paying.take(tenant):
            self._resume(fd)

    def _park(self, parked: _Parked, fd: int, tenant: str) -> None:
        self._loop.loop.remove_reader(fd)
        parked.add(fd, tenant)

    def _resume(self, fd: int) -> None:
        self._loop.loop.add_reader(fd, self._stream, fd, *self._streams[fd])

    def _hold(self, fd: int, tenant: str, spent_s: float) -> None:
        """Stop reading ``fd`` until its turn comes (one held stream per turn, round the tenants and
        round each tenant's streams), and put the next turn off until reading this chunk
        (``spent_s``) is paid for."""
        loop = self._loop.loop
        self._park(self._held, fd, tenant)
        delay = max(HELD_TURN_S, HELD_SPACING * spent_s)
        if self._turn is None or self._turn.when() < loop.time() + delay:
            if self._turn is not None:
                self._turn.cancel()
            self._turn = loop.call_later(delay, self._next_turn)

    def _next_turn(self) -> None:
        self._turn = None
        if not self._held:
            return
        self._resume(self._held.next_in_round())
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


class _Parked:
    """Streams not read for now, by tenant: tenants in the order they came, each one's streams too."""

    def __init__(self) -> None:
        self._by_tenant: dict[str, dict[int, None]] = {}
        self._tenant_of: dict[int, str] = {}

    def __contains__(self, fd: int) -> bool:
        return fd in self._tenant_of

    def __bool__(self) -> bool:
        return bool(self._tenant_of)

    def has(self, tenant: str) -> bool:
        return tenant in self._by_tenant

    def add(self, fd: int, tenant: str) -> None:
        self._by_tenant.setdefault(tenant, {})[fd] = None  # a tenant with none parked comes last
        self._tenant_of[fd] = tenant

    def discard(self, fd: int) -> bool:
        """Forget ``fd``; whether it was parked."""
        tenant = self._tenant_of.pop(fd, None)
        if tenant is None:
            return False
        streams = self._by_tenant[tenant]
        del streams[fd]
        if not streams:
            del self._by_tenant[tenant]
        return True

    def next_in_round(self) -> int:
        """Take the first tenant's first stream; that tenant's next one waits for its next round."""
        tenant, streams = next(iter(self._by_tenant.items()))
        fd = next(iter(streams))
        self.discard(fd)
        if tenant in self._by_tenant:
            self._by_tenant[tenant] = self._by_tenant.pop(tenant)  # to the end of the round
        return fd

    def take(self, tenant: str) -> list[int]:
        """Take every stream of ``tenant``."""
        streams = list(self._by_tenant.get(tenant, ()))
        for fd in streams:
            self.discard(fd)
        return streams


def _safe(callback: Callable[..., object], *args: object) -> object:
    """``callback(*args)``, or None when it raised (logged)."""
    try:
        return callback(*args)
    except Exception:  # a faulty callback must not stop log reading for every other container
        log.exception("fd watcher callback failed")
        return None
