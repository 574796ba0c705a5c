"""The gateway as an ASGI application: the Flask app on a bounded thread pool, deferred answers on the loop.

Each request's body is read on the event loop (refused with 413 past the entity cap, before it
is buffered), the Flask app runs on one of ``threads`` threads, and a view that deferred its
answer (:mod:`owx.gateway.deferred`) releases its thread while the loop awaits the result.
Requests that ``inline`` selects run on the loop first (:mod:`owx.gateway.inline`), and on a
thread only if they reach code that may block.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable
from urllib.parse import unquote_to_bytes

from werkzeug.wrappers import Response

from owx.gateway.deferred import ENVIRON_KEY, Deferred
from owx.gateway.errors import ENTITY_TOO_BIG, INTERNAL, ApiError
from owx.gateway.inline import NeedsThread, on_loop
from owx.gateway.pipeline.records import new_id

log = logging.getLogger(__name__)
Scope = dict[str, Any]
Receive = Callable[[], Any]
Send = Callable[[dict[str, Any]], Any]
WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Any]
Inline = Callable[[Scope, bytes], bool]  # which requests to try on the event loop first
KEPT_HEADERS = ("x-request-id", "x-openwhisk-activation-id")  # from the view's placeholder to the final answer


class FlaskOnAsgi:
    """Serves a WSGI (Flask) app over ASGI with deferred answers."""

    def __init__(self, app: WsgiApp, threads: int, max_body_bytes: int, inline: Inline | None = None) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="owx-http")
        self.inline = inline

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        body = await self._body(scope, receive)
        if body is None:
            message = ENTITY_TOO_BIG.format(field="Request", size=_length(scope) or "more", allowed=self.max_body_bytes)
            await _send(send, _answer(_error(413, message, "")))
            return
        environ = _environ(scope, body)
        answer = self._on_loop(environ) if self.inline is not None and self.inline(scope, body) else None
        if answer is None:
            environ = _environ(scope, body)  # afresh: the attempt on the loop read the body
            answer = await asyncio.get_running_loop().run_in_executor(self.pool, _call, self.app, environ)
        deferred = environ.get(ENVIRON_KEY)
        if deferred is not None:
            kept = [(k, v) for k, v in answer.headers if k.lower() in KEPT_HEADERS]
            transaction_id = next((v for k, v in kept if k.lower() == "x-request-id"), "")
            settled = _answer(await _settle(deferred, transaction_id))
            answer = _Answer(settled.status, [*((k, v) for k, v in settled.headers if k.lower() not in KEPT_HEADERS),
                                              *kept], settled.body)
        await _send(send, answer)

    def _on_loop(self, environ: dict[str, Any]) -> _Answer | None:
        """The app's answer computed right here on the event loop; None if it needs a thread."""
        with on_loop():
            try:
                return _call(self.app, environ)
            except NeedsThread:
                return None

    async def _body(self, scope: Scope, receive: Receive) -> bytes | None:
        """The whole body, or None as soon as it is known to exceed the cap."""
        if (_length(scope) or 0) > self.max_body_bytes:
            return None
        chunks, size = [], 0
        while True:
            message = await receive()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                return None
            chunks.append(chunk)
            if not message.get("more_body"):
                return b"".join(chunks)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


async def _settle(deferred: Deferred, transaction_id: str) -> Response:
    try:
        result = await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(deferred.future)), deferred.timeout_s)
    except asyncio.TimeoutError:
        if deferred.on_timeout is None:
            return _error(500, INTERNAL, transaction_id)
        return await _settle(deferred.on_timeout, transaction_id)
    except Exception:  # noqa: BLE001 - the activation's pipeline failed: an internal error, never a crash
        return _error(500, INTERNAL, transaction_id)
    try:
        return deferred.render(result)
    except ApiError as exc:
        response = _error(exc.status, exc.message, transaction_id)
        response.headers.update(exc.headers)
        return response
    except Exception:  # noqa: BLE001 - a renderer's bug is an internal error, never a dropped connection
        log.exception("rendering a deferred answer failed")
        return _error(500, INTERNAL, transaction_id)


@dataclass(frozen=True, slots=True)
class _Answer:
    """What goes on the wire: status, header pairs, body (no second response object per request)."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes


def _answer(response: Response) -> _Answer:
    return _Answer(response.status_code, response.headers.to_wsgi_list(), response.get_data())


def _call(app: WsgiApp, environ: dict[str, Any]) -> _Answer:
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
    return _Answer(captured["status"], captured["headers"], body)


def _environ(scope: Scope, body: bytes) -> dict[str, Any]:
    server = scope.get("server") or ("localhost", 80)
    client = scope.get("client") or ("", 0)
    raw_path = scope.get("raw_path") or scope["path"].encode()
    environ: dict[str, Any] = {
        "REQUEST_METHOD": scope["method"],
        "SCRIPT_NAME": "",
        "PATH_INFO": unquote_to_bytes(raw_path).decode("latin-1"),
        "QUERY_STRING": scope.get("query_string", b"").decode("latin-1"),
        "SERVER_NAME": str(server[0]),
        "SERVER_PORT": str(server[1]),
        "SERVER_PROTOCOL": f"HTTP/{scope.get('http_version', '1.1')}",
        "REMOTE_ADDR": client[0],
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": scope.get("scheme", "http"),
        "wsgi.input": io.BytesIO(body),
        "wsgi.input_terminated": True,  # the whole body is here: werkzeug reads chunked requests too
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
        "CONTENT_LENGTH": str(len(body)),
    }
    for raw_name, raw_value in scope.get("headers", ()):
        name, value = raw_name.decode("latin-1").upper().replace("-", "_"), raw_value.decode("latin-1")
        if name in ("CONTENT_TYPE", "CONTENT_LENGTH"):
            environ[name] = value if name == "CONTENT_TYPE" else environ[name]
            continue
        key = f"HTTP_{name}"
        environ[key] = f"{environ[key]},{value}" if key in environ else value
    return environ


def _length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _error(status: int, message: str, transaction_id: str) -> Response:
    return Response(json.dumps({"error": message, "code": transaction_id or new_id()}), status=status,
                    mimetype="application/json")


async def _send(send: Send, answer: _Answer) -> None:
    headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in answer.headers]
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": answer.body})


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
