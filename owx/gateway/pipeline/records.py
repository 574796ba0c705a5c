"""Activation records shaped as OpenWhisk's (``wsk activation get`` reads them unchanged)."""

from __future__ import annotations

import json
import uuid
from typing import Any

from owx.gateway.errors import INVALID_RESULT, SEQUENCE_COMPONENT_NOT_FOUND, ApiError
from owx.gateway import jsonvalues
from owx.gateway.stores import MAX_DOC_BYTES
from owx.platform import loglines
from owx.platform.types import (
    APPLICATION_ERROR,
    DEVELOPER_ERROR,
    INTERNAL_ERROR,
    SUCCESS,
    RunOutcome,
)

STATUS_CODES = {SUCCESS: 0, APPLICATION_ERROR: 1, DEVELOPER_ERROR: 2, INTERNAL_ERROR: 3}
TRUNCATED_RESPONSE = "The action produced a response that exceeded the allowed length: {size} > {limit} bytes."
MB = 1024 * 1024
RECORD_SLACK = 4096  # room for the truncation line that replaces cut logs


def new_id() -> str:
    """A 32-hex activation (or transaction) id."""
    return uuid.uuid4().hex


def response(status: str, result: Any, max_bytes: int) -> dict[str, Any]:
    """The ``response`` object. A result that is not storable JSON (NaN, a lone surrogate, nested
    too deep) or is over ``max_bytes`` (as stored) becomes a developer error saying so."""
    problem = jsonvalues.problem(result)
    if problem:
        status, result = DEVELOPER_ERROR, {"error": INVALID_RESULT.format(detail=problem)}
    size = jsonvalues.encoded_size(result)
    if size > max_bytes:
        status, result = DEVELOPER_ERROR, {"error": TRUNCATED_RESPONSE.format(size=size, limit=max_bytes)}
        size = jsonvalues.encoded_size(result)
    return {"status": status, "statusCode": STATUS_CODES[status], "success": status == SUCCESS,
            "result": result, "size": size}


def component_failure(exc: ApiError) -> dict[str, Any]:
    """The ``response`` of a sequence whose component cannot be invoked any more (deleted, or no longer
    shared): an application error, as OpenWhisk's sequences report a missing component."""
    message = SEQUENCE_COMPONENT_NOT_FOUND if exc.status == 404 else exc.message
    return response(APPLICATION_ERROR, {"error": message}, MB)


def stored_logs(lines: Any, limit_bytes: int) -> list[str]:
    """The log lines as a record stores them: strings of valid Unicode within the action's log limit
    (counted per line as the collector counts them), cut with OpenWhisk's truncation line."""
    if not isinstance(lines, list):
        lines = [] if lines is None else [lines]
    text = [(line if isinstance(line, str) else json.dumps(line, default=repr)).encode("utf-8", "replace").decode()
            for line in lines]
    return loglines.within(text, limit_bytes)


def activation(
    *,
    activation_id: str,
    namespace: str,
    action: dict[str, Any],
    path: str,
    outcome: RunOutcome,
    max_result_bytes: int,
    cause: str | None = None,
    extra_annotations: list[dict[str, Any]] | None = None,
    binding: str | None = None,
) -> dict[str, Any]:
    """The record of one activation of ``action`` (its stored document) run by ``namespace``, through
    the package ``binding`` (``ns/name``) if given; always storable (see `response`, `stored_logs`)."""
    annotations = [
        {"key": "path", "value": path},
        {"key": "waitTime", "value": outcome.wait_ms},
        {"key": "kind", "value": action["exec"]["kind"]},
        {"key": "timeout", "value": outcome.failure == "timeout"},
        {"key": "limits", "value": action["limits"]},
    ]
    if outcome.init_ms is not None:
        annotations.append({"key": "initTime", "value": outcome.init_ms})
    if outcome.memory_peak_bytes is not None:  # the container's high-water mark so far, in bytes
        annotations.append({"key": "memoryPeak", "value": outcome.memory_peak_bytes})
    if cause:
        annotations.append({"key": "causedBy", "value": "sequence"})
    if binding:
        annotations.append({"key": "binding", "value": binding})
    annotations.extend(a for a in extra_annotations or () if jsonvalues.problem(a) is None)
    record = {
        "activationId": activation_id,
        "namespace": namespace,
        "name": action["name"],
        "subject": namespace,
        "version": action.get("version", "0.0.1"),
        "publish": False,
        "start": outcome.start_ms,
        "end": outcome.end_ms,
        "duration": outcome.duration_ms,
        "response": response(outcome.status, outcome.result, max_result_bytes),
        "logs": stored_logs(outcome.logs, action["limits"]["logs"] * MB),
        "annotations": annotations,
    }
    if cause:
        record["cause"] = cause
    return _fitted(record)


def _fitted(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with its logs cut further if it would still be over the stores' document limit
    (a result limit and log limit configured together above it)."""
    overflow = jsonvalues.encoded_size(record) - MAX_DOC_BYTES
    if overflow > 0:
        kept = sum(loglines.cost(line) for line in record["logs"]) - overflow - RECORD_SLACK
        record["logs"] = loglines.within(record["logs"], max(0, kept))
    return record


def summary(record: dict[str, Any]) -> dict[str, Any]:
    """What ``GET .../activations`` lists without ``docs=true``."""
    keys = ("activationId", "namespace", "name", "version", "publish", "start", "end", "duration", "annotations")
    brief = {key: record[key] for key in keys if key in record}
    brief["statusCode"] = record.get("response", {}).get("statusCode", 0)
    return brief
