"""A node: one invoker's worth of containers under its own cgroup parent."""

from __future__ import annotations

from collections.abc import Callable

from owx.common.cgroups import Cgroup
from owx.platform.embedded.container import Backend
from owx.platform.embedded.pool import ContainerPool
from owx.platform.ledger import MemoryLedger
from owx.platform.settings import PlatformSettings
from owx.platform.types import NodeInfo


class Node:
    """A named container pool whose containers live under ``cgroup_parent`` (``<cgroup_root>/<name>``)."""

    def __init__(self, name: str, cgroup_parent: str, backend_for: Callable[[str], Backend], ledger: MemoryLedger,
                 settings: PlatformSettings, backend_name: str) -> None:
        self.name = name
        self.cgroup_parent = cgroup_parent
        self.backend_name = backend_name
        Cgroup(self.cgroup_parent).create()
        self.pool = ContainerPool(name, backend_for, self.cgroup_parent, ledger, settings)

    @property
    def alive(self) -> bool:
        return not self.pool.lost

    def info(self) -> NodeInfo:
        return NodeInfo(self.name, self.alive, self.pool.budget_bytes, self.cgroup_parent, self.backend_name,
                        self.pool.queued())

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
        Cgroup(self.cgroup_parent).remove_if_empty()
