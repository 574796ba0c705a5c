"""The reconciler: keeps the datapath's rules equal to what the kernel's tables imply.

Netlink is best effort, so an event is only a hint: on each one the affected
table is re-dumped in full, and every ``period_s`` all tables are re-dumped, so
a lost event delays convergence by at most one period. ``drop_events`` ignores
that fraction of events on purpose, to prove it. The remote VTEPs it finds are
handed to ``on_vteps`` (fast failover steers the paths to them, see
:mod:`owx.thorn.steering`).
"""

from __future__ import annotations

import logging
import os
import random
import select
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from owx.thorn import netns
from owx.thorn.datapath.base import DatapathDriver
from owx.thorn.events import Overflow, drain, open_event_socket
from owx.thorn.model import NodeSpec
from owx.thorn.rules import Rule, desired_rules, paths
from owx.thorn.view import ZERO_MAC, KernelView, Nexthop, Table

log = logging.getLogger(__name__)
DEBOUNCE_S = 0.005


@dataclass
class ReconcileStatus:
    reconciles: int = 0
    last_at: float = 0.0  # unix time of the last completed pass
    last_reason: str = ""
    last_duration_ms: float = 0.0
    events: int = 0
    events_dropped: int = 0
    overflows: int = 0
    rules_added: int = 0
    rules_removed: int = 0
    errors: int = 0
    last_error: str | None = None
    rules: list[Rule] = field(default_factory=list)
    paths: dict[str, list[Nexthop]] = field(default_factory=dict)
    dumps: dict[str, int] = field(default_factory=dict)


class Reconciler:
    """Runs in its own thread; ``status`` is a consistent snapshot after each pass."""

    def __init__(self, node: NodeSpec, driver: DatapathDriver,
                 on_vteps: Callable[[set[str]], None] | None = None) -> None:
        self.node = node
        self.driver = driver
        self.on_vteps = on_vteps
        self.period_s = node.reconciler.period_s
        self.drop_events = node.reconciler.drop_events
        self.status = ReconcileStatus()
        self._rng = random.Random()
        self._stop = threading.Event()
        self._wake_r, self._wake_w = os.pipe()
        self._thread: threading.Thread | None = None
        self._passed = threading.Condition()
        self._ready = threading.Event()
        self._start_error: BaseException | None = None
        self._next_driver: DatapathDriver | None = None

    def start(self, timeout: float = 30) -> None:
        """Start the thread; return after the first full pass (raise if it could not subscribe)."""
        self._thread = threading.Thread(target=self._run, name=f"thorn-reconciler-{self.node.name}", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError("reconciler did not complete its first pass")
        if self._start_error:
            raise self._start_error

    def stop(self) -> None:
        self._stop.set()
        os.write(self._wake_w, b"x")
        if self._thread:
            self._thread.join(10)
        os.close(self._wake_r)
        os.close(self._wake_w)

    def kick(self) -> None:
        """Ask for a full pass now."""
        os.write(self._wake_w, b"k")

    def replace_driver(self, driver: DatapathDriver) -> None:
        """Switch datapaths: the next pass removes the old driver's rules and installs the new one's."""
        self._next_driver = driver
        self.kick()

    def wait_pass(self, after: float, timeout: float) -> bool:
        """Wait until a pass completed after unix time ``after``."""
        deadline = time.monotonic() + timeout
        with self._passed:
            while self.status.last_at <= after:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._passed.wait(left)
        return True

    def _run(self) -> None:
        try:
            sock = open_event_socket(self.node.netns)
            ipr = netns.ipr(self.node.netns)
        except BaseException as exc:  # reported by start()
            self._start_error = exc
            self._ready.set()
            return
        view = KernelView()
        try:
            self._pass(ipr, view, set(Table), "start")
            self._ready.set()
            next_full = time.monotonic() + self.period_s
            while not self._stop.is_set():
                wait = max(0.0, next_full - time.monotonic())
                readable, _, _ = select.select([sock, self._wake_r], [], [], wait)
                tables: set[Table] = set()
                if self._wake_r in readable:
                    if b"k" in os.read(self._wake_r, 64):
                        next_full = 0
                if sock in readable:
                    time.sleep(DEBOUNCE_S)  # let a burst (e.g. one route with many next hops) arrive
                    tables = self._take_events(sock)
                if self._stop.is_set():
                    break
                if time.monotonic() >= next_full:
                    self._pass(ipr, view, set(Table), "period")
                    next_full = time.monotonic() + self.period_s
                elif tables:
                    self._pass(ipr, view, tables, "event")
        finally:
            sock.close()
            ipr.close()
            self._ready.set()

    def _take_events(self, sock) -> set[Table]:
        try:
            events = drain(sock)
        except Overflow:
            self.status.overflows += 1
            return set(Table)
        kept = set()
        for table in events:
            self.status.events += 1
            if self.drop_events and self._rng.random() < self.drop_events:
                self.status.events_dropped += 1
                continue
            kept.add(table)
        return kept

    def _pass(self, ipr, view: KernelView, tables: set[Table], reason: str) -> None:
        started = time.monotonic()
        try:
            view.refresh(ipr, tables)
            ov = self.node.overlay
            rules = desired_rules(view, ov.vtep, ov.vni)
            vteps = {e.dst for e in view.fdb if e.dev == ov.vtep and e.dst and e.mac == ZERO_MAC}
            vteps |= {r.vtep for r in rules}
            if self.on_vteps:
                self.on_vteps(vteps)
            if self._next_driver is not None:
                self.driver.close()
                self.driver, self._next_driver = self._next_driver, None
            result = self.driver.sync(rules)
            status_paths = paths(view, vteps)
        except Exception as exc:  # keep running: the next event or period retries
            self.status.errors += 1
            self.status.last_error = f"{type(exc).__name__}: {exc}"
            log.warning("reconcile (%s) failed: %s", reason, exc)
            return
        with self._passed:
            st = self.status
            st.rules, st.paths = rules, status_paths
            st.rules_added += result.added
            st.rules_removed += result.removed
            st.dumps = {t.value: n for t, n in view.dumps.items()}
            st.reconciles += 1
            st.last_reason = reason
            st.last_duration_ms = (time.monotonic() - started) * 1000
            st.last_at = time.time()
            st.last_error = None
            self._passed.notify_all()
        if result.changed:
            log.info("reconcile (%s): +%d -%d rules", reason, result.added, result.removed)
