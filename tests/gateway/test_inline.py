"""Invokes run their view on the event loop when the caller and the action are cached, and on a
thread, from the start, when anything on the way may block (:mod:`owx.gateway.inline`)."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Callable
from typing import Any

from flask import Flask, jsonify

from owx.gateway.asgi import FlaskOnAsgi
from owx.gateway.inline import require_thread
from tests.gateway.conftest import RunningGateway

LISTENER_THREAD = "owx-listeners"  # the server's event loop (GatewayServer.start_background)


def _app(ran: list[tuple[str, str]]) -> Flask:
    app = Flask("inline-test")

    @app.post("/computes")
    def computes():
        ran.append(("computes", threading.current_thread().name))
        return jsonify(done=True)

    @app.post("/reads")
    def reads():
        ran.append(("reads, before", threading.current_thread().name))
        require_thread()
        ran.append(("reads, after", threading.current_thread().name))
        return jsonify(done=True)

    @app.errorhandler(Exception)
    def _everything(exc: Exception):  # as the gateway's app does: any error is a 500
        return jsonify(error=str(exc)), 500

    return app


def _post(asgi: FlaskOnAsgi, path: str) -> tuple[int, Any]:
    """One request through the bridge, as the server makes it; (status, JSON body)."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": path, "raw_path": path.encode(), "query_string": b"",
             "headers": [(b"content-type", b"application/json")], "http_version": "1.1"}
    asyncio.run(asgi(scope, receive, send))
    return sent[0]["status"], json.loads(sent[1]["body"])


def test_a_view_that_needs_no_io_runs_on_the_event_loop() -> None:
    ran: list[tuple[str, str]] = []
    asgi = FlaskOnAsgi(_app(ran).wsgi_app, 2, 1 << 20, inline=lambda scope, body: True)
    try:
        assert _post(asgi, "/computes") == (200, {"done": True})
    finally:
        asgi.close()
    assert ran == [("computes", threading.current_thread().name)]  # asyncio.run's loop runs on this thread


def test_a_view_that_may_block_is_run_again_on_a_thread_and_answers_once() -> None:
    ran: list[tuple[str, str]] = []
    asgi = FlaskOnAsgi(_app(ran).wsgi_app, 2, 1 << 20, inline=lambda scope, body: True)
    try:
        assert _post(asgi, "/reads") == (200, {"done": True})  # not the catch-all's 500
    finally:
        asgi.close()
    loop_thread = threading.current_thread().name
    assert [step for step, _ in ran] == ["reads, before", "reads, before", "reads, after"]
    assert ran[0][1] == loop_thread
    assert ran[1][1] == ran[2][1] != loop_thread and ran[1][1].startswith("owx-http")


def test_requests_the_server_does_not_select_run_on_its_threads() -> None:
    ran: list[tuple[str, str]] = []
    asgi = FlaskOnAsgi(_app(ran).wsgi_app, 2, 1 << 20, inline=lambda scope, body: scope["path"] != "/computes")
    try:
        assert _post(asgi, "/computes") == (200, {"done": True})
    finally:
        asgi.close()
    assert ran[0][1].startswith("owx-http")


def _threads_of(calls: list[str], function: Callable[..., Any]) -> Callable[..., Any]:
    """``function``, noting the thread of every call in ``calls``."""
    def noted(*args: Any, **kwargs: Any) -> Any:
        calls.append(threading.current_thread().name)
        return function(*args, **kwargs)
    return noted


def test_cache_misses_read_the_store_on_a_thread_and_warm_invokes_run_on_the_loop(gateway: RunningGateway,
                                                                                monkeypatch) -> None:
    tenant = gateway.tenant(f"inline-{uuid.uuid4().hex[:6]}")  # its key is in no cache yet
    http = tenant.session()
    name = f"echo-{uuid.uuid4().hex[:6]}"
    code = "def main(args):\n    return {'n': args.get('n', 0) + 1}\n"
    assert http.put(tenant.api(f"actions/{name}"), json={"exec": {"kind": "python:3", "code": code}}).ok
    service = gateway.service
    store_reads: list[str] = []
    starts: list[str] = []
    monkeypatch.setattr(service.auth.store, "get", _threads_of(store_reads, service.auth.store.get))
    monkeypatch.setattr(service.catalog.store, "get", _threads_of(store_reads, service.catalog.store.get))
    monkeypatch.setattr(service.invoker, "start", _threads_of(starts, service.invoker.start))
    service.auth._cache.clear()  # the PUT above cached the key: the first invoke must look it up again
    answers = [http.post(tenant.api(f"actions/{name}"), params={"blocking": "true", "result": "true"}, json={"n": n})
               for n in range(3)]
    assert [(a.status_code, a.json()) for a in answers] == [(200, {"n": 1}), (200, {"n": 2}), (200, {"n": 3})]
    assert store_reads and LISTENER_THREAD not in store_reads  # the cold caller and action were read on a thread
    assert starts[0] != LISTENER_THREAD and starts[1:] == [LISTENER_THREAD, LISTENER_THREAD]
    code_v2 = code.replace("+ 1", "+ 2")  # a new revision: the action is no longer cached, the caller still is
    assert http.put(tenant.api(f"actions/{name}"), params={"overwrite": "true"},
                    json={"exec": {"kind": "python:3", "code": code_v2}}).ok
    store_reads.clear()
    starts.clear()
    answer = http.post(tenant.api(f"actions/{name}"), params={"blocking": "true", "result": "true"}, json={"n": 0})
    assert (answer.status_code, answer.json()) == (200, {"n": 2})
    assert store_reads and LISTENER_THREAD not in store_reads and starts[0] != LISTENER_THREAD
    stranger = http.post(tenant.api(f"actions/{name}"), auth=(str(uuid.uuid4()), "k" * 64))
    assert stranger.status_code == 401 and LISTENER_THREAD not in store_reads
