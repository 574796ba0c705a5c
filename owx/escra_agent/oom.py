"""OOM rescue from user space, done locally from a reserve the allocator pre-granted.

cgroup v1: ``memory.oom_control`` oom_kill_disable=1 pauses a task at the limit
instead of killing it; an eventfd registered through ``cgroup.event_control``
wakes this thread, which raises the limit (memsw first) so the task continues.
cgroup v2: ``memory.high`` (the managed limit) sits below ``memory.max``;
crossing it throttles the task and bumps ``memory.events`` (inotify wakes us).

The allocator owns the budget: it grants each agent a reserve per application
in advance, the rescue spends from it without a round trip (~0.2 ms), and the
spending is reported afterwards.  With the reserve short the allocator is
asked; it may grant, make the task wait while it reclaims elsewhere, or deny —
then the OOM proceeds (oom_kill_disable is dropped for that episode).
"""

from __future__ import annotations

import json
import logging
import os
import queue
import select
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from owx.common.cgroups import CgroupError, is_v2
from owx.escra_agent.discovery import Handle
from owx.escra_agent.limits import LimitWriter
from owx.escra_agent.messages import OomReply

log = logging.getLogger(__name__)

# (handle, usage, new limit, bytes taken from the reserve) -> allocator's reply, None if unreachable
Reporter = Callable[[Handle, int, int, int], OomReply | None]


@dataclass
class _Watch:
    handle: Handle
    fd: int
    high_events: int = 0


class OomGuard:
    """Watches containers for OOM events and rescues them; one thread for all."""

    def __init__(self, writer: LimitWriter, report: Reporter, slice_bytes: int, event_log: str | None = None) -> None:
        self.writer = writer
        self.slice_bytes = slice_bytes
        self.rescues = 0  # OOM events answered with a raised limit (for metrics)
        self._report = report
        self._event_log = open(event_log, "a", buffering=1) if event_log else None
        self._reserve: dict[str, int] = {}
        self._lock = threading.Lock()
        self._watches: dict[int, _Watch] = {}
        self._by_id: dict[str, _Watch] = {}
        self._stuck: dict[str, Handle] = {}
        self._epoll = select.epoll()
        self._wake_r, self._wake_w = os.pipe()
        self._epoll.register(self._wake_r, select.EPOLLIN)
        self._outbox: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._running = True
        self._threads = [
            threading.Thread(target=self._watch_loop, name="escra-oom", daemon=True),
            threading.Thread(target=self._report_loop, name="escra-oom-report", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    # -- reserve -------------------------------------------------------------
    def grant(self, app: str, amount: int) -> None:
        with self._lock:
            self._reserve[app] = self._reserve.get(app, 0) + amount
        self.retry_stuck()

    def retry_stuck(self) -> None:
        """Try again for tasks left paused while the allocator was unreachable."""
        with self._lock:
            stuck, self._stuck = list(self._stuck.values()), {}
        for handle in stuck:
            self._outbox.put(lambda handle=handle: self._rescue(handle, time.monotonic_ns()))

    def reset_reserves(self) -> None:
        """The allocator restarted: memory it granted before is no longer backed."""
        with self._lock:
            self._reserve.clear()

    def reserve(self, app: str) -> int:
        with self._lock:
            return self._reserve.get(app, 0)

    def _take(self, app: str) -> int:
        """Bytes taken from the reserve for one rescue: a slice, or what is left (at least 1 MiB)."""
        with self._lock:
            amount = min(self.slice_bytes, self._reserve.get(app, 0))
            if amount < 1 << 20:
                return 0
            self._reserve[app] -= amount
            return amount

    # -- containers ------------------------------------------------------------
    def watch(self, handle: Handle) -> None:
        """Pause instead of kill at the limit, and listen for the event."""
        group = handle.cgroup
        group.set_oom_kill_disable(True)
        fd = group.oom_eventfd()
        watch = _Watch(handle, fd, self._high_events(handle))
        with self._lock:
            self._watches[fd] = watch
            self._by_id[handle.id] = watch
        self._epoll.register(fd, select.EPOLLIN)

    def unwatch(self, container_id: str) -> None:
        with self._lock:
            watch = self._by_id.pop(container_id, None)
            self._stuck.pop(container_id, None)
            if watch is not None:
                self._watches.pop(watch.fd, None)
        if watch is not None:
            try:
                self._epoll.unregister(watch.fd)
            except OSError:
                pass
            os.close(watch.fd)

    def let_proceed(self, container_id: str) -> None:
        """No memory for this container: allow the kernel to OOM-kill, then guard again."""
        with self._lock:
            watch = self._by_id.get(container_id)
        if watch is not None:
            self._outbox.put(lambda: self._proceed(watch.handle))

    def close(self) -> None:
        if not self._running:
            return
        self._running = False
        os.write(self._wake_w, b"x")
        self._outbox.put(None)
        for thread in self._threads:
            thread.join(timeout=5)
        for container_id in list(self._by_id):
            self.unwatch(container_id)
        self._epoll.close()
        os.close(self._wake_r)
        os.close(self._wake_w)
        if self._event_log:
            self._event_log.close()

    # -- event thread ------------------------------------------------------------
    def _watch_loop(self) -> None:
        try:  # rescue latency is scheduling latency on a busy node: run this (mostly sleeping) thread real-time
            os.sched_setscheduler(threading.get_native_id(), os.SCHED_FIFO, os.sched_param(10))
        except OSError:
            log.info("OOM thread runs without real-time priority (not permitted)")
        while self._running:
            try:
                events = self._epoll.poll(1.0)
            except OSError:
                return
            for fd, _mask in events:
                if fd == self._wake_r:
                    continue
                event_ns = time.monotonic_ns()
                with self._lock:
                    watch = self._watches.get(fd)
                if watch is None:
                    continue
                try:
                    os.read(fd, 4096)  # consume the eventfd counter / inotify records
                except BlockingIOError:
                    continue
                except OSError:
                    self.unwatch(watch.handle.id)
                    continue
                if is_v2() and not self._crossed_high(watch):
                    continue
                self._rescue(watch.handle, event_ns)

    def _rescue(self, handle: Handle, event_ns: int) -> None:
        """The critical path: one read, two writes, no allocator round trip when the reserve covers it."""
        try:
            current = self._current_limit(handle)
        except (CgroupError, OSError):
            return  # vanished
        if amount := self._take(handle.app):
            limit = current + amount
            if self.writer.set_memory(handle, limit):
                self._log(handle, event_ns, limit, "reserve")
                self._outbox.put(lambda: self._spent(handle, limit, amount))
                return
            self.grant(handle.app, amount)  # not spent
        self._outbox.put(lambda: self._ask(handle, self._usage(handle), current, event_ns))

    def _spent(self, handle: Handle, limit: int, amount: int) -> None:
        reply = self._report(handle, self._usage(handle), limit, amount)
        if reply is not None and reply.reserve_grant:
            self.grant(handle.app, reply.reserve_grant)

    def _ask(self, handle: Handle, usage: int, current: int, event_ns: int) -> None:
        reply = self._report(handle, usage, current, 0)
        if reply is None:
            log.warning("OOM of %s: allocator unreachable and reserve empty; the task stays paused", handle.id[:12])
            with self._lock:
                self._stuck[handle.id] = handle
            return
        if reply.decision == "granted" and reply.memory_limit:
            if self.writer.set_memory(handle, reply.memory_limit):
                self._log(handle, event_ns, reply.memory_limit, "allocator")
        elif reply.decision == "denied":
            self._proceed(handle)
        # "wait": the grant arrives as a limit update with the next directives

    def _proceed(self, handle: Handle) -> None:
        log.warning("OOM of %s: no memory in the pool, the kernel's OOM killer proceeds", handle.id[:12])
        group = handle.cgroup
        try:
            group.set_oom_kill_disable(False)
            deadline = time.monotonic() + 1.0
            while group.under_oom() and time.monotonic() < deadline:
                time.sleep(0.005)
            group.set_oom_kill_disable(True)
        except CgroupError:
            pass

    def _report_loop(self) -> None:
        while (job := self._outbox.get()) is not None:
            try:
                job()
            except Exception:
                log.exception("OOM report failed")

    # -- v1/v2 details -----------------------------------------------------------
    def _current_limit(self, handle: Handle) -> int:
        """The managed limit: ``memory.limit_in_bytes`` (v1) or ``memory.high`` (v2)."""
        group = handle.cgroup
        if not is_v2():
            return group.memory_limit()
        high = group.memory_high()
        return group.memory_limit() - self.writer.headroom_bytes if high is None else high

    @staticmethod
    def _usage(handle: Handle) -> int:
        try:
            return handle.cgroup.memory().usage
        except CgroupError:
            return 0

    def _high_events(self, handle: Handle) -> int:
        if not is_v2():
            return 0
        for line in (handle.cgroup.dir() / "memory.events").read_text().splitlines():
            key, value = line.split()
            if key == "high":
                return int(value)
        return 0

    def _crossed_high(self, watch: _Watch) -> bool:
        try:
            now = self._high_events(watch.handle)
        except OSError:
            return False
        crossed, watch.high_events = now > watch.high_events, now
        return crossed

    def _log(self, handle: Handle, event_ns: int, limit: int, source: str) -> None:
        """Record one rescue (the log, the event log, the count)."""
        self.rescues += 1
        done_ns = time.monotonic_ns()
        log.info("OOM of %s rescued from %s in %.2f ms (limit %d MiB)", handle.id[:12], source, (done_ns - event_ns) / 1e6, limit >> 20)
        if self._event_log:
            record = {"container": handle.id, "event_ns": event_ns, "raised_ns": done_ns, "limit": limit, "source": source}
            self._event_log.write(json.dumps(record) + "\n")
