"""The anchors ``owx bench invoke`` is judged against, each a server process of its own on this machine:
a Flask "hello" POST on waitress, on granian (a Rust WSGI server) and on the server owx uses
(uvicorn with owx's ASGI bridge); a warm action runtime answering ``/run`` directly; and a Flask
"forward" on granian: each POST passes its body to that runtime's ``/run`` on a kept-alive
connection and answers the result (the least a gateway on Flask does per invocation)."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import requests
from flask import Flask, jsonify, request

SERVERS = ("waitress", "granian", "owx-server")
app = Flask("hello")
forwarder = Flask("forward")
RUN_URL_ENV = "OWX_BENCH_RUN_URL"
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
    """A Flask hello served by ``kind`` in its own process; yields its URL."""
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
        return
    import uvicorn

    from owx.gateway.asgi import FlaskOnAsgi

    uvicorn.run(FlaskOnAsgi(app.wsgi_app, 32, 1 << 20), host="127.0.0.1", port=port, http="httptools",
                loop="uvloop", lifespan="off", access_log=False, log_level="warning")


if __name__ == "__main__":
    _serve(sys.argv[1], int(sys.argv[2]))
