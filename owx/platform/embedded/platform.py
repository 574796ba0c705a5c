"""The embedded platform: ``settings.nodes`` container pools on this machine, and placement across them."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import ClassVar

from owx.common.cgroups import CgroupError
from owx.common.eventloop import EventLoopThread
from owx.platform.embedded.backends import Backends
from owx.platform.embedded.host_firewall import HostFirewall
from owx.platform.embedded.identities import Identities
from owx.platform.embedded.instance import Instance
from owx.platform.embedded.node import Node
from owx.platform.embedded.uid_block import UidBlock
from owx.platform.embedded.watcher import FdWatcher
from owx.platform.interface import ContainerListener, Platform, PlatformUnavailable
from owx.platform.ledger import MemoryLedger
from owx.platform.settings import PlatformSettings
from owx.platform.types import (
    INTERNAL_ERROR,
    ActionSpec,
    ContainerInfo,
    ContainerUsage,
    NodeInfo,
    RunOutcome,
    RunRequest,
)
from owx.runtimes import kernel

log = logging.getLogger(__name__)


class EmbeddedPlatform(Platform):
    """Nodes of container pools sharing the backends; every container is reachable from here.

    Container output, exits and warm runs are handled on ``loop`` (the gateway's), or on a loop of
    the platform's own when none is given."""

    name: ClassVar[str] = "embedded"

    def __init__(self, settings: PlatformSettings, loop: EventLoopThread | None = None) -> None:
        self.settings = settings
        self._own_loop = loop is None
        self.loop = loop or EventLoopThread("owx-platform-loop")
        self.watcher = FdWatcher(self.loop)
        self.instance = Instance(settings)
        self.uid_block = UidBlock.lease(settings.sandbox) if os.geteuid() == 0 else None  # no root: no sandboxes
        uids = range(self.uid_block.first, self.uid_block.last + 1) if self.uid_block is not None else None
        self.identities = Identities(self.instance.state_dir, settings.sandbox, uids)
        self.firewall: HostFirewall | None = None
        self.backends = Backends(settings, settings.kind == "docker", self.instance, self.identities, self.watcher)
        self.ledger = MemoryLedger()
        self.replicas = self
        self.resources = self
        self._nodes: dict[str, Node] = {}
        self._closed = False
        self._helper_uids: dict[str, int] = {}  # namespace -> the uid of owx's processes in its directory
        self._helper_uids_lock = threading.Lock()
        try:
            if self.uid_block is not None:
                self.firewall = self.backends.firewall = HostFirewall(self.uid_block, settings.sandbox.host_ports)
                _warn_of_missing_landlock(kernel.landlock_abi())
            for index in range(settings.nodes):
                name = f"node{index}"
                self._nodes[name] = Node(name, f"{self.instance.cgroup_root}/{name}", self.backends.for_kind,
                                         self.ledger, settings, self.backends.default_name)
            for node in self._nodes.values():
                node.pool.start_stem_cells()
        except BaseException:
            self.close()
            raise

    # -- Platform ---------------------------------------------------------------------------
    def run(self, spec: ActionSpec, request: RunRequest, node: str | None = None,
            claim: str | None = None) -> RunOutcome:
        """Run one activation on ``node``, else on the node that has it warm, else the least loaded."""
        target = self._nodes.get(node) if node is not None else self._place(spec)
        if target is None or not target.alive:
            where = f"node {node} is lost" if node is not None else "no live node to run the action"
            return RunOutcome(INTERNAL_ERROR, {"error": where}, [], 0, 0, node=node or "")
        return target.pool.run(spec, request, claim=claim)

    def charge_output(self, namespace: str, seconds: float) -> None:
        self.watcher.charge(namespace, seconds)

    async def run_warm(self, spec: ActionSpec, request: RunRequest) -> RunOutcome | None:
        """On the node that has ``spec`` warm (the first, when several have; a node alone is asked
        directly: its pool answers None when it has none)."""
        nodes = self._nodes.values()
        if len(nodes) == 1:
            target = next(iter(nodes))
            target = target if target.alive else None
        else:
            target = next((n for n in nodes if n.alive and n.pool.has_warm(spec.key)), None)
        return None if target is None else await target.pool.run_warm(spec, request)

    def nodes(self) -> list[NodeInfo]:
        return [node.info() for node in self._nodes.values()]

    def warm_nodes(self, spec: ActionSpec) -> list[str]:
        return [name for name, node in self._nodes.items() if node.alive and node.pool.has_idle_warm(spec.key)]

    def subscribe(self, listener: ContainerListener) -> None:
        for node in self._nodes.values():
            node.pool.add_start_listener(listener.container_started)
            node.pool.add_death_listener(listener.container_died)

    def containers(self) -> list[ContainerInfo]:
        return [info for node in self._nodes.values() for info in node.pool.containers()]

    def forget(self, path: str) -> None:
        for node in self._nodes.values():
            node.pool.forget(path)

    def unsupported(self, kind: str) -> str | None:
        """Why actions of ``kind`` cannot run on this platform (None if they can)."""
        return self.backends.unsupported(kind)

    def open_host_port(self, port: int) -> None:
        """Let local containers reach TCP ``port`` of this machine (see :mod:`owx.platform.embedded.host_firewall`)."""
        if self.firewall is not None:
            self.firewall.open_port(port)

    def namespace_dir(self, namespace: str) -> Path | None:
        """The namespace's directory, mounted read-write into its local containers only (not Docker's)."""
        if self.backends.docker_only:
            return None
        return self.identities.directory(namespace, create=True)

    def namespace_identity(self, namespace: str) -> tuple[int, int] | None:
        if self.namespace_dir(namespace) is None or self.uid_block is None:
            return None
        with self._helper_uids_lock:
            uid = self._helper_uids.get(namespace)
            if uid is None:
                uid = self._helper_uids[namespace] = self.identities.take_uid()
        return uid, self.identities.gid(namespace)

    # -- ReplicaControl ----------------------------------------------------------------------
    def prewarm(self, spec: ActionSpec, node: str | None = None, wait_s: float = 0.0) -> ContainerInfo:
        target = self._nodes.get(node) if node is not None else self._place(spec)
        if target is None or not target.alive:
            raise PlatformUnavailable("no live node for a replica")
        return target.pool.prewarm(spec, wait_s)

    def claim(self, spec: ActionSpec, node: str) -> str | None:
        target = self._nodes.get(node)
        return target.pool.claim_replica(spec) if target is not None and target.alive else None

    def remove(self, container_id: str) -> bool:
        return any(node.pool.remove(container_id) for node in self._nodes.values())

    # -- ResourceControl ----------------------------------------------------------------------
    def resize(self, container_id: str, memory_bytes: int | None = None, cpu_quota_us: int | None = None) -> bool:
        return any(node.pool.resize(container_id, memory_bytes, cpu_quota_us) for node in self._nodes.values())

    def usage(self, container_id: str) -> ContainerUsage | None:
        for node in self._nodes.values():
            container = node.pool.container(container_id)
            if container is not None:
                try:
                    memory, cpu = container.cgroup.memory(), container.cgroup.cpu()
                    quota, _ = container.cgroup.cpu_quota()
                except CgroupError:
                    return None
                return ContainerUsage(memory.usage, memory.limit, memory.max_usage, cpu.usage_ns, quota)
        return None

    # -- this machine's nodes (tests and benchmarks kill and revive them) ------------------------
    def node(self, name: str) -> Node:
        return self._nodes[name]

    def close(self) -> None:
        """Remove every container and give back what the platform holds; a second close does nothing."""
        if self._closed:
            return
        self._closed = True
        for node in self._nodes.values():
            node.close()
        self._nodes.clear()
        self.backends.close()
        self.watcher.close()
        if self.firewall is not None:
            self.firewall.close()
        self.identities.close()
        if self.uid_block is not None:
            self.uid_block.release()
        self.instance.close()
        if self._own_loop:
            self.loop.close()

    def _place(self, spec: ActionSpec) -> Node | None:
        live = [node for node in self._nodes.values() if node.alive]
        warm = [node for node in live if node.pool.has_idle_warm(spec.key)]
        return min(warm or live, key=Node.load, default=None)



def _warn_of_missing_landlock(abi: int) -> None:
    """Log what the sandbox cannot close on a kernel of this Landlock ABI."""
    if abi < kernel.LANDLOCK_NET_ABI:
        log.warning("this kernel has no Landlock network rights (Linux 6.7): only the port bind filter keeps "
                    "actions from binding TCP ports of this machine")
    if abi < kernel.LANDLOCK_SCOPES_ABI:
        log.warning("this kernel has no Landlock scopes (Linux 6.12): actions can reach the abstract "
                    "Unix sockets of this machine")
