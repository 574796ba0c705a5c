"""Invoke an action: admit, journal, run on the platform (or as a sequence), record durably.

One straight line per activation, on a worker thread (:mod:`.workers`):

1. :meth:`Invoker.start` admits it (throttles), journals it as accepted (durable before anyone
   is answered for it: the next start records it as failed if this gateway dies) and queues it;
2. the worker runs it on the platform (or on the runner an extension routed it to);
3. :mod:`.records` builds its record and hands it to the store; the worker moves on, and the
   completion resolves when the store has committed it (and dropped the journal entry): an
   answer never names a record that could be lost.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

from owx.gateway.catalog import Catalog, ResolvedAction, annotation
from owx.gateway.errors import ApiError, bad_request
from owx.gateway.identity import Identity
from owx.gateway.inline import require_thread
from owx.gateway.names import parse_fqn
from owx.gateway.pipeline import records
from owx.gateway.pipeline.admission import Throttle
from owx.gateway.pipeline.records import ActionFacts
from owx.gateway.pipeline.workers import FairWorkers
from owx.gateway.stores import ActivationStore
from owx.platform.interface import PlatformError
from owx.platform.types import APPLICATION_ERROR, INTERNAL_ERROR, SUCCESS, ActionSpec, RunOutcome, RunRequest
from owx.settings import Settings

log = logging.getLogger(__name__)
PARAMETERS_NOT_ALLOWED = "Request defines parameters that are not allowed (e.g., reserved properties)."
DURABLE_WAIT_S = 60.0


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

    @classmethod
    def of(cls, record: dict[str, Any], platform_status: int | None = None) -> Completion:
        """200 for a success, 502 for the action's errors, 500 for owx's own; ``platform_status`` when
        the platform could not run the activation at all (an upstream that is down: 503, ...)."""
        outcome = record["response"]["status"]
        status = 200 if outcome == SUCCESS else 500 if outcome == INTERNAL_ERROR else 502
        return cls(record, platform_status or status)


@dataclass
class Activation:
    """One activation on its way through the pipeline."""

    id: str
    identity: Identity
    action: ResolvedAction
    args: dict[str, Any]
    cause: str | None = None
    accepted_ms: int = field(default_factory=records.now_ms)

    @property
    def facts(self) -> ActionFacts:
        return ActionFacts.of(self.action.doc, str(self.action.path), self.action.binding)

    def entry(self) -> dict[str, Any]:
        return self.facts.entry(self.id, self.identity.namespace, self.accepted_ms, self.cause)


@dataclass(frozen=True)
class Invocation:
    """An admitted activation: ``accepted`` completes once it is journalled (durable), ``done`` once
    its record is stored."""

    activation_id: str
    accepted: Future[None]
    done: Future[Completion]


def _forward(outer: Future[Completion], inner: Future[Any]) -> None:
    """Complete ``outer`` as ``inner`` ends; when ``inner`` hands on a future (a worker's run, which
    gives the future of its committed record), follow that one in turn."""
    if inner.cancelled():
        outer.cancel()
    elif inner.exception() is not None:
        outer.set_exception(inner.exception())  # type: ignore[arg-type]
    elif isinstance(inner.result(), Future):
        inner.result().add_done_callback(partial(_forward, outer))
    else:
        outer.set_result(inner.result())


def action_spec(resolved: ResolvedAction) -> ActionSpec:
    """What the platform needs to find or make a container for ``resolved``."""
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
        concurrency=limits.get("concurrency", 1),
        env={key: value if isinstance(value, str) else json.dumps(value)
             for key, value in resolved.init_parameters.items()},
    )


class Invoker:
    """The pipeline behind ``POST .../actions/NAME``, web actions and extensions' jobs."""

    def __init__(self, settings: Settings, catalog: Catalog, activations: ActivationStore, runner: Runner,
                 throttle: Throttle) -> None:
        self.settings = settings
        self.catalog = catalog
        self.activations = activations
        self.runner = runner
        self.throttle = throttle
        self.max_result_bytes = settings.gateway.max_payload_bytes
        self.runners_by_annotation: list[tuple[Callable[[ResolvedAction], bool], Runner, Gate | None]] = []
        self.api_host: str | None = settings.gateway.public_url  # set by the server once it listens
        workers = settings.gateway.workers
        self._workers = FairWorkers(workers, "owx-activation", per_key=max(1, workers // 2))
        self._open: dict[str, Activation] = {}  # accepted, not yet recorded
        self.record_observers: list[Callable[[dict[str, Any]], None]] = []  # told of every record stored (metrics)

    def route(self, accepts: Callable[[ResolvedAction], bool], runner: Runner, gate: Gate | None = None) -> None:
        """Send actions that ``accepts`` selects to ``runner`` instead of the platform (e.g. Canary's
        stateful actions); the first route that accepts an action takes it.

        With a ``gate`` their invocations queue instead of answering 429, and start when
        ``gate(resolved, activation_ids)`` has reserved what they need (all or nothing).
        """
        self.runners_by_annotation.append((accepts, runner, gate))

    # -- admission -------------------------------------------------------------------------------
    def start(self, identity: Identity, resolved: ResolvedAction, params: dict[str, Any]) -> Invocation:
        """Admit, journal and queue one activation."""
        if self._route(resolved)[1] is not None:
            return self.start_all(identity, resolved, [params])[0]
        if self.activations.backlogged():
            require_thread()  # before admission, which a retry on a thread would count twice
        activation = Activation(records.new_id(), identity, resolved, self._arguments(resolved, params))
        self.throttle.admit(identity.namespace)
        done: Future[Completion] = Future()
        try:
            accepted = self._accept(activation)
            ran = self._workers.submit(identity.namespace, partial(self._admitted_run, activation))
        except BaseException:
            self._open.pop(activation.id, None)
            self.throttle.release(identity.namespace)
            raise
        ran.add_done_callback(partial(_forward, done))
        return Invocation(activation.id, accepted, done)

    def start_all(self, identity: Identity, resolved: ResolvedAction, params: list[dict[str, Any]],
                  activation_ids: list[str] | None = None) -> list[Invocation]:
        """Queue activations that are admitted together (gang) when capacity allows; never 429
        for concurrency. Records arrive on the returned futures."""
        require_thread()  # an extension's gate may reserve capacity, which can wait
        ids = activation_ids or [records.new_id() for _ in params]
        activations = [Activation(aid, identity, resolved, self._arguments(resolved, p)) for aid, p in zip(ids, params)]
        gate = self._route(resolved)[1]
        invocations = [Invocation(a.id, self._accept(a), Future()) for a in activations]

        def admitted() -> None:
            for invocation, activation in zip(invocations, activations):
                try:
                    inner = self._workers.submit(identity.namespace, partial(self._admitted_run, activation))
                except RuntimeError as exc:  # shutting down
                    self.throttle.release(identity.namespace)
                    invocation.done.set_exception(exc)
                    continue
                inner.add_done_callback(partial(_forward, invocation.done))

        reserve = (lambda: gate(resolved, ids)) if gate is not None else None
        self.throttle.enqueue(identity.namespace, len(ids), admitted, reserve)
        return invocations

    def load(self) -> tuple[int, int]:
        """(activations running, activations queued for a worker)."""
        return self._workers.load()

    def _accept(self, activation: Activation) -> Future[None]:
        self._open[activation.id] = activation
        return self.activations.accept(activation.entry())

    @staticmethod
    def _arguments(resolved: ResolvedAction, params: dict[str, Any]) -> dict[str, Any]:
        if annotation(resolved.doc, "final") and set(params) & {*resolved.parameters, *resolved.init_parameters}:
            raise bad_request(PARAMETERS_NOT_ALLOWED)
        return resolved.arguments(params)

    # -- execution --------------------------------------------------------------------------------
    def _admitted_run(self, activation: Activation) -> Future[Completion]:
        try:
            return self.recorded(activation)
        finally:
            self._open.pop(activation.id, None)  # its record is queued: closing writes it, not a failure
            self.throttle.release(activation.identity.namespace)

    def execute(self, activation: Activation) -> Completion:
        """Run one activation to its durably stored record (synchronously)."""
        return self.recorded(activation).result(DURABLE_WAIT_S)

    def recorded(self, activation: Activation) -> Future[Completion]:
        """Run one activation and queue its record; the completion arrives once the record is
        committed (the caller's thread does not wait for that)."""
        platform_status = None
        if activation.action.kind == "sequence":
            record = self._sequence(activation)
        else:
            outcome, platform_status = self._run(activation)
            record = records.build(activation.id, activation.identity.namespace, activation.facts, outcome,
                                   self.max_result_bytes, activation.cause)
        done: Future[Completion] = Future()

        def committed(stored: Future[None]) -> None:
            if stored.exception() is not None:
                done.set_exception(stored.exception())  # type: ignore[arg-type]
                return
            for observe in self.record_observers:
                try:
                    observe(record)
                except Exception:  # noqa: BLE001 - an observer's bug must not withhold the answer
                    log.exception("a record observer failed")
            done.set_result(Completion.of(record, platform_status))

        self.activations.put(record).add_done_callback(committed)
        return done

    def _route(self, resolved: ResolvedAction) -> tuple[Runner, Gate | None]:
        for accepts, runner, gate in self.runners_by_annotation:
            if accepts(resolved):
                return runner, gate
        return self.runner, None

    def _run(self, activation: Activation) -> tuple[RunOutcome, int | None]:
        """The activation's outcome, and the status to answer when the platform could not run it."""
        resolved = activation.action
        spec = action_spec(resolved)
        now_ms = records.now_ms()
        request = RunRequest(
            value=activation.args,
            namespace=activation.identity.namespace,
            action_name=resolved.path.fqn,
            activation_id=activation.id,
            transaction_id=activation.id,
            deadline_ms=now_ms + spec.timeout_ms,
            api_key=activation.identity.auth if resolved.gets_api_key else None,
            api_host=self.api_host,
        )
        try:
            return self._route(resolved)[0].run(spec, request), None
        except PlatformError as exc:  # an upstream that is away, throttles or refuses owx's key
            log.warning("activation %s: %s", activation.id, exc)
            return RunOutcome(INTERNAL_ERROR, {"error": str(exc)}, [], now_ms, records.now_ms()), exc.status
        except Exception as exc:  # the platform failed, not the action
            log.exception("activation %s failed inside the platform", activation.id)
            return RunOutcome(INTERNAL_ERROR, {"error": f"whisk internal error: {exc}"}, [], now_ms,
                              records.now_ms()), None

    def _sequence(self, activation: Activation) -> dict[str, Any]:
        """Run the components in order, each with the previous result; the sequence's record ends
        with the last one run, lists the components' activation ids as its logs, and lasts as long as
        they did together (OpenWhisk's)."""
        start_ms = records.now_ms()
        component_ids: list[str] = []
        duration, value, last, failure = 0, activation.args, None, None
        for reference in activation.action.doc["exec"]["components"]:
            try:
                component = self.catalog.resolve(parse_fqn(reference, activation.identity.namespace),
                                                 activation.identity.namespace)
            except ApiError as exc:  # deleted or no longer shared since the sequence was resolved
                failure = records.component_error(exc)
                break
            child = Activation(records.new_id(), activation.identity, component, component.arguments(value),
                               cause=activation.id)
            last = self.execute(child).record
            component_ids.append(child.id)
            duration += last["duration"]
            if not last["response"]["success"]:
                break
            value = last["response"]["result"]
        if failure is not None:
            status, result = APPLICATION_ERROR, failure
        elif last is not None:
            status, result = last["response"]["status"], last["response"]["result"]
        else:
            status, result = SUCCESS, activation.args
        outcome = RunOutcome(status, result, component_ids, start_ms, records.now_ms(),
                             annotations=[{"key": "topmost", "value": activation.cause is None}])
        return records.build(activation.id, activation.identity.namespace, activation.facts, outcome,
                             self.max_result_bytes, activation.cause, duration_ms=duration)

    # -- stopping and recovery ---------------------------------------------------------------------
    def close(self, grace_s: float) -> None:
        """Stop: give what runs ``grace_s``, then record every accepted activation that is still not
        finished (queued, waiting for admission, running) as failed, so none anyone was answered for
        is left unrecorded. Their later outcomes are ignored (a record's first write wins)."""
        self._workers.shutdown(grace_s)
        for activation in list(self._open.values()):
            self.activations.put(records.unfinished(activation.entry(), records.GATEWAY_STOPPED, self.max_result_bytes))
        self._open.clear()

    def recover(self) -> int:
        """Record as failed the activations a gateway that died had accepted and not finished."""
        left = self.activations.unfinished()
        for entry in left:
            self.activations.put(records.unfinished(entry, records.GATEWAY_DIED, self.max_result_bytes))
        if left:
            log.warning("recorded %d activations left unfinished by a gateway that died", len(left))
        return len(left)
