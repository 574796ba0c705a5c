"""The steering thread: fast failover (:mod:`owx.thorn.failover`) as soon as a path changes.

It has its own netlink subscription (links, routes), bfdd's session states and the
notices of remote nodes, and nothing else to do: it never waits behind the
datapath programming of the reconciler (tc commands take tens of milliseconds on
a loaded machine). It runs at real-time priority, as FRR's daemons do.
"""

from __future__ import annotations

import logging
import os
import select
import threading
import time

from owx.thorn import netns
from owx.thorn.bfdctl import BfdWatch
from owx.thorn.events import Overflow, drain, open_event_socket
from owx.thorn.failover import FailoverState, ensure_rule, remove_overrides, sync_overrides
from owx.thorn.model import NodeSpec
from owx.thorn.notices import NoticeChannel
from owx.thorn.view import KernelView, Table

log = logging.getLogger(__name__)
RESYNC_S = 1.0  # re-read everything this often (lost netlink events, overrides removed behind our back)
MIN_WAIT_S = 0.001  # a real-time thread must never spin


class Steering:
    """Owns a :class:`FailoverState`; inputs from other threads arrive through ``set_vteps``/``bgp_polled``."""

    def __init__(self, node: NodeSpec) -> None:
        self.node = node
        self.state = FailoverState(node)
        self.errors = 0
        self.last_error: str | None = None
        self.notices: NoticeChannel | None = None
        self._vteps: frozenset[str] = frozenset()
        self._bgp_poll: tuple[dict[str, bool], float] | None = None
        self._stop = threading.Event()
        self._wake_r, self._wake_w = os.pipe()
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._start_error: BaseException | None = None

    def start(self, timeout: float = 30) -> None:
        self._thread = threading.Thread(target=self._run, name=f"thorn-steering-{self.node.name}", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError("steering did not start")
        if self._start_error:
            raise self._start_error

    def stop(self) -> None:
        self._stop.set()
        self._wake()
        if self._thread:
            self._thread.join(10)
        os.close(self._wake_r)
        os.close(self._wake_w)

    def set_vteps(self, vteps: set[str]) -> None:
        """The remote VTEPs the reconciler found (notices go to them, overrides are made for them)."""
        if vteps != self._vteps:
            self._vteps = frozenset(vteps)
            self._wake()

    def bgp_polled(self, established: dict[str, bool], polled_at: float) -> None:
        """BGP session states (by peer address) from a poll that started at ``polled_at`` (monotonic)."""
        self._bgp_poll = (established, polled_at)
        self._wake()

    def set_enabled(self, enabled: bool) -> None:
        self.state.enabled = enabled
        self.state.next_refresh = 0.0  # announce the current losses (if any) again
        self._wake()

    def _wake(self) -> None:
        os.write(self._wake_w, b"w")

    def _run(self) -> None:
        if self.node.frr_rt_priority:
            os.sched_setscheduler(threading.get_native_id(), os.SCHED_FIFO,
                                  os.sched_param(self.node.frr_rt_priority))
        try:
            events = open_event_socket(self.node.netns)
            ipr = netns.ipr(self.node.netns)
            notices = self.notices = NoticeChannel(self.node)
            ensure_rule(ipr)
        except BaseException as exc:  # reported by start()
            self._start_error = exc
            self._ready.set()
            return
        bfd = BfdWatch(self.node.run_dir / "bfdd.sock")
        view = KernelView()
        tables = {Table.links, Table.routes}
        try:
            bfd.connect()
            self._ready.set()
            next_resync = 0.0
            while not self._stop.is_set():
                now = time.monotonic()
                if now >= next_resync:
                    if bfd.sock is None:
                        bfd.connect()
                    self._step(ipr, view, tables, notices, resync=True)
                    next_resync = now + RESYNC_S
                wait = max(MIN_WAIT_S, min(next_resync, self.state.next_deadline()) - time.monotonic())
                inputs = [events, self._wake_r, notices] + ([bfd.sock] if bfd.sock else [])
                readable, _, _ = select.select(inputs, [], [], wait)
                if self._wake_r in readable:
                    os.read(self._wake_r, 64)
                poll, self._bgp_poll = self._bgp_poll, None
                if poll is not None:
                    self.state.on_bgp(*poll)
                if bfd.sock in readable:
                    self.state.on_bfd(bfd.read())
                if notices in readable:
                    self.state.on_notices(notices.receive(), time.monotonic())
                changed: set[Table] = set()
                if events in readable:
                    try:
                        changed = set(drain(events)) & tables
                    except Overflow:
                        changed = tables
                if not self._stop.is_set():
                    self._step(ipr, view, changed, notices, resync=False)
        finally:
            try:
                remove_overrides(ipr)
            except Exception as exc:
                log.warning("could not remove the override routes: %s", exc)
            bfd.close()
            notices.close()
            events.close()
            ipr.close()

    def _step(self, ipr, view: KernelView, tables: set[Table], notices: NoticeChannel, resync: bool) -> None:
        """Re-read ``tables``, tell the others about our uplinks, and set the override routes."""
        try:
            view.refresh(ipr, tables)
            now = time.monotonic()
            st, vteps = self.state, self._vteps
            st.update_down(st.local_down(view, now), now)
            notice = st.notice(now)
            if notice is not None:
                notices.send(notice, [u.name for u in self.node.uplinks if u.name not in st.down], sorted(vteps))
            want = st.desired(view, set(vteps), now)
            if want != st.overrides or resync:
                sync_overrides(ipr, want, {link.name: i for i, link in view.links.items()})
                st.overrides = want
            self.last_error = None
        except Exception as exc:  # keep steering: the next event or resync retries
            self.errors += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.warning("steering failed: %s", exc)
