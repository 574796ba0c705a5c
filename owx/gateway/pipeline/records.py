"""Activation records shaped as OpenWhisk's (``wsk activation get`` reads them unchanged)."""

from __future__ import annotations

import json
import uuid
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


def new_id() -> str:
    """A 32-hex activation (or transaction) id."""
    return uuid.uuid4().hex


def response(status: str, result: Any, max_bytes: int) -> dict[str, Any]:
    """The ``response`` object; a result over ``max_bytes`` becomes a developer error."""
    size = len(json.dumps(result, separators=(",", ":")))
    if size > max_bytes:
        status, result = DEVELOPER_ERROR, {"error": TRUNCATED_RESPONSE.format(size=size, limit=max_bytes)}
        size = len(json.dumps(result))
    return {"status": status, "statusCode": STATUS_CODES[status], "success": status == SUCCESS,
            "result": result, "size": size}


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
) -> dict[str, Any]:
    """The record of one activation of ``action`` (its stored document) run by ``namespace``."""
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
    annotations.extend(extra_annotations or ())
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
        "logs": outcome.logs,
        "annotations": annotations,
    }
    if cause:
        record["cause"] = cause
    return record


def summary(record: dict[str, Any]) -> dict[str, Any]:
    """What ``GET .../activations`` lists without ``docs=true``."""
    keys = ("activationId", "namespace", "name", "version", "publish", "start", "end", "duration", "annotations")
    brief = {key: record[key] for key in keys if key in record}
    brief["statusCode"] = record.get("response", {}).get("statusCode", 0)
    return brief
