"""The steering process: fast failover (:mod:`owx.thorn.failover`) as soon as a path changes.

A process of its own, at real-time priority just below bfdd's: a thread of the daemon would wait for
Python's interpreter lock whenever the kernel has descheduled another thread holding it (the
reconciler parsing tc output, an HTTP request), which on a loaded machine takes tens of
milliseconds. It has its own netlink subscription (links, routes), bfdd's session states and
the notices of remote nodes; the daemon sends it the remote VTEPs, BGP session states and the
on/off switch over a pipe, and receives a :class:`SteeringStatus` after every change.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import select
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection

from owx.thorn import netns
from owx.thorn.bfdctl import BfdWatch
from owx.thorn.events import Overflow, drain, open_event_socket
from owx.thorn.failover import FailoverState, ensure_rule, remove_overrides, sync_overrides
from owx.thorn.model import NodeSpec
from owx.thorn.notices import NoticeChannel
from owx.thorn.view import KernelView, Table

log = logging.getLogger(__name__)
RESYNC_S = 1.0  # re-read everything this often (lost netlink events, overrides removed behind our back)
MIN_WAIT_S = 0.001  # a real-time process must never spin


@dataclass
class SteeringStatus:
    """What the steering process reports to the daemon."""

    enabled: bool = True
    down: list[str] = field(default_factory=list)
    remote_lost: dict[str, list[int]] = field(default_factory=dict)
    overrides: dict[str, list[str]] = field(default_factory=dict)  # VTEP -> ["gateway@dev", ...]
    notices_sent: int = 0
    notices_received: int = 0
    notices_rejected: int = 0
    bfd_downs: int = 0
    errors: int = 0
    last_error: str | None = None


class Steering:
    """The daemon's handle on its steering process."""

    def __init__(self, node: NodeSpec) -> None:
        self.node = node
        self.status = SteeringStatus(enabled=node.reconciler.fast_failover)
        ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: the daemon has threads
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_main, args=(node.model_dump_json(), child), daemon=True,
                                 name=f"thorn-steering-{node.name}")
        self._child = child
        self._send_lock = threading.Lock()
        self._first = threading.Event()
        self._start_error: str | None = None

    def start(self, timeout: float = 30) -> None:
        self._proc.start()
        self._child.close()
        threading.Thread(target=self._read, name=f"thorn-steering-reader-{self.node.name}", daemon=True).start()
        if not self._first.wait(timeout):
            raise TimeoutError("the steering process did not start")
        if self._start_error:
            raise RuntimeError(f"steering: {self._start_error}")

    def stop(self) -> None:
        self._send(("stop",))
        self._proc.join(10)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join()
        self._conn.close()

    def set_vteps(self, vteps: set[str]) -> None:
        """The remote VTEPs the reconciler found (notices go to them, overrides are made for them)."""
        self._send(("vteps", sorted(vteps)))

    def bgp_polled(self, established: dict[str, bool], polled_at: float) -> None:
        """BGP session states (by peer address) from a poll that started at ``polled_at`` (monotonic)."""
        self._send(("bgp", established, polled_at))

    def set_enabled(self, enabled: bool) -> None:
        self._send(("enabled", enabled))

    def alive(self) -> bool:
        return self._proc.is_alive()

    def _send(self, message: tuple) -> None:
        with self._send_lock:
            try:
                self._conn.send(message)
            except OSError:  # the process is gone; the daemon reports it through alive()
                pass

    def _read(self) -> None:
        while True:
            try:
                kind, value = self._conn.recv()
            except (EOFError, OSError):
                self._first.set()
                return
            if kind == "error":
                self._start_error = value
            else:
                self.status = SteeringStatus(**value)
            self._first.set()


def steering_priority(bfdd_priority: int) -> int:
    """One below bfdd's: SCHED_FIFO never preempts a task of equal priority, so at bfdd's own a
    steering pass (tens of ms of Python after a fault, on every node at once) kept the bfdds
    of a 2-core machine off the CPU past their 60 ms detection time, and BFD failed everywhere."""
    return max(1, bfdd_priority - 1)


def _main(node_json: str, conn: Connection) -> None:
    node = NodeSpec.model_validate_json(node_json)
    # a stale override could pin traffic to a path that fails later: always clean up on the way out
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s steering[{node.name}] %(levelname)s %(message)s")
    if node.frr_rt_priority:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(steering_priority(node.frr_rt_priority)))
        except PermissionError:
            log.warning("cannot run at real-time priority (needs CAP_SYS_NICE): failover may lag on a busy host")
    try:
        events = open_event_socket(node.netns)
        ipr = netns.ipr(node.netns)
        notices = NoticeChannel(node)
        ensure_rule(ipr)
    except Exception as exc:
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    try:
        _Loop(node, conn, events, ipr, notices).run()
    finally:
        try:
            remove_overrides(ipr)
        except Exception as exc:
            log.warning("could not remove the override routes: %s", exc)
        notices.close()
        events.close()
        ipr.close()


class _Loop:
    """The steering process's single thread."""

    def __init__(self, node: NodeSpec, conn: Connection, events, ipr, notices: NoticeChannel) -> None:
        self.node, self.conn, self.events, self.ipr, self.notices = node, conn, events, ipr, notices
        self.state = FailoverState(node)
        self.bfd = BfdWatch(node.run_dir / "bfdd.sock")
        self.view = KernelView()
        self.vteps: set[str] = set()
        self.errors = 0
        self.last_error: str | None = None
        self.reported: dict | None = None

    def run(self) -> None:
        tables = {Table.links, Table.routes}
        next_resync = 0.0
        while True:
            now = time.monotonic()
            if now >= next_resync:
                if self.bfd.sock is None:
                    self.bfd.connect()
                self.step(tables, resync=True)
                next_resync = now + RESYNC_S
            wait = max(MIN_WAIT_S, min(next_resync, self.state.next_deadline()) - time.monotonic())
            inputs = [self.events, self.conn, self.notices] + ([self.bfd.sock] if self.bfd.sock else [])
            readable, _, _ = select.select(inputs, [], [], wait)
            if self.conn in readable and not self.take_messages():
                return
            if self.bfd.sock in readable:
                self.state.on_bfd(self.bfd.read())
            if self.notices in readable:
                self.state.on_notices(self.notices.receive(), time.monotonic())
            changed: set[Table] = set()
            if self.events in readable:
                try:
                    changed = set(drain(self.events)) & tables
                except Overflow:
                    changed = tables
            self.step(changed, resync=False)

    def take_messages(self) -> bool:
        """Apply what the daemon sent; False when it asks to stop or is gone."""
        while self.conn.poll():
            try:
                message = self.conn.recv()
            except (EOFError, OSError):
                return False
            kind = message[0]
            if kind == "stop":
                return False
            if kind == "vteps":
                self.vteps = set(message[1])
            elif kind == "bgp":
                self.state.on_bgp(message[1], message[2])
            elif kind == "enabled":
                self.state.enabled = message[1]
                self.state.next_refresh = 0.0  # announce the current losses (if any) again
        return True

    def step(self, tables: set[Table], resync: bool) -> None:
        """Re-read ``tables``, tell the others about our uplinks, set the override routes, report."""
        st = self.state
        try:
            self.view.refresh(self.ipr, tables)
            now = time.monotonic()
            st.update_down(st.local_down(self.view, now), now)
            notice = st.notice(now)
            if notice is not None:
                self.notices.send(notice, [u.name for u in self.node.uplinks if u.name not in st.down],
                                  sorted(self.vteps))
            want = st.desired(self.view, self.vteps, now)
            if want != st.overrides or resync:
                sync_overrides(self.ipr, want, {link.name: i for i, link in self.view.links.items()})
                st.overrides = want
            self.last_error = None
        except Exception as exc:  # keep steering: the next event or resync retries
            self.errors += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.warning("steering failed: %s", exc)
        self.report()

    def report(self) -> None:
        st = self.state
        status = asdict(SteeringStatus(
            enabled=st.enabled, down=sorted(st.down),
            remote_lost={v: sorted(loss.lost) for v, loss in st.remote.items() if loss.lost},
            overrides={v: [f"{h.gateway}@{h.dev}" for h in hops] for v, hops in st.overrides.items()},
            notices_sent=st.notices_sent, notices_received=st.notices_received,
            notices_rejected=self.notices.rejected, bfd_downs=st.bfd_downs, errors=self.errors,
            last_error=self.last_error))
        if status != self.reported:
            self.conn.send(("status", status))
            self.reported = status
