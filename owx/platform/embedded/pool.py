"""A node's container pool: warm reuse, stem cells, replicas, and admission against the node's budget.

``run(spec, request)`` is the only path for traffic and never raises for action
failures.  Memory admission follows OpenWhisk's invoker: every container holds its
current memory limit in the platform's :class:`MemoryLedger` against the node's budget
(userMemory); a request that needs a new container waits while the budget is full, after
idle containers of other actions (then idle stem cells) have been evicted to make room.
Unlike the invoker's, the wait is fair among tenants (:mod:`.memory_shares`), and so is the CPU
weight of their containers (:mod:`.cpu_shares`): the tenant
holding least is served first, a container that frees goes to a poorer tenant's waiting
request rather than to its own action, and a poorer tenant's idle container is not evicted
at once.  Requests that find a free warm container of their action never wait behind that
queue, nor do activations that bring a reservation (memory held for them in advance).
When others push the node over its budget (a forced hold), idle containers are evicted
until it fits again: stem cells, then the largest holder's, then those kept past
``fair_keep_idle_s`` (:func:`.memory_shares.overcommit_victims`).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

from owx.common import jsonvalues
from owx.common.cgroups import CgroupError
from owx.common.eventloop import call_on, run_on_thread
from owx.platform.embedded import outcome as outcomes
from owx.platform.embedded.container import ActionStartupError, Backend, Container, ContainerRequest
from owx.platform.embedded.container_limits import MB, limits_for
from owx.platform.embedded.cpu_shares import tenant_shares
from owx.platform.embedded.logs import LogCollector
from owx.platform.embedded.memory_shares import (
    MemoryWait,
    first_waiting,
    held_by_tenant,
    may_evict,
    overcommit_victims,
    yields,
)
from owx.platform.embedded.proxy import ProxyAnswerTooLong, ProxyResponse, ProxyTimeout, ProxyUnreachable
from owx.platform.embedded.slots import Slot, SlotTable
from owx.platform.embedded.start_turns import StartTurns
from owx.platform.interface import NoRoom, PlatformUnavailable, ReplicaFailed
from owx.platform.ledger import MemoryLedger
from owx.platform.settings import PlatformSettings
from owx.platform.types import (
    DEVELOPER_ERROR,
    EXITED_MESSAGE,
    INIT_EXITED_MESSAGE,
    INIT_TIMEOUT_MESSAGE,
    INVALID_INIT_MESSAGE,
    INTERNAL_ERROR,
    OOM_MESSAGE,
    TIMEOUT_MESSAGE,
    ActionSpec,
    ContainerDeath,
    ContainerInfo,
    ContainerState,
    DeathReason,
    RunOutcome,
    RunRequest,
    tenant_of,
)
from owx.runtimes.activation_env import ow_env

log = logging.getLogger(__name__)

STEM_KIND = "python:3"
STEM_KINDS = frozenset({"python:3", "python:3.11", "python:default"})
# a platform failure's record: its cause (paths, addresses of this machine) goes to the gateway's log only
RUN_FAILED = "the platform failed to run the action (the cause is in the gateway's log)"
START_FAILED = "could not start a container (the cause is in the gateway's log)"
DEATH_GRACE_S = 0.5  # after a broken connection, how long to wait for the exit to be seen

DeathListener = Callable[[ContainerDeath], None]
StartListener = Callable[[ContainerInfo], None]
_tickets = itertools.count()


@dataclass(eq=False)
class _Grant:
    """Capacity handed to one request: an existing slot, and/or memory held for a new container."""

    slot: Slot | None = None
    ticket: str | None = None  # ledger holder of the memory for the new container (or a stem's growth)
    victims: list[Slot] = field(default_factory=list)
    from_stem: bool = False


@dataclass(frozen=True, slots=True)
class _Start:
    """A container started for an action: its slot, or the failed outcome, and when its ``/init`` was sent
    (when the start failed before: when it began)."""

    slot: Slot | None
    failed: RunOutcome | None
    init_sent: float


class ContainerPool:
    """Containers of one node; thread-safe, many concurrent callers."""

    def __init__(
        self,
        node: str,
        backend_for: Callable[[str], Backend],
        cgroup_parent: str,
        ledger: MemoryLedger,
        settings: PlatformSettings,
    ) -> None:
        self.node = node
        self.backend_for = backend_for
        self.cgroup_parent = cgroup_parent
        self.ledger = ledger
        self.settings = settings
        self.user_memory_mb = settings.user_memory_mb
        self.budget_bytes = settings.user_memory_mb * MB
        self.stem_target = settings.stem_cells
        self.idle_evict_s = settings.idle_evict_s
        self.pause_grace_s = settings.pause_grace_s
        self._reaper_dozing = False  # the reaper sleeps its long period: a container going idle wakes it
        self._start_turns = StartTurns(settings.starts_per_tenant or 2 * len(os.sched_getaffinity(0)))
        self._slots = SlotTable()
        self._evicting = 0  # bytes of containers being destroyed (still held in the ledger)
        self._queue: deque[MemoryWait] = deque()  # requests waiting for memory, oldest first
        self._lock = threading.RLock()  # alone where nobody waits or is woken (cheaper to enter than the condition)
        self._cond = threading.Condition(self._lock)
        self._waiting = 0  # threads waiting on the condition for capacity: only they need a notification
        self._shares_lock = threading.Lock()  # one tenant's CPU shares are worked out and written at a time
        self._reap_now = threading.Event()  # the reaper's own wake-up: not every acquire and release
        self._listeners: list[DeathListener] = []
        self._start_listeners: list[StartListener] = []
        self._closed = False
        self._lost = False
        self._stems_starting = 0
        self._warm_waiters: dict[str, deque[asyncio.Future[Slot | None]]] = {}  # on the loop, per action key
        ledger.add_node(node, self.budget_bytes, self.reclaimable, self._ledger_changed)
        self._reaper = threading.Thread(target=self._reap_idle, name=f"owx-pool-{node}-reaper", daemon=True)
        self._reaper.start()

    # -- traffic ---------------------------------------------------------------
    def run(self, spec: ActionSpec, request: RunRequest, claim: str | None = None) -> RunOutcome:
        """Run one activation; ``claim`` names a replica taken with :meth:`claim_replica`."""
        try:
            grant = self._acquire(spec, claim, state="warm", wait_s=None, reservation=request.reservation)
        except PlatformUnavailable as exc:
            now = _ms(time.time())
            return RunOutcome(INTERNAL_ERROR, outcomes.error(str(exc)), [], now, now, node=self.node)
        started = time.time()
        slot = grant.slot
        init_ms = None
        if slot is None or grant.from_stem:
            # as OpenWhisk's invoker times a cold start: making the container is waiting, /init is initTime,
            # and the activation starts with its /init
            env = ow_env(self._payload(spec, request))
            start = self._start_for(spec, request.action_name, grant, activation_env=env)
            started = start.init_sent
            if start.failed is not None:
                return start.failed
            slot = start.slot
            assert slot is not None
            init_ms = _ms(time.time()) - _ms(started)
        try:
            result = self._run_on(slot, spec, request, started)
        except Exception:  # a platform bug must not reach the caller as an exception
            log.exception("running %s on %s failed", spec.key, slot.container.id)
            self._drop(slot)
            result = self._failure(INTERNAL_ERROR, RUN_FAILED, started)
        finally:
            self._release(slot)
        result.init_ms = init_ms
        return result

    async def run_warm(self, spec: ActionSpec, request: RunRequest) -> RunOutcome | None:
        """Run ``request`` on an idle warm container of ``spec`` from the platform's event loop; when
        every warm container of ``spec`` is busy and no new one can start now (no room, or requests
        already wait for memory), wait on the loop for the first that frees (no thread waits). None
        when a thread must run it with :meth:`run`: no warm container of ``spec`` here, or room to
        start one."""
        with self._lock:
            if self._closed or self._lost or request.reservation is not None:
                return None
            slot = self._warm(spec.key)
            if slot is not None:
                slot.in_flight += 1
            elif not self._has_warm(spec.key) or (not self._startable() and self._fits(spec)):
                return None
            else:
                turn: asyncio.Future[Slot | None] = asyncio.get_running_loop().create_future()
                self._warm_waiters.setdefault(spec.key, deque()).append(turn)
        if slot is None:
            slot = await turn
            if slot is None:  # its warm containers went away meanwhile
                return None
        return await self._run_warm(slot, spec, request)

    def _has_warm(self, key: str) -> bool:
        """Whether a warm container of ``key`` lives here (idle or busy; under the lock)."""
        return any(s.state == "warm" and s.container.is_alive() for s in self._slots.of(key))

    def _fits(self, spec: ActionSpec) -> bool:
        """Whether a new container of ``spec`` would start now, evicting the idle ones it may evict
        (another tenant's kept for it, ``may_evict``, are not room; under the lock)."""
        need = spec.memory_mb * MB
        room = self.ledger.free(self.node) + self._evicting
        return need <= room + sum(self.ledger.held(s.holder) for s in self._evictable_for(spec, need))

    async def _run_warm(self, slot: Slot, spec: ActionSpec, request: RunRequest) -> RunOutcome:
        started = time.time()
        container = slot.container
        try:
            container.resume()
            oom_before = container.oom_kills_before_run()
            try:
                body = jsonvalues.dumps(self._payload(spec, request))
                response = await container.run_async(body, spec.timeout_ms / 1000, spec.result_bytes)
            except (ProxyTimeout, ProxyUnreachable) as exc:  # rare: its blocking ends go to a thread
                return await run_on_thread(None, self._lost_run, slot, spec, started, exc)
            logs = await self._logs(container, spec.logs_bytes)
            return self._judged(slot, spec, response, oom_before, logs, started)
        except Exception:  # a platform bug must not reach the caller as an exception
            log.exception("running %s on %s failed", spec.key, container.id)
            await run_on_thread(None, self._drop, slot)
            return self._failure(INTERNAL_ERROR, RUN_FAILED, started)
        finally:
            self._release(slot)

    def _payload(self, spec: ActionSpec, request: RunRequest) -> dict[str, Any]:
        """``request``'s ``/run`` body for a container of ``spec``, sent now (its API host as that
        container reaches it)."""
        payload = request.payload(_deadline_ms(spec))
        if request.api_host:
            payload["api_host"] = self.backend_for(spec.kind).api_host(request.api_host)
        return payload

    async def _logs(self, container: Container, limit_bytes: int) -> list[str]:
        """The activation's lines once both sentinels are read (at most ``sentinel_wait_s`` away)."""
        logs = container.logs
        lines = logs.take(limit_bytes)
        if lines is None:
            container.drain_output()
            lines = logs.take(limit_bytes)
            if lines is None:
                await _complete(logs, self.settings.sentinel_wait_s)
                lines = logs.collect(0.0, limit_bytes)
        return lines

    # -- replicas ----------------------------------------------------------------
    def prewarm(self, spec: ActionSpec, wait_s: float = 0.0) -> ContainerInfo:
        """Start and initialise a replica of ``spec``; it takes no traffic until claimed.

        Raises NoRoom when the budget has no room within ``wait_s`` seconds (idle
        containers of other actions are evicted first), ReplicaFailed when it fails to start.
        """
        grant = self._acquire(spec, None, state="replica", wait_s=wait_s)
        start = self._start_for(spec, spec.key, grant, state="replica")
        if start.failed is not None or start.slot is None:
            raise ReplicaFailed(str(start.failed.result if start.failed else "no container"))
        self._release(start.slot)
        return self._info(start.slot)

    def claim_replica(self, spec: ActionSpec) -> str | None:
        """Take a live replica of ``spec`` for :meth:`run` (``claim=`` its id); None if there is none."""
        with self._cond:
            for slot in self._slots.values():
                if slot.state == "replica" and slot.key == spec.key and slot.container.is_alive():
                    slot.state = "claimed"
                    return slot.container.id
        return None

    def add_death_listener(self, listener: DeathListener) -> None:
        """Call ``listener(ContainerDeath)`` when a container dies by itself, times out or its node is lost."""
        self._listeners.append(listener)

    def add_start_listener(self, listener: StartListener) -> None:
        """Call ``listener(ContainerInfo)`` when a container has started (before its ``/init``)."""
        self._start_listeners.append(listener)

    # -- resources ---------------------------------------------------------------
    def resize(self, container_id: str, memory_bytes: int | None, cpu_quota_us: int | None) -> bool:
        """Apply a container's new limits (memory also in the ledger); False if unknown.
        Raises CgroupError when the kernel refuses the new limit."""
        with self._cond:
            slot = self._slots.get(container_id)
        if slot is None:
            return False
        if memory_bytes is not None:
            slot.container.set_memory_limit(memory_bytes)
            self.ledger.resize(slot.holder, memory_bytes)
            if slot.key is not None:
                self._share_cpu(tenant_of(slot.key))
        if cpu_quota_us is not None:
            slot.container.cgroup.set_cpu_quota(cpu_quota_us, slot.container.request.limits.cpu_period_us)
        return True

    def container(self, container_id: str) -> Container | None:
        with self._cond:
            slot = self._slots.get(container_id)
        return slot.container if slot else None

    def containers(self) -> list[ContainerInfo]:
        """Every live container with its state, limit and cgroup path."""
        with self._cond:
            return [self._info(slot) for slot in self._slots.values()]

    def used_bytes(self) -> int:
        return self.ledger.used(self.node)

    def reclaimable(self) -> int:
        """Memory that evicting idle warm containers and stem cells would free now."""
        with self._cond:
            return sum(self.ledger.held(s.holder) for s in self._slots.values() if self._evictable(s))

    def queued(self) -> int:
        with self._cond:
            return len(self._queue)

    def has_warm(self, key: str) -> bool:
        """Whether a warm container of ``key`` lives here, idle or busy."""
        with self._cond:
            return self._has_warm(key)

    def has_idle_warm(self, key: str) -> bool:
        with self._cond:
            return any(self._free_warm(slot, key) for slot in self._slots.of(key))

    def forget(self, path: str) -> None:
        """Destroy the idle warm containers of every revision of the action at ``path`` (busy ones
        finish their activation and are never reused: their revision is no longer resolved)."""
        prefix = f"{path}@"
        with self._cond:
            stale = [s for s in self._slots.values()
                     if s.state == "warm" and s.idle and s.key is not None and s.key.startswith(prefix)]
            for slot in stale:
                self._slots.remove(slot.container.id)
            self._cond.notify_all()
        if stale:  # off the caller's thread: an update answers before its old containers are gone
            threading.Thread(target=lambda: [self._destroy(s) for s in stale], daemon=True,
                             name=f"owx-pool-{self.node}-forget").start()

    def remove(self, container_id: str) -> bool:
        """Destroy one container (e.g. a replica no longer needed); False if unknown."""
        with self._cond:
            slot = self._slots.remove(container_id)
            self._cond.notify_all()
        if slot is None:
            return False
        self._destroy(slot)
        return True

    # -- lifecycle ---------------------------------------------------------------
    def start_stem_cells(self) -> None:
        """Create the configured stem cells now (blocking) where the budget allows."""
        while (ticket := self._stem_wanted()) is not None:
            if not self._make_stem(ticket):
                break

    def kill_all(self, reason: DeathReason = "node-lost") -> None:
        """The node is lost: kill every container at once; new work is refused."""
        with self._cond:
            self._lost = True
            slots = list(self._slots.values())
            self._wake_waiters()
            self._cond.notify_all()
        for slot in slots:
            slot.container.kill(reason)

    def revive(self) -> None:
        """Accept work again after :meth:`kill_all` (a node that came back, empty)."""
        with self._cond:
            self._lost = False
        self.start_stem_cells()

    @property
    def lost(self) -> bool:
        return self._lost

    def close(self) -> None:
        """Destroy every container and stop; waiting requests get an internal error."""
        with self._cond:
            self._closed = True
            slots = list(self._slots.values())
            self._slots.clear()
            self._wake_waiters()
            self._cond.notify_all()
        self._reap_now.set()
        for slot in slots:
            self._destroy(slot)
        self._reaper.join(timeout=2)

    # -- admission -----------------------------------------------------------------
    def _acquire(self, spec: ActionSpec, claim: str | None, state: ContainerState, wait_s: float | None,
                 reservation: str | None = None) -> _Grant:
        need = spec.memory_mb * MB
        if need > self.budget_bytes:
            raise PlatformUnavailable(
                f"action memory {spec.memory_mb} MB exceeds the node's container budget of {self.user_memory_mb} MB"
            )
        deadline = None if wait_s is None else time.monotonic() + wait_s
        ticket = MemoryWait(spec.tenant, need)
        handoffs: list[tuple[asyncio.Future[Slot | None], Slot]] = []
        try:
            with self._cond:
                try:
                    return self._wait_for_capacity(spec, claim, state, reservation, need, deadline, ticket)
                finally:
                    if ticket in self._queue:
                        self._queue.remove(ticket)
                        handoffs = self._hand_idle_to_waiters()  # a container kept for it may be free now
                    self._cond.notify_all()
        finally:
            for turn, slot in handoffs:
                _resolve(turn, slot, self._release)

    def _wait_for_capacity(self, spec: ActionSpec, claim: str | None, state: ContainerState,
                           reservation: str | None, need: int, deadline: float | None,
                           ticket: MemoryWait) -> _Grant:
        """:meth:`_acquire`'s wait (under the lock)."""
        while True:
            self._check_open()
            if state == "warm":
                slot = self._claimed(claim, spec.key) or self._warm(spec.key)
                if slot is not None:
                    slot.in_flight += 1
                    slot.state = "warm"
                    if reservation:  # an existing container: the memory held in advance is not needed
                        self.ledger.release(reservation)
                    return _Grant(slot=slot)
                reserved = self.ledger.take(reservation, self.node) if reservation else 0
                if reserved:  # memory held for this activation in advance: no queue, nor a turn to wait for
                    self._start_turns.begin(spec.tenant)
                    return self._plan(spec, need, allow_stem=True, reserved=reserved)  # type: ignore[return-value]
            if ticket not in self._queue:
                self._queue.append(ticket)
            startable = self._startable()
            if startable and first_waiting(startable, self.held_by_tenant()) is ticket:
                grant = self._plan(spec, need, allow_stem=state == "warm")
                if grant is not None:
                    self._start_turns.begin(spec.tenant)
                    return grant
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise NoRoom(f"no memory for {spec.memory_mb} MB on node {self.node}")
            self._waiting += 1
            try:
                self._cond.wait(remaining)
            finally:
                self._waiting -= 1

    def _startable(self) -> list[MemoryWait]:
        """The requests waiting for memory whose tenants may start a container now (under the lock)."""
        return [wait for wait in self._queue if not self._start_turns.full(wait.tenant)]

    def _check_open(self) -> None:
        if self._closed:
            raise PlatformUnavailable(f"the container pool of node {self.node} is closed")
        if self._lost:
            raise PlatformUnavailable(f"node {self.node} is lost")

    def _claimed(self, claim: str | None, key: str) -> Slot | None:
        slot = self._slots.get(claim) if claim else None
        if slot is not None and slot.state == "claimed" and slot.key == key and slot.container.is_alive():
            return slot
        return None

    def _warm(self, key: str) -> Slot | None:
        """The free warm container of ``key`` to run on, if one is free and not owed to a request of
        another tenant waiting for memory (under the lock)."""
        free = [slot for slot in self._slots.of(key) if self._free_warm(slot, key)]
        if free and self._queue:
            free = [slot for slot in free if not self._owed(slot)]
        if len(free) < 2:
            return free[0] if free else None
        return max(free, key=lambda s: s.in_flight)  # pack concurrent activations

    def held_by_tenant(self) -> dict[str, int]:
        """The memory each tenant's containers and reservations hold here."""
        with self._lock:
            return held_by_tenant(self._slots.values(), self.ledger, self.node)

    def _owed(self, slot: Slot) -> bool:
        """Whether ``slot``, once idle, is kept for a request of another tenant waiting for memory,
        which will evict it (:func:`~owx.platform.embedded.memory_shares.yields`; under the lock)."""
        return slot.idle and yields(slot, self._startable(), self.held_by_tenant(), self.ledger.held(slot.holder))

    def _hand_idle_to_waiters(self) -> list[tuple[asyncio.Future[Slot | None], Slot]]:
        """Free warm containers handed to activations waiting for them on the loop, now that nobody
        they were kept for waits (under the lock; resolve the futures after it)."""
        handoffs = []
        for key in list(self._warm_waiters):
            while key in self._warm_waiters and (slot := self._warm(key)) is not None:
                turn = self._next_waiter(slot)
                if turn is None:
                    break
                handoffs.append((turn, slot))
        return handoffs

    @staticmethod
    def _free_warm(slot: Slot, key: str) -> bool:
        return (
            slot.state == "warm"
            and slot.key == key
            and slot.in_flight < slot.concurrency
            and slot.container.is_alive()
        )

    def _plan(self, spec: ActionSpec, need: int, allow_stem: bool, reserved: int = 0) -> _Grant | None:
        """Memory for a new container (or a stem cell's growth), evicting idle ones if that is enough.

        ``reserved`` bytes were held for this activation in advance: they are taken whether or not
        the node has room now (idle containers are evicted as far as that helps).
        """
        free = self.ledger.free(self.node) + self._evicting + reserved
        stem = self._idle_stem() if allow_stem and spec.kind in STEM_KINDS else None
        extra = need if stem is None else max(0, need - self.ledger.held(stem.holder))
        victims: list[Slot] = []
        if extra > free:
            for victim in self._evictable_for(spec, need, spared=stem):
                if extra <= free:
                    break
                victims.append(victim)
                free += self.ledger.held(victim.holder)
            if extra > free and not reserved:
                return None
        for victim in victims:
            self._slots.remove(victim.container.id)
            self._evicting += self.ledger.held(victim.holder)
            if victim.key is not None:
                self._wake_waiters(victim.key)  # an owed container may have been its action's last
        ticket = f"starting:{self.node}:{next(_tickets)}"
        self.ledger.hold(ticket, self.node, max(extra, reserved), force=True)
        grant = _Grant(slot=stem, ticket=ticket, victims=victims, from_stem=stem is not None)
        if stem is not None:
            stem.state, stem.in_flight = "starting", 1
            self._slots.serve(stem, spec.key)
        return grant

    def _idle_stem(self) -> Slot | None:
        return next(
            (s for s in self._slots.values() if s.state == "stem" and s.idle and s.container.is_alive()), None
        )

    def _evictable_for(self, spec: ActionSpec, need: int, spared: Slot | None = None) -> list[Slot]:
        """The idle containers a new container of ``spec`` needing ``need`` bytes may evict (all but
        ``spared``), in the order they go: other actions' warm containers first, least recently used
        first (under the lock)."""
        held, now, tenant = self.held_by_tenant(), time.monotonic(), spec.tenant
        return sorted(
            (s for s in self._slots.values() if self._evictable(s) and s is not spared
             and may_evict(s, self.ledger.held(s.holder), tenant, need, held, now - s.last_used,
                           self.settings.fair_keep_idle_s)),
            key=lambda s: (s.state == "stem", s.last_used),
        )

    @staticmethod
    def _evictable(slot: Slot) -> bool:
        return slot.idle and slot.state in ("warm", "stem")

    # -- container start ---------------------------------------------------------------
    def _start_for(
        self, spec: ActionSpec, name: str, grant: _Grant, state: ContainerState = "warm",
        activation_env: dict[str, str] | None = None,
    ) -> _Start:
        """Make (or adapt a stem cell into) an initialised container for ``spec``. ``activation_env``:
        the ``__OW_*`` variables of the activation it starts for, which the action's module code sees
        at init (OpenWhisk's invoker gives them there too)."""
        try:
            self._evict(grant)
            return self._start_granted(spec, name, grant, state, activation_env)
        finally:
            with self._cond:
                self._start_turns.end(spec.tenant)
                self._cond.notify_all()

    def _start_granted(self, spec: ActionSpec, name: str, grant: _Grant, state: ContainerState,
                       activation_env: dict[str, str] | None) -> _Start:
        started = time.time()
        slot = grant.slot
        try:
            if slot is None:
                container = self._create(spec.kind, spec.image, spec.memory_mb, spec.key)
                slot = Slot(container, "starting", spec.key, in_flight=1)
                self._adopt(slot, grant.ticket)
            else:
                slot.container.logs.discard_pending()
                self._fit_stem(slot, spec.memory_mb * MB, grant.ticket)
        except Exception as exc:  # noqa: BLE001 - any start failure is the platform's, reported as such
            self._unreserve(grant.ticket)
            if slot is not None:
                self._drop(slot)
            if isinstance(exc, ActionStartupError):
                log.info("no container for %s on %s: %s", spec.key, self.node, exc)
                return _Start(None, self._failure(DEVELOPER_ERROR, str(exc), started), started)
            log.exception("could not start a container for %s on %s", spec.key, self.node)
            return _Start(None, self._failure(INTERNAL_ERROR, START_FAILED, started), started)
        if grant.from_stem:
            self._replenish_stems()
        slot.concurrency = max(1, spec.concurrency)
        container = slot.container
        container.assign(spec.tenant, own_code=spec.tenant == spec.namespace)
        self._share_cpu(spec.tenant)  # before its /init, which competes for the CPU with other tenants'
        container.logs.limit_bytes = spec.logs_bytes
        value = {"name": name, "main": spec.main, "code": spec.code or "", "binary": spec.binary,
                 "env": {**spec.env, **(activation_env or {})}}
        init_sent = time.time()
        try:
            response = container.init(value, spec.timeout_ms / 1000)
        except ProxyTimeout:
            container.kill("timeout")
            message, failure = INIT_TIMEOUT_MESSAGE.format(ms=spec.timeout_ms), "timeout"
        except ProxyAnswerTooLong as exc:
            message, failure = f"{INVALID_INIT_MESSAGE}: {exc}", "init"
        except ProxyUnreachable as exc:
            log.info("init of %s on %s failed: %s", spec.key, container.id, exc)
            message, failure = self._death_message(container, INIT_EXITED_MESSAGE)
        else:
            if response.ok:
                with self._cond:
                    slot.state = state
                    self._slots.serve(slot, spec.key)
                return _Start(slot, None, init_sent)
            message, failure = outcomes.init_error(response)["error"], "init"
        return _Start(slot, self._fail_slot(slot, spec, init_sent, message, failure), init_sent)

    def _fit_stem(self, slot: Slot, memory_bytes: int, ticket: str | None) -> None:
        """Give a stem cell the action's memory limit; the ledger follows the limit in force."""
        container = slot.container
        try:
            container.set_memory_limit(memory_bytes)
        except CgroupError as exc:  # a shrink below usage: keep the larger limit, it is still accounted
            log.info("stem cell %s keeps %d bytes: %s", container.id, container.memory_bytes, exc)
        if ticket:
            self.ledger.take(ticket, self.node)
        self.ledger.hold(slot.holder, self.node, container.memory_bytes, force=True)

    def _create(self, kind: str, image: str | None, memory_mb: int, key: str | None) -> Container:
        limits = limits_for(memory_mb, self.user_memory_mb, self.settings.user_cpus, self.settings.pids_max)
        labels = {"owx.node": self.node, "owx.action": key or "", "owx.kind": kind, "owx.pool": self.cgroup_parent}
        request = ContainerRequest(self.node, self.cgroup_parent, kind, image, limits, labels)
        return self.backend_for(kind).create(request)

    def _adopt(self, slot: Slot, ticket: str | None) -> None:
        """A new container joins the pool: it holds its memory under its own name from now on."""
        container = slot.container
        if ticket:
            self.ledger.take(ticket, self.node)
        self.ledger.hold(slot.holder, self.node, container.memory_bytes, force=True)
        container.on_exit(self._on_exit)
        with self._cond:
            self._slots.add(slot)
        info = self._info(slot)
        for listener in self._start_listeners:
            try:
                listener(info)
            except Exception:
                log.exception("start listener failed for %s", container.id)

    def _evict(self, grant: _Grant) -> None:
        for victim in grant.victims:
            freed = self._destroy(victim)
            with self._cond:
                self._evicting -= freed
                self._cond.notify_all()

    def _unreserve(self, ticket: str | None) -> None:
        if ticket:
            self.ledger.release(ticket)

    # -- running -----------------------------------------------------------------------
    def _run_on(self, slot: Slot, spec: ActionSpec, request: RunRequest, started: float) -> RunOutcome:
        container = slot.container
        container.resume()
        oom_before = container.oom_kills_before_run()
        try:
            response = container.run(self._payload(spec, request), spec.timeout_ms / 1000, spec.result_bytes)
        except (ProxyTimeout, ProxyUnreachable) as exc:
            return self._lost_run(slot, spec, started, exc)
        logs = container.logs.collect(self.settings.sentinel_wait_s, spec.logs_bytes)
        return self._judged(slot, spec, response, oom_before, logs, started)

    def _lost_run(self, slot: Slot, spec: ActionSpec, started: float, exc: Exception) -> RunOutcome:
        """The container did not answer ``/run`` in time, or its connection broke (blocking)."""
        if isinstance(exc, ProxyTimeout):
            slot.container.kill("timeout")
            return self._fail_slot(slot, spec, started, TIMEOUT_MESSAGE.format(ms=spec.timeout_ms), "timeout")
        message, failure = self._death_message(slot.container, EXITED_MESSAGE)
        return self._fail_slot(slot, spec, started, message, failure)

    def _judged(self, slot: Slot, spec: ActionSpec, response: ProxyResponse, oom_before: int, logs: list[str],
                started: float) -> RunOutcome:
        """The outcome of an answered ``/run``: the action's, or an OOM kill's when the kernel counted one."""
        container = slot.container
        status, result = outcomes.classify_run(response)
        failure = None
        if not response.ok and container.oom_kills() > oom_before:
            status, result, failure = DEVELOPER_ERROR, outcomes.error(OOM_MESSAGE), "oom"
        outcome = self._outcome(status, result, logs, started, container, failure)
        outcome.checked = response.checked and failure is None
        return outcome

    def _death_message(self, container: Container, exited_message: str) -> tuple[str, str]:
        container.wait_dead(DEATH_GRACE_S)
        if container.exit_reason == "oom":
            return OOM_MESSAGE, "oom"
        return exited_message, "exited"

    def _fail_slot(self, slot: Slot, spec: ActionSpec, started: float, message: str, failure: str) -> RunOutcome:
        """The container failed this activation: answer a developer error and get rid of it."""
        container = slot.container
        if failure != "init":
            container.wait_dead(DEATH_GRACE_S)
        logs = container.logs.collect(self.settings.sentinel_wait_s if container.is_alive() else 0.0, spec.logs_bytes)
        self._drop(slot)
        return self._outcome(DEVELOPER_ERROR, outcomes.error(message), logs, started, container, failure)

    def _outcome(self, status, result, logs, started, container, failure) -> RunOutcome:
        try:
            peak = container.cgroup.memory_peak()
        except CgroupError:
            peak = None
        return RunOutcome(
            status=status,
            result=result,
            logs=logs,
            start_ms=_ms(started),
            end_ms=_ms(time.time()),
            container_id=container.id,
            node=self.node,
            memory_peak_bytes=peak,
            failure=failure,
            logs_checked=True,
        )

    def _failure(self, status, message: str, started: float) -> RunOutcome:
        now = _ms(time.time())
        return RunOutcome(status, outcomes.error(message), [], _ms(started), now, node=self.node)

    def _release(self, slot: Slot) -> None:
        with self._lock:
            slot.in_flight = max(0, slot.in_flight - 1)
            slot.last_used = time.monotonic()
            if self._waiting:
                self._cond.notify_all()
            turn = self._next_waiter(slot)
            if turn is None and self._reaper_dozing and self.pause_grace_s and slot.idle:
                self._reaper_dozing = False
                self._reap_now.set()  # to pause it after the grace, not after the long period
        if turn is not None:
            _resolve(turn, slot, self._release)

    def _next_waiter(self, slot: Slot) -> asyncio.Future[Slot | None] | None:
        """The first activation waiting on the loop for ``slot``'s action, now holding ``slot``, if it is
        free and one waits (under the lock)."""
        waiting = self._warm_waiters.get(slot.key or "")
        if not waiting or slot.state != "warm" or self._slots.get(slot.container.id) is not slot \
                or not self._free_warm(slot, slot.key or "") or (self._queue and self._owed(slot)):
            return None
        turn = waiting.popleft()
        if not waiting:
            del self._warm_waiters[slot.key or ""]
        slot.in_flight += 1
        return turn

    def _wake_waiters(self, key: str | None = None) -> None:
        """Tell the activations waiting for warm containers of ``key`` (None: every key) that none will
        free (their last one went): they run on a thread instead. Under the lock."""
        keys = [key] if key is not None else list(self._warm_waiters)
        for each in keys:
            if key is not None and self._has_warm(each):
                continue
            for turn in self._warm_waiters.pop(each, ()):
                _resolve(turn, None, None)

    def _drop(self, slot: Slot) -> None:
        with self._cond:
            if self._slots.get(slot.container.id) is slot:
                self._slots.remove(slot.container.id)
            self._wake_waiters(slot.key or "")
            self._cond.notify_all()
        self._destroy(slot)

    def _destroy(self, slot: Slot) -> int:
        """Destroy a container the pool no longer lists; then its memory is free. The bytes freed."""
        slot.container.destroy()
        freed = self.ledger.release(slot.holder)
        if slot.key is not None:
            self._share_cpu(tenant_of(slot.key))
        return freed

    def _share_cpu(self, tenant: str) -> None:
        """Give ``tenant``'s containers here their part of its CPU weight (:mod:`.cpu_shares`), after one
        of them started, went or was resized."""
        with self._shares_lock:
            with self._lock:
                mine = [s for s in self._slots.values() if s.key is not None and tenant_of(s.key) == tenant]
                shares = tenant_shares({s.container.id: self.ledger.held(s.holder) for s in mine})
            for slot in mine:
                wanted = shares[slot.container.id]
                if slot.cpu_shares == wanted:
                    continue
                try:
                    slot.container.cgroup.set_cpu_shares(wanted)
                except CgroupError:  # gone meanwhile: its end rebalances the rest
                    continue
                slot.cpu_shares = wanted

    # -- deaths, stem cells, idle eviction -------------------------------------------
    def _on_exit(self, container: Container, reason: DeathReason, code: int | None) -> None:
        with self._cond:
            slot = self._slots.get(container.id)
            key = slot.key if slot is not None else container.request.labels.get("owx.action") or None
            if slot is not None and slot.in_flight == 0:  # busy slots are dropped by their run
                self._slots.remove(container.id)
                self._wake_waiters(key or "")
            self._cond.notify_all()
        death = ContainerDeath(container.id, self.node, reason, key, container.died_at or time.time(), code)
        for listener in self._listeners:
            try:
                listener(death)
            except Exception:
                log.exception("death listener failed for %s", container.id)
        if slot is not None and slot.in_flight == 0:
            self._destroy(slot)
            self._replenish_stems()

    def _stem_wanted(self) -> str | None:
        """Hold memory for one more stem cell if the pool wants one and has room; the hold's name."""
        with self._cond:
            if self._closed or self._lost or self._queue:
                return None
            stems = sum(1 for s in self._slots.values() if s.state == "stem") + self._stems_starting
            if stems >= self.stem_target:
                return None
            ticket = f"starting:{self.node}:{next(_tickets)}"
            if not self.ledger.hold(ticket, self.node, self.settings.stem_memory_mb * MB):
                return None
            self._stems_starting += 1
            return ticket

    def _make_stem(self, ticket: str) -> bool:
        """Create one stem cell whose memory ``_stem_wanted`` held; False if that failed."""
        try:
            container = self._create(STEM_KIND, None, self.settings.stem_memory_mb, None)
        except Exception:  # noqa: BLE001 - a missing stem cell only costs a cold start later
            log.exception("could not start a stem cell on %s", self.node)
            container = None
        with self._cond:
            self._stems_starting -= 1
            keep = container is not None and not (self._closed or self._lost)
        if container is None:
            self.ledger.release(ticket)
        elif keep:
            self._adopt(Slot(container, "stem", None), ticket)
        else:
            self.ledger.release(ticket)
            container.destroy()
        with self._cond:
            self._cond.notify_all()
        return container is not None

    def _replenish_stems(self) -> None:
        ticket = self._stem_wanted()
        if ticket is not None:
            threading.Thread(target=self._replenish_loop, args=(ticket,), name=f"owx-pool-{self.node}-stem",
                             daemon=True).start()

    def _replenish_loop(self, ticket: str) -> None:
        self._make_stem(ticket)
        self.start_stem_cells()

    def _ledger_changed(self) -> None:
        with self._cond:
            self._cond.notify_all()  # waiting requests look again
        self._reap_now.set()  # the reaper sheds an overcommit

    def _reap_idle(self) -> None:
        """Pause warm containers idle for ``pause_grace_s``; remove idle warm containers after
        ``idle_evict_s``, and idle ones of any age while others' forced holds keep the node over its
        budget (`overcommit_victims`)."""
        long_period = min(1.0, self.idle_evict_s / 4)
        period = long_period
        while True:
            self._reap_now.wait(period)
            self._reap_now.clear()
            with self._cond:
                if self._closed:
                    return
                period = self._pause_idle(long_period)
                cutoff = time.monotonic() - self.idle_evict_s
                stale = [s for s in self._slots.values() if s.state == "warm" and s.idle and s.last_used < cutoff]
                over = -(self.ledger.free(self.node) + self._evicting)
                if over > 0:
                    idle = [s for s in self._slots.values() if self._evictable(s) and s not in stale]
                    stale += overcommit_victims(idle, over, self.held_by_tenant(),
                                                lambda s: self.ledger.held(s.holder),
                                                time.monotonic() - self.settings.fair_keep_idle_s)
                for slot in stale:
                    self._slots.remove(slot.container.id)
                if stale:
                    self._cond.notify_all()
            for slot in stale:
                self._destroy(slot)

    def _pause_idle(self, long_period: float) -> float:
        """Pause the warm containers idle for the pause grace (under the lock, so none is claimed
        meanwhile); the reaper's next period: the grace while others may come due, else ``long_period``."""
        if not self.pause_grace_s:
            return long_period
        now = time.monotonic()
        due = [s for s in self._slots.values() if s.state == "warm" and s.idle and not s.container.paused]
        for slot in due:
            if now - slot.last_used >= self.pause_grace_s:
                slot.container.pause()
        coming = [s.last_used + self.pause_grace_s - now for s in due if not s.container.paused]
        self._reaper_dozing = not coming
        return max(0.005, min(coming)) if coming else long_period

    def _info(self, slot: Slot) -> ContainerInfo:
        container = slot.container
        return ContainerInfo(
            id=container.id,
            node=self.node,
            backend=container.backend_name,
            state=slot.state,
            action_key=slot.key,
            memory_bytes=self.ledger.held(slot.holder) or container.memory_bytes,
            cgroup=container.cgroup.relpath,
            pid=container.pid,
            in_flight=slot.in_flight,
        )


def _ms(epoch: float) -> int:
    return int(epoch * 1000)


def _deadline_ms(spec: ActionSpec) -> int:
    """The deadline of a request sent now to an action of ``spec``."""
    return _ms(time.time()) + spec.timeout_ms


def _resolve(turn: asyncio.Future[Slot | None], slot: Slot | None,
             give_back: Callable[[Slot], None] | None) -> None:
    """Hand ``slot`` (or None) to a waiting activation from any thread; a wait that was cancelled
    meanwhile gives the slot back."""
    def settle() -> None:
        if turn.cancelled():
            if slot is not None and give_back is not None:
                give_back(slot)
        elif not turn.done():
            turn.set_result(slot)

    call_on(turn.get_loop(), settle)


async def _complete(logs: LogCollector, timeout_s: float) -> None:
    """Wait until ``logs`` has an activation's lines, or ``timeout_s`` (the collector then says what is
    missing). Its callback comes from the loop (the output's reader) or another thread (a container's end)."""
    loop = asyncio.get_running_loop()
    done = loop.create_future()

    def settle() -> None:
        if not done.done():
            done.set_result(None)

    if logs.when_complete(lambda: call_on(loop, settle)):
        return
    timer = loop.call_later(timeout_s, settle)
    try:
        await done
    finally:
        timer.cancel()
