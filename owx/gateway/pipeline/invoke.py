"""Invoke an action: admit, journal, run on the platform (or as a sequence or a composition), record durably.

One straight line per activation, on the gateway's event loop (:meth:`Invoker.admit`, then
:meth:`Invoker.run` in the task of whoever started it: an invoke's in its request's own task):

1. admission: the namespace's throttles (429 over them), and the activation journalled as
   accepted (durable before anyone is answered for it: the next start records it as failed if
   this gateway dies). A blocking caller is answered only with the record, or with a 202 once
   ``blocking_wait_s`` passed, so its activation is journalled in the loop turn after its start,
   while the runtime works, instead of on the answer's path;
2. a run slot (:mod:`.slots`), then the run: on an idle warm container straight from the loop,
   else on one of the worker threads (a cold start or a wait for memory, an extension's runner, a
   sequence);
3. :mod:`.records` builds its record and the store makes it durable; the caller is told at once,
   then the pipeline's own bookkeeping and observers follow.

A warm invocation therefore never leaves the loop's thread, nor its request's task. Threads (web
actions' views, trigger fires, Canary's jobs) use :meth:`Invoker.start`, the same line in a task of
its own, behind concurrent futures.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple, Protocol

from owx.common.eventloop import EventLoopThread, run_on_thread
from owx.gateway.catalog import Catalog, ResolvedAction, annotation
from owx.gateway.errors import SEQUENCE_TOO_LONG, SYSTEM_UNAVAILABLE, ApiError, bad_request
from owx.gateway.identity import Identity
from owx.gateway.ids import new_id
from owx.gateway.models import MAX_SEQUENCE_LENGTH
from owx.gateway.names import parse_fqn
from owx.gateway.pipeline import records
from owx.gateway.pipeline.admission import Throttle
from owx.gateway.pipeline.compositions import Steps, compose, is_conductor
from owx.gateway.pipeline.records import ActionFacts
from owx.gateway.pipeline.slots import RunSlots
from owx.gateway.stores import DURABLE, ActivationStore, StoreUnavailable
from owx.platform.interface import Platform, PlatformError
from owx.platform.types import APPLICATION_ERROR, INTERNAL_ERROR, SUCCESS, ActionSpec, RunOutcome, RunRequest
from owx.settings import Settings

log = logging.getLogger(__name__)
PARAMETERS_NOT_ALLOWED = "Request defines parameters that are not allowed (e.g., reserved properties)."
DURABLE_WAIT_S = 60.0
MAX_PLANS = 4096  # cached action revisions; the cache starts afresh beyond
RECORD_BYTES = 1024  # a record's bytes besides its result and logs, about
MAX_NESTING_DEPTH = 100  # sequences and compositions in one another, counted as they run (each level is a thread's frames)
NESTED_TOO_DEEP = f"Sequences and compositions may nest at most {MAX_NESTING_DEPTH} levels deep."
OUTSIDER = "outsider"  # in a journal entry: a web action's outside caller's activation (its record is trimmed first)


class Runner(Protocol):
    """Runs one activation somewhere and tells what happened (never raises for action failures)."""

    def run(self, spec: ActionSpec, request: RunRequest) -> RunOutcome: ...


# Reserves what activations of an action need before they start (all or nothing); True if reserved.
Gate = Callable[[ResolvedAction, list[str]], bool]


@dataclass(frozen=True)
class Completion:
    """A stored activation record and the status OpenWhisk answers a blocking invoke of it with."""

    record: dict[str, Any]
    status: int
    logs_share: float = 0.0  # of the record's bytes, its logs' (what the loop's work on it is charged)

    @classmethod
    def of(cls, record: dict[str, Any], platform_status: int | None = None) -> Completion:
        """200 for a success, 502 for the action's errors, 500 for owx's own; ``platform_status`` when
        the platform could not run the activation at all (an upstream that is down: 503, ...)."""
        outcome = record["response"]["status"]
        status = 200 if outcome == SUCCESS else 500 if outcome == INTERNAL_ERROR else 502
        logs, share = record["logs"], 0.0
        if logs:
            logs_bytes = sum(map(len, logs)) + 3 * len(logs)  # each line's quotes and separator
            share = logs_bytes / (logs_bytes + record["response"]["size"] + RECORD_BYTES)
        return cls(record, platform_status or status, share)


@dataclass(frozen=True)
class Plan:
    """What every activation of one resolved action needs, worked out once per revision."""

    runner: Runner
    gate: Gate | None
    spec: ActionSpec
    facts: ActionFacts
    warm_on_loop: bool  # an atomic action the platform runs itself: a warm container may take it on the loop
    final_parameters: frozenset[str]  # those an invoke may not override (see `_final_parameters`)
    gets_api_key: bool  # the caller's key goes to the action (see ``ResolvedAction.gets_api_key``)
    conductor: bool  # an invoke runs a composition (see `compositions`)
    action_name: str  # ``/ns/[pkg/]name``, as the runtime gets it

    @property
    def invoked_facts(self) -> ActionFacts:
        """What the record of an invoke of the action says about it: a conductor's invoke is a
        composition, recorded as a sequence (the conductor's own steps keep ``facts``)."""
        return replace(self.facts, kind="sequence") if self.conductor else self.facts


@dataclass
class Activation:
    """One activation on its way through the pipeline."""

    id: str
    identity: Identity
    action: ResolvedAction
    plan: Plan
    args: dict[str, Any] | list[Any]
    cause: str | None = None
    accepted_ms: int = field(default_factory=records.now_ms)
    transaction: str | None = None  # the request's transaction id (``X-Request-ID``); else its own id
    blocking: bool = False  # its caller waits for the record (journalled once its run started)
    journalled: bool = False  # its journal entry is durable: a gateway that dies records it as failed

    @property
    def transaction_id(self) -> str:
        """What the action gets as ``__OW_TRANSACTION_ID``: the id of the request that caused it, as the
        caller's answer names it in ``X-Request-ID`` (a sequence's components share it)."""
        return self.transaction or self.id

    def entry(self) -> dict[str, Any]:
        """The journal entry of this (invoked, topmost) activation."""
        entry = self.plan.invoked_facts.entry(self.id, self.identity.namespace, self.accepted_ms, self.cause)
        if self.identity.outsider:
            entry[OUTSIDER] = True
        return entry


class Running(NamedTuple):
    """An admitted activation running in a task of its own: its id, and the task that ends with its
    completion."""

    activation_id: str
    done: asyncio.Task[Completion]


@dataclass
class _Nesting:
    """What a topmost sequence or composition has run so far, shared with everything nested in it, in
    whatever order sequences and compositions nest (each starting a count of its own would let them
    reset each other's without end): atomic actions its sequences ran, its compositions' steps, and
    how deep the component running now is."""

    ran: int = 0
    steps: Steps = field(default_factory=Steps)
    depth: int = 0


class _Ran(NamedTuple):
    outcome: RunOutcome
    platform_status: int | None = None  # the platform could not run it at all: answer this status
    duration_ms: int | None = None  # a sequence's: its components' together (OpenWhisk's)
    facts: ActionFacts | None = None  # what the record says about the action, if not the plan's (a composition)


@dataclass(frozen=True)
class Invocation:
    """An admitted activation (journalled, so durable), for threads: ``done`` completes once its record
    is stored."""

    activation_id: str
    done: Future[Completion]


def action_spec(resolved: ResolvedAction, result_bytes: int) -> ActionSpec:
    """What the platform needs to find or make a container for ``resolved`` and run it (a result
    longer than ``result_bytes`` is cut)."""
    doc, limits = resolved.doc, resolved.limits
    exec_doc = doc["exec"]
    return ActionSpec(
        key=resolved.container_key,
        kind=exec_doc["kind"],
        code=exec_doc.get("code"),
        binary=bool(exec_doc.get("binary")),
        main=exec_doc.get("main", "main"),
        image=exec_doc.get("image"),
        memory_mb=limits["memory"],
        timeout_ms=limits["timeout"],
        logs_bytes=limits["logs"] * 1024 * 1024,
        result_bytes=result_bytes,
        concurrency=limits.get("concurrency", 1),
        env={key: value if isinstance(value, str) else json.dumps(value)
             for key, value in resolved.init_parameters.items()},
    )


class Invoker:
    """The pipeline behind ``POST .../actions/NAME``, web actions, trigger rules and extensions' jobs."""

    def __init__(self, settings: Settings, catalog: Catalog, activations: ActivationStore, platform: Platform,
                 throttle: Throttle, loop: EventLoopThread) -> None:
        self.settings = settings
        self.catalog = catalog
        self.activations = activations
        self.runner: Runner = platform
        self.platform = platform
        self.throttle = throttle
        self.loop = loop
        self.max_result_bytes = settings.gateway.max_payload_bytes
        self._loop_runs = settings.gateway.loop_runs
        self.runners_by_annotation: list[tuple[Callable[[ResolvedAction], bool], Runner, Gate | None]] = []
        self.api_host: str | None = settings.gateway.public_url  # set by the server once it listens
        workers = settings.gateway.workers
        self._slots = RunSlots(workers, max(1, workers // 2))  # on the loop
        self._threads = ThreadPoolExecutor(workers, thread_name_prefix="owx-activation")  # a slot each at most
        self._plans: dict[int, tuple[ResolvedAction, Plan]] = {}
        self._open: dict[str, Activation] = {}  # accepted, not yet recorded
        self._tasks: set[asyncio.Task[Completion]] = set()
        self._closed = threading.Event()
        self.record_observers: list[Callable[[dict[str, Any]], None]] = []  # told of every record stored (metrics)
        # told (namespace, activation id) of each activation recorded as failed because a gateway stopped or died
        self.unfinished_observers: list[Callable[[str, str], None]] = []

    def route(self, accepts: Callable[[ResolvedAction], bool], runner: Runner, gate: Gate | None = None) -> None:
        """Send actions that ``accepts`` selects to ``runner`` instead of the platform (e.g. Canary's
        stateful actions); the first route that accepts an action takes it.

        With a ``gate`` their invocations queue instead of answering 429, and start when
        ``gate(resolved, activation_ids)`` has reserved what they need (all or nothing).
        """
        self.runners_by_annotation.append((accepts, runner, gate))
        self._plans.clear()

    def plan(self, resolved: ResolvedAction) -> Plan:
        """The plan of ``resolved`` (made on its first activation)."""
        cached = self._plans.get(id(resolved))
        if cached is not None and cached[0] is resolved:
            return cached[1]
        runner, gate = next(((r, g) for accepts, r, g in self.runners_by_annotation if accepts(resolved)),
                            (self.runner, None))
        facts = ActionFacts.of(resolved.doc, str(resolved.path), resolved.binding)
        conductor = is_conductor(resolved)
        warm_on_loop = self._loop_runs and runner is self.platform and resolved.kind != "sequence" and not conductor
        plan = Plan(runner, gate, action_spec(resolved, self.max_result_bytes), facts, warm_on_loop,
                    _final_parameters(resolved), resolved.gets_api_key, conductor, resolved.path.fqn)
        if len(self._plans) >= MAX_PLANS:
            self._plans.clear()
        self._plans[id(resolved)] = (resolved, plan)  # the entry keeps ``resolved`` alive: its id stays its own
        return plan

    # -- admission (the event loop) ------------------------------------------------------------
    def admit(self, identity: Identity, resolved: ResolvedAction, params: dict[str, Any],
              blocking: bool = False, transaction: str | None = None) -> Activation:
        """Admit and journal one activation, on the event loop; :meth:`run` runs it. Raises
        ``ApiError`` (400, 429) or ``StoreUnavailable`` (503) instead. ``blocking``: the caller waits
        for the record (see the module's docstring: then it is journalled once started). Actions
        behind a gate (see :meth:`route`) go through :meth:`start` on a thread instead."""
        plan = self.plan(resolved)
        activation = Activation(new_id(), identity, resolved, plan, self._arguments(resolved, plan, params),
                                transaction=transaction, blocking=blocking)
        self.throttle.admit(identity.namespace)
        try:
            self._accept(activation, journal=not blocking)
        except BaseException:
            self._release(identity.namespace)
            raise
        return activation

    def submit(self, identity: Identity, resolved: ResolvedAction, params: dict[str, Any],
               transaction: str | None = None) -> Running:
        """:meth:`admit` one activation and run it in a task of its own."""
        activation = self.admit(identity, resolved, params, transaction=transaction)
        return Running(activation.id, self._launch(activation))

    def gated(self, resolved: ResolvedAction) -> bool:
        """Whether invocations of ``resolved`` wait for an extension's reservation (see :meth:`route`)."""
        return self.plan(resolved).gate is not None

    def load(self) -> tuple[int, int]:
        """(activations running, activations waiting for a run slot)."""
        return self._slots.load()

    def _accept(self, activation: Activation, journal: bool = True) -> None:
        if self._closed.is_set():
            raise ApiError(503, SYSTEM_UNAVAILABLE.format(detail="the gateway is stopping"))
        if not journal:
            self.activations.check_room()
        self._open[activation.id] = activation
        if journal:
            try:
                self.activations.accept(activation.entry())
            except BaseException:
                self._open.pop(activation.id, None)
                raise
            activation.journalled = True

    def _journal_started(self, activation: Activation) -> None:
        """Journal a started blocking activation (nobody has been answered for it yet)."""
        if activation.id not in self._open:
            return  # recorded already
        try:
            self.activations.accept(activation.entry())
        except StoreUnavailable as exc:
            log.error("activation %s runs without its journal entry (if this gateway dies, it is not "
                      "recorded): %s", activation.id, exc)
            return
        activation.journalled = True

    def _launch(self, activation: Activation) -> asyncio.Task[Completion]:
        task = self.loop.loop.create_task(self.run(activation))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    @staticmethod
    def _arguments(resolved: ResolvedAction, plan: Plan, params: dict[str, Any]) -> dict[str, Any] | list[Any]:
        if plan.final_parameters and not plan.final_parameters.isdisjoint(params):
            raise bad_request(PARAMETERS_NOT_ALLOWED)
        return resolved.arguments(params)

    def _release(self, namespace: str) -> None:
        # invocations wait for admission: admitting them may block (an extension's gate), so on a thread
        if self.throttle.release(namespace) and not self._closed.is_set():
            self._threads.submit(self.throttle.pump)

    # -- execution (the event loop) -------------------------------------------------------------
    async def run(self, activation: Activation,
                  durable: Callable[[Completion], None] | None = None) -> Completion:
        """Run an admitted activation (:meth:`admit`) in the calling task, on the event loop, until its
        record is stored; ``durable(completion)`` is called as soon as it is (a waiting caller answers
        there), before the pipeline's own bookkeeping and its observers."""
        if activation.blocking:  # once the run is on its way: the loop turn after its first step
            self.loop.loop.call_soon(self._journal_started, activation)
        try:
            completion = await self._completed(activation)
            if durable is not None:
                started = time.perf_counter()
                durable(completion)
                self._charge_logs(activation, completion, time.perf_counter() - started)
            return self._observed(completion)
        finally:
            self._open.pop(activation.id, None)  # its record is stored: closing writes nothing for it
            self._release(activation.identity.namespace)

    async def _completed(self, activation: Activation) -> Completion:
        """Run the activation in a run slot and store its record (durable on return)."""
        namespace = activation.identity.namespace
        await self._slots.take(namespace)
        try:
            if self._closed.is_set():  # stopping: close() records what is unfinished, nothing more runs
                ran = _Ran(RunOutcome(INTERNAL_ERROR, {"error": records.GATEWAY_STOPPED}, [], activation.accepted_ms,
                                      records.now_ms()))
            else:
                ran = await self._outcome(activation)
        except Exception as exc:  # noqa: BLE001 - a bug of owx's is the activation's recorded error, never a lost record
            ran = _failed_inside(activation, exc, activation.accepted_ms)
        finally:
            self._slots.give_back(namespace)
        return await self._recorded(activation, ran)

    async def _outcome(self, activation: Activation) -> _Ran:
        if activation.plan.warm_on_loop:
            now_ms = records.now_ms()
            try:
                warm = await self.platform.run_warm(activation.plan.spec, self._request(activation))
            except PlatformError as exc:
                return _unavailable(activation, exc, now_ms)
            if warm is not None:
                return _Ran(warm)
        return await run_on_thread(self._threads, self._run, activation)

    async def _recorded(self, activation: Activation, ran: _Ran) -> Completion:
        started = time.perf_counter()
        completion, stored = self._store(activation, ran)
        self._charge_logs(activation, completion, time.perf_counter() - started)
        if stored is not DURABLE:  # the store could not make it durable at once: wait for its commit
            await asyncio.wrap_future(stored)
            stored.result()
        return completion

    def _store(self, activation: Activation, ran: _Ran) -> tuple[Completion, Future[None]]:
        """Build the record (the one builder) and hand it to the store; the future: once it is durable."""
        record = records.build(activation.id, activation.identity.namespace, ran.facts or activation.plan.facts,
                               ran.outcome, self.max_result_bytes, activation.accepted_ms, activation.cause,
                               ran.duration_ms)
        return Completion.of(record, ran.platform_status), self.activations.put(record, activation.identity.outsider)

    def _charge_logs(self, activation: Activation, completion: Completion, spent_s: float) -> None:
        """Charge the part of ``spent_s`` (the loop's work on the record) that its logs took to the
        tenant whose containers printed them (`Platform.charge_output`; a published action's caller):
        an activation's printing costs the loop again when its lines are recorded and answered."""
        if completion.logs_share:
            self.platform.charge_output(activation.plan.spec.tenant, spent_s * completion.logs_share)

    def _observed(self, completion: Completion) -> Completion:
        for observe in self.record_observers:
            try:
                observe(completion.record)
            except Exception:  # noqa: BLE001 - an observer's bug must not withhold the answer
                log.exception("a record observer failed")
        return completion

    def _request(self, activation: Activation) -> RunRequest:
        return RunRequest(
            value=activation.args,
            namespace=activation.identity.namespace,
            action_name=activation.plan.action_name,
            activation_id=activation.id,
            transaction_id=activation.transaction_id,
            api_key=activation.identity.auth if activation.plan.gets_api_key else None,
            api_host=self.api_host,
            action_version=activation.plan.facts.version,
        )

    # -- execution (worker threads) ---------------------------------------------------------------
    def _run(self, activation: Activation, nesting: _Nesting | None = None) -> _Ran:
        """The activation's outcome (with the status to answer when the platform could not run it);
        ``nesting``: the topmost sequence's or composition's, when it is one of their components."""
        if activation.action.kind == "sequence":
            return self._sequence(activation, nesting or _Nesting())
        if activation.plan.conductor:
            return self._composition(activation, nesting or _Nesting())
        return self._atomic(activation)

    def _nested(self, component: Activation, nesting: _Nesting) -> _Ran:
        """Run a sequence's or composition's component one level deeper; refused past
        ``MAX_NESTING_DEPTH`` (a chain of sequences, or a cycle a binding closed after creation)."""
        if nesting.depth >= MAX_NESTING_DEPTH:
            now_ms = records.now_ms()
            return _Ran(RunOutcome(APPLICATION_ERROR, {"error": NESTED_TOO_DEEP}, [], now_ms, now_ms))
        nesting.depth += 1
        try:
            return self._run(component, nesting)
        finally:
            nesting.depth -= 1

    def _atomic(self, activation: Activation) -> _Ran:
        """One run of the action itself on its runner."""
        now_ms = records.now_ms()
        try:
            return _Ran(activation.plan.runner.run(activation.plan.spec, self._request(activation)))
        except PlatformError as exc:
            return _unavailable(activation, exc, now_ms)
        except Exception as exc:  # noqa: BLE001 - the platform failed, not the action
            return _failed_inside(activation, exc, now_ms)

    def _sequence(self, activation: Activation, nesting: _Nesting) -> _Ran:
        """Run the components in order, each with the previous result; the sequence ends with the last
        one run, lists the components' activation ids as its logs, and lasts as long as they did
        together (OpenWhisk's).

        As in OpenWhisk, a topmost sequence runs at most ``MAX_SEQUENCE_LENGTH`` atomic actions, its
        nested sequences' counted as they run: creation checks the nesting as it is then, but an inner
        sequence updated later could otherwise multiply an invoke into 50^depth activations."""
        start_ms = records.now_ms()
        component_ids: list[str] = []
        duration, value, last, failure, memory = 0, activation.args, None, None, None
        for reference in activation.action.doc["exec"]["components"]:
            if nesting.ran >= MAX_SEQUENCE_LENGTH:
                failure = APPLICATION_ERROR, {"error": SEQUENCE_TOO_LONG}
                break
            try:
                last = self._component(activation, reference, value, nesting)
            except ApiError as exc:  # deleted or no longer shared since the sequence was resolved
                failure = APPLICATION_ERROR, records.component_error(exc)
                break
            except Exception as exc:  # noqa: BLE001 - owx failed (its store, a bug), not the action: the
                # sequence ends as an internal error and still lists the components that ran
                failed = _failed_inside(activation, exc, start_ms).outcome
                failure = failed.status, failed.result
                break
            component_ids.append(last["activationId"])
            duration += last["duration"]
            if (component_memory := records.memory_limit(last)) is not None:
                memory = max(memory or 0, component_memory)
            if not last["response"]["success"]:
                break
            value = last["response"]["result"]
        if failure is not None:
            status, result = failure
        elif last is not None:
            status, result = last["response"]["status"], last["response"]["result"]
        else:
            status, result = SUCCESS, activation.args
        outcome = RunOutcome(status, result, component_ids, start_ms, records.now_ms(),
                             annotations=records.sequence_annotations(activation.action.doc["limits"], memory,
                                                                      topmost=activation.cause is None))
        return _Ran(outcome, duration_ms=duration)

    def _component(self, sequence: Activation, reference: str, value: Any, nesting: _Nesting) -> dict[str, Any]:
        """Run one component of ``sequence`` with ``value`` and store its record (on this thread: no slot,
        no admission); the record. Raises ApiError when the component cannot be invoked any more."""
        caller = sequence.identity.namespace
        component = self.catalog.resolve(parse_fqn(reference, caller), caller)
        if component.kind != "sequence":
            nesting.ran += 1
        return self._child(sequence, component, value, lambda child: self._nested(child, nesting))

    def _composition(self, activation: Activation, nesting: _Nesting) -> _Ran:
        """Run a conductor action's composition (:mod:`.compositions`); what it nests shares ``nesting``."""
        caller = activation.identity.namespace
        start_ms = records.now_ms()

        def component(resolved: ResolvedAction, params: dict[str, Any]) -> dict[str, Any]:
            if not self.plan(resolved).conductor:
                nesting.steps.components += 1
            return self._child(activation, resolved, params, lambda child: self._nested(child, nesting))

        ended = compose(activation.args, caller, nesting.steps,
                        lambda params: self._child(activation, activation.action, params, self._atomic),
                        component, lambda path: self.catalog.resolve(path, caller), activation.action.limits["memory"])
        annotations = [*records.sequence_annotations(activation.action.limits, ended.memory_mb,
                                                     topmost=activation.cause is None),
                       {"key": "conductor", "value": True}]
        outcome = RunOutcome(ended.status, ended.result, ended.ids, start_ms, records.now_ms(), annotations=annotations)
        return _Ran(outcome, duration_ms=ended.duration_ms, facts=activation.plan.invoked_facts)

    def _child(self, parent: Activation, resolved: ResolvedAction, value: Any,
               run: Callable[[Activation], _Ran]) -> dict[str, Any]:
        """Run ``resolved`` with ``value`` as a step of ``parent`` (its cause; on this thread: no slot, no
        admission) and store its record; the record."""
        child = Activation(new_id(), parent.identity, resolved, self.plan(resolved), resolved.arguments(value),
                           cause=parent.id, transaction=parent.transaction_id)
        completion, stored = self._store(child, run(child))
        stored.result(DURABLE_WAIT_S)
        return self._observed(completion).record

    # -- threads' entry points ---------------------------------------------------------------------
    def start(self, identity: Identity, resolved: ResolvedAction, params: dict[str, Any],
              transaction: str | None = None) -> Invocation:
        """:meth:`submit` from a thread (a gated action: :meth:`start_all`); raises what it raises."""
        if self.gated(resolved):
            return self.start_all(identity, resolved, [params], transaction=transaction)[0]

        async def submitted() -> Running:
            return self.submit(identity, resolved, params, transaction=transaction)

        running = self.loop.submit(submitted()).result()
        done: Future[Completion] = Future()
        self.loop.call(running.done.add_done_callback, lambda task: _copy(task, done))
        return Invocation(running.activation_id, done)

    def start_all(self, identity: Identity, resolved: ResolvedAction, params: list[dict[str, Any]],
                  activation_ids: list[str] | None = None, transaction: str | None = None) -> list[Invocation]:
        """Journal activations that are admitted together (gang) once capacity allows, from a thread;
        never 429 for concurrency. Records arrive on the returned futures."""
        plan = self.plan(resolved)
        ids = activation_ids or [new_id() for _ in params]
        activations = [Activation(aid, identity, resolved, plan, self._arguments(resolved, plan, p),
                                  transaction=transaction) for aid, p in zip(ids, params)]
        # refused before any is journalled: a journalled one would be recorded as failed at the next start
        self.throttle.charge(identity.namespace, len(ids))
        for activation in activations:
            self._accept(activation)
        invocations = [Invocation(a.id, Future()) for a in activations]

        def launch_all() -> None:
            for activation, invocation in zip(activations, invocations):
                task = self._launch(activation)
                task.add_done_callback(lambda t, done=invocation.done: _copy(t, done))

        reserve = (lambda: plan.gate(resolved, ids)) if plan.gate is not None else None
        try:
            self.throttle.enqueue(identity.namespace, len(ids), lambda: self.loop.call(launch_all), reserve)
        except BaseException:
            for activation in activations:
                self._open.pop(activation.id, None)
            raise
        return invocations

    # -- stopping and recovery ---------------------------------------------------------------------
    def close(self, grace_s: float) -> None:
        """Stop (from a thread other than the loop's): refuse new activations, give what runs
        ``grace_s``, then record every accepted activation that is still not finished (waiting for
        admission or a slot, running) as failed, so none anyone was answered for is left
        unrecorded. Their later outcomes are ignored (a record's first write wins)."""
        self._closed.set()
        deadline = time.monotonic() + grace_s
        while self._open and time.monotonic() < deadline:
            time.sleep(0.01)
        for activation in list(self._open.values()):
            self._put_unfinished(activation.entry(), records.GATEWAY_STOPPED, records.now_ms())
        self._open.clear()
        self._threads.shutdown(wait=False, cancel_futures=True)

    def recover(self) -> int:
        """Record as failed the activations a gateway that died had accepted and not finished, ending
        when it was last known alive."""
        left = self.activations.unfinished()
        died_ms = self.activations.last_alive_ms() or records.now_ms()
        for entry in left:
            self._put_unfinished(entry, records.GATEWAY_DIED, died_ms)
        if left:
            log.warning("recorded %d activations left unfinished by a gateway that died", len(left))
        return len(left)

    def _put_unfinished(self, entry: dict[str, Any], message: str, end_ms: int) -> None:
        self.activations.put(records.unfinished(entry, message, self.max_result_bytes, end_ms),
                             entry.get(OUTSIDER) is True)
        for observe in self.unfinished_observers:
            try:
                observe(entry["namespace"], entry["activationId"])
            except Exception:  # noqa: BLE001 - an extension's bookkeeping must not stop the others' records
                log.exception("unfinished activation %s: an observer failed", entry["activationId"])


def _copy(task: asyncio.Task[Completion], done: Future[Completion]) -> None:
    """Pass an activation task's end on to a thread's future."""
    if task.cancelled():
        done.cancel()
    elif task.exception() is not None:
        done.set_exception(task.exception())  # type: ignore[arg-type]
    else:
        done.set_result(task.result())


def _final_parameters(resolved: ResolvedAction) -> frozenset[str]:
    """The parameters an invoke may not set, as OpenWhisk's ``final`` annotation protects them: when it
    is ``true`` (the JSON boolean), every parameter of the action and its package with a value."""
    if annotation(resolved.doc, "final") is not True:
        return frozenset()
    merged = {**resolved.parameters, **resolved.init_parameters}
    return frozenset(name for name, value in merged.items() if value is not None)


def _failed_inside(activation: Activation, exc: Exception, started_ms: int) -> _Ran:
    """The outcome of an activation that failed inside owx or its platform, not in the action."""
    log.error("activation %s failed inside owx", activation.id, exc_info=exc)
    return _Ran(RunOutcome(INTERNAL_ERROR, {"error": f"whisk internal error: {exc}"}, [], started_ms, records.now_ms()))


def _unavailable(activation: Activation, exc: PlatformError, started_ms: int) -> _Ran:
    """The outcome of an activation the platform could not run (an upstream that is away, throttles or
    refuses owx's key): answered with the platform's status."""
    log.warning("activation %s: %s", activation.id, exc)
    return _Ran(RunOutcome(INTERNAL_ERROR, {"error": str(exc)}, [], started_ms, records.now_ms()), exc.status)
