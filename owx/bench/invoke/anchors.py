"""The anchors ``owx bench invoke`` is judged against, each a server process of its own on this machine:
a Flask "hello" POST on waitress, on granian (a Rust WSGI server) and on the server owx uses (owx's
own HTTP/1.1 server with its bridge to Flask); a warm action runtime answering ``/run`` directly; a
Flask "forward" on granian: each POST passes its body to that runtime's ``/run`` on a kept-alive
connection and answers the result (the least a gateway on Flask does per invocation); the same
JSON hello without Flask on owx's server and on uvicorn (httptools, uvloop), which shows what owx's
server saves per request over the usual asyncio server (why owx has one of its own); and owx's own
forward: owx's server on an event loop that busy-polls as the gateway's does, passing each POST to a
runtime on a Unix socket through the client the embedded platform calls its containers with (what
a warm invoke costs in owx's parts before any of its pipeline's work)."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import orjson
import requests
from flask import Flask, jsonify, request

from owx.gateway.http.messages import Request, Response, json_response

SERVERS = ("waitress", "granian", "owx-server")
NATIVE_SERVERS = ("owx-native", "uvicorn-native")  # the hello without Flask
app = Flask("hello")
forwarder = Flask("forward")
RUN_URL_ENV = "OWX_BENCH_RUN_URL"
ACTION = "def main(args):\n    return {'n': args.get('n', 0)}\n"  # the bench action, everywhere it runs
_connections = threading.local()


@app.post("/hello")
def hello():
    """Parse a JSON body and answer JSON: the least a REST endpoint does."""
    body = request.get_json(force=True, silent=True) or {}
    return jsonify(hello=body.get("n", 0))


@forwarder.post("/forward")
def forward():
    """Pass the JSON body to the runtime's ``/run`` as the activation's value; answer the result."""
    run = getattr(_connections, "run", None)
    if run is None:
        host_port = os.environ[RUN_URL_ENV].split("/")[2]
        run = _connections.run = http.client.HTTPConnection(host_port)
    run.request("POST", "/run", json.dumps(run_payload(request.get_json(force=True, silent=True) or {})),
                {"Content-Type": "application/json"})
    answer = run.getresponse()
    return answer.read(), answer.status, {"Content-Type": "application/json"}


def run_payload(value: dict) -> dict:
    """A runtime's ``/run`` body for an activation of the bench action with ``value``."""
    return {"value": value, "namespace": "guest", "action_name": "/guest/bench", "activation_id": "0" * 32,
            "transaction_id": "0" * 32, "deadline": str(int(time.time() * 1000) + 3_600_000)}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def hello_server(kind: str) -> Iterator[str]:
    """A hello served by ``kind`` (``SERVERS``: Flask's; ``NATIVE_SERVERS``: without it) in its own
    process; yields its URL."""
    port = free_port()
    if kind == "granian":
        command = [sys.executable, "-m", "granian", "--interface", "wsgi", "--host", "127.0.0.1", "--port", str(port),
                   "--workers", "1", "--no-ws", f"{__name__}:app"]
    else:
        command = [sys.executable, "-m", __name__, kind, str(port)]
    with _process(command, f"http://127.0.0.1:{port}/hello") as (url, _):
        yield url


@contextmanager
def forward_server(run_url: str) -> Iterator[tuple[str, int]]:
    """The Flask forward on granian, passing invocations to the runtime at ``run_url``; yields its URL
    and the pid of granian's main process (its worker is a child)."""
    port = free_port()
    command = [sys.executable, "-m", "granian", "--interface", "wsgi", "--host", "127.0.0.1", "--port", str(port),
               "--workers", "1", "--no-ws", f"{__name__}:forwarder"]
    with _process(command, f"http://127.0.0.1:{port}/forward", {**os.environ, RUN_URL_ENV: run_url}) as served:
        yield served


@contextmanager
def owx_forward_server() -> Iterator[str]:
    """owx's own forward (see the module's docstring) in a process of its own, with its runtime; yields its URL."""
    port = free_port()
    with _process([sys.executable, "-m", __name__, "owx-forward", str(port)],
                  f"http://127.0.0.1:{port}/forward") as (url, _):
        yield url


@contextmanager
def _process(command: list[str], url: str, env: dict[str, str] | None = None) -> Iterator[tuple[str, int]]:
    """``command`` started and answering a POST at ``url``; yields (url, pid); terminated after."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if requests.post(url, json={"n": 1}, timeout=1).ok:
                    break
            except requests.ConnectionError:
                pass
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError(f"{command} did not start")
            time.sleep(0.05)
        yield url, process.pid
    finally:
        process.terminate()
        process.wait(10)


def _serve(kind: str, port: int) -> None:
    if kind == "waitress":
        from waitress import serve

        serve(app, host="127.0.0.1", port=port, threads=16, _quiet=True)
    elif kind == "owx-forward":
        _serve_owx_forward(port)
    elif kind == "uvicorn-native":
        import uvicorn

        uvicorn.run(_asgi_hello, host="127.0.0.1", port=port, http="httptools", loop="uvloop", lifespan="off",
                    access_log=False, log_level="warning")
    else:
        from owx.gateway.http import serve_forever
        from owx.gateway.http.wsgi import WsgiBridge

        serve_forever(_native_hello if kind == "owx-native" else WsgiBridge(app.wsgi_app, 32), "127.0.0.1", port)


def _serve_owx_forward(port: int) -> None:
    """owx's forward on ``port`` until SIGTERM, its runtime (the bench action) a child on a Unix socket."""
    from owx.common.eventloop import EventLoopThread
    from owx.gateway.http.protocol import Connections, HttpConnection, Limits
    from owx.gateway.settings import GatewaySettings
    from owx.platform.embedded.proxy import ProxyClient

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # so that the runtime is stopped too
    with tempfile.TemporaryDirectory(prefix="owx-forward-") as directory:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(os.path.join(directory, "runtime.sock"))
        listener.listen(16)
        runtime = subprocess.Popen([sys.executable, "-m", "owx.runtimes.python_action", "--fd", str(listener.fileno())],
                                   pass_fds=[listener.fileno()], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            client = ProxyClient.unix(listener.getsockname())
            if not client.init({"name": "bench", "main": "main", "code": ACTION}, 30).ok:
                raise RuntimeError("the forward's runtime refused the bench action")

            async def forward(request: Request) -> Response:
                value = orjson.loads(request.body or b"{}")
                answer = await client.run_async(orjson.dumps(run_payload(value)), 60)
                return json_response(answer.body, answer.status)

            limits = Limits()
            connections = Connections(limits)

            async def listen() -> None:
                await asyncio.get_running_loop().create_server(
                    lambda: HttpConnection(forward, limits, "http", connections), "127.0.0.1", port)

            loop = EventLoopThread("owx-loop", GatewaySettings().busy_poll_us / 1e6)
            loop.submit(listen()).result()
            threading.Event().wait()
        finally:
            runtime.kill()
            runtime.wait()


async def _native_hello(request: Request) -> Response:
    """The hello without Flask, as owx's invoke endpoint is served."""
    body = orjson.loads(request.body or b"{}")
    return json_response({"hello": body.get("n", 0)})


async def _asgi_hello(scope: dict, receive, send) -> None:  # type: ignore[no-untyped-def]
    """The hello as a plain ASGI application."""
    body = orjson.loads((await receive()).get("body") or b"{}")
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": orjson.dumps({"hello": body.get("n", 0)})})


if __name__ == "__main__":
    _serve(sys.argv[1], int(sys.argv[2]))
