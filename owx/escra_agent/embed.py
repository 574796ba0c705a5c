"""Escra inside the gateway process: allocator and agent as library objects over one pool.

The embedded platform integrates Escra with one call::

    escra = embed_escra(pool, node="node0", cgroup_root=settings.cgroup_root,
                        memory_bytes=settings.user_memory_mb << 20)
    ...
    escra.stop()

``pool`` implements :class:`owx.escra_agent.ledger.PoolLedger`; its budget is the
application's global memory limit, and every resize Escra makes is reported to it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from owx.escra_agent.agent import NodeAgent
from owx.escra_agent.allocator import ResourceAllocator
from owx.escra_agent.ledger import PoolLedger
from owx.escra_agent.link import LocalLink
from owx.escra_agent.messages import AppLimits
from owx.escra_agent.settings import AgentSettings, AllocatorParams


@dataclass
class EmbeddedEscra:
    allocator: ResourceAllocator
    agent: NodeAgent

    def stop(self) -> None:
        self.agent.stop()


def embed_escra(
    pool: PoolLedger,
    node: str,
    cgroup_root: str,
    memory_bytes: int,
    cpu_cores: float | None = None,
    app: str = "openwhisk",
    params: AllocatorParams | None = None,
) -> EmbeddedEscra:
    """Start an in-process allocator and node agent managing ``<cgroup_root>/<node>/*``.

    Containers keep the memory the pool gave them when they start
    (``adopt_memory``); CPU is shared out of ``cpu_cores`` (default: all cores).
    """
    allocator = ResourceAllocator(params)
    limits = AppLimits(name=app, cpu_cores=cpu_cores or float(os.cpu_count() or 1), memory_bytes=memory_bytes, adopt_memory=True)
    allocator.add_application(limits, ledger=pool)
    agent = NodeAgent(AgentSettings(node=node, cgroup_root=cgroup_root, app=app), LocalLink(allocator)).start()
    return EmbeddedEscra(allocator, agent)
