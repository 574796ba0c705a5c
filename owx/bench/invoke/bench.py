"""``owx bench invoke``: gateway overhead, warm throughput and cold starts.

Baseline and subject run in the same invocation of this script:
- latency: blocking invocations through the gateway against direct ``/run`` calls on a
  warm runtime of the same code (p50/p99, and the overhead = gateway p50 - direct p50);
- throughput: concurrent clients doing warm blocking invocations for a fixed time;
- cold start: container + ``/init`` for the embedded (local) and Docker backends.

Goals (2 cores): overhead <= 2 ms at p50; >= 500 warm blocking invocations/s;
embedded cold start <= 200 ms.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from owx.bench.http_client import Connection, percentile, timed

ACTION = "def main(args):\n    return {'n': args.get('n', 0)}\n"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_gateway(data_dir: Path, port: int) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "OWX_DATA_DIR": str(data_dir), "OWX_GATEWAY__PORT": str(port),
           "OWX_PLATFORM__CGROUP_ROOT": "owx-bench-invoke", "OWX_LOG_LEVEL": "WARNING", "HOME": str(data_dir),
           "OWX_GATEWAY__INVOCATIONS_PER_MINUTE": "1000000", "OWX_PLATFORM__STEM_CELLS": "0"}
    process = subprocess.Popen([sys.executable, "-m", "owx.cli", "up"], env=env, stdout=subprocess.PIPE, text=True)
    auth = ""
    for line in process.stdout:  # type: ignore[union-attr]
        if line.startswith("auth "):
            auth = line.split()[1]
            break
    return process, auth


def direct_runtime(n: int) -> list[float]:
    """Direct /run calls on a warm runtime process (the baseline)."""
    port = free_port()
    runtime = subprocess.Popen([sys.executable, "-m", "owx.runtimes.python_action", "--host", "127.0.0.1",
                                "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 10
        while True:
            try:
                conn = Connection(port)
                status, body = conn.post("/init", {"value": {"name": "bench", "main": "main", "code": ACTION}})
                break
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.01)
        assert status == 200, body
        payload = {"namespace": "guest", "action_name": "/guest/bench", "activation_id": "0" * 32,
                   "transaction_id": "0" * 32, "deadline": str(int(time.time() * 1000) + 60000)}
        timed(lambda i: conn.post("/run", {"value": {"n": i}, **payload}), 200)  # warm up
        return timed(lambda i: conn.post("/run", {"value": {"n": i}, **payload}), n)
    finally:
        runtime.kill()
        runtime.wait()


def _throughput_worker(port: int, auth: str, path: str, seconds: float, queue) -> None:
    conn = Connection(port, auth)
    done, latencies = 0, []
    end = time.perf_counter() + seconds
    while (now := time.perf_counter()) < end:
        status, _ = conn.post(path, {"n": done})
        latencies.append(time.perf_counter() - now)
        done += status == 200
    queue.put((done, latencies))


def throughput(port: int, auth: str, path: str, clients: int, seconds: float) -> tuple[float, list[float]]:
    queue: multiprocessing.Queue = multiprocessing.Queue()
    workers = [multiprocessing.Process(target=_throughput_worker, args=(port, auth, path, seconds, queue))
               for _ in range(clients)]
    for worker in workers:
        worker.start()
    results = [queue.get() for _ in workers]
    for worker in workers:
        worker.join()
    return sum(r[0] for r in results) / seconds, [lat for r in results for lat in r[1]]


def cold_starts(n: int, backends: list[str]) -> dict[str, list[float]]:
    from owx.bench.invoke.coldstart import measure_cold_start

    return {backend: measure_cold_start(backend, n) for backend in backends}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=1000, help="sequential invocations per latency series")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--cold", type=int, default=20, help="cold starts per backend")
    parser.add_argument("--no-docker", action="store_true", help="skip the Docker cold start")
    args = parser.parse_args(argv)

    direct = direct_runtime(args.n)
    with tempfile.TemporaryDirectory(prefix="owx-bench-") as tmp:
        port = free_port()
        gateway, auth = start_gateway(Path(tmp), port)
        try:
            conn = Connection(port, auth)
            status, body = conn.put("/api/v1/namespaces/_/actions/bench?overwrite=true",
                                    {"exec": {"kind": "python:3", "code": ACTION}, "limits": {"concurrency": 1}})
            assert status == 200, body
            path = "/api/v1/namespaces/_/actions/bench?blocking=true&result=true"
            timed(lambda i: conn.post(path, {"n": i}), 200)  # warm up
            through_gateway = timed(lambda i: conn.post(path, {"n": i}), args.n)
            rate, loaded = throughput(port, auth, path, args.clients, args.seconds)
        finally:
            gateway.terminate()
            gateway.wait(timeout=30)
    colds = cold_starts(args.cold, ["local"] if args.no_docker else ["local", "docker"])

    ms = 1000.0
    d50, d99 = percentile(direct, 0.5) * ms, percentile(direct, 0.99) * ms
    g50, g99 = percentile(through_gateway, 0.5) * ms, percentile(through_gateway, 0.99) * ms
    overhead = g50 - d50
    print(f"{'series':34} {'p50 ms':>8} {'p99 ms':>8}")
    print(f"{'direct /run (baseline)':34} {d50:8.3f} {d99:8.3f}")
    print(f"{'gateway blocking invoke':34} {g50:8.3f} {g99:8.3f}   ratio p50 {g50 / d50:.2f}x")
    print(f"{'gateway under load (' + str(args.clients) + ' clients)':34} "
          f"{percentile(loaded, 0.5) * ms:8.3f} {percentile(loaded, 0.99) * ms:8.3f}")
    print(f"gateway overhead at p50: {overhead:.3f} ms")
    print(f"warm blocking throughput: {rate:.0f} invocations/s with {args.clients} clients")
    for backend, samples in colds.items():
        print(f"cold start {backend:7}: p50 {percentile(samples, 0.5) * ms:7.1f} ms  "
              f"p99 {percentile(samples, 0.99) * ms:7.1f} ms  (container + /init, n={len(samples)})")
    goals = [
        ("gateway overhead <= 2 ms at p50", overhead <= 2.0),
        (">= 500 warm blocking invocations/s", rate >= 500),
        ("embedded cold start <= 200 ms (p50)", percentile(colds["local"], 0.5) * ms <= 200),
    ]
    for label, ok in goals:
        print(f"{'PASS' if ok else 'FAIL'}  {label}")
    print(f"direct mean {statistics.mean(direct) * ms:.3f} ms, gateway mean {statistics.mean(through_gateway) * ms:.3f} ms")
    return 0 if all(ok for _, ok in goals) else 1


if __name__ == "__main__":
    sys.exit(main())
