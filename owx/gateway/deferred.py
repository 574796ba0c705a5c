"""Answers that wait without holding a server thread.

A Flask view that must wait for an activation (a web action) returns :func:`defer` of a
:class:`Deferred`: the view's thread is free at once, and the server's event loop awaits the
future and then renders the answer (:mod:`owx.gateway.http.wsgi`). So one tenant's waiting
invocations, however many and however slow, never take the threads other requests need.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import Future, wait
from dataclasses import dataclass
from typing import Any

from flask import current_app, request
from werkzeug.wrappers import Response


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
        wait([deferred.future], deferred.timeout_s)
    request.environ[ENVIRON_KEY] = deferred
    return Response(status=204, headers=headers)


def json_response(body: Any, status: int = 200) -> Response:
    """A compact JSON answer built without an application context (for renderers)."""
    return Response(json.dumps(body, separators=(",", ":")), status=status, mimetype="application/json")


def accepted(activation_id: str) -> Deferred:
    """202 ``{activationId}`` at once: an activation is journalled before anyone hears of it."""
    return Deferred(_NOW, lambda _: json_response({"activationId": activation_id}, 202))
