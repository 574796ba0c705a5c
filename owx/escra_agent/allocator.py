"""The resource allocator: one per cluster, owns every application's CPU and memory budget.

It is a plain object (thread-safe) that the gateway can hold in-process, and
that :mod:`owx.escra_agent.server` serves over HTTP for ``owx agent --controller``.
Agents report telemetry; the allocator answers with limit updates, reclaim
requests and top-ups of each agent's local OOM rescue reserve.  Books follow
what agents measure: a resize the kernel refused shows up in the next sample
and the books take the real value.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass, field

from owx.escra_agent.cpu_policy import CpuWindow, fair_target_us, next_quota
from owx.escra_agent.ledger import PoolLedger
from owx.escra_agent.messages import (
    AllocatorView,
    AppLimits,
    ContainerInfo,
    Directives,
    Heartbeat,
    LimitUpdate,
    OomEvent,
    OomReply,
    Register,
    TelemetryBatch,
)
from owx.escra_agent.settings import CFS_PERIOD_US, AllocatorParams

log = logging.getLogger(__name__)
PAGE = 4096


class StaleAgent(Exception):
    """The agent's node or epoch is unknown here (allocator restarted): it must register again."""


class UnknownContainer(LookupError):
    """An OOM event for a container this allocator does not manage."""


@dataclass
class Tracked:
    """The allocator's record of one container."""

    id: str
    node: str
    app: str
    cpu_quota_us: int
    memory_limit: int
    memory_usage: int
    window: CpuWindow
    settle_after_seq: int = -1  # samples up to this batch seq predate our last update


@dataclass
class NodeState:
    name: str
    last_seen: float
    next_reclaim: float
    last_seq: int = -1
    reserve: dict[str, int] = field(default_factory=dict)  # app -> rescue bytes the agent holds
    outbox: dict[str, LimitUpdate] = field(default_factory=dict)
    deny: set[str] = field(default_factory=set)


@dataclass
class AppState:
    limits: AppLimits
    ledger: PoolLedger | None
    containers: dict[str, Tracked] = field(default_factory=dict)
    reclaimed_bytes: int = 0
    oom_granted: int = 0
    oom_denied: int = 0

    @property
    def cpu_limit_us(self) -> int:
        return int(self.limits.cpu_cores * CFS_PERIOD_US)


@dataclass
class PendingOom:
    container_id: str
    deadline: float


class ResourceAllocator:
    """Global CPU and memory pools per application, and Escra's decisions over them."""

    def __init__(self, params: AllocatorParams | None = None, clock=time.monotonic) -> None:
        self.params = params or AllocatorParams()
        self.epoch = uuid.uuid4().hex[:12]
        self._clock = clock
        self._lock = threading.Lock()
        self._apps: dict[str, AppState] = {}
        self._nodes: dict[str, NodeState] = {}
        self._where: dict[str, str] = {}  # container id -> app
        self._pending: dict[str, PendingOom] = {}

    # -- applications ------------------------------------------------------
    def add_application(self, limits: AppLimits, ledger: PoolLedger | None = None) -> None:
        """Declare a distributed container; ``ledger`` makes a pool's budget the memory limit."""
        with self._lock:
            if limits.name in self._apps:
                raise ValueError(f"application {limits.name!r} already exists")
            self._apps[limits.name] = AppState(limits, ledger)

    # -- agent messages ----------------------------------------------------
    def register(self, msg: Register) -> Directives:
        """A (re)starting agent, or one that saw a new epoch, lists its containers."""
        now = self._clock()
        with self._lock:
            node = self._nodes.get(msg.node)
            if node is not None:  # the agent restarted and lost its local reserve
                for app in node.reserve:
                    self._set_reserve(node, app, 0)
            node = NodeState(msg.node, last_seen=now, next_reclaim=now + self.params.reclaim_interval_s)
            self._nodes[msg.node] = node
            listed = {info.id for info in msg.containers}
            for stale in [t for t in self._tracked() if t.node == msg.node and t.id not in listed]:
                self._forget(stale)
            for info in msg.containers:
                self._admit(node, info)
            return self._directives(node)

    def telemetry(self, batch: TelemetryBatch) -> Directives:
        """One node's period: samples drive CPU decisions and keep the memory books true."""
        with self._lock:
            node = self._node(batch.node, batch.epoch)
            node.last_seq = batch.seq
            for gone in batch.gone:
                if (tracked := self._get(gone)) is not None and tracked.node == node.name:
                    self._forget(tracked)
            for info in batch.new:
                self._admit(node, info)
            for item in batch.reclaimed:
                if (tracked := self._get(item.id)) is not None:
                    app = self._apps[tracked.app]
                    app.reclaimed_bytes += item.freed_bytes  # ψ returns to the pool
                    self._book_memory(app, tracked, item.memory_limit)
            for sample in batch.samples:
                tracked = self._get(sample.id)
                if tracked is None or tracked.node != node.name:
                    continue
                app = self._apps[tracked.app]
                if batch.seq > tracked.settle_after_seq:
                    if sample.cpu_quota_us > 0:
                        tracked.cpu_quota_us = sample.cpu_quota_us
                    if sample.memory_limit > 0:
                        self._book_memory(app, tracked, sample.memory_limit)
                tracked.memory_usage = sample.memory_usage
                tracked.window.push(sample, tracked.cpu_quota_us)
                split = self._equal_split_us(app)
                quota = next_quota(tracked.cpu_quota_us, tracked.window, self._cpu_unallocated(app), self.params, split)
                wanted = fair_target_us(tracked.cpu_quota_us, tracked.window, self.params, split)
                if quota < wanted:  # what is unallocated did not cover it
                    quota += self._take_back_cpu(app, tracked, wanted - quota, split)
                if abs(quota - tracked.cpu_quota_us) >= max(1, self.params.quota_step_us):
                    tracked.cpu_quota_us = quota
                    self._send(node, tracked, LimitUpdate(id=tracked.id, cpu_quota_us=quota))
            return self._directives(node)

    def heartbeat(self, beat: Heartbeat) -> Directives:
        with self._lock:
            return self._directives(self._node(beat.node, beat.epoch))

    def oom(self, event: OomEvent) -> OomReply:
        """A container is paused at its limit: record a local rescue, or find memory for it.

        Order (paper §2.4.4.2): unallocated memory of the application first; else
        reclaim from containers whose slack exceeds δ and grant once their
        shrink is measured (decision ``wait``); else ``denied``: the OOM proceeds.
        """
        with self._lock:
            node = self._node(event.node, event.epoch)
            tracked = self._get(event.id)
            if tracked is None or tracked.node != node.name:
                raise UnknownContainer(f"container {event.id!r} is not managed on node {node.name!r}")
            app = self._apps[tracked.app]
            tracked.memory_usage = event.memory_usage
            tracked.settle_after_seq = node.last_seq + 1
            if event.granted_bytes:
                held = node.reserve.get(app.limits.name, 0)
                self._set_reserve(node, app.limits.name, max(0, held - event.granted_bytes))
                self._book_memory(app, tracked, event.memory_limit)
                app.oom_granted += 1
                return OomReply(epoch=self.epoch, decision="recorded", reserve_grant=self._top_up(node, app))
            self._book_memory(app, tracked, event.memory_limit)
            if (grant := self._grantable(app)) > 0:
                limit = tracked.memory_limit + grant
                self._book_memory(app, tracked, limit)
                app.oom_granted += 1
                return OomReply(epoch=self.epoch, decision="granted", memory_limit=limit)
            if self._reclaim_for(app, exclude=tracked.id):
                self._pending[tracked.id] = PendingOom(tracked.id, self._clock() + self.params.oom_wait_s)
                return OomReply(epoch=self.epoch, decision="wait")
            app.oom_denied += 1
            return OomReply(epoch=self.epoch, decision="denied")

    def view(self) -> AllocatorView:
        with self._lock:
            apps = {
                name: {
                    "cpu_limit_us": app.cpu_limit_us,
                    "cpu_unallocated_us": self._cpu_unallocated(app),
                    "memory_bytes": app.limits.memory_bytes,
                    "memory_free": self._memory_free(app),
                    "reserved_bytes": self._reserved(name),
                    "reclaimed_bytes": app.reclaimed_bytes,
                    "oom_granted": app.oom_granted,
                    "oom_denied": app.oom_denied,
                }
                for name, app in self._apps.items()
            }
            containers = {
                t.id: {
                    "node": t.node,
                    "app": t.app,
                    "cpu_quota_us": t.cpu_quota_us,
                    "memory_limit": t.memory_limit,
                    "memory_usage": t.memory_usage,
                }
                for t in self._tracked()
            }
            return AllocatorView(epoch=self.epoch, apps=apps, containers=containers)

    # -- internals (lock held) ---------------------------------------------
    def _node(self, name: str, epoch: str) -> NodeState:
        self._expire_nodes()
        node = self._nodes.get(name)
        if node is None or epoch != self.epoch:
            raise StaleAgent(f"node {name!r} is not registered with allocator epoch {self.epoch}")
        node.last_seen = self._clock()
        return node

    def _expire_nodes(self) -> None:
        horizon = self._clock() - self.params.node_timeout_s
        for node in [n for n in self._nodes.values() if n.last_seen < horizon]:
            log.warning("node %s silent for %.0f s: its containers leave the books", node.name, self.params.node_timeout_s)
            for tracked in [t for t in self._tracked() if t.node == node.name]:
                self._forget(tracked)
            for app in list(node.reserve):
                self._set_reserve(node, app, 0)
            del self._nodes[node.name]

    def _tracked(self) -> list[Tracked]:
        return [t for app in self._apps.values() for t in app.containers.values()]

    def _get(self, container_id: str) -> Tracked | None:
        app = self._where.get(container_id)
        return self._apps[app].containers.get(container_id) if app else None

    def _admit(self, node: NodeState, info: ContainerInfo) -> None:
        known = self._get(info.id)
        if known is not None:  # the agent restarted: the cgroup still holds our limits
            known.node = node.name
            self._sync_known(known, info)
            return
        app = self._apps.get(info.app)
        if app is None:
            log.warning("container %s of unknown application %r stays unmanaged", info.id, info.app)
            return
        tracked = Tracked(info.id, node.name, info.app, info.cpu_quota_us, 0, info.memory_usage, CpuWindow(self.params.window))
        app.containers[info.id] = tracked
        self._where[info.id] = info.app
        if info.managed:  # allocator restarted: adopt what is there
            self._sync_known(tracked, info)
            return
        self._initial_limits(node, app, tracked, info)

    def _sync_known(self, tracked: Tracked, info: ContainerInfo) -> None:
        app = self._apps[tracked.app]
        if info.cpu_quota_us > 0:
            tracked.cpu_quota_us = info.cpu_quota_us
        if info.memory_limit > 0:
            self._book_memory(app, tracked, info.memory_limit)
        tracked.memory_usage = info.memory_usage

    def _initial_limits(self, node: NodeState, app: AppState, tracked: Tracked, info: ContainerInfo) -> None:
        """Equations 2.1 and 2.2, bounded by what is unallocated.

        The extracted eq. 2.2 reads ``global mem limit ∗ σ / #containers`` while
        the text defines σ as the share *withheld* for OOM events; the reading
        that withholds it is ``global · (1 − σ) / #containers``, and a new
        container may not dip into the withheld σ part.
        """
        count = _container_count(app)
        tracked.cpu_quota_us = 0
        quota = min(self._equal_split_us(app), self._cpu_unallocated(app))
        tracked.cpu_quota_us = max(self.params.min_quota_us, quota)
        update = {"cpu_quota_us": tracked.cpu_quota_us}
        if app.limits.adopt_memory and info.memory_limit > 0:
            self._book_memory(app, tracked, info.memory_limit)
        else:
            withheld = int(app.limits.memory_bytes * self.params.sigma)
            share = int(app.limits.memory_bytes * (1 - self.params.sigma)) // count // PAGE * PAGE  # the kernel rounds to pages
            memory = max(self.params.min_memory_bytes, min(share, self._memory_free(app) - withheld))
            if memory < info.memory_usage + self.params.delta_bytes:
                log.warning("container %s already uses %d bytes: its initial limit exceeds its share", info.id, info.memory_usage)
                memory = info.memory_usage + self.params.delta_bytes
            self._book_memory(app, tracked, memory)
            update["memory_limit"] = memory
        self._send(node, tracked, LimitUpdate(id=tracked.id, **update))

    def _forget(self, tracked: Tracked) -> None:
        app = self._apps[tracked.app]
        app.containers.pop(tracked.id, None)
        self._where.pop(tracked.id, None)
        self._pending.pop(tracked.id, None)
        node = self._nodes.get(tracked.node)
        if node is not None:
            node.outbox.pop(tracked.id, None)
            node.deny.discard(tracked.id)
        if app.ledger is not None:
            app.ledger.on_resize(tracked.id, 0)

    def _book_memory(self, app: AppState, tracked: Tracked, limit: int) -> None:
        if limit != tracked.memory_limit:
            tracked.memory_limit = limit
            if app.ledger is not None:
                app.ledger.on_resize(tracked.id, limit)

    def _set_reserve(self, node: NodeState, app: str, value: int) -> None:
        node.reserve[app] = value
        ledger = self._apps[app].ledger
        if ledger is not None:
            ledger.on_hold(f"escra-reserve:{node.name}", value)

    def _reserved(self, app: str) -> int:
        return sum(n.reserve.get(app, 0) for n in self._nodes.values())

    def _memory_free(self, app: AppState) -> int:
        allocated = sum(t.memory_limit for t in app.containers.values()) + self._reserved(app.limits.name)
        free = app.limits.memory_bytes - allocated
        return min(free, app.ledger.free_bytes()) if app.ledger is not None else free

    @staticmethod
    def _equal_split_us(app: AppState) -> int:
        """Eq. 2.1: the application's CPU limit over its (expected) containers."""
        return app.cpu_limit_us // _container_count(app)

    def _cpu_unallocated(self, app: AppState) -> int:
        return app.cpu_limit_us - sum(max(0, t.cpu_quota_us) for t in app.containers.values())

    def _take_back_cpu(self, app: AppState, needy: Tracked, needed_us: int, split_us: int) -> int:
        """Cut the application's containers above their equal split, furthest above first and
        never below it, by up to ``needed_us`` in all, for ``needy``; the runtime taken.

        Without this, a container that climbed past its split while the budget was free holds
        the runtime for as long as it stays busy, and one that becomes busy later waits at
        the floor: one tenant's hog would starve another's newcomer.
        """
        taken = 0
        for other in sorted(app.containers.values(), key=lambda t: t.cpu_quota_us, reverse=True):
            if taken >= needed_us or other.cpu_quota_us <= split_us:
                break
            if other is needy:
                continue
            cut = min(other.cpu_quota_us - split_us, needed_us - taken)
            other.cpu_quota_us -= cut
            taken += cut
            node = self._nodes[other.node]
            # samples taken before the agent applies the cut must not undo it: the rest of this
            # batch if ``other`` is on this node, else its node's next batch
            seen = node.last_seq if other.node == needy.node else node.last_seq + 1
            other.settle_after_seq = max(other.settle_after_seq, seen)
            self._send(node, other, LimitUpdate(id=other.id, cpu_quota_us=other.cpu_quota_us))
        return taken

    def _send(self, node: NodeState, tracked: Tracked, update: LimitUpdate) -> None:
        merged = node.outbox.get(tracked.id)
        if merged is not None:
            update = merged.model_copy(update={k: v for k, v in update.model_dump().items() if v is not None})
        node.outbox[tracked.id] = update

    def _reclaim_for(self, app: AppState, exclude: str) -> bool:
        """Ask agents to shrink every container with slack > δ; True if any can give."""
        delta = self.params.delta_bytes
        asked = False
        for tracked in app.containers.values():
            if tracked.id == exclude or tracked.memory_limit - tracked.memory_usage <= delta:
                continue
            target = max(self.params.min_memory_bytes, tracked.memory_usage + delta)
            if target < tracked.memory_limit and (node := self._nodes.get(tracked.node)) is not None:
                self._send(node, tracked, LimitUpdate(id=tracked.id, memory_limit=target))
                asked = True
        return asked

    def _serve_pending(self) -> None:
        now = self._clock()
        for pending in list(self._pending.values()):
            tracked = self._get(pending.container_id)
            node = self._nodes.get(tracked.node) if tracked else None
            if tracked is None or node is None:
                self._pending.pop(pending.container_id, None)
                continue
            app = self._apps[tracked.app]
            if (grant := self._grantable(app)) > 0:
                self._book_memory(app, tracked, tracked.memory_limit + grant)
                self._send(node, tracked, LimitUpdate(id=tracked.id, memory_limit=tracked.memory_limit))
                app.oom_granted += 1
                del self._pending[pending.container_id]
            elif now > pending.deadline:
                node.deny.add(tracked.id)
                app.oom_denied += 1
                del self._pending[pending.container_id]

    def _grantable(self, app: AppState) -> int:
        """What one OOM event gets: a slice, or the rest of the pool if less (at least 1 MiB, whole pages)."""
        grant = min(self.params.oom_slice_bytes, self._memory_free(app)) // PAGE * PAGE
        return grant if grant >= 256 * PAGE else 0

    def _top_up(self, node: NodeState, app: AppState) -> int:
        held = node.reserve.get(app.limits.name, 0)
        grant = min(self.params.node_reserve_bytes - held, self._memory_free(app)) // PAGE * PAGE
        if grant <= 0:
            return 0
        self._set_reserve(node, app.limits.name, held + grant)
        return grant

    def _directives(self, node: NodeState) -> Directives:
        self._serve_pending()
        grants = {}
        for name, app in self._apps.items():
            if any(t.node == node.name for t in app.containers.values()) and (grant := self._top_up(node, app)):
                grants[name] = grant
        now = self._clock()
        reclaim = now >= node.next_reclaim
        if reclaim:
            node.next_reclaim = now + self.params.reclaim_interval_s
        updates = list(node.outbox.values())
        for update in updates:
            if (tracked := self._get(update.id)) is not None:
                tracked.settle_after_seq = node.last_seq + 1
        node.outbox.clear()
        deny = sorted(node.deny)
        node.deny.clear()
        return Directives(
            epoch=self.epoch,
            updates=updates,
            reclaim=reclaim,
            delta_bytes=self.params.delta_bytes,
            reserve_grant=grants,
            deny_oom=deny,
        )


def _container_count(app: AppState) -> int:
    """How many containers share the application's limits (eq. 2.1/2.2's #containers)."""
    return max(1, app.limits.expected_containers or len(app.containers))
