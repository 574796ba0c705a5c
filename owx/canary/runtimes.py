"""The runtime manager: replicated runtimes per action, launched, handed out and retired.

It counts the active functions of each runtime, asks Algorithm 5
(:mod:`owx.canary.replication`) for the replicas they need, starts them in the
background on the nodes placement chooses (memory permitting), hands the best one to a
failed function, replaces it, and retires a runtime's replicas once it has had no active
function for ``linger_s``. Every replica has a ``replication_info`` row. A failed function that
finds no warm replica but one still starting waits for it (up to ``wait_s``): the replica is
further along than a new container would be, and a cold start beside it would only compete with
it for the node's CPU.

On a platform that cannot pin a run to a container (``platform.replicas is None``: an upstream
OpenWhisk), a replica is a keep-warm activation instead: the runtime stays warm upstream, but no
particular container is handed out, so recovery re-runs the function (from its checkpoint) wherever
the platform places it.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from owx.canary.options import Replication
from owx.canary.replication import FailureRate, decide, placement
from owx.canary.tables import CoreTables, ReplicationInfo, now_ms
from owx.platform import Platform
from owx.platform.interface import NoRoom, PlatformUnavailable, ReplicaControl, ReplicaFailed
from owx.platform.types import ActionSpec, ContainerDeath

log = logging.getLogger(__name__)


@dataclass
class Replica:
    container_id: str
    node: str
    row: ReplicationInfo


@dataclass
class Runtime:
    """One action's code and kind, with its functions and replicas."""

    spec: ActionSpec
    namespace: str
    strategy: Replication
    active: int = 0
    job_nodes: list[str] = field(default_factory=list)
    replicas: dict[str, Replica] = field(default_factory=dict)
    starting: list[str] = field(default_factory=list)  # the nodes of replicas being started
    idle_since: float | None = None


class RuntimeManager:
    """Replicas of every stateful runtime on the platform."""

    def __init__(self, platform: Platform, tables: CoreTables, failures: FailureRate, linger_s: float,
                 wait_s: float) -> None:
        self.platform = platform
        self.tables = tables
        self.failures = failures
        self.linger_s = linger_s
        self.wait_s = wait_s
        self._runtimes: dict[str, Runtime] = {}
        self._lock = threading.Lock()
        self._started = threading.Condition(self._lock)  # a replica start ended (warm or not)
        self._launcher = ThreadPoolExecutor(2, thread_name_prefix="owx-canary-replica")
        self._closed = threading.Event()
        self._reaper = threading.Thread(target=self._reap, name="owx-canary-retire", daemon=True)
        self._reaper.start()

    # -- functions come and go ------------------------------------------------------------
    def functions_started(self, namespace: str, spec: ActionSpec, strategy: Replication, job_id: str,
                          nodes: list[str]) -> None:
        """``len(nodes)`` functions of ``spec`` were scheduled on ``nodes``: run Algorithm 5."""
        with self._lock:
            runtime = self._runtimes.get(spec.key)
            if runtime is None:
                runtime = self._runtimes[spec.key] = Runtime(spec, namespace, strategy)
            scheduled = len(nodes)
            runtime.job_nodes = list(dict.fromkeys(nodes + runtime.job_nodes))
            decision = decide(strategy, runtime.active, scheduled, len(runtime.replicas) + len(runtime.starting),
                              self.failures.value)
            runtime.active += scheduled
            runtime.idle_since = None
            launches = self._plan_launches(runtime, decision.launch)
        for node in launches:
            self._launch(runtime, node, job_id)

    def function_ended(self, spec: ActionSpec) -> None:
        """One function of ``spec`` ended. Its replicas stay while the runtime has functions
        (trimming them at every end and launching them again at the next start would burn a
        container start each time); they are retired after ``linger_s`` without functions."""
        with self._lock:
            runtime = self._runtimes.get(spec.key)
            if runtime is None:
                return
            runtime.active = max(0, runtime.active - 1)
            if runtime.active == 0:
                runtime.idle_since = time.monotonic()

    def replenish(self, spec: ActionSpec, job_id: str) -> None:
        """Re-run Algorithm 5 for a runtime (after a replica was used or lost)."""
        with self._lock:
            runtime = self._runtimes.get(spec.key)
            if runtime is None or runtime.active == 0:
                return
            decision = decide(runtime.strategy, runtime.active, 0, len(runtime.replicas) + len(runtime.starting),
                              self.failures.value)
            launches = self._plan_launches(runtime, decision.launch)
        for node in launches:
            self._launch(runtime, node, job_id)

    # -- recovery ---------------------------------------------------------------------------
    def take(self, spec: ActionSpec, function_id: str, avoid: set[str]) -> Replica | None:
        """Claim the best live replica of ``spec`` for ``function_id`` (not on ``avoid`` nodes): on
        the node with the most free memory; if none is warm but some are starting, the first of them
        to be ready (waiting up to ``wait_s``); None if there is none."""
        control = self.platform.replicas
        if control is None:  # keep-warm activations upstream: no container to hand out
            return None
        deadline = time.monotonic() + self.wait_s
        while (replica := self._claim(control, spec, function_id, avoid)) is None:
            with self._lock:
                runtime = self._runtimes.get(spec.key)
                pending = runtime is not None and any(node not in avoid and self._alive(node)
                                                      for node in runtime.starting)
                left = deadline - time.monotonic()
                if not pending or left <= 0:
                    return None
                self._started.wait(left)
        return replica

    def _claim(self, control: ReplicaControl, spec: ActionSpec, function_id: str, avoid: set[str]) -> Replica | None:
        with self._lock:
            runtime = self._runtimes.get(spec.key)
            candidates = [] if runtime is None else [
                r for r in runtime.replicas.values() if r.node not in avoid and self._alive(r.node)
            ]
            candidates.sort(key=lambda r: -self.platform.ledger.free(r.node))
        for replica in candidates:
            claimed = control.claim(spec, replica.node)
            if claimed is None:
                continue
            with self._lock:
                chosen = runtime.replicas.pop(claimed, None) if runtime else None
            if chosen is None:  # the pool handed out another replica of the same node than listed
                continue
            self._finish_row(chosen, "used", function_id)
            return chosen
        return None

    def lost(self, death: ContainerDeath) -> None:
        """A container died: if it was a replica, forget it and replace it."""
        with self._lock:
            found = next(((rt, rt.replicas.pop(death.container_id)) for rt in self._runtimes.values()
                          if death.container_id in rt.replicas), None)
        if found is None:
            return
        runtime, replica = found
        self._finish_row(replica, "lost", None)
        self.replenish(runtime.spec, replica.row.job_id)

    def retire_idle(self) -> bool:
        """Retire the replicas of runtimes without active functions now (to admit a waiting job)."""
        with self._lock:
            idle = [rt for rt in self._runtimes.values() if rt.active == 0 and rt.replicas]
        for runtime in idle:
            self._retire(runtime, keep=0)
        return bool(idle)

    def close(self) -> None:
        self._closed.set()
        self._launcher.shutdown(wait=True, cancel_futures=True)
        self._reaper.join(timeout=2)
        with self._lock:
            runtimes = list(self._runtimes.values())
        for runtime in runtimes:
            self._retire(runtime, keep=0)

    # -- internals -------------------------------------------------------------------------
    def _alive(self, node: str) -> bool:
        return node in self.platform.live_nodes()

    def _plan_launches(self, runtime: Runtime, count: int) -> list[str]:
        live = self.platform.live_nodes()
        existing = [r.node for r in runtime.replicas.values()]
        nodes = placement(count, runtime.job_nodes, live, existing)
        runtime.starting.extend(nodes)
        return nodes

    def _launch(self, runtime: Runtime, node: str, job_id: str) -> None:
        try:
            self._launcher.submit(self._start_replica, runtime, node, job_id)
        except RuntimeError:  # closing
            with self._lock:
                runtime.starting.remove(node)

    def _start_replica(self, runtime: Runtime, node: str, job_id: str) -> None:
        spec = runtime.spec
        control = self.platform.replicas
        info = None
        try:
            if control is None:
                self.platform.keep_warm(spec)
            elif self._alive(node):
                info = control.prewarm(spec, node)
        except (NoRoom, PlatformUnavailable, ReplicaFailed) as exc:
            log.info("no replica of %s on %s: %s", spec.key, node, exc)
        with self._lock:
            runtime.starting.remove(node)
            self._started.notify_all()
            if info is None:
                return
            replica = Replica(info.id, node, ReplicationInfo(
                replica_id=info.id, runtime=spec.kind, runtime_key=spec.key, job_id=job_id, worker=node,
                created=now_ms()))
            runtime.replicas[info.id] = replica
        self.tables.put(runtime.namespace, replica.row)

    def _finish_row(self, replica: Replica, state: str, used_by: str | None) -> None:
        row = replica.row
        row.state, row.used_by, row.ended = state, used_by, now_ms()  # type: ignore[assignment]
        namespace = self._namespace_of(row.runtime_key)
        self.tables.put(namespace, row)

    def _namespace_of(self, key: str) -> str:
        with self._lock:
            runtime = self._runtimes.get(key)
        return runtime.namespace if runtime else key.split("/", 1)[0]

    def _reap(self) -> None:
        while not self._closed.wait(0.5):
            now = time.monotonic()
            with self._lock:
                idle = [rt for rt in self._runtimes.values()
                        if rt.active == 0 and rt.idle_since is not None and now - rt.idle_since >= self.linger_s]
            for runtime in idle:
                self._retire(runtime, keep=0)

    def _retire(self, runtime: Runtime, keep: int) -> None:
        with self._lock:
            surplus = list(runtime.replicas.values())[keep:]
            for replica in surplus:
                runtime.replicas.pop(replica.container_id, None)
        for replica in surplus:
            if self.platform.replicas is not None:
                self.platform.replicas.remove(replica.container_id)
            self._finish_row(replica, "retired", None)
