"""Canary's core module: admission of stateful functions, their execution, and their records.

The gateway routes actions with a ``canary`` annotation here. :meth:`CanaryCore.gate`
admits the functions of a job together (memory reserved on nodes in the platform's ledger,
all or none, so two jobs never each hold half the pool while waiting for the rest; each
function's first container takes its reservation over) and runs Algorithm 5 for their runtime; :meth:`CanaryCore.run` executes one function with
the strategy its annotation selects (:mod:`owx.canary.strategies`), commits its result
exactly once and keeps the five tables up to date.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import wait
from typing import Any

from owx.canary.checkpoint import WARNING_PREFIX
from owx.canary.checkpoint_view import CheckpointView
from owx.canary.commits import Commit, ResultLedger
from owx.canary.deaths import DeathWatch
from owx.canary.function import Failure, Function
from owx.canary.options import BadAnnotation, CanaryOptions, options_of
from owx.canary.settings import CanarySettings
from owx.canary.replication import FailureRate
from owx.canary.runtimes import RuntimeManager
from owx.canary.store_location import StoreLocation
from owx.canary.strategies import STRATEGIES
from owx.canary.table_retention import TableRetention
from owx.canary.tables import (
    PLATFORM_NS,
    CoreTables,
    FunctionInfo,
    JobInfo,
    WorkerInfo,
    now_ms,
)
from owx.gateway.catalog import ResolvedAction
from owx.gateway.pipeline.invoke import action_spec
from owx.platform import Platform
from owx.platform.types import INTERNAL_ERROR, ActionSpec, ContainerDeath, RunOutcome, RunRequest

MB = 1024 * 1024
STATS = ("commits", "duplicates_discarded", "recoveries")

log = logging.getLogger(__name__)


class CanaryCore:
    """Everything Canary does for stateful actions inside one gateway."""

    def __init__(self, platform: Platform, tables: CoreTables, results: ResultLedger, settings: CanarySettings,
                 store: StoreLocation, pump: Callable[[], None], result_bytes: int) -> None:
        self.platform = platform
        self.result_bytes = result_bytes  # the gateway's result limit, for the specs its functions run with
        self.memory = platform.ledger
        self.tables = tables
        self.results = results
        self.settings = settings
        self.store = store
        self.pump = pump
        self.failure_rate = FailureRate(settings.failure_window)
        self.runtimes = RuntimeManager(platform, tables, self.failure_rate, settings.replica_linger_s,
                                       settings.replica_wait_s)
        self.deaths = DeathWatch()
        self.deaths.subscribe(self.runtimes.lost)
        self.deaths.subscribe(self._node_watch)
        platform.subscribe(self.deaths)
        self.checkpoints = CheckpointView(store.open, tables)
        self.retention = TableRetention(tables.store, settings.table_rows, settings.table_min_age_s)
        self._functions: dict[str, Function] = {}
        self._jobs: dict[str, str] = {}  # function id -> job id, for jobs submitted but not yet admitted
        self._options: dict[str, CanaryOptions] = {}  # by runtime key
        self._admissions: dict[str, tuple[JobInfo | None, int]] = {}  # job id -> (new row, admitted at)
        self._lock = threading.Lock()
        self.stats = dict.fromkeys(STATS, 0)  # of every namespace: the operator's /metrics
        self._stats_of: dict[str, dict[str, int]] = {}  # by namespace: what each tenant's overview shows
        self._live_seen = set(platform.live_nodes())
        self.write_workers()

    # -- routing and admission -----------------------------------------------------------------
    def accepts(self, resolved: ResolvedAction) -> bool:
        """Whether ``resolved`` opted in (remembering its options for runs outside admission)."""
        if resolved.kind == "sequence":
            return False
        try:
            options = options_of(resolved.doc)
        except BadAnnotation as exc:  # stored before validation existed: run it as plain OpenWhisk
            log.warning("%s: %s", resolved.path, exc)
            return False
        if options is not None:
            with self._lock:
                self._options[action_spec(resolved, self.result_bytes).key] = options
        return options is not None

    def expect_job(self, namespace: str, resolved: ResolvedAction, job_id: str, function_ids: list[str]) -> None:
        """A job was submitted: record it (queued) before its functions are admitted."""
        options = options_of(resolved.doc)
        assert options is not None
        spec = action_spec(resolved, self.result_bytes)
        with self._lock:
            for fid in function_ids:
                self._jobs[fid] = job_id
        self.tables.put(namespace, self._job_row(job_id, resolved, spec, options, function_ids))

    def forget_job(self, namespace: str, job_id: str, function_ids: list[str]) -> None:
        """A submitted job was refused after :meth:`expect_job` (rate limit): drop its traces."""
        with self._lock:
            for fid in function_ids:
                self._jobs.pop(fid, None)
        self.tables.store.delete(namespace, "canary.job_info", job_id)

    def fits_ever(self, resolved: ResolvedAction, count: int) -> bool:
        """Whether ``count`` functions of ``resolved`` fit the live nodes when nothing else runs."""
        return self.copies_fit(resolved.doc, count)

    def copies_fit(self, doc: dict[str, Any], count: int = 1) -> bool:
        """Whether ``count`` functions of the action ``doc`` (each with its request-replication copies)
        fit the live nodes when nothing else runs."""
        options = options_of(doc)
        copies = options.copies if options and options.fault_tolerance == "request-replication" else 1
        memory = doc["limits"]["memory"] * MB
        per_node = [node.budget_bytes // memory for node in self.platform.nodes() if node.alive]
        return sum(per_node) >= count * copies

    def gate(self, resolved: ResolvedAction, function_ids: list[str]) -> bool:
        """Reserve memory for every function of a job (all or none) and schedule their replicas."""
        try:
            return self._gate(resolved, function_ids)
        except Exception:  # the admission queue must never break; admit and let the run report
            log.exception("canary admission failed for %s", resolved.path)
            return True

    def _gate(self, resolved: ResolvedAction, function_ids: list[str]) -> bool:
        options = options_of(resolved.doc)
        assert options is not None
        spec = action_spec(resolved, self.result_bytes)
        live = self._live_nodes()
        warm = [n for n in self.platform.warm_nodes(spec) if n in live]
        copies = options.copies if options.fault_tolerance == "request-replication" else 1
        holders = {fid: [reservation(fid, i if copies > 1 else None) for i in range(copies)] for fid in function_ids}
        everything = [h for hs in holders.values() for h in hs]
        placed = self.memory.place_all(everything, spec.memory_mb * MB, live, warm, tenant=spec.tenant)
        if placed is None:
            if self.fits_ever(resolved, len(function_ids)):
                self._reclaim_idle_replicas()
                return False
            placed = {h: self._roomiest(live) for h in everything}  # never fits: the pool will say why
            for h, node in placed.items():
                self.memory.hold(h, node, spec.memory_mb * MB, force=True, tenant=spec.tenant)
        namespace = resolved.caller  # its runs, checkpoints and tables are the caller's, as its containers are
        self.store.prepare(namespace)  # before its replicas start: they mount the namespace's directory
        now = now_ms()
        with self._lock:
            job_id = self._jobs.pop(function_ids[0], function_ids[0])
            for fid in function_ids[1:]:
                self._jobs.pop(fid, None)
            for fid in function_ids:
                self._functions[fid] = Function(namespace, fid, job_id, options, spec, placed[holders[fid][0]],
                                                holders[fid], now)
        single = job_id == function_ids[0] and len(function_ids) == 1
        with self._lock:  # written by the first function to run: no store writes under the admission lock
            self._admissions[job_id] = (self._job_row(job_id, resolved, spec, options, function_ids) if single
                                        else None, now)
        nodes = [placed[holders[fid][0]] for fid in function_ids]
        if options.fault_tolerance == "canary":
            self.runtimes.functions_started(namespace, spec, options.replication, job_id, nodes)
        elif options.fault_tolerance == "active-standby":
            self.runtimes.functions_started(namespace, spec, "standby", job_id, nodes)  # type: ignore[arg-type]
        return True

    # -- execution ----------------------------------------------------------------------------
    def run(self, spec: ActionSpec, request: RunRequest) -> RunOutcome:
        """The gateway's runner for stateful actions: one function, to its committed outcome."""
        function = self._admitted(spec, request)
        self.store.prepare(function.namespace)
        self._record_admission(function)
        self._function_row(function, request)
        try:
            outcome = STRATEGIES[function.options.fault_tolerance](self, function, request)
        finally:
            with self._lock:
                self._functions.pop(function.function_id, None)
            if function.background:
                threading.Thread(target=self._release_after, args=(function,), daemon=True).start()
            else:
                self._release(function)
        self._finish(function, outcome)
        return outcome

    def unfinished(self, namespace: str, function_id: str) -> None:
        """A function a gateway stopped or died before it finished (its record says so): its row and
        its job's count end as failed, where they had not ended."""
        self._end_rows(namespace, function_id, succeeded=False)

    def _end_rows(self, namespace: str, function_id: str, succeeded: bool) -> None:
        """End the function's row and count it in its job's, once: a function a stopping gateway
        recorded as unfinished may still end on its own before the process does."""
        ended: list[FunctionInfo] = []

        def end(row: FunctionInfo) -> None:
            ended.clear()
            if row.state not in ("succeeded", "failed"):
                _ended(row, succeeded)
                ended.append(row)

        self.tables.update(namespace, "function_info", function_id, end)
        if ended:
            self.tables.update(namespace, "job_info", ended[0].job_id, lambda row: _counted(row, succeeded))

    def count(self, stat: str, namespace: str) -> None:
        with self._lock:
            self.stats[stat] += 1
            self._stats_of.setdefault(namespace, dict.fromkeys(STATS, 0))[stat] += 1

    def stats_of(self, namespace: str) -> dict[str, int]:
        """``namespace``'s counters (another tenant's commits and recoveries are not its business)."""
        with self._lock:
            return dict(self._stats_of.get(namespace) or dict.fromkeys(STATS, 0))

    def _release(self, function: Function) -> None:
        for holder in function.holders:  # what no container took over
            self.memory.release(holder)
        if function.options.fault_tolerance in ("canary", "active-standby"):
            self.runtimes.function_ended(function.spec)

    def _release_after(self, function: Function) -> None:
        wait(function.background)
        self._release(function)
        self.pump()

    def attempt(self, function: Function, request: RunRequest, node: str, claim: str | None,
                checkpoints: bool, reservation: str | None = None) -> RunOutcome:
        """One execution of ``function`` on ``node`` (on the replica ``claim``, if given); a new
        container takes the memory of ``reservation`` (default: the function's first holder)."""
        number = len(function.attempts) + 1
        env = dict(request.extra_env)
        if checkpoints and function.checkpointed:
            self.store.grant(function.namespace)  # the store may have restarted since the last attempt
            env.update(canary_function_id=function.function_id, canary_store=self.store.url_for(function.namespace),
                       canary_interval=str(function.options.interval_s))
        self.tables.update(function.namespace, "function_info", function.function_id,
                           lambda row: _running(row, node, number))
        held = reservation or function.holders[0]
        outcome = self.platform.run(function.spec, dataclasses.replace(request, extra_env=env, reservation=held),
                                    node=node, claim=claim)
        function.attempts.append(outcome)
        return outcome

    def failure_of(self, outcome: RunOutcome) -> Failure | None:
        """Why the attempt's container died (crash, OOM kill, kill, lost node); None if it did not."""
        lost_node = bool(outcome.node) and outcome.node not in self.platform.live_nodes()
        if outcome.failure not in ("exited", "oom") and not (outcome.status == INTERNAL_ERROR and lost_node):
            return None
        death: ContainerDeath | None = None
        if outcome.container_id:
            death = self.deaths.wait_for(outcome.container_id, self.settings.death_wait_s)
        if death is not None:
            return Failure(death.reason, death.node, death.container_id, death.detected_at)
        reason = "node-lost" if lost_node else outcome.failure or "exited"
        return Failure(reason, outcome.node, outcome.container_id, time.time())

    def recovery_node(self, function: Function, failed: Failure) -> str:
        """Where a failed function restarts without a replica: its node if still alive, else the roomiest."""
        live = self._live_nodes()
        node = failed.node if failed.node in live else self._roomiest(live)
        for holder in function.holders[:1]:
            self.memory.move(holder, node)
        return node

    def commit(self, function: Function, attempt: int, outcome: RunOutcome) -> bool:
        """Commit ``outcome`` as the function's only result; False (and counted) if one already was."""
        won = self.results.commit(function.namespace, Commit(
            function.function_id, attempt, outcome.status, outcome.container_id, now_ms()))
        self.count("commits" if won else "duplicates_discarded", function.namespace)
        return won

    def close(self) -> None:
        self.retention.close()
        self.runtimes.close()
        self.deaths.close()
        self.store.close()

    # -- records -------------------------------------------------------------------------------
    def write_workers(self) -> None:
        """Describe every node in ``worker_info``."""
        for node in self.platform.nodes():
            self.tables.put(PLATFORM_NS, WorkerInfo(
                worker_id=node.name, alive=node.alive, memory_mb=node.budget_bytes // MB, cpus=os.cpu_count() or 1,
                backend=node.backend, updated=now_ms()))

    def _finish(self, function: Function, outcome: RunOutcome) -> None:
        first = function.attempts[0] if function.attempts else outcome
        outcome.start_ms = min(outcome.start_ms, first.start_ms) if first.start_ms else outcome.start_ms
        outcome.logs = [line for attempt in function.attempts for line in attempt.logs] or outcome.logs
        function.warnings.extend(
            line.split(WARNING_PREFIX, 1)[1] for line in outcome.logs if WARNING_PREFIX in line
        )
        if function.options.fault_tolerance == "canary":
            self.checkpoints.finished(function, outcome.status == "success")
        outcome.annotations.extend(function.annotations())
        self._end_rows(function.namespace, function.function_id, outcome.status == "success")
        self.retention.function_ended(function.namespace)

    def _job_row(self, job_id: str, resolved: ResolvedAction, spec: ActionSpec, options: CanaryOptions,
                 function_ids: list[str]) -> JobInfo:
        return JobInfo(
            job_id=job_id, action=str(resolved.path), runtime=spec.kind, function_ids=function_ids,
            functions=len(function_ids), checkpoint=options.checkpoint, interval_s=options.interval_s,
            replication=options.replication, fault_tolerance=options.fault_tolerance,
            memory_mb=spec.memory_mb, submitted=now_ms())

    # -- internals -----------------------------------------------------------------------------
    def _admitted(self, spec: ActionSpec, request: RunRequest) -> Function:
        with self._lock:
            function = self._functions.get(request.activation_id)
        if function is not None:
            return function
        # not through the admission queue (a sequence component): admit it on its own now
        options = self._options_by_key(spec)
        live = self._live_nodes()
        node = self._roomiest(live)
        held = reservation(request.activation_id)
        self.memory.hold(held, node, spec.memory_mb * MB, force=True, tenant=spec.tenant)
        function = Function(request.namespace, request.activation_id, request.activation_id, options, spec, node,
                            [held], now_ms())
        with self._lock:
            self._functions[function.function_id] = function
        self.tables.put(request.namespace, JobInfo(
            job_id=function.job_id, action=request.action_name, runtime=spec.kind, function_ids=[function.function_id],
            functions=1, state="running", checkpoint=options.checkpoint, interval_s=options.interval_s,
            replication=options.replication, fault_tolerance=options.fault_tolerance, memory_mb=spec.memory_mb,
            submitted=now_ms(), admitted=now_ms()))
        return function

    def _options_by_key(self, spec: ActionSpec) -> CanaryOptions:
        with self._lock:
            return self._options.get(spec.key, CanaryOptions())

    def _record_admission(self, function: Function) -> None:
        with self._lock:
            pending = self._admissions.pop(function.job_id, None)
        if pending is None:
            return
        row, admitted = pending
        if row is not None:
            self.tables.put(function.namespace, row)
        self.tables.update(function.namespace, "job_info", function.job_id, lambda job: _admit(job, admitted))

    def _function_row(self, function: Function, request: RunRequest) -> None:
        self.tables.put(function.namespace, FunctionInfo(
            function_id=function.function_id, job_id=function.job_id, action=request.action_name,
            runtime=function.spec.kind, runtime_key=function.spec.key, worker=function.node))

    def _live_nodes(self) -> list[str]:
        """Nodes taking work; ``worker_info`` follows their liveness."""
        live = self.platform.live_nodes()
        if set(live) != self._live_seen:
            self._live_seen = set(live)
            self.write_workers()
        return live

    def _roomiest(self, live: list[str]) -> str:
        return max(live or [n.name for n in self.platform.nodes()], key=self.memory.free)

    def _reclaim_idle_replicas(self) -> None:
        def reclaim() -> None:
            if self.runtimes.retire_idle():
                self.pump()

        threading.Thread(target=reclaim, name="owx-canary-reclaim", daemon=True).start()

    def _node_watch(self, death: ContainerDeath) -> None:
        if death.reason == "node-lost" and death.node in self._live_seen:
            self._live_seen = self._live_seen - {death.node}  # a revived node is written back by _live_nodes
            self.tables.update(PLATFORM_NS, "worker_info", death.node, _lost)


def reservation(function_id: str, copy: int | None = None) -> str:
    """The ledger holder of the memory reserved for one function (or one copy of it)."""
    return f"function:{function_id}" if copy is None else f"function:{function_id}#{copy}"


def _admit(row: JobInfo, now: int) -> None:
    row.state, row.admitted = "running", now


def _running(row: FunctionInfo, node: str, attempt: int) -> None:
    row.state = "running" if attempt == 1 else "recovering"
    row.worker, row.attempts = node, attempt
    row.started = row.started or now_ms()


def _ended(row: FunctionInfo, succeeded: bool) -> None:
    row.state, row.ended = ("succeeded" if succeeded else "failed"), now_ms()


def _counted(row: JobInfo, succeeded: bool) -> None:
    if succeeded:
        row.succeeded += 1
    else:
        row.failed += 1
    if row.succeeded + row.failed >= row.functions:
        row.state, row.finished = "done", now_ms()


def _lost(row: WorkerInfo) -> None:
    row.alive, row.updated = False, now_ms()
