"""Escra's Prometheus metrics: one collector over node agents, served by ``owx agent --metrics``
and registered on the gateway's ``/metrics`` by the Escra extension."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from owx.escra_agent.agent import AgentStats


class AgentCollector:
    """Reads each agent's :class:`AgentStats` at scrape time."""

    def __init__(self, stats: Callable[[], list[AgentStats]]) -> None:
        self.stats = stats

    def collect(self) -> Iterator[Metric]:
        resizes = CounterMetricFamily("owx_escra_resizes", "Container limits Escra changed, by resource",
                                      labels=["node", "resource"])
        rescues = CounterMetricFamily("owx_escra_oom_rescues", "OOM events answered with a raised limit",
                                      labels=["node"])
        managed = GaugeMetricFamily("owx_escra_containers", "Containers the agent manages", labels=["node"])
        reachable = GaugeMetricFamily("owx_escra_allocator_reachable", "1 while the allocator answers",
                                      labels=["node"])
        for stats in self.stats():
            resizes.add_metric([stats.node, "cpu"], stats.cpu_resizes)
            resizes.add_metric([stats.node, "memory"], stats.memory_resizes)
            rescues.add_metric([stats.node], stats.oom_rescues)
            managed.add_metric([stats.node], stats.containers)
            reachable.add_metric([stats.node], 1.0 if stats.allocator_reachable else 0.0)
        yield from (resizes, rescues, managed, reachable)


def serve_metrics(address: str, stats: Callable[[], list[AgentStats]]) -> int:
    """Serve ``/metrics`` on ``HOST:PORT`` (port 0: a free one) in a thread; the port it listens on."""
    host, _, port = address.rpartition(":")
    registry = CollectorRegistry()
    registry.register(AgentCollector(stats))
    server, _thread = start_http_server(int(port), addr=host or "127.0.0.1", registry=registry)
    return server.server_port
