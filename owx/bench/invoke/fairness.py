"""Fairness of ``owx bench invoke``: one tenant's many slow blocking invokes against another tenant's
plain requests.

Tenant A sends ``blocked`` blocking invokes of an action that sleeps ``sleep_s`` (all at once, each
from a client thread of its own, so they wait in the gateway); while they wait, tenant B lists its
actions every 20 ms and the bench times each answer from B's side. Goal: B's p99 < 100 ms. The
control ``held-waits`` (``OWX_GATEWAY__DEFER_WAITS=false``, ``OWX_GATEWAY__TENANT_THREAD_SHARE=1``)
makes every waiting request hold one of the server's threads and lets A hold all of them, as a plain
WSGI server does: B then waits behind A and the goal fails.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from owx.bench.gateway_process import GatewayProcess
from owx.bench.http_client import percentile
from owx.bench.results import Report

SLEEPY = "import time\n\ndef main(args):\n    time.sleep(float(args.get('s', 0)))\n    return {}\n"


@dataclass
class Fairness:
    """What tenant B saw while tenant A's invokes waited."""

    blocked: int
    sleep_s: float
    latencies_ms: list[float]
    a_answered_ok: int

    def report(self, report: Report) -> None:
        report.figure(f"fairness: tenant B list p50 / p99 while {self.blocked} blocking invokes of A wait",
                      f"{percentile(self.latencies_ms, 0.5):.1f} / {percentile(self.latencies_ms, 0.99):.1f}", "ms")
        report.figure("fairness: A's blocking invokes answered 2xx", f"{self.a_answered_ok} / {self.blocked}")
        report.goal(f"fairness: tenant B p99 with {self.blocked} of A's invokes waiting < 100 ms",
                    round(percentile(self.latencies_ms, 0.99), 1), 100.0, "ms")


def measure_fairness(gateway: GatewayProcess, blocked: int = 200, sleep_s: float = 2.0,
                     window_s: float = 5.0) -> Fairness:
    """Run the two tenants on ``gateway`` (A is the gateway's own key; B is created here)."""
    a = gateway.session()
    answer = a.put(gateway.api("actions/sleepy?overwrite=true"),
                   json={"exec": {"kind": "python:3", "code": SLEEPY}, "limits": {"memory": 128}})
    answer.raise_for_status()
    b = gateway.session(new_tenant(gateway, "bench-tenant-b"))
    b.get(f"{gateway.url}/api/v1/namespaces/_/actions").raise_for_status()
    started = threading.Barrier(blocked + 1)

    def blocked_invoke() -> int:
        session = gateway.session()
        started.wait()
        return session.post(gateway.api("actions/sleepy"), params={"blocking": "true"}, json={"s": sleep_s},
                            timeout=600).status_code

    latencies: list[float] = []
    with ThreadPoolExecutor(blocked) as pool:
        waits = [pool.submit(blocked_invoke) for _ in range(blocked)]
        started.wait()
        time.sleep(0.5)  # A's requests are in the gateway, waiting
        end = time.monotonic() + window_s
        while time.monotonic() < end:
            asked = time.perf_counter()
            b.get(f"{gateway.url}/api/v1/namespaces/_/actions", timeout=120)
            latencies.append((time.perf_counter() - asked) * 1000)
            time.sleep(0.02)
        codes = [w.result() for w in waits]
    return Fairness(blocked, sleep_s, latencies, sum(1 for code in codes if 200 <= code < 300))


def new_tenant(gateway: GatewayProcess, subject: str, auth: str | None = None) -> str:
    """The key of a new subject, as ``owx admin user create`` makes it (or with ``auth``, given to owx)."""
    given = [] if auth is None else ["--auth", auth]
    done = subprocess.run([sys.executable, "-m", "owx.cli", "admin", "--data-dir", str(gateway.data_dir), "user",
                           "create", subject, *given], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"owx admin user create failed: {done.stderr}")
    return done.stdout.strip()
