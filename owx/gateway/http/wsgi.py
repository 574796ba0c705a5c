"""A WSGI (Flask) application behind the gateway's server: its views run on a bounded thread pool
that serves the callers' namespaces in turn (:mod:`owx.gateway.http.fair_pool`).

A view that must wait (a web action's answer) returns a placeholder with a :class:`Deferred`
(:mod:`owx.gateway.deferred`): its thread is free at once, and the event loop awaits the future
and renders the answer, so waits never hold the threads other requests need.
"""

from __future__ import annotations

import asyncio
import io
import logging
import sys
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote_to_bytes

from werkzeug.wrappers import Response as WerkzeugResponse

from owx.common.eventloop import run_on_thread
from owx.gateway.deferred import ENVIRON_KEY, Deferred
from owx.gateway.errors import INTERNAL, ApiError
from owx.gateway.http.fair_pool import SHARED, FairPool
from owx.gateway.http.messages import Request, Response, error_response

log = logging.getLogger(__name__)
WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Any]
# from the view's placeholder to the final answer (a web action's CORS headers too)
KEPT_HEADERS = ("x-request-id", "x-openwhisk-activation-id", "access-control-allow-origin",
                "access-control-allow-methods", "access-control-allow-headers")


class WsgiBridge:
    """Serves ``app`` to the server's connections (a handler: ``await bridge(request)``); a request
    waits for a thread in the turn of the tenant ``tenant_of(request)`` names; the tenants of one
    ``share_of(tenant)`` hold at most ``tenant_threads`` of them at once (default: all)."""

    def __init__(self, app: WsgiApp, threads: int, name: str = "owx-http",
                 tenant_of: Callable[[Request], str] = lambda request: SHARED,
                 tenant_threads: int | None = None, share_of: Callable[[str], str] = lambda tenant: tenant) -> None:
        self.app = app
        self.pool = FairPool(threads, name, tenant_threads, share_of)
        self._tenant_of = tenant_of

    async def __call__(self, request: Request) -> Response:
        environ = _environ(request)
        answer = await run_on_thread(self.pool.for_tenant(self._tenant_of(request)), _call, self.app, environ)
        deferred = environ.get(ENVIRON_KEY)
        if deferred is None:
            return answer
        kept = [(k, v) for k, v in answer.headers if k.lower() in KEPT_HEADERS]
        transaction_id = next((v for k, v in kept if k.lower() == "x-request-id"), "")
        settled = await settle(deferred, transaction_id)
        replaced = {k.lower() for k, _ in kept}  # an action that takes CORS over keeps its own
        settled.headers = [*((k, v) for k, v in settled.headers if k.lower() not in replaced), *kept]
        return settled

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


async def settle(deferred: Deferred, transaction_id: str) -> Response:
    """The answer ``deferred`` renders once its future is done (or its timeout's answer)."""
    try:
        result = await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(deferred.future)), deferred.timeout_s)
    except asyncio.TimeoutError:
        if deferred.on_timeout is None:
            return error_response(500, INTERNAL, transaction_id)
        return await settle(deferred.on_timeout, transaction_id)
    except Exception:  # noqa: BLE001 - the activation's pipeline failed: an internal error, never a crash
        return error_response(500, INTERNAL, transaction_id)
    try:
        return _answer(deferred.render(result))
    except ApiError as exc:
        return error_response(exc.status, exc.message, transaction_id, exc.headers)
    except Exception:  # noqa: BLE001 - a renderer's bug is an internal error, never a dropped connection
        log.exception("rendering a deferred answer failed")
        return error_response(500, INTERNAL, transaction_id)


def _answer(response: WerkzeugResponse) -> Response:
    return Response(response.status_code, response.get_data(), response.headers.to_wsgi_list())


def _call(app: WsgiApp, environ: dict[str, Any]) -> Response:
    """Run the WSGI app once; its answer."""
    captured: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[[bytes], None]:
        captured["status"], captured["headers"] = int(status.split(" ", 1)[0]), headers
        return lambda data: None

    chunks = app(environ, start_response)
    try:
        body = b"".join(chunks)
    finally:
        if hasattr(chunks, "close"):
            chunks.close()
    return Response(captured["status"], body, captured["headers"])


def _environ(request: Request) -> dict[str, Any]:
    environ: dict[str, Any] = {
        "REQUEST_METHOD": request.method,
        "SCRIPT_NAME": "",
        "PATH_INFO": unquote_to_bytes(request.raw_path).decode("latin-1"),
        "QUERY_STRING": request.query.decode("latin-1"),
        "SERVER_NAME": request.server[0],
        "SERVER_PORT": str(request.server[1]),
        "SERVER_PROTOCOL": f"HTTP/{request.http_version}",
        "REMOTE_ADDR": request.client[0] if request.client else "",
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": request.scheme,
        "wsgi.input": io.BytesIO(request.body),
        "wsgi.input_terminated": True,  # the whole body is here: werkzeug reads chunked requests too
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
        "CONTENT_LENGTH": str(len(request.body)),
    }
    for name, value in request.headers.items():
        key = name.upper().replace("-", "_")
        if key == "CONTENT_TYPE":
            environ[key] = value
        elif key != "CONTENT_LENGTH":
            environ[f"HTTP_{key}"] = value
    if request.authorization is not None:  # the first, as the invoke route reads it (not several joined)
        environ["HTTP_AUTHORIZATION"] = request.authorization
    return environ
