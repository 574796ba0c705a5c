"""Escra as a gateway extension (``OWX_ESCRA__ENABLED=true``): one allocator and agent per embedded node.

Each node's budget (userMemory) is the global memory limit Escra shares out, and every resize
Escra makes is written to the platform's memory ledger, so pools neither over-admit nor waste
what Escra reclaimed. On a platform whose containers are not on this machine (an upstream
OpenWhisk: ``platform.resources is None``) nothing runs here: ``owx agent`` runs on each invoker
node instead and manages the containers OpenWhisk's invoker made there.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from owx.escra_agent.embed import EmbeddedEscra, embed_escra
from owx.platform.ledger import NodeLedger
from owx.platform.settings import for_instance

if TYPE_CHECKING:
    from owx.gateway.service import Gateway

log = logging.getLogger(__name__)


class EscraExtension:
    """Starts Escra over every node of an embedded platform when enabled."""

    name = "escra"

    def __init__(self) -> None:
        self.handles: list[EmbeddedEscra] = []

    def init_app(self, gateway: Gateway) -> None:
        settings = gateway.settings
        if not settings.escra.enabled:
            return
        platform = gateway.platform
        cgroup_root = for_instance(settings.platform, settings.data_dir).cgroup_root
        if platform.resources is None:
            log.warning("escra: the %s platform's containers are not on this machine; run `owx agent` on its nodes",
                        platform.name)
            return
        for node in platform.nodes():
            if node.cgroup_parent is None:
                continue
            self.handles.append(embed_escra(
                NodeLedger(platform.ledger, node.name), node=node.name, cgroup_root=cgroup_root,
                memory_bytes=node.budget_bytes, app=f"owx-{node.name}", params=settings.escra.allocator))

    def collect(self):
        """Escra's metrics on the gateway's ``/metrics`` (its agents' resizes and OOM rescues)."""
        from owx.escra_agent.metrics import AgentCollector

        return AgentCollector(lambda: [handle.agent.stats() for handle in self.handles]).collect()

    def close(self) -> None:
        for handle in self.handles:
            handle.stop()
        self.handles.clear()
