"""Turning what a container did into a ``RunOutcome``, with OpenWhisk's categories and wording."""

from __future__ import annotations

import json
from typing import Any

from owx.platform.embedded.proxy import ProxyResponse
from owx.platform.types import (
    APPLICATION_ERROR,
    DEVELOPER_ERROR,
    INVALID_INIT_MESSAGE,
    INVALID_RESPONSE_MESSAGE,
    SUCCESS,
    Status,
    UnreadAnswer,
)

MAX_ECHOED_BODY = 1000


def classify_run(response: ProxyResponse) -> tuple[Status, dict[str, Any] | list[Any] | UnreadAnswer]:
    """Status and result of a ``/run`` answer, as OpenWhisk's invoker judges it.

    200 with a JSON object carrying ``error`` is an application error (the action
    returned ``{"error": ...}``); any other 200 object or array is a success.  Any other
    status is the developer's fault (an exception, a non-JSON answer), keeping the
    runtime's ``error`` text when it gave one.  An answer too long to be parsed is passed on
    as it is (its record is the truncated response, whatever its status).
    """
    body = response.body
    if isinstance(body, UnreadAnswer):
        return (SUCCESS if response.ok else DEVELOPER_ERROR), body
    if response.is_json and response.ok and isinstance(body, dict) and "error" in body:
        return APPLICATION_ERROR, {"error": body["error"]}
    if response.is_json and response.ok and isinstance(body, (dict, list)):
        return SUCCESS, body
    if response.is_json and isinstance(body, dict) and "error" in body:
        return DEVELOPER_ERROR, {"error": body["error"]}
    return DEVELOPER_ERROR, {"error": _with_body(INVALID_RESPONSE_MESSAGE, body)}


def init_error(response: ProxyResponse) -> dict[str, Any]:
    """The result of a refused ``/init``: the runtime's own error when it gave one."""
    body = response.body
    if response.is_json and isinstance(body, dict) and "error" in body:
        return {"error": body["error"]}
    return {"error": _with_body(INVALID_INIT_MESSAGE, body)}


def error(message: str) -> dict[str, Any]:
    return {"error": message}


def _with_body(message: str, body: Any) -> str:
    """OpenWhisk's ``message: <the body as sent>`` (its start), or ``message.`` for an empty one."""
    text = body if isinstance(body, str) else json.dumps(body)
    return f"{message}: {text[:MAX_ECHOED_BODY]}" if text else f"{message}."
