"""The gateway's Prometheus metrics, on prometheus_client's own registry.

Counted as they happen: activations by kind and outcome with their duration, wait and init
histograms (from every record the pipeline stores), API requests by route, trigger fires.
Read at scrape time: containers by node, state and backend, queue depth (admission and node
pools), node memory, scheduled alarms, and what extensions offer through ``collect()``
(Canary's recoveries, Escra's resizes). Labels never carry namespaces, names or keys.

What is counted on every activation's path is tallied in plain lists (a bucket found by bisection,
one lock), not in prometheus_client's metric objects: those cost several microseconds per
observation, a sizeable part of a warm invocation. The tallies become metric families at scrape.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from collections import Counter as Tally
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from owx.common.eventloop import BusyPoll
from owx.gateway.stores.activations import annotation_values

if TYPE_CHECKING:
    from owx.gateway.service import Gateway

SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)


TEXT_MAX_AGE_S = 1.0  # a scraper asks every few seconds


class _Counts:
    """A counter by label values, exported as one family."""

    def __init__(self, name: str, documentation: str, labels: tuple[str, ...] = ()) -> None:
        self.name, self.documentation, self.labels = name, documentation, labels
        self._counts: dict[tuple[str, ...], float] = {}
        self._lock = threading.Lock()

    def inc(self, values: tuple[str, ...] = (), by: float = 1) -> None:
        with self._lock:
            self._counts[values] = self._counts.get(values, 0) + by

    def family(self) -> Metric:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labels)
        with self._lock:
            counts = list(self._counts.items())
        for values, count in counts:
            family.add_metric(list(values), count)
        return family


class _Histograms:
    """A histogram of seconds by label values (buckets ``SECONDS``), exported as one family."""

    def __init__(self, name: str, documentation: str, labels: tuple[str, ...]) -> None:
        self.name, self.documentation, self.labels = name, documentation, labels
        self._tallies: dict[tuple[str, ...], list[Any]] = {}  # values -> [bucket counts (+Inf last), sum]
        self._lock = threading.Lock()

    def observe(self, values: tuple[str, ...], seconds: float) -> None:
        with self._lock:
            tally = self._tallies.get(values)
            if tally is None:
                tally = self._tallies[values] = [[0] * (len(SECONDS) + 1), 0.0]
            tally[0][bisect_left(SECONDS, seconds)] += 1
            tally[1] += seconds

    def family(self) -> Metric:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labels)
        with self._lock:
            tallies = [(values, list(counts), total) for values, (counts, total) in self._tallies.items()]
        for values, counts, total in tallies:
            cumulative, buckets = 0, []
            for bound, count in zip((*map(str, SECONDS), "+Inf"), counts):
                cumulative += count
                buckets.append((bound, cumulative))
            family.add_metric(list(values), buckets, total)
        return family


class GatewayMetrics:
    """One registry per gateway; ``record`` and ``request`` are called on the request path."""

    def __init__(self, gateway: Gateway) -> None:
        self.registry = CollectorRegistry()
        registry = self.registry
        self.activations = _Counts("owx_activations", "Activations recorded, by kind and outcome", ("kind", "status"))
        self.duration = _Histograms("owx_activation_duration_seconds", "Time an activation ran", ("kind",))
        self.wait = _Histograms("owx_activation_wait_seconds", "Time an activation waited for a container", ("kind",))
        self.init = _Histograms("owx_activation_init_seconds", "Cold starts: container start and /init", ("kind",))
        self.requests = _Histograms("owx_http_request_duration_seconds", "API requests by route and status code",
                                    ("method", "route", "code"))
        self.fires = _Counts("owx_trigger_fires", "Trigger activations")
        self.rule_activations = _Counts("owx_rule_activations", "Actions started by rules of fired triggers")
        registry.register(_Tallied((self.activations, self.duration, self.wait, self.init, self.requests,
                                    self.fires, self.rule_activations)))
        registry.register(_StateCollector(gateway))
        for extension in gateway.extensions.values():
            if callable(getattr(extension, "collect", None)):
                registry.register(extension)  # type: ignore[arg-type]
        gateway.invoker.record_observers.append(self.record)
        gateway.reactive.firer.observers.append(self.fired)
        self._text, self._text_made = b"", float("-inf")
        self._text_lock = threading.Lock()

    def record(self, record: dict[str, Any]) -> None:
        """Count one stored activation record (on every activation's path)."""
        annotations = annotation_values(record)
        kind = str(annotations.get("kind", "unknown"))
        wait_ms, init_ms = annotations.get("waitTime") or 0, annotations.get("initTime")
        status = record.get("response", {}).get("status", "unknown")
        labels = (kind,)
        self.activations.inc((kind, status))
        self.duration.observe(labels, max(0, record.get("duration") or 0) / 1000)
        self.wait.observe(labels, max(0, wait_ms) / 1000)
        if init_ms is not None:
            self.init.observe(labels, max(0, init_ms) / 1000)

    def fired(self, _namespace: str, rules_activated: int) -> None:
        self.fires.inc()
        self.rule_activations.inc(by=rules_activated)

    def request(self, method: str, route: str, code: int, seconds: float) -> None:
        self.requests.observe((method, route, str(code)), seconds)

    def text(self) -> bytes:
        """Every metric as Prometheus text, made at most once every ``TEXT_MAX_AGE_S`` (it runs to
        hundreds of KB: a client asking in a loop made every tenant's requests wait behind it)."""
        with self._text_lock:
            if time.monotonic() - self._text_made >= TEXT_MAX_AGE_S:
                self._text, self._text_made = generate_latest(self.registry), time.monotonic()
            return self._text


class _Tallied:
    """The tallies' families at scrape time."""

    def __init__(self, tallies: tuple[_Counts | _Histograms, ...]) -> None:
        self.tallies = tallies

    def collect(self) -> Iterator[Metric]:
        for tally in self.tallies:
            yield tally.family()


class _StateCollector:
    """Gauges read from the platform and the pipeline at scrape time."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway

    def collect(self) -> Iterator[Metric]:
        platform, throttle = self.gateway.platform, self.gateway.throttle
        containers = GaugeMetricFamily("owx_containers", "Containers of the platform by node, state and backend",
                                       labels=["node", "state", "backend"])
        for (node, state, backend), count in sorted(Tally((c.node, c.state, c.backend)
                                                          for c in platform.containers()).items()):
            containers.add_metric([node, state, backend], count)
        waiting, running = throttle.backlog()
        queue = GaugeMetricFamily("owx_queue_depth", "Activations waiting: for admission, or for a container "
                                  "on a node", labels=["queue"])
        queue.add_metric(["admission"], waiting)
        in_flight = GaugeMetricFamily("owx_invocations_in_flight", "Activations admitted and not finished",
                                      value=running)
        memory = GaugeMetricFamily("owx_node_memory_bytes", "Node memory budget and what containers hold",
                                   labels=["node", "kind"])
        nodes = platform.nodes()
        queue.add_metric(["node"], sum(node.queued for node in nodes))
        for node in nodes:
            memory.add_metric([node.name, "budget"], node.budget_bytes)
            memory.add_metric([node.name, "used"], platform.ledger.used(node.name))
        alarms = GaugeMetricFamily("owx_alarms_scheduled", "Alarm feeds that will fire again",
                                   value=self.gateway.reactive.alarms.scheduled())
        yield from (containers, queue, in_flight, memory, alarms)
        if (poll := BusyPoll.of(self.gateway.loop.loop)) is not None:
            yield GaugeMetricFamily("owx_busy_poll_budget_seconds", "How long the event loop polls for an answer "
                                    "due at once (tuned to the answers' waits on this machine)", value=poll.budget_s)
