"""Escra inside ``owx up`` (``OWX_ESCRA=true``): one allocator and agent per embedded node.

Each node's pool is the ledger of its application: its budget (userMemory) is the
global memory limit Escra shares out, and every resize Escra makes is accounted
by the pool, so the pool neither over-admits nor wastes what Escra reclaimed.
"""

from __future__ import annotations

from typing import Any

from owx.escra_agent.embed import embed_escra


def install(gateway: Any) -> None:
    settings = gateway.settings
    nodes = getattr(gateway.runner, "nodes", None)
    if not settings.escra or not nodes:
        return
    handles = [
        embed_escra(node.pool, node=name, cgroup_root=settings.cgroup_root,
                    memory_bytes=settings.user_memory_mb << 20, app=f"owx-{name}")
        for name, node in nodes.items()
    ]
    gateway.extensions["closers"].append(lambda: [handle.stop() for handle in handles])
