"""Conductor actions: OpenWhisk's compositions, where an action decides step by step what runs next.

An action annotated ``conductor`` (truthy) is not run once: each run of it (a conductor step) returns
either a final result or ``{"action": NAME, "params": {...}, "state": {...}}``. Then ``NAME`` runs with
``params``, and the conductor runs again with that component's result and ``state`` laid over it,
until it returns no ``action``; the composition's result is then that last step's ``params`` (its
whole result without them). A name that does not parse, resolve or may not be invoked, and a
composition past its limit, go back to the conductor as ``{"error": ...}``, OpenWhisk's messages.

As in OpenWhisk, a topmost composition runs at most ``MAX_COMPONENTS`` components and
``2 * MAX_COMPONENTS + 1`` conductor steps, nested compositions' included (and those nested in its
sequences, and theirs: one count holds however they nest); its record is a sequence's
(kind ``sequence``, ``conductor: true``, the steps' ids as its logs, their durations summed).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from owx.gateway.catalog import ResolvedAction, annotation
from owx.gateway.errors import ApiError
from owx.gateway.models import MAX_SEQUENCE_LENGTH
from owx.gateway.names import EntityPath, parse_fqn
from owx.gateway.pipeline import records
from owx.platform.types import APPLICATION_ERROR, INTERNAL_ERROR

MAX_COMPONENTS = MAX_SEQUENCE_LENGTH
TOO_LONG = "Too many actions in the composition."
ACTIVATION_FAILURE = "Activation failure during composition."
COMPONENT_INVALID = "Failed to parse action name from json value {value} during composition."
COMPONENT_NOT_FOUND = "Failed to resolve action with name '{name}' during composition."
COMPONENT_NOT_ACCESSIBLE = "Failed entitlement check for action with name '{name}' during composition."

Record = dict[str, Any]


def is_conductor(resolved: ResolvedAction) -> bool:
    """Whether invoking ``resolved`` runs a composition: a truthy ``conductor`` annotation, as OpenWhisk
    reads one (true, a non-zero number, a non-empty string, an object); never on a sequence."""
    value = annotation(resolved.doc, "conductor")
    return resolved.kind != "sequence" and value is not None and value is not False and value not in (0, "")


@dataclass
class Steps:
    """What a topmost composition has run so far, shared with the compositions nested in it."""

    components: int = 0
    conductors: int = 0


@dataclass
class Ended:
    """How a composition ended, and what its steps add up to: their ids, their durations together and
    the largest memory limit among them (the conductor's to begin with)."""

    status: str = ""
    result: Any = None
    ids: list[str] = field(default_factory=list)
    duration_ms: int = 0
    memory_mb: int | None = None

    def add(self, record: Record) -> Any:
        """Count one step's record in; its result."""
        self.ids.append(record["activationId"])
        self.duration_ms += record["duration"]
        if (memory := records.memory_limit(record)) is not None:
            self.memory_mb = max(self.memory_mb or 0, memory)
        return record["response"]["result"]

    def end(self, status: str, result: Any) -> Ended:
        self.status, self.result = status, result
        return self


def compose(value: Any, caller: str, steps: Steps, conductor: Callable[[dict[str, Any]], Record],
            component: Callable[[ResolvedAction, dict[str, Any]], Record],
            resolve: Callable[[EntityPath], ResolvedAction], memory_mb: int) -> Ended:
    """Run one composition from its input ``value``: ``conductor(params)`` runs a conductor step,
    ``component(action, params)`` a component (each stores its record and returns it), ``resolve``
    finds a component as ``caller`` may invoke it (raising ApiError). ``memory_mb``: the conductor's."""
    trace = Ended(memory_mb=memory_mb)
    payload, state = value, None
    try:
        while True:
            if steps.conductors > 2 * MAX_COMPONENTS:
                return trace.end(APPLICATION_ERROR, {"error": TOO_LONG})
            steps.conductors += 1
            params = {**payload, **(state or {})} if isinstance(payload, dict) else {}
            step = conductor(params)
            result = trace.add(step)
            if not isinstance(result, dict):
                return trace.end(step["response"]["status"], result)
            given = _boxed(result, "params", "value")
            state = _boxed(result, "state", "state")
            if "action" not in result:
                return trace.end(step["response"]["status"], given if given is not None else result)
            payload = _next(result["action"], caller, steps, resolve, component, given, trace)
    except Exception:  # noqa: BLE001 - a step owx could not run or store ends the composition, as OpenWhisk's
        return trace.end(INTERNAL_ERROR, {"error": ACTIVATION_FAILURE})


def _next(name: Any, caller: str, steps: Steps, resolve: Callable[[EntityPath], ResolvedAction],
          component: Callable[[ResolvedAction, dict[str, Any]], Record], params: dict[str, Any] | None,
          trace: Ended) -> Any:
    """Run the component ``name`` a conductor step asked for; what the conductor gets next."""
    try:
        if not isinstance(name, str):
            raise ApiError(400, "not a name")
        path = parse_fqn(name, caller)
    except ApiError:
        return {"error": COMPONENT_INVALID.format(value=json.dumps(name))}
    if steps.components >= MAX_COMPONENTS:
        return {"error": TOO_LONG}
    try:
        resolved = resolve(path)
    except ApiError as exc:
        message = COMPONENT_NOT_ACCESSIBLE if exc.status == 403 else COMPONENT_NOT_FOUND
        return {"error": message.format(name=str(path))}
    return trace.add(component(resolved, params or {}))


def _boxed(result: dict[str, Any], key: str, box: str) -> dict[str, Any] | None:
    """``result[key]`` as an object (a value that is not one is boxed as ``{box: value}``), if present."""
    if key not in result:
        return None
    value = result[key]
    return value if isinstance(value, dict) else {box: value}
