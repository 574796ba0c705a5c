"""The platform interface: what the gateway and the extensions may ask of where activations run.

Every platform runs activations, describes its nodes, keeps one :class:`MemoryLedger` and
tells listeners about its containers. Three abilities are optional and typed as such:

* ``replicas`` (:class:`ReplicaControl`) — start a warm container of an action that takes no
  traffic, and later run one activation on exactly that container. ``None`` where a client cannot
  pick a container: OpenWhisk decides placement itself, so Canary keeps replicas warm there with
  keep-warm activations instead (:meth:`Platform.keep_warm`).
* ``resources`` (:class:`ResourceControl`) — resize a running container and read its usage.
  ``None`` where containers are not on this machine (OpenWhisk: Escra runs as ``owx agent`` on
  the invoker nodes instead).
* ``accounts`` (:class:`TenantAccounts`) — run a tenant's activations under an identity of its own on
  the platform, which then limits it apart from the others (an upstream OpenWhisk's namespaces).
  ``None`` where owx itself is the only limit (its own containers).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import ClassVar, Protocol

from owx.platform.ledger import MemoryLedger
from owx.platform.types import (
    ActionSpec,
    ContainerDeath,
    ContainerInfo,
    ContainerUsage,
    NodeInfo,
    PlatformLimits,
    RunOutcome,
    RunRequest,
)


class PlatformUnavailable(RuntimeError):
    """The platform cannot take this work: closed, node lost, or the action can never fit."""


class PlatformError(RuntimeError):
    """The platform could not run an activation at all (not the action's failure): an upstream that
    is unreachable, throttles, or refuses owx's key. ``status`` is what the caller is answered
    (OpenWhisk's codes: 502, 503, 429); the activation is recorded as a whisk internal error."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class NoRoom(RuntimeError):
    """No memory for a replica right now."""


class ReplicaFailed(RuntimeError):
    """A replica could not be started or initialised."""


class ContainerListener(Protocol):
    """Told about containers as they come and go (calls arrive on a platform thread)."""

    def container_started(self, info: ContainerInfo) -> None: ...

    def container_died(self, death: ContainerDeath) -> None:
        """A container stopped without being asked to: crashed, OOM-killed, timed out, node lost."""


class ReplicaControl(Protocol):
    """Warm containers kept aside for one action, and runs pinned to one of them."""

    def prewarm(self, spec: ActionSpec, node: str | None = None, wait_s: float = 0.0) -> ContainerInfo:
        """Start and initialise a replica of ``spec`` on ``node`` (default: the least loaded);
        raises :class:`NoRoom` or :class:`ReplicaFailed`."""

    def claim(self, spec: ActionSpec, node: str) -> str | None:
        """Take a live replica of ``spec`` on ``node`` for one run (``run(claim=...)``); its id or None."""

    def remove(self, container_id: str) -> bool:
        """Destroy a replica that is no longer needed; False if unknown."""


class ResourceControl(Protocol):
    """Resizing running containers and reading their usage."""

    def resize(self, container_id: str, memory_bytes: int | None = None, cpu_quota_us: int | None = None) -> bool:
        """Apply new limits (memory also in the ledger); False if the container is unknown."""

    def usage(self, container_id: str) -> ContainerUsage | None: ...


class TenantAccounts(ABC):
    """Tenants' own identities on the platform, used for their invocations from the next one on."""

    @abstractmethod
    def assign(self, namespace: str, auth: str | None) -> None:
        """Run the invocations of ``namespace``'s callers with ``auth`` (``uuid:key``); None: with the
        platform's shared identity."""


class Platform(ABC):
    """Where activations run. One per gateway, built from the settings by :func:`owx.platform.open_platform`."""

    name: ClassVar[str]
    ledger: MemoryLedger
    replicas: ReplicaControl | None = None
    resources: ResourceControl | None = None
    accounts: TenantAccounts | None = None

    @abstractmethod
    def run(self, spec: ActionSpec, request: RunRequest, node: str | None = None,
            claim: str | None = None) -> RunOutcome:
        """Run one activation to its outcome (never raises for action failures). ``node`` pins the
        node (Canary's placement), ``claim`` a replica taken with ``replicas.claim``."""

    async def run_warm(self, spec: ActionSpec, request: RunRequest) -> RunOutcome | None:
        """Run ``request`` on a warm container of ``spec`` from the platform's event loop, without a
        thread (call it on that loop); None when it needs one: then the caller runs it with :meth:`run`
        on a thread (a new container to start, memory to wait for, an action to deploy upstream). Raises
        :class:`PlatformError` as :meth:`run` does. By default always None."""
        return None

    def charge_output(self, namespace: str, seconds: float) -> None:
        """The caller's event loop (the platform's) spent ``seconds`` on output of ``namespace``'s
        containers beyond reading it (the record its lines became): where the platform reads output on
        that loop within each namespace's share of it, this counts against the share too. Call it on
        that loop. By default nothing (the output is read elsewhere)."""

    @abstractmethod
    def nodes(self) -> list[NodeInfo]: ...

    @abstractmethod
    def warm_nodes(self, spec: ActionSpec) -> list[str]:
        """Nodes holding an idle warm container of ``spec`` (where it would start fastest)."""

    @abstractmethod
    def subscribe(self, listener: ContainerListener) -> None: ...

    @abstractmethod
    def containers(self) -> list[ContainerInfo]: ...

    def unsupported(self, kind: str) -> str | None:
        """Why actions of ``kind`` cannot run on this platform (None if they can)."""
        return None

    def keep_warm(self, spec: ActionSpec) -> None:
        """Keep at least one container of ``spec`` warm somewhere (platforms without ``replicas``)."""

    def forget(self, path: str) -> None:
        """The action at ``namespace/[pkg/]name`` was updated or deleted: drop what was made for its
        earlier revisions (deployments, idle containers)."""

    def open_host_port(self, port: int) -> None:
        """Let the platform's containers reach TCP ``port`` of this machine (the gateway's listeners, a
        store they use); platforms whose containers run elsewhere have nothing to open."""

    def namespace_dir(self, namespace: str) -> Path | None:
        """A directory on this machine that the containers of ``namespace``, and no other namespace's,
        read and write at this same path (made on first use); None where containers cannot share one."""
        return None

    def namespace_identity(self, namespace: str) -> tuple[int, int] | None:
        """The (uid, gid) for a process of owx's that acts in ``namespace_dir(namespace)``: the namespace's
        group and a uid of its own, so it has the rights of that namespace's containers and no more
        (what they put there is theirs to shape: never opened by root). None without such a directory."""
        return None

    def limits(self) -> PlatformLimits:
        budgets = [node.budget_bytes for node in self.nodes() if node.alive]
        return PlatformLimits(max(budgets, default=0), sum(budgets), len(budgets))

    def live_nodes(self) -> list[str]:
        return [node.name for node in self.nodes() if node.alive]

    @abstractmethod
    def close(self) -> None:
        """Destroy every container, thread and cgroup the platform made."""
