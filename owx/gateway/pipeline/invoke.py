"""Invoke an action: resolve, admit, run on the platform (or as a sequence), record."""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Protocol

from owx.gateway.catalog import Catalog, ResolvedAction, annotation
from owx.gateway.errors import ApiError, bad_request
from owx.gateway.identity import Identity
from owx.gateway.names import parse_fqn
from owx.gateway.pipeline import records
from owx.gateway.pipeline.admission import Throttle
from owx.gateway.stores import ActivationStore
from owx.platform.interface import PlatformError
from owx.platform.types import INTERNAL_ERROR, SUCCESS, ActionSpec, RunOutcome, RunRequest
from owx.settings import Settings

log = logging.getLogger(__name__)
PARAMETERS_NOT_ALLOWED = "Request defines parameters that are not allowed (e.g., reserved properties)."


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
    def of(cls, record: dict[str, Any], platform_status: int | None = None) -> "Completion":
        """200 for a success, 502 for the action's errors, 500 for owx's own; ``platform_status`` when
        the platform could not run the activation at all (an upstream that is down: 503, ...)."""
        outcome = record["response"]["status"]
        status = 200 if outcome == SUCCESS else 500 if outcome == INTERNAL_ERROR else 502
        return cls(record, platform_status or status)


@dataclass(frozen=True)
class Invocation:
    activation_id: str
    future: Future[Completion]


def _copy_result(outer: Future[Completion], inner: Future[Completion]) -> None:
    if inner.exception() is not None:
        outer.set_exception(inner.exception())  # type: ignore[arg-type]
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
    )


class Invoker:
    """The pipeline behind ``POST .../actions/NAME`` and web actions."""

    def __init__(
        self,
        settings: Settings,
        catalog: Catalog,
        activations: ActivationStore,
        runner: Runner,
        throttle: Throttle,
    ) -> None:
        self.settings = settings
        self.catalog = catalog
        self.activations = activations
        self.runner = runner
        self.throttle = throttle
        self.runners_by_annotation: list[tuple[Callable[[ResolvedAction], bool], Runner, Gate | None]] = []
        self.api_host: str | None = settings.gateway.public_url  # set by the server once it listens
        self._executor = ThreadPoolExecutor(settings.gateway.concurrent_invocations, thread_name_prefix="invoke")

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=False)

    def route(self, accepts: Callable[[ResolvedAction], bool], runner: Runner, gate: Gate | None = None) -> None:
        """Send actions that ``accepts`` selects to ``runner`` instead of the platform (e.g. Canary's
        stateful actions); the first route that accepts an action takes it.

        With a ``gate`` their invocations queue instead of answering 429, and start when
        ``gate(resolved, activation_ids)`` has reserved what they need (all or nothing).
        """
        self.runners_by_annotation.append((accepts, runner, gate))

    def start(self, identity: Identity, resolved: ResolvedAction, params: dict[str, Any]) -> Invocation:
        """Admit and start one activation; its record arrives on the returned future."""
        if self._route(resolved)[1] is not None:
            return self.start_all(identity, resolved, [params])[0]
        arguments = self._arguments(resolved, params)
        self.throttle.admit(identity.namespace)
        activation_id = records.new_id()
        try:
            future = self._executor.submit(self._admitted_run, identity, resolved, arguments, activation_id)
        except RuntimeError:
            self.throttle.release(identity.namespace)
            raise
        return Invocation(activation_id, future)

    def start_all(
        self, identity: Identity, resolved: ResolvedAction, params: list[dict[str, Any]],
        activation_ids: list[str] | None = None,
    ) -> list[Invocation]:
        """Queue activations that are admitted together (gang) when capacity allows; never 429
        for concurrency. Records arrive on the returned futures."""
        arguments = [self._arguments(resolved, p) for p in params]
        ids = activation_ids or [records.new_id() for _ in arguments]
        gate = self._route(resolved)[1]
        invocations = [Invocation(aid, Future()) for aid in ids]

        def admitted() -> None:
            for invocation, args in zip(invocations, arguments):
                try:
                    inner = self._executor.submit(self._admitted_run, identity, resolved, args, invocation.activation_id)
                except RuntimeError as exc:  # shutting down
                    self.throttle.release(identity.namespace)
                    invocation.future.set_exception(exc)
                    continue
                inner.add_done_callback(partial(_copy_result, invocation.future))

        reserve = (lambda: gate(resolved, ids)) if gate is not None else None
        self.throttle.enqueue(identity.namespace, len(ids), admitted, reserve)
        return invocations

    def _admitted_run(self, identity: Identity, resolved: ResolvedAction, args: dict[str, Any], aid: str) -> Completion:
        try:
            return self.execute(identity, resolved, args, aid)
        finally:
            self.throttle.release(identity.namespace)

    @staticmethod
    def _arguments(resolved: ResolvedAction, params: dict[str, Any]) -> dict[str, Any]:
        if annotation(resolved.doc, "final") and set(params) & set(resolved.parameters):
            raise bad_request(PARAMETERS_NOT_ALLOWED)
        return {**resolved.parameters, **params}

    def execute(
        self, identity: Identity, resolved: ResolvedAction, args: dict[str, Any], activation_id: str,
        cause: str | None = None,
    ) -> Completion:
        """Run one activation to its stored record (synchronously)."""
        platform_status = None
        if resolved.kind == "sequence":
            record = self._sequence(identity, resolved, args, activation_id, cause)
        else:
            outcome, platform_status = self._run(identity, resolved, args, activation_id)
            record = records.activation(
                activation_id=activation_id, namespace=identity.namespace, action=resolved.doc,
                path=str(resolved.path), outcome=outcome, max_result_bytes=self.settings.gateway.max_payload_bytes,
                cause=cause, extra_annotations=outcome.annotations, binding=resolved.binding,
            )
        self.activations.put(record)
        return Completion.of(record, platform_status)

    def _route(self, resolved: ResolvedAction) -> tuple[Runner, Gate | None]:
        for accepts, runner, gate in self.runners_by_annotation:
            if accepts(resolved):
                return runner, gate
        return self.runner, None

    def _run(self, identity: Identity, resolved: ResolvedAction, args: dict[str, Any],
             aid: str) -> tuple[RunOutcome, int | None]:
        """The activation's outcome, and the status to answer when the platform could not run it."""
        spec = action_spec(resolved)
        now_ms = int(time.time() * 1000)
        request = RunRequest(
            value=args,
            namespace=identity.namespace,
            action_name=resolved.path.fqn,
            activation_id=aid,
            transaction_id=aid,
            deadline_ms=now_ms + spec.timeout_ms,
            api_key=identity.auth if resolved.gets_api_key else None,
            api_host=self.api_host,
        )
        try:
            return self._route(resolved)[0].run(spec, request), None
        except PlatformError as exc:  # an upstream that is away, throttles or refuses owx's key
            log.warning("activation %s: %s", aid, exc)
            end_ms = int(time.time() * 1000)
            return RunOutcome(INTERNAL_ERROR, {"error": str(exc)}, [], now_ms, end_ms), exc.status
        except Exception as exc:  # the platform failed, not the action
            log.exception("activation %s failed inside the platform", aid)
            end_ms = int(time.time() * 1000)
            return RunOutcome(INTERNAL_ERROR, {"error": f"whisk internal error: {exc}"}, [], now_ms, end_ms), None

    def _sequence(
        self, identity: Identity, resolved: ResolvedAction, args: dict[str, Any], aid: str, cause: str | None
    ) -> dict[str, Any]:
        start_ms = int(time.time() * 1000)
        component_ids: list[str] = []
        duration = 0
        value, last, failure = args, None, None
        for reference in resolved.doc["exec"]["components"]:
            try:
                component = self.catalog.resolve(parse_fqn(reference, identity.namespace), identity.namespace)
            except ApiError as exc:  # deleted or no longer shared since the sequence was resolved
                failure = records.component_failure(exc)
                break
            child_id = records.new_id()
            last = self.execute(identity, component, {**component.parameters, **value}, child_id, cause=aid).record
            component_ids.append(child_id)
            duration += last["duration"]
            if not last["response"]["success"]:
                break
            value = last["response"]["result"]
        end_ms = int(time.time() * 1000)
        response = failure or (last["response"] if last else
                               records.response("success", args, self.settings.gateway.max_payload_bytes))
        annotations = [
            {"key": "topmost", "value": cause is None},
            {"key": "path", "value": str(resolved.path)},
            {"key": "kind", "value": "sequence"},
            {"key": "limits", "value": resolved.limits},
            {"key": "waitTime", "value": 0},
        ]
        record = {
            "activationId": aid, "namespace": identity.namespace, "name": resolved.doc["name"],
            "subject": identity.namespace, "version": resolved.doc.get("version", "0.0.1"), "publish": False,
            "start": start_ms, "end": end_ms, "duration": duration,
            "response": response, "logs": component_ids, "annotations": annotations,
        }
        if cause:
            record["cause"] = cause
        return record
