"""A node: one invoker's worth of containers under its own cgroup parent."""

from __future__ import annotations

from owx.common.cgroups import Cgroup, CgroupError
from owx.gateway.platform.container import Backend
from owx.gateway.platform.pool import ContainerPool
from owx.gateway.platform.settings import PlatformSettings


class Node:
    """A named container pool whose containers live under ``<cgroup_root>/<name>``."""

    def __init__(
        self,
        name: str,
        backend: Backend,
        cgroup_root: str,
        user_memory_mb: int,
        stem_cells: int,
        idle_evict_s: float,
        settings: PlatformSettings,
    ) -> None:
        self.name = name
        self.backend = backend
        self.cgroup_parent = f"{cgroup_root.strip('/')}/{name}"
        Cgroup(self.cgroup_parent).create()
        self.pool = ContainerPool(
            name, backend, self.cgroup_parent, user_memory_mb, stem_cells, idle_evict_s, settings
        )

    @property
    def alive(self) -> bool:
        return not self.pool.lost

    def load(self) -> float:
        """Fraction of the memory budget in use, plus the queue (for placement)."""
        return self.pool.used_bytes() / self.pool.budget_bytes + self.pool.queued()

    def kill(self) -> None:
        """Simulate losing this node: every container dies at once and the node takes no work."""
        self.pool.kill_all("node-lost")

    def revive(self) -> None:
        """Bring a killed node back (empty, with fresh stem cells)."""
        self.pool.revive()

    def close(self) -> None:
        self.pool.close()
        parent = Cgroup(self.cgroup_parent)
        if parent.exists() and not parent.children():
            try:
                parent.destroy()
            except CgroupError:
                pass
