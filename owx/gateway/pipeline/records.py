"""Activation records shaped as OpenWhisk's (``wsk activation get`` reads them unchanged): one builder.

Every record comes from :func:`build`: an action's run, a sequence's end, and the failed record
of an activation a gateway answered for and then could not finish (it stopped or died).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

from owx.platform.types import (
    APPLICATION_ERROR,
    DEVELOPER_ERROR,
    INTERNAL_ERROR,
    SUCCESS,
    RunOutcome,
)

STATUS_CODES = {SUCCESS: 0, APPLICATION_ERROR: 1, DEVELOPER_ERROR: 2, INTERNAL_ERROR: 3}
TRUNCATED_RESPONSE = "The action produced a response that exceeded the allowed length: {size} > {limit} bytes."
GATEWAY_STOPPED = "whisk internal error: the gateway stopped before the activation finished; it is not retried."
GATEWAY_DIED = ("whisk internal error: the gateway died (it restarted) before the activation finished; "
                "it is not retried.")


def new_id() -> str:
    """A 32-hex activation (or transaction) id."""
    return uuid.uuid4().hex


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class ActionFacts:
    """What a record says about the action that ran: from its stored document."""

    namespace: str  # where the action lives (``ns`` or ``ns/pkg``)
    name: str
    path: str  # ``ns/[pkg/]name``
    version: str
    kind: str
    limits: dict[str, int]

    @classmethod
    def of(cls, doc: dict[str, Any], path: str) -> "ActionFacts":
        return cls(doc["namespace"], doc["name"], path, doc.get("version", "0.0.1"), doc["exec"]["kind"],
                   doc["limits"])

    def entry(self, activation_id: str, subject: str, start_ms: int, cause: str | None) -> dict[str, Any]:
        """The journal entry of an accepted activation: enough to build its failed record later."""
        return {"activationId": activation_id, "namespace": subject, "action": asdict(self), "start": start_ms,
                "cause": cause}


def response(status: str, result: Any, max_bytes: int) -> dict[str, Any]:
    """The ``response`` object; a result over ``max_bytes`` becomes a developer error."""
    size = len(json.dumps(result, separators=(",", ":")))
    if size > max_bytes:
        status, result = DEVELOPER_ERROR, {"error": TRUNCATED_RESPONSE.format(size=size, limit=max_bytes)}
        size = len(json.dumps(result))
    return {"status": status, "statusCode": STATUS_CODES[status], "success": status == SUCCESS,
            "result": result, "size": size}


def build(activation_id: str, subject: str, action: ActionFacts, outcome: RunOutcome, max_result_bytes: int,
          cause: str | None = None, duration_ms: int | None = None) -> dict[str, Any]:
    """The record of one activation of ``action`` run by namespace ``subject``. ``duration_ms``: a
    sequence's, the sum of its components' (OpenWhisk's), instead of end - start."""
    annotations: list[dict[str, Any]] = [
        {"key": "path", "value": action.path},
        {"key": "waitTime", "value": outcome.wait_ms},
        {"key": "kind", "value": action.kind},
        {"key": "timeout", "value": outcome.failure == "timeout"},
        {"key": "limits", "value": action.limits},
    ]
    if outcome.init_ms is not None:
        annotations.append({"key": "initTime", "value": outcome.init_ms})
    if outcome.memory_peak_bytes is not None:  # the container's high-water mark so far, in bytes
        annotations.append({"key": "memoryPeak", "value": outcome.memory_peak_bytes})
    if cause:
        annotations.append({"key": "causedBy", "value": "sequence"})
    annotations.extend(outcome.annotations)
    record = {
        "activationId": activation_id,
        "namespace": subject,
        "name": action.name,
        "subject": subject,
        "version": action.version,
        "publish": False,
        "start": outcome.start_ms,
        "end": outcome.end_ms,
        "duration": outcome.duration_ms if duration_ms is None else duration_ms,
        "response": response(outcome.status, outcome.result, max_result_bytes),
        "logs": outcome.logs,
        "annotations": annotations,
    }
    if cause:
        record["cause"] = cause
    return record


def unfinished(entry: dict[str, Any], message: str, max_result_bytes: int) -> dict[str, Any]:
    """The failed record of an accepted activation that never finished (``message``: why:
    ``GATEWAY_STOPPED`` or ``GATEWAY_DIED``)."""
    action = ActionFacts(**entry["action"])
    outcome = RunOutcome(INTERNAL_ERROR, {"error": message}, [], entry["start"], now_ms())
    return build(entry["activationId"], entry["namespace"], action, outcome, max_result_bytes, entry.get("cause"))
