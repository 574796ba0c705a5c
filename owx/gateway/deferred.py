"""Answers that wait without holding a server thread.

A Flask view that must wait for an activation (a blocking invoke, a web action) returns
:func:`defer` of a :class:`Deferred`: the view's thread is free at once, and the server's event
loop awaits the future and then renders the answer (:mod:`owx.gateway.asgi`). So one tenant's
blocking invocations, however many and however slow, never take the threads other requests need.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import Future, wait
from dataclasses import dataclass
from typing import Any

from flask import current_app, request
from werkzeug.wrappers import Response

from owx.gateway.errors import SYSTEM_UNAVAILABLE, ApiError
from owx.gateway.inline import require_thread
from owx.gateway.pipeline.invoke import Invocation

ENVIRON_KEY = "owx.deferred"
_NOW: Future[None] = Future()  # already resolved: an on_timeout that answers at once
_NOW.set_result(None)


@dataclass(frozen=True)
class Deferred:
    """Wait for ``future`` (at most ``timeout_s``), then answer ``render(result)``; on timeout, answer
    what ``on_timeout`` waits for and renders instead. Renderers build werkzeug responses without
    an application context (plain ``json``) and may raise ``ApiError``."""

    future: Future[Any]
    render: Callable[[Any], Response]
    timeout_s: float | None = None
    on_timeout: "Deferred | None" = None


def defer(deferred: Deferred, headers: dict[str, str] | None = None) -> Response:
    """Hand ``deferred`` to the server; the view returns this placeholder (its headers are kept).
    With ``defer_waits`` off the view's thread waits here first (the control of ``owx bench invoke``)."""
    if not current_app.extensions["owx"].settings.gateway.defer_waits:
        require_thread()
        wait([deferred.future], deferred.timeout_s)
    request.environ[ENVIRON_KEY] = deferred
    return Response(status=204, headers=headers)


def json_response(body: Any, status: int = 200) -> Response:
    """A compact JSON answer built without an application context (for renderers)."""
    return Response(json.dumps(body, separators=(",", ":")), status=status, mimetype="application/json")


def accepted(invocation: Invocation) -> Deferred:
    """202 ``{activationId}`` once the activation is journalled (it can no longer be lost); 503 when
    the activation store has not taken the entry within ``store_wait_s``."""
    wait_s = current_app.extensions["owx"].settings.gateway.store_wait_s
    activation_id = invocation.activation_id

    def unconfirmed(_: Any) -> Response:
        raise ApiError(503, SYSTEM_UNAVAILABLE.format(
            detail=f"the activation store did not take activation {activation_id} within {wait_s:g} s; "
                   "it may still run, and is recorded once the store takes it"))

    return Deferred(invocation.accepted, lambda _: json_response({"activationId": activation_id}, 202), wait_s,
                    Deferred(_NOW, unconfirmed))

