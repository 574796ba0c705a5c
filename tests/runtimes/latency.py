"""Measure the Python runtime's cold start and warm ``/run`` cost: ``python tests/runtimes/latency.py``.

* cold start: spawn ``python [-S] -m owx.runtimes.python_action --fd N`` (the way the embedded
  platform does) → ``/init`` answered;
* warm ``/run``: round trip of a trivial action over one keep-alive loopback connection with a
  raw-socket client, and the handler alone in-process (the server-side cost without the network).
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

from owx.runtimes.protocol import ActionProxy

REPO = str(Path(__file__).resolve().parents[2])
ECHO = {"value": {"code": "def main(args):\n    return args\n"}}
RUN = {"value": {"x": 1}, "namespace": "guest", "action_name": "echo", "activation_id": "0" * 32,
       "transaction_id": "t", "deadline": "0"}  # fmt: skip


def http_request(path: str, body: dict[str, object]) -> bytes:
    data = json.dumps(body).encode()
    return b"POST %s HTTP/1.1\r\nHost: runtime\r\nContent-Length: %d\r\n\r\n%s" % (path.encode(), len(data), data)


def round_trip(sock: socket.socket, request: bytes) -> bytes:
    sock.sendall(request)
    buffer = b""
    while b"\r\n\r\n" not in buffer:
        buffer += sock.recv(65536)
    head, _, body = buffer.partition(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
    while len(body) < length:
        body += sock.recv(65536)
    return head.split(b" ", 2)[1]


def cold_start(flags: list[str], env: dict[str, str]) -> tuple[float, subprocess.Popen[bytes], socket.socket]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, *flags, "-m", "owx.runtimes.python_action", "--fd", str(listener.fileno())],
        pass_fds=(listener.fileno(),), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
    )  # fmt: skip
    client = socket.create_connection(listener.getsockname())
    status = round_trip(client, http_request("/init", ECHO))
    elapsed = time.perf_counter() - started
    listener.close()
    assert status == b"200", status
    client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return elapsed, process, client


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    env = dict(os.environ)
    lean_env = {**env, "PYTHONPATH": REPO}
    for label, flags, environment in (("python -m", [], env), ("python -S -m", ["-S"], lean_env)):
        timings = []
        for _ in range(15):
            elapsed, process, client = cold_start(flags, environment)
            timings.append(elapsed * 1000)
            client.close()
            process.kill()
            process.wait()
        print(f"cold start ({label}): p50 {statistics.median(timings):.1f} ms, min {min(timings):.1f} ms")

    _, process, client = cold_start([], env)
    run = http_request("/run", RUN)
    for _ in range(300):
        round_trip(client, run)
    trips = []
    for _ in range(3000):
        started = time.perf_counter()
        round_trip(client, run)
        trips.append((time.perf_counter() - started) * 1e6)
    print(f"warm /run round trip: p50 {percentile(trips, 0.5):.0f} us, p99 {percentile(trips, 0.99):.0f} us")
    process.kill()
    process.wait()

    proxy = ActionProxy()
    proxy.init(json.dumps(ECHO).encode())
    body = json.dumps(RUN).encode()
    devnull = open(os.devnull, "w")  # noqa: SIM115 - the sentinel goes here, not to the terminal
    stdout, stderr, sys.stdout, sys.stderr = sys.stdout, sys.stderr, devnull, devnull
    try:
        started = time.perf_counter()
        for _ in range(10000):
            proxy.run(body)
        per_run = (time.perf_counter() - started) / 10000 * 1e6
    finally:
        sys.stdout, sys.stderr = stdout, stderr
        devnull.close()
    print(f"warm /run handler in-process: {per_run:.1f} us")


if __name__ == "__main__":
    main()
