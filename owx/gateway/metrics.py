"""The gateway's Prometheus metrics, on prometheus_client's own registry.

Counted as they happen: activations by kind and outcome with their duration, wait and init
histograms (from every record the pipeline stores), API requests by route, trigger fires.
Read at scrape time: containers by node, state and backend, queue depth (admission and node
pools), node memory, scheduled alarms, and what extensions offer through ``collect()``
(Canary's recoveries, Escra's resizes). Labels never carry namespaces, names or keys.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric

if TYPE_CHECKING:
    from owx.gateway.service import Gateway

SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)


class GatewayMetrics:
    """One registry per gateway; ``record`` and ``request`` are called on the request path."""

    def __init__(self, gateway: Gateway) -> None:
        self.registry = CollectorRegistry()
        registry = self.registry
        self.activations = Counter("owx_activations", "Activations recorded, by kind and outcome",
                                   ["kind", "status"], registry=registry)
        self.duration = Histogram("owx_activation_duration_seconds", "Time an activation ran", ["kind"],
                                  buckets=SECONDS, registry=registry)
        self.wait = Histogram("owx_activation_wait_seconds", "Time an activation waited for a container", ["kind"],
                              buckets=SECONDS, registry=registry)
        self.init = Histogram("owx_activation_init_seconds", "Cold starts: container start and /init", ["kind"],
                              buckets=SECONDS, registry=registry)
        self.requests = Histogram("owx_http_request_duration_seconds", "API requests by route and status code",
                                  ["method", "route", "code"], buckets=SECONDS, registry=registry)
        self.fires = Counter("owx_trigger_fires", "Trigger activations", registry=registry)
        self.rule_activations = Counter("owx_rule_activations", "Actions started by rules of fired triggers",
                                        registry=registry)
        registry.register(_StateCollector(gateway))
        for extension in gateway.extensions.values():
            if callable(getattr(extension, "collect", None)):
                registry.register(extension)  # type: ignore[arg-type]
        self._children: dict[tuple[str, str], tuple[Any, Any, Any, Any]] = {}
        self._requests: dict[tuple[str, str, int], Any] = {}  # routes are the app's, codes few: bounded
        gateway.invoker.record_observers.append(self.record)
        gateway.reactive.firer.observers.append(self.fired)

    def record(self, record: dict[str, Any]) -> None:
        """Count one stored activation record (on every activation's path: the labelled children are
        looked up once per kind and outcome)."""
        kind, wait_ms, init_ms = "unknown", 0, None
        for annotation in record.get("annotations", ()):
            key = annotation.get("key")
            if key == "kind":
                kind = str(annotation.get("value"))
            elif key == "waitTime":
                wait_ms = annotation.get("value") or 0
            elif key == "initTime":
                init_ms = annotation.get("value")
        status = record.get("response", {}).get("status", "unknown")
        counted, duration, wait, init = self._children.get((kind, status)) or self._child(kind, status)
        counted.inc()
        duration.observe(max(0, record.get("duration") or 0) / 1000)
        wait.observe(max(0, wait_ms) / 1000)
        if init_ms is not None:
            init.observe(max(0, init_ms) / 1000)

    def _child(self, kind: str, status: str) -> tuple[Any, Any, Any, Any]:
        children = (self.activations.labels(kind, status), self.duration.labels(kind), self.wait.labels(kind),
                    self.init.labels(kind))
        self._children[kind, status] = children
        return children

    def fired(self, _namespace: str, rules_activated: int) -> None:
        self.fires.inc()
        self.rule_activations.inc(rules_activated)

    def request(self, method: str, route: str, code: int, seconds: float) -> None:
        key = (method, route, code)
        child = self._requests.get(key)
        if child is None:
            child = self._requests[key] = self.requests.labels(method, route, str(code))
        child.observe(seconds)


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
