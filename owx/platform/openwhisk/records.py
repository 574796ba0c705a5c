"""An upstream activation record read back as the platform's ``RunOutcome``.

OpenWhisk tells container failures only by their wording in the record's result (the invoker
writes the same messages owx's embedded platform does), so a death is recognised from the text:
the container exited (Canary recovers), was OOM-killed, or the action ran out of time. owx's
runtime image adds one log line with the container's peak memory when it is asked to
(``report_memory``), its last; that line is taken out of the logs and becomes ``memory_peak_bytes``,
since OpenWhisk records no memory figure of its own.
"""

from __future__ import annotations

import re
from typing import Any

from owx.platform.types import (
    EXITED_MESSAGE,
    INIT_EXITED_MESSAGE,
    INTERNAL_ERROR,
    OOM_MESSAGE,
    RunOutcome,
    Status,
)
from owx.runtimes.protocol import MEMORY_REPORT_PREFIX

STATUSES: dict[str, Status] = {
    "success": "success",
    "application error": "application error",
    "action developer error": "action developer error",
    "whisk internal error": "whisk internal error",
}
TIMEOUT = re.compile(r"The action exceeded its time limits of \d+ milliseconds\.")
UPSTREAM_ID = "upstreamActivationId"
_FAILURES = {EXITED_MESSAGE: "exited", INIT_EXITED_MESSAGE: "init", OOM_MESSAGE: "oom"}


def is_record(body: Any) -> bool:
    return isinstance(body, dict) and "activationId" in body and isinstance(body.get("response"), dict)


def failure_of(status: Status, result: Any) -> str | None:
    """Which platform failure the record's wording names, word for word (None for an action's own
    outcome: an error it raised only begins with that wording, ``Name: message``)."""
    error = result.get("error") if isinstance(result, dict) else None
    if status != "action developer error" or not isinstance(error, str):
        return None
    return _FAILURES.get(error) or ("timeout" if TIMEOUT.fullmatch(error) else None)


def outcome_of(record: dict[str, Any]) -> RunOutcome:
    response = record.get("response") or {}
    status = STATUSES.get(str(response.get("status")), INTERNAL_ERROR)
    result = response.get("result")
    if not isinstance(result, (dict, list)):
        result = {}
    logs, peak = _split_memory_report(record.get("logs") or [])
    annotations = {a.get("key"): a.get("value") for a in record.get("annotations") or [] if isinstance(a, dict)}
    start, end = int(record.get("start") or 0), int(record.get("end") or 0)
    return RunOutcome(
        status=status,
        result=result,
        logs=logs,
        start_ms=start,
        end_ms=max(start, end),
        init_ms=annotations.get("initTime"),
        node="upstream",
        memory_peak_bytes=peak,
        failure=failure_of(status, result),  # type: ignore[arg-type]
        annotations=[{"key": UPSTREAM_ID, "value": record.get("activationId")}],
    )


def _split_memory_report(lines: list[Any]) -> tuple[list[str], int | None]:
    """The logs without the runtime's memory report, and the peak it reports. The report is the
    last line (the runtime writes it right before its sentinel): the same words on another line
    are the action's own, kept, and report nothing."""
    texts = [str(line) for line in lines]
    if not texts:
        return texts, None
    marker = texts[-1].find(MEMORY_REPORT_PREFIX)
    if marker < 0:
        return texts, None
    try:
        return texts[:-1], int(texts[-1][marker + len(MEMORY_REPORT_PREFIX):].strip())
    except ValueError:
        return texts, None
