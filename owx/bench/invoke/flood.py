"""The flood of ``owx bench invoke``: many non-blocking invokes as fast as wrk sends them.

While ab (-c16, keep-alive) sends ``count`` non-blocking invokes, another client GETs one activation every
10 ms and times each answer, and the gateway's threads and RSS are sampled from /proc. Then the
bench waits until every accepted (202) activation is recorded, and says how long that took beyond
the flood's end. Goals: GET p99 < 100 ms during the flood; threads bounded (below 2x the workers
of a normal run plus fixed overhead: a control that raises the workers is held to the same bound);
every accepted activation recorded.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from owx.bench.gateway_process import GatewayProcess
from owx.bench.http_client import percentile
from owx.bench.results import Report
from owx.bench.ab import ab
from owx.bench.wrk import WrkResult
from owx.gateway.settings import GatewaySettings

THREAD_SLACK = 64  # listeners, HTTP pool, store writer, watchers, pools' reapers
NORMAL_WORKERS: int = GatewaySettings.model_fields["workers"].default  # a normal run's activation threads


@dataclass
class Flood:
    """What one flood showed."""

    sent: WrkResult
    accepted: int
    recorded: int
    record_lag_s: float
    get_latencies_ms: list[float] = field(default_factory=list)
    max_threads: int = 0
    max_rss_mb: float = 0.0

    def figures(self) -> list[tuple[str, float | str, str]]:
        return [
            ("flood: invokes sent / accepted (202) / recorded", f"{self.sent.requests} / {self.accepted} / "
             f"{self.recorded}", ""),
            ("flood: invokes/s while sending", round(self.sent.rate), "req/s"),
            ("flood: GET p50 / p99 during the flood", f"{self.get_p(0.5):.1f} / {self.get_p(0.99):.1f}", "ms"),
            ("flood: gateway threads (max)", self.max_threads, ""),
            ("flood: gateway RSS (max)", round(self.max_rss_mb, 1), "MB"),
            ("flood: last record after the flood's end", round(self.record_lag_s, 1), "s"),
            ("flood: records beyond the 202s counted (invokes the client cut off)",
             self.recorded - self.accepted, ""),
        ]

    def get_p(self, q: float) -> float:
        return percentile(self.get_latencies_ms, q) if self.get_latencies_ms else float("inf")

    def goals(self, report: Report) -> None:
        report.goal("flood: GET p99 < 100 ms", round(self.get_p(0.99), 1), 100.0, "ms")
        report.goal("flood: gateway threads bounded (<= 2 x workers + 64)", self.max_threads,
                    2 * NORMAL_WORKERS + THREAD_SLACK)
        report.goal("flood: accepted (202) activations not recorded", max(0, self.accepted - self.recorded), 0)


def flood(gateway: GatewayProcess, invoke_url: str, count: int, record_wait_s: float = 600.0) -> Flood:
    """Send ``count`` non-blocking invokes of ``invoke_url`` (no body beyond ``{"n": 1}``)."""
    http = gateway.session()
    before = settled_count(gateway)
    probe_id = http.post(invoke_url, json={"n": 0}).json()["activationId"]
    _wait(lambda: http.get(gateway.api(f"activations/{probe_id}")).status_code == 200, 60)
    stop = threading.Event()
    latencies: list[float] = []
    samples: list[tuple[int, float]] = []

    def probe() -> None:
        session = gateway.session()
        while not stop.is_set():
            started = time.perf_counter()
            session.get(gateway.api(f"activations/{probe_id}"), timeout=30)
            latencies.append((time.perf_counter() - started) * 1000)
            samples.append((gateway.threads(), gateway.rss_mb()))
            stop.wait(0.01)

    prober = threading.Thread(target=probe, daemon=True)
    prober.start()
    sent = ab(invoke_url, requests=count, connections=16, body='{"n": 1}', auth=gateway.auth)
    flood_end = time.monotonic()
    stop.set()
    prober.join()
    accepted = sent.requests - sent.non_2xx - sent.errors
    expected = before + 1 + accepted
    _wait(lambda: count_records(gateway) >= expected, record_wait_s)
    lag = time.monotonic() - flood_end
    return Flood(sent, accepted, settled_count(gateway) - before - 1, lag, latencies,
                 max(t for t, _ in samples), max(r for _, r in samples))


def count_records(gateway: GatewayProcess) -> int:
    answer = gateway.session().get(gateway.api("activations"), params={"count": "true"})
    return int(answer.json()["activations"])


def settled_count(gateway: GatewayProcess, quiet_s: float = 1.0, timeout_s: float = 120.0) -> int:
    """The number of records once it stops changing for ``quiet_s`` (activations a client cut off, or
    that were still queued, are recorded too: a count taken before they are would be off)."""
    deadline = time.monotonic() + timeout_s
    count, since = count_records(gateway), time.monotonic()
    while time.monotonic() - since < quiet_s and time.monotonic() < deadline:
        time.sleep(0.2)
        now = count_records(gateway)
        if now != count:
            count, since = now, time.monotonic()
    return count


def _wait(condition, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.2)
