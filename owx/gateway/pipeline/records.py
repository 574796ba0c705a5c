"""Activation records shaped as OpenWhisk's (``wsk activation get`` reads them unchanged): every
record owx stores is made here.

An action's record comes from :func:`build`: its run, a sequence's end, and the failed record of an
activation a gateway answered for and then could not finish (it stopped or died, :func:`unfinished`);
a fired trigger's from :func:`trigger`. Their ``logs`` come last, so that the logs of a stored record
are served from its text without parsing them (`split_stored`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, fields
from functools import cached_property
from typing import Any

from owx.gateway.errors import INVALID_RESULT, SEQUENCE_COMPONENT_NOT_FOUND, ApiError
from owx.common import jsonvalues
from owx.gateway.stores import MAX_DOC_BYTES
from owx.platform import loglines
from owx.platform.types import (
    APPLICATION_ERROR,
    DEVELOPER_ERROR,
    DEVELOPER_ERROR_LOG_MESSAGE,
    INTERNAL_ERROR,
    SUCCESS,
    RunOutcome,
    UnreadAnswer,
)

STATUS_CODES = {SUCCESS: 0, APPLICATION_ERROR: 1, DEVELOPER_ERROR: 2, INTERNAL_ERROR: 3}
TRUNCATED_RESPONSE = ("The action produced a response that exceeded the allowed length: {size} > {limit} bytes. "
                      "The truncated response was: {trunk}")
GATEWAY_STOPPED = "whisk internal error: the gateway stopped before the activation finished; it is not retried."
GATEWAY_DIED = ("whisk internal error: the gateway died (it restarted) before the activation finished; "
                "it is not retried.")
MB = 1024 * 1024
RECORD_SLACK = 4096  # room for the truncation line that replaces cut logs (and a record's other fields)
MAX_ESCAPED = 6  # bytes one character of a string takes in JSON at most (``\u001f``)
BUILT_ANNOTATIONS = 9  # at most how many `build` makes itself (path, waitTime, kind, timeout, limits, ...)


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
    binding: str | None = None  # the package binding (``ns/name``) it was reached through

    @classmethod
    def of(cls, doc: dict[str, Any], path: str, binding: str | None = None) -> "ActionFacts":
        return cls(doc["namespace"], doc["name"], path, doc.get("version", "0.0.1"), doc["exec"]["kind"],
                   doc["limits"], binding)

    @cached_property
    def _journalled(self) -> dict[str, Any]:
        """The facts as a journal entry holds them (no null in it: the stores encode a document without
        nulls faster); made once."""
        return {field.name: getattr(self, field.name) for field in fields(self) if getattr(self, field.name) is not None}

    def entry(self, activation_id: str, subject: str, start_ms: int, cause: str | None) -> dict[str, Any]:
        """The journal entry of an accepted activation: enough to build its failed record later."""
        entry = {"activationId": activation_id, "namespace": subject, "action": self._journalled, "start": start_ms}
        if cause is not None:
            entry["cause"] = cause
        return entry


def response(status: str, result: Any, max_bytes: int, checked: bool = False) -> dict[str, Any]:
    """The ``response`` object. A result that is not storable JSON (NaN, a lone surrogate, nested
    too deep) becomes a developer error saying so; one over ``max_bytes`` (as stored), an
    application error holding its first ``max_bytes`` (OpenWhisk's truncated response; ``size``
    stays the whole result's; an `UnreadAnswer` is cut as it was sent). ``checked``: the result is
    known to be storable (it was parsed strictly), so it is not walked again."""
    if isinstance(result, UnreadAnswer):  # longer than the limit as sent: never parsed, always cut
        encoded, size = result.head, max(result.size, max_bytes + 1)
    else:
        problem = None if checked else jsonvalues.problem(result)
        if problem:
            status, result = DEVELOPER_ERROR, {"error": INVALID_RESULT.format(detail=problem)}
        encoded = jsonvalues.dumps(result)
        size = len(encoded)
    if size > max_bytes:
        trunk = encoded[:max_bytes].decode("utf-8", "ignore")  # never half a character
        status, result = APPLICATION_ERROR, {"error": TRUNCATED_RESPONSE.format(size=size, limit=max_bytes,
                                                                                trunk=trunk)}
    return {"status": status, "statusCode": STATUS_CODES[status], "success": status == SUCCESS,
            "result": result, "size": size}


def sequence_annotations(limits: dict[str, int], max_memory_mb: int | None, topmost: bool) -> list[dict[str, Any]]:
    """A sequence record's own annotations, as OpenWhisk's: ``topmost``, and once a component has run,
    ``limits``: the sequence's, with the largest memory limit among its components' records."""
    annotations: list[dict[str, Any]] = [{"key": "topmost", "value": topmost}]
    if max_memory_mb is not None:
        annotations.append({"key": "limits", "value": {**limits, "memory": max_memory_mb}})
    return annotations


def memory_limit(record: dict[str, Any]) -> int | None:
    """The memory limit (MB) in ``record``'s ``limits`` annotation, if it has one."""
    for annotation in record["annotations"]:
        if annotation["key"] == "limits" and isinstance(annotation["value"], dict):
            memory = annotation["value"].get("memory")
            return memory if isinstance(memory, int) else None
    return None


def component_error(exc: ApiError) -> dict[str, Any]:
    """The result of a sequence whose component cannot be invoked any more (deleted, or no longer
    shared), as OpenWhisk's sequences report a missing component (with an application error)."""
    return {"error": SEQUENCE_COMPONENT_NOT_FOUND if exc.status == 404 else exc.message}


def run_logs(lines: Any, limit_bytes: int, developer_error: bool, checked: bool = False) -> list[str]:
    """An action run's logs as its record keeps them (`stored_logs`; ``checked``: lines the platform's
    collector kept within this limit, taken as they are), as OpenWhisk's invoker collects them: none
    at a limit of 0, and a developer error's end with its warning that some may be missing (once: an
    upstream OpenWhisk's record has it already)."""
    if limit_bytes == 0:
        return []
    kept = lines if checked else stored_logs(lines, limit_bytes)
    if developer_error and not (kept and kept[-1].endswith(DEVELOPER_ERROR_LOG_MESSAGE)):
        kept = [*kept, loglines.line(time.time(), "stderr", DEVELOPER_ERROR_LOG_MESSAGE)]
    return kept


def stored_logs(lines: Any, limit_bytes: int) -> list[str]:
    """The log lines as a record stores them: strings of valid Unicode within the action's log limit
    (counted per line as the collector counts them), cut with OpenWhisk's truncation line."""
    if not isinstance(lines, list):
        lines = [] if lines is None else [lines]
    text = [(line if isinstance(line, str) else json.dumps(line, default=repr)).encode("utf-8", "replace").decode()
            for line in lines]
    return loglines.within(text, limit_bytes)


def build(activation_id: str, subject: str, action: ActionFacts, outcome: RunOutcome, max_result_bytes: int,
          accepted_ms: int, cause: str | None = None, duration_ms: int | None = None) -> dict[str, Any]:
    """The record of one activation of ``action`` run by namespace ``subject``, accepted at
    ``accepted_ms`` (its ``waitTime`` runs from then to its start, as OpenWhisk's from the controller's
    receipt). ``duration_ms``: a sequence's, the sum of its components' (OpenWhisk's), instead of
    end - start."""
    annotations: list[dict[str, Any]] = [
        {"key": "path", "value": action.path},
        {"key": "waitTime", "value": max(0, outcome.start_ms - accepted_ms)},
        {"key": "kind", "value": action.kind},
    ]
    atomic = action.kind != "sequence"  # a sequence's limits come with its outcome (`sequence_annotations`)
    if atomic:  # the limits it ran with: the action's, or those its runner chose (DiSDeL's estimates)
        applied = next((a["value"] for a in outcome.annotations if a["key"] == "limits"), {})
        annotations.append({"key": "timeout", "value": outcome.failure == "timeout"})
        annotations.append({"key": "limits", "value": {**action.limits, **applied}})
    if outcome.init_ms is not None:
        annotations.append({"key": "initTime", "value": outcome.init_ms})
    if outcome.memory_peak_bytes is not None:  # the container's high-water mark so far, in bytes
        annotations.append({"key": "memoryPeak", "value": outcome.memory_peak_bytes})
    if cause:
        annotations.append({"key": "causedBy", "value": "sequence"})
    if action.binding:
        annotations.append({"key": "binding", "value": action.binding})
    if outcome.annotations:
        annotations.extend(a for a in outcome.annotations
                           if not (atomic and a["key"] == "limits") and jsonvalues.problem(a) is None)
    answer = response(outcome.status, outcome.result, max_result_bytes, outcome.checked)
    log_limit = action.limits["logs"] * MB
    logs = (stored_logs(outcome.logs, log_limit) if action.kind == "sequence"  # its components' ids
            else run_logs(outcome.logs, log_limit, answer["status"] == DEVELOPER_ERROR, outcome.logs_checked))
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
        "response": answer,
        "annotations": annotations,
    }
    if cause:
        record["cause"] = cause
    record["logs"] = logs  # last: see `split_stored`
    return _fitted(record)


def _fitted(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with its logs cut further if it would still be over the stores' document limit
    (a result limit and log limit configured together above it)."""
    logs = record["logs"]
    logs_at_most = MAX_ESCAPED * sum(map(len, logs)) + 3 * len(logs)
    if record["response"]["size"] + logs_at_most + RECORD_SLACK < MAX_DOC_BYTES - MAX_DOC_BYTES // 4 \
            and len(record["annotations"]) <= BUILT_ANNOTATIONS:
        return record  # far below the limit (the annotations of build's own, small): not worth measuring
    others = jsonvalues.encoded_size(record["annotations"]) + RECORD_SLACK
    if record["response"]["size"] + logs_at_most + others < MAX_DOC_BYTES:
        return record  # below the limit: not worth encoding the record to measure it
    overflow = jsonvalues.encoded_size(record) - MAX_DOC_BYTES
    if overflow > 0:
        kept = sum(loglines.cost(line) for line in record["logs"]) - overflow - RECORD_SLACK
        record["logs"] = loglines.within(record["logs"], max(0, kept))
    return record


def unfinished(entry: dict[str, Any], message: str, max_result_bytes: int, end_ms: int) -> dict[str, Any]:
    """The failed record of an accepted activation that never finished (``message``: why:
    ``GATEWAY_STOPPED`` or ``GATEWAY_DIED``), ending at ``end_ms`` (no earlier than its start)."""
    action = ActionFacts(**entry["action"])
    outcome = RunOutcome(INTERNAL_ERROR, {"error": message}, [], entry["start"], max(entry["start"], end_ms))
    return build(entry["activationId"], entry["namespace"], action, outcome, max_result_bytes, entry["start"],
                 entry.get("cause"))


def trigger(activation_id: str, subject: str, name: str, version: str, start_ms: int, payload: dict[str, Any],
            rule_lines: list[dict[str, Any]], max_result_bytes: int) -> dict[str, Any]:
    """The record of trigger ``name`` fired by namespace ``subject``, as OpenWhisk keeps one: its
    result is the payload, its logs one JSON line per rule (the activation the rule started, or why
    it started none), and it has no ``end`` (the rules' actions run on their own; OpenWhisk leaves
    out an end that is its epoch)."""
    return {
        "activationId": activation_id,
        "namespace": subject,
        "name": name,
        "subject": subject,
        "version": version,
        "publish": False,
        "start": start_ms,
        "response": response(SUCCESS, payload, max_result_bytes),
        "annotations": [],
        "logs": [json.dumps(line, separators=(",", ":")) for line in rule_lines],  # last: see `split_stored`
    }


def split_stored(stored: bytes) -> tuple[bytes, memoryview] | None:
    """A stored record made here, as JSON text, split without parsing it: (the record without its
    ``logs``, the ``logs`` array); records hold up to tens of MB of logs, and parsing one holds the
    interpreter lock every tenant's requests wait for. None for a record of another layout (an older
    version's: logs before annotations).

    Inside a JSON string every quote is escaped, so ``"logs":[`` and ``"annotations":[`` occur in the
    text only as keys: the last ``"logs":[`` after the last ``"annotations":[`` is the record's own
    key (its last, after a comma), with nothing but its array (of strings) and the record's closing
    brace after it."""
    logs_at = stored.rfind(_LOGS_KEY)
    if logs_at < 1 or stored.rfind(_ANNOTATIONS_KEY) > logs_at or not stored.endswith((b'"]}', b"[]}")):
        return None
    return stored[:logs_at - 1] + b"}", memoryview(stored)[logs_at + len(_LOGS_KEY) - 1:-1]  # the array not copied


_LOGS_KEY, _ANNOTATIONS_KEY = b'"logs":[', b'"annotations":['
