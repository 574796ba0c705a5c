"""``Platform``: the embedded platform's nodes on this machine, and placement across them."""

from __future__ import annotations

from owx.common.cgroups import Cgroup, CgroupError
from owx.config import Settings
from owx.gateway.platform.backends import make_backend
from owx.gateway.platform.container import Backend
from owx.gateway.platform.node import Node
from owx.gateway.platform.pool import DeathListener, PoolUnavailable
from owx.gateway.platform.settings import PlatformSettings
from owx.gateway.platform.types import INTERNAL_ERROR, ActionSpec, ContainerInfo, RunOutcome, RunRequest


class Platform:
    """``settings.nodes`` nodes sharing one backend; ``run`` places each activation on one of them."""

    def __init__(self, settings: Settings, platform_settings: PlatformSettings | None = None) -> None:
        self.settings = settings
        self.platform_settings = platform_settings or PlatformSettings()
        self.backend: Backend = make_backend(
            settings.backend, self.platform_settings, settings.action_user, settings.runtime_image
        )
        self.nodes: dict[str, Node] = {}
        try:
            for index in range(settings.nodes):
                name = f"node{index}"
                self.nodes[name] = Node(
                    name,
                    self.backend,
                    settings.cgroup_root,
                    settings.user_memory_mb,
                    settings.stem_cells,
                    settings.idle_evict_s,
                    self.platform_settings,
                )
            for node in self.nodes.values():
                node.pool.start_stem_cells()
        except BaseException:
            self.close()
            raise

    def run(self, spec: ActionSpec, request: RunRequest) -> RunOutcome:
        """Run one activation on the node that has it warm, else on the least loaded live node."""
        node = self.place(spec)
        if node is None:
            outcome = RunOutcome(INTERNAL_ERROR, {"error": "no live node to run the action"}, [], 0, 0)
            return outcome
        return node.pool.run(spec, request)

    def place(self, spec: ActionSpec) -> Node | None:
        live = [node for node in self.nodes.values() if node.alive]
        warm = [node for node in live if node.pool.has_idle_warm(spec.key)]
        return min(warm or live, key=Node.load, default=None)

    def prewarm(self, spec: ActionSpec, node: str | None = None, wait_s: float = 0.0) -> ContainerInfo:
        """A replica of ``spec`` on ``node`` (default: the least loaded live node)."""
        target = self.nodes[node] if node is not None else self.place(spec)
        if target is None or not target.alive:
            raise PoolUnavailable("no live node for a replica")
        return target.pool.prewarm(spec, wait_s)

    def add_death_listener(self, listener: DeathListener) -> None:
        for node in self.nodes.values():
            node.pool.add_death_listener(listener)

    def containers(self) -> list[ContainerInfo]:
        return [info for node in self.nodes.values() for info in node.pool.containers()]

    def pool_of(self, container_id: str):
        """The pool holding ``container_id`` (for resize/remove/claimed runs), or None."""
        for node in self.nodes.values():
            if any(info.id == container_id for info in node.pool.containers()):
                return node.pool
        return None

    def close(self) -> None:
        """Destroy every container, cgroup and thread the platform made."""
        for node in self.nodes.values():
            node.close()
        self.nodes.clear()
        root = Cgroup(self.settings.cgroup_root)
        if root.exists() and not root.children():  # the root may be shared with other owx processes
            try:
                root.destroy()
            except CgroupError:
                pass
        self.backend.close()
