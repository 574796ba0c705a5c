"""A node's container pool: warm reuse, stem cells, a memory budget with a FIFO queue, replicas.

``run(spec, request)`` is the only path for traffic and never raises for action
failures.  Memory admission follows OpenWhisk's invoker: every container counts
its current memory limit against ``user_memory_mb``; a request that needs a new
container waits in FIFO order while the budget is full, after idle containers of
other actions (then idle stem cells) have been evicted to make room.  Requests
that find a free warm container of their action never wait behind that queue.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from owx.common.cgroups import CgroupError
from owx.gateway.platform import outcome as outcomes
from owx.gateway.platform.container import Backend, Container, ContainerRequest
from owx.gateway.platform.limits import MB, limits_for
from owx.gateway.platform.proxy import ProxyTimeout, ProxyUnreachable
from owx.gateway.platform.settings import PlatformSettings
from owx.gateway.platform.types import (
    DEVELOPER_ERROR,
    EXITED_MESSAGE,
    INIT_EXITED_MESSAGE,
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
)

log = logging.getLogger(__name__)

STEM_KIND = "python:3"
STEM_KINDS = frozenset({"python:3", "python:3.11", "python:default"})
DEATH_GRACE_S = 0.5  # after a broken connection, how long to wait for the exit to be seen

DeathListener = Callable[[ContainerDeath], None]


class PoolUnavailable(RuntimeError):
    """The pool cannot take work: closed, node lost, or the action can never fit its budget."""


class PoolFull(RuntimeError):
    """No memory for a replica right now."""


class ReplicaError(RuntimeError):
    """A replica could not be started or initialised."""


@dataclass(eq=False)
class Slot:
    """One container and its place in the pool."""

    container: Container
    state: ContainerState
    key: str | None
    concurrency: int = 1
    in_flight: int = 0
    last_used: float = field(default_factory=time.monotonic)

    @property
    def memory_bytes(self) -> int:
        return self.container.memory_bytes

    @property
    def idle(self) -> bool:
        return self.in_flight == 0


@dataclass(eq=False)
class _Grant:
    """Capacity handed to one request: an existing slot, or bytes reserved for a new container."""

    slot: Slot | None = None
    reserved: int = 0
    victims: list[Slot] = field(default_factory=list)
    from_stem: bool = False


class ContainerPool:
    """Containers of one node; thread-safe, many concurrent callers."""

    def __init__(
        self,
        node: str,
        backend: Backend,
        cgroup_parent: str,
        user_memory_mb: int,
        stem_cells: int,
        idle_evict_s: float,
        settings: PlatformSettings | None = None,
    ) -> None:
        self.node = node
        self.backend = backend
        self.cgroup_parent = cgroup_parent
        self.user_memory_mb = user_memory_mb
        self.budget_bytes = user_memory_mb * MB
        self.stem_target = stem_cells
        self.idle_evict_s = idle_evict_s
        self.settings = settings or PlatformSettings()
        self._slots: dict[str, Slot] = {}
        self._reserved = 0  # bytes of containers being created or destroyed
        self._holds: dict[str, int] = {}  # memory held outside containers (Escra's OOM-rescue reserves)
        self._queue: deque[object] = deque()
        self._cond = threading.Condition()
        self._listeners: list[DeathListener] = []
        self._closed = False
        self._lost = False
        self._stems_starting = 0
        self._reaper = threading.Thread(target=self._reap_idle, name=f"owx-pool-{node}-reaper", daemon=True)
        self._reaper.start()

    # -- traffic ---------------------------------------------------------------
    def run(self, spec: ActionSpec, request: RunRequest, claim: str | None = None) -> RunOutcome:
        """Run one activation; ``claim`` names a replica taken with :meth:`claim_replica`."""
        entered = time.time()
        try:
            grant = self._acquire(spec, claim, state="warm", wait_s=None)
        except PoolUnavailable as exc:
            now = _ms(time.time())
            return RunOutcome(INTERNAL_ERROR, outcomes.error(str(exc)), [], now, now, node=self.node)
        started = time.time()
        wait_ms = _ms(started) - _ms(entered)
        slot = grant.slot
        init_ms = None
        if slot is None or grant.from_stem:
            slot, failed = self._start_for(spec, request.action_name, grant, started)
            if failed is not None:
                failed.wait_ms = wait_ms
                return failed
            assert slot is not None
            init_ms = _ms(time.time()) - _ms(started)
        try:
            result = self._run_on(slot, spec, request, started)
        except Exception as exc:  # a platform bug must not reach the caller as an exception
            log.exception("running %s on %s failed", spec.key, slot.container.id)
            self._drop(slot)
            result = self._failure(INTERNAL_ERROR, f"the platform failed to run the action: {exc}", started)
        finally:
            self._release(slot)
        result.wait_ms, result.init_ms = wait_ms, init_ms
        return result

    # -- hooks for Canary --------------------------------------------------------
    def prewarm(self, spec: ActionSpec, wait_s: float = 0.0) -> ContainerInfo:
        """Start and initialise a replica of ``spec``; it takes no traffic until claimed.

        Raises PoolFull when the budget has no room within ``wait_s`` seconds (idle
        containers of other actions are evicted first), ReplicaError when it fails to start.
        """
        grant = self._acquire(spec, None, state="replica", wait_s=wait_s)
        slot, failed = self._start_for(spec, spec.key, grant, time.time(), state="replica")
        if failed is not None or slot is None:
            raise ReplicaError(str(failed.result if failed else "no container"))
        self._release(slot)
        return self._info(slot)

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

    # -- hooks for Escra ---------------------------------------------------------
    def resize(self, container_id: str, memory_bytes: int, apply: bool = True) -> bool:
        """Record (and with ``apply`` set) a container's new memory limit; False if unknown.

        Escra calls this with ``apply=False`` after writing the cgroup itself, so the
        pool's budget always sums the limits in force.  Raises CgroupError when the
        kernel refuses the new limit.
        """
        with self._cond:
            slot = self._slots.get(container_id)
        if slot is None:
            return False
        if apply:
            slot.container.set_memory_limit(memory_bytes)
        else:
            slot.container.memory_bytes = memory_bytes
        with self._cond:
            self._cond.notify_all()
        return True

    # Escra's PoolLedger: the pool's budget is the application's global memory limit.
    def on_resize(self, container_id: str, memory_bytes: int) -> None:
        """Escra wrote ``container_id``'s limit itself; account it (0: Escra stopped tracking it)."""
        if memory_bytes > 0:
            self.resize(container_id, memory_bytes, apply=False)

    def on_hold(self, holder: str, memory_bytes: int) -> None:
        """Account ``memory_bytes`` held by ``holder`` outside any container (0 releases it)."""
        with self._cond:
            if memory_bytes > 0:
                self._holds[holder] = memory_bytes
            else:
                self._holds.pop(holder, None)
            self._cond.notify_all()

    def free_bytes(self) -> int:
        """Budget not accounted to a container, a container being made, or a hold."""
        with self._cond:
            return max(0, self.budget_bytes - self._used())

    def containers(self) -> list[ContainerInfo]:
        """Every live container with its state, limit and cgroup path."""
        with self._cond:
            return [self._info(slot) for slot in self._slots.values()]

    def used_bytes(self) -> int:
        with self._cond:
            return self._used()

    def queued(self) -> int:
        with self._cond:
            return len(self._queue)

    def has_idle_warm(self, key: str) -> bool:
        with self._cond:
            return any(self._free_warm(slot, key) for slot in self._slots.values())

    def remove(self, container_id: str) -> bool:
        """Destroy one container (e.g. a replica no longer needed); False if unknown."""
        with self._cond:
            slot = self._slots.pop(container_id, None)
            self._cond.notify_all()
        if slot is None:
            return False
        slot.container.destroy()
        return True

    # -- lifecycle ---------------------------------------------------------------
    def start_stem_cells(self) -> None:
        """Create the configured stem cells now (blocking) where the budget allows."""
        while self._stem_wanted():
            if not self._make_stem():
                break

    def kill_all(self, reason: DeathReason = "node-lost") -> None:
        """The node is lost: kill every container at once; new work is refused."""
        with self._cond:
            self._lost = True
            slots = list(self._slots.values())
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
            self._cond.notify_all()
        for slot in slots:
            slot.container.destroy()
        self._reaper.join(timeout=2)

    # -- admission -----------------------------------------------------------------
    def _acquire(self, spec: ActionSpec, claim: str | None, state: ContainerState, wait_s: float | None) -> _Grant:
        need = spec.memory_mb * MB
        if need > self.budget_bytes:
            raise PoolUnavailable(
                f"action memory {spec.memory_mb} MB exceeds the node's container budget of {self.user_memory_mb} MB"
            )
        deadline = None if wait_s is None else time.monotonic() + wait_s
        ticket = object()
        with self._cond:
            try:
                while True:
                    self._check_open()
                    if state == "warm":
                        slot = self._claimed(claim, spec.key) or self._warm(spec.key)
                        if slot is not None:
                            slot.in_flight += 1
                            slot.state = "warm"
                            return _Grant(slot=slot)
                    if ticket not in self._queue:
                        self._queue.append(ticket)
                    if self._queue[0] is ticket:
                        grant = self._plan(spec, need, allow_stem=state == "warm")
                        if grant is not None:
                            return grant
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise PoolFull(f"no memory for {spec.memory_mb} MB on node {self.node}")
                    self._cond.wait(remaining)
            finally:
                if ticket in self._queue:
                    self._queue.remove(ticket)
                self._cond.notify_all()

    def _check_open(self) -> None:
        if self._closed:
            raise PoolUnavailable(f"the container pool of node {self.node} is closed")
        if self._lost:
            raise PoolUnavailable(f"node {self.node} is lost")

    def _claimed(self, claim: str | None, key: str) -> Slot | None:
        slot = self._slots.get(claim) if claim else None
        if slot is not None and slot.state == "claimed" and slot.key == key and slot.container.is_alive():
            return slot
        return None

    def _warm(self, key: str) -> Slot | None:
        free = [slot for slot in self._slots.values() if self._free_warm(slot, key)]
        return max(free, key=lambda s: s.in_flight, default=None)  # pack concurrent activations

    @staticmethod
    def _free_warm(slot: Slot, key: str) -> bool:
        return (
            slot.state == "warm"
            and slot.key == key
            and slot.in_flight < slot.concurrency
            and slot.container.is_alive()
        )

    def _plan(self, spec: ActionSpec, need: int, allow_stem: bool) -> _Grant | None:
        """Capacity for a new container (or a stem cell), evicting idle ones if that is enough."""
        free = self.budget_bytes - self._used()
        stem = self._idle_stem() if allow_stem and spec.kind in STEM_KINDS else None
        extra = need if stem is None else max(0, need - stem.memory_bytes)
        victims: list[Slot] = []
        if extra > free:
            candidates = sorted(
                (s for s in self._slots.values() if s.idle and s is not stem and s.state in ("warm", "stem")),
                key=lambda s: (s.state == "stem", s.last_used),  # other actions' warm containers first, LRU
            )
            for victim in candidates:
                if extra <= free:
                    break
                victims.append(victim)
                free += victim.memory_bytes
            if extra > free:
                return None
        for victim in victims:
            del self._slots[victim.container.id]
            self._reserved += victim.memory_bytes
        self._reserved += extra
        grant = _Grant(slot=stem, reserved=extra, victims=victims, from_stem=stem is not None)
        if stem is not None:
            stem.state, stem.key, stem.in_flight = "starting", spec.key, 1
        return grant

    def _idle_stem(self) -> Slot | None:
        return next(
            (s for s in self._slots.values() if s.state == "stem" and s.idle and s.container.is_alive()), None
        )

    def _used(self) -> int:
        held = sum(self._holds.values())
        return self._reserved + held + sum(slot.memory_bytes for slot in self._slots.values())

    # -- container start ---------------------------------------------------------------
    def _start_for(
        self, spec: ActionSpec, name: str, grant: _Grant, started: float, state: ContainerState = "warm"
    ) -> tuple[Slot | None, RunOutcome | None]:
        """Make (or adapt a stem cell into) an initialised container for ``spec``."""
        self._evict(grant)
        slot = grant.slot
        try:
            if slot is None:
                container = self.backend.create(self._request(spec.kind, spec.image, spec.memory_mb, spec.key))
                slot = Slot(container, "starting", spec.key, in_flight=1)
                container.on_exit(self._on_exit)
                with self._cond:
                    self._slots[container.id] = slot
            else:
                slot.container.logs.discard_pending()
                self._fit_stem(slot.container, spec.memory_mb * MB)
        except Exception as exc:  # noqa: BLE001 - any start failure is the platform's, reported as such
            log.exception("could not start a container for %s on %s", spec.key, self.node)
            self._unreserve(grant.reserved)
            if slot is not None:
                self._drop(slot)
            return None, self._failure(INTERNAL_ERROR, f"could not start a container: {exc}", started)
        self._unreserve(grant.reserved)
        if grant.from_stem:
            self._replenish_stems()
        slot.concurrency = max(1, spec.concurrency)
        container = slot.container
        container.logs.limit_bytes = spec.logs_bytes
        value = {"name": name, "main": spec.main, "code": spec.code or "", "binary": spec.binary, "env": spec.env}
        try:
            response = container.init(value, spec.timeout_ms / 1000)
        except ProxyTimeout:
            container.kill("timeout")
            return slot, self._fail_slot(slot, spec, started, TIMEOUT_MESSAGE.format(ms=spec.timeout_ms), "timeout")
        except ProxyUnreachable as exc:
            log.info("init of %s on %s failed: %s", spec.key, container.id, exc)
            message, failure = self._death_message(container, INIT_EXITED_MESSAGE)
            return slot, self._fail_slot(slot, spec, started, message, failure)
        if not response.ok:
            return slot, self._fail_slot(slot, spec, started, outcomes.init_error(response)["error"], "init")
        with self._cond:
            slot.state = state
            slot.key = spec.key
        return slot, None

    def _fit_stem(self, container: Container, memory_bytes: int) -> None:
        try:
            container.set_memory_limit(memory_bytes)
        except CgroupError as exc:  # a shrink below usage: keep the larger limit, it is still accounted
            log.info("stem cell %s keeps %d bytes: %s", container.id, container.memory_bytes, exc)

    def _request(self, kind: str, image: str | None, memory_mb: int, key: str | None) -> ContainerRequest:
        limits = limits_for(memory_mb, self.user_memory_mb, self.settings.user_cpus, self.settings.pids_max)
        labels = {"owx.node": self.node, "owx.action": key or "", "owx.kind": kind, "owx.pool": self.cgroup_parent}
        return ContainerRequest(self.node, self.cgroup_parent, kind, image, limits, labels)

    def _evict(self, grant: _Grant) -> None:
        for victim in grant.victims:
            victim.container.destroy()
            self._unreserve(victim.memory_bytes)

    def _unreserve(self, amount: int) -> None:
        if amount:
            with self._cond:
                self._reserved -= amount
                self._cond.notify_all()

    # -- running -----------------------------------------------------------------------
    def _run_on(self, slot: Slot, spec: ActionSpec, request: RunRequest, started: float) -> RunOutcome:
        container = slot.container
        oom_before = container.oom_kills()
        try:
            response = container.run(request.payload(), spec.timeout_ms / 1000)
        except ProxyTimeout:
            container.kill("timeout")
            return self._fail_slot(slot, spec, started, TIMEOUT_MESSAGE.format(ms=spec.timeout_ms), "timeout")
        except ProxyUnreachable:
            message, failure = self._death_message(container, EXITED_MESSAGE)
            return self._fail_slot(slot, spec, started, message, failure)
        status, result = outcomes.classify_run(response)
        failure = None
        if not response.ok and container.oom_kills() > oom_before:
            status, result, failure = DEVELOPER_ERROR, outcomes.error(OOM_MESSAGE), "oom"
        logs = container.logs.collect(self.settings.sentinel_wait_s, spec.logs_bytes)
        return self._outcome(status, result, logs, started, container, failure)

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
            peak = container.cgroup.memory().max_usage
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
        )

    def _failure(self, status, message: str, started: float) -> RunOutcome:
        now = _ms(time.time())
        return RunOutcome(status, outcomes.error(message), [], _ms(started), now, node=self.node)

    def _release(self, slot: Slot) -> None:
        with self._cond:
            slot.in_flight = max(0, slot.in_flight - 1)
            slot.last_used = time.monotonic()
            self._cond.notify_all()

    def _drop(self, slot: Slot) -> None:
        with self._cond:
            if self._slots.get(slot.container.id) is slot:
                del self._slots[slot.container.id]
            self._cond.notify_all()
        slot.container.destroy()

    # -- deaths, stem cells, idle eviction -------------------------------------------
    def _on_exit(self, container: Container, reason: DeathReason, code: int | None) -> None:
        with self._cond:
            slot = self._slots.get(container.id)
            key = slot.key if slot is not None else container.request.labels.get("owx.action") or None
            if slot is not None and slot.in_flight == 0:  # busy slots are dropped by their run
                del self._slots[container.id]
            self._cond.notify_all()
        death = ContainerDeath(container.id, self.node, reason, key, container.died_at or time.time(), code)
        for listener in self._listeners:
            try:
                listener(death)
            except Exception:
                log.exception("death listener failed for %s", container.id)
        if slot is not None and slot.in_flight == 0:
            container.destroy()
            self._replenish_stems()

    def _stem_wanted(self) -> bool:
        with self._cond:
            if self._closed or self._lost or self._queue:
                return False
            stems = sum(1 for s in self._slots.values() if s.state == "stem") + self._stems_starting
            room = self.budget_bytes - self._used() >= self.settings.stem_memory_mb * MB
            if stems >= self.stem_target or not room:
                return False
            self._stems_starting += 1
            self._reserved += self.settings.stem_memory_mb * MB
            return True

    def _make_stem(self) -> bool:
        """Create one stem cell whose memory ``_stem_wanted`` reserved; False if that failed."""
        try:
            container = self.backend.create(self._request(STEM_KIND, None, self.settings.stem_memory_mb, None))
        except Exception:  # noqa: BLE001 - a missing stem cell only costs a cold start later
            log.exception("could not start a stem cell on %s", self.node)
            container = None
        with self._cond:
            self._stems_starting -= 1
            self._reserved -= self.settings.stem_memory_mb * MB
            keep = container is not None and not (self._closed or self._lost)
            if keep:
                self._slots[container.id] = Slot(container, "stem", None)
                container.on_exit(self._on_exit)
            self._cond.notify_all()
        if container is not None and not keep:
            container.destroy()
        return container is not None

    def _replenish_stems(self) -> None:
        if self._stem_wanted():
            threading.Thread(target=self._replenish_loop, name=f"owx-pool-{self.node}-stem", daemon=True).start()

    def _replenish_loop(self) -> None:
        self._make_stem()
        self.start_stem_cells()

    def _reap_idle(self) -> None:
        period = min(1.0, self.idle_evict_s / 4)
        while True:
            with self._cond:
                self._cond.wait(period)
                if self._closed:
                    return
                cutoff = time.monotonic() - self.idle_evict_s
                stale = [s for s in self._slots.values() if s.state == "warm" and s.idle and s.last_used < cutoff]
                for slot in stale:
                    del self._slots[slot.container.id]
                if stale:
                    self._cond.notify_all()
            for slot in stale:
                slot.container.destroy()

    def _info(self, slot: Slot) -> ContainerInfo:
        container = slot.container
        return ContainerInfo(
            id=container.id,
            node=self.node,
            backend=container.backend_name,
            state=slot.state,
            action_key=slot.key,
            memory_bytes=container.memory_bytes,
            cgroup=container.cgroup.relpath,
            pid=container.pid,
            in_flight=slot.in_flight,
        )


def _ms(epoch: float) -> int:
    return int(epoch * 1000)
