"""The node agent: every period, discover containers, sample them, report, apply the answer.

State that matters lives in the kernel (cgroups and their limits), so a
restarted agent rediscovers every container and loses nothing.  When the
allocator is unreachable the agent logs it once, keeps the current limits and
keeps sampling; when the allocator answers 409 (it restarted) the agent
registers again with the limits its containers have.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from owx.common.cgroups import CgroupError
from owx.escra_agent.discovery import DockerDiscovery, EmbeddedDiscovery, Handle
from owx.escra_agent.limits import LimitWriter
from owx.escra_agent.link import AllocatorLink, AllocatorUnavailable, StaleAgent
from owx.escra_agent.messages import (
    ContainerInfo,
    Directives,
    Heartbeat,
    OomEvent,
    OomReply,
    Reclaimed,
    Register,
    Sample,
    TelemetryBatch,
)
from owx.escra_agent.oom import OomGuard
from owx.escra_agent.settings import AgentSettings
from owx.escra_agent.telemetry import CgroupProbe, Reading, delta

log = logging.getLogger(__name__)
HEARTBEAT_S = 1.0


@dataclass(frozen=True)
class AgentStats:
    """What an agent has done so far, for its metrics."""

    node: str
    containers: int
    cpu_resizes: int
    memory_resizes: int
    oom_rescues: int
    allocator_reachable: bool


@dataclass
class _Managed:
    handle: Handle
    probe: CgroupProbe
    last: Reading


class NodeAgent:
    """One node's agent; ``run()`` in the foreground or ``start()``/``stop()`` a thread."""

    def __init__(self, settings: AgentSettings, link: AllocatorLink, docker: DockerDiscovery | None = None) -> None:
        self.settings = settings
        self.link = link
        self.embedded = EmbeddedDiscovery(settings.cgroup_root, settings.node, settings.app)
        self.docker = docker if docker is not None else (DockerDiscovery(settings.node, settings.app) if settings.docker else None)
        self.writer = LimitWriter(self.docker, settings.docker_sync_s, headroom_bytes=settings.oom_slice_bytes)
        self.guard = OomGuard(self.writer, self._report_oom, settings.oom_slice_bytes, settings.event_log)
        self.containers: dict[str, _Managed] = {}
        self.epoch: str | None = None
        self._seq = 0
        self._managed_ids: set[str] = set()
        self._unreported_new: dict[str, ContainerInfo] = {}
        self._unreported_gone: set[str] = set()
        self._reclaimed: list[Reclaimed] = []
        self._docker_seen: dict[str, Handle] = {}
        self._next_docker_scan = 0.0
        self._last_sent = 0.0
        self._reachable = True
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------
    def start(self) -> "NodeAgent":
        self._thread = threading.Thread(target=self.run, name=f"escra-agent-{self.settings.node}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the loop and release descriptors; limits stay as they are. Idempotent."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.guard.close()
        self.writer.close()
        for managed in self.containers.values():
            managed.probe.close()
        self.containers.clear()

    def run(self) -> None:
        deadline = time.monotonic()
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception:
                log.exception("agent tick failed; limits stay as they are")
            deadline += self.settings.period_s
            pause = deadline - time.monotonic()
            if pause < 0:  # fell behind: do not try to catch up with a burst of ticks
                deadline, pause = time.monotonic(), 0
            self._stop.wait(pause)

    def stats(self) -> AgentStats:
        return AgentStats(self.settings.node, len(self.containers), self.writer.resizes["cpu"],
                          self.writer.resizes["memory"], self.guard.rescues, self._reachable)

    # -- one period --------------------------------------------------------------
    def tick(self) -> None:
        self._discover()
        samples = self._sample()
        try:
            directives = self._exchange(samples)
        except StaleAgent as exc:
            log.info("allocator does not know this agent (%s): registering again", exc)
            self.epoch = None
            self.guard.reset_reserves()
            directives = self._exchange([])
        except AllocatorUnavailable as exc:
            if self._reachable:
                log.warning("%s; keeping current limits", exc)
            self._reachable = False
            return
        if directives is not None:
            if not self._reachable:
                log.info("allocator reachable again")
                self._reachable = True
            self.apply(directives)

    def _exchange(self, samples: list[Sample]) -> Directives | None:
        now = time.monotonic()
        if self.epoch is None:
            infos = [self._info(m.handle, m.last) for m in self.containers.values()]
            directives = self.link.register(Register(node=self.settings.node, containers=infos))
            self._managed_ids = {info.id for info in infos}
            self._unreported_new.clear()
            self._unreported_gone.clear()
            self._reclaimed.clear()
            self.epoch = directives.epoch
            self._last_sent = now
            self.guard.retry_stuck()
            return directives
        if not self.containers and not self._unreported_gone:
            if now - self._last_sent < HEARTBEAT_S:
                return None
            directives = self.link.heartbeat(Heartbeat(node=self.settings.node, epoch=self.epoch))
        else:
            self._seq += 1
            batch = TelemetryBatch(
                node=self.settings.node,
                epoch=self.epoch,
                seq=self._seq,
                samples=samples,
                new=list(self._unreported_new.values()),
                gone=sorted(self._unreported_gone),
                reclaimed=self._reclaimed,
            )
            directives = self.link.telemetry(batch)
            self._managed_ids.update(self._unreported_new)
            self._unreported_new.clear()
            self._unreported_gone.clear()
            self._reclaimed = []
        self._last_sent = now
        return directives

    def apply(self, directives: Directives) -> None:
        """Carry out the allocator's answer; a container that vanished in between is skipped."""
        for update in directives.updates:
            managed = self.containers.get(update.id)
            if managed is None:
                log.info("update for %s: container is gone", update.id[:12])
                continue
            self.writer.apply(managed.handle, update)
        for app, amount in directives.reserve_grant.items():
            self.guard.grant(app, amount)
        for container_id in directives.deny_oom:
            self.guard.let_proceed(container_id)
        if directives.reclaim:
            self.reclaim(directives.delta_bytes)

    def reclaim(self, delta_bytes: int) -> None:
        """Shrink every container whose limit exceeds usage + δ to usage + δ; remember ψ."""
        for managed in self.containers.values():
            reading = managed.last
            target = reading.memory_usage + delta_bytes
            if reading.memory_limit <= 0 or reading.memory_limit <= target:
                continue
            if self.writer.set_memory(managed.handle, target):
                freed = reading.memory_limit - target
                self._reclaimed.append(Reclaimed(id=managed.handle.id, memory_limit=target, freed_bytes=freed))

    # -- discovery and telemetry ---------------------------------------------------
    def _discover(self) -> None:
        found = self.embedded.scan()
        if self.docker is not None:
            if time.monotonic() >= self._next_docker_scan:
                self._next_docker_scan = time.monotonic() + self.settings.rediscover_s
                try:
                    self._docker_seen = self.docker.scan()
                except Exception as exc:
                    log.warning("docker discovery failed (keeping last view): %s", exc)
            found.update(self._docker_seen)
        for container_id in [c for c in self.containers if c not in found]:
            self._drop(container_id)
        for container_id, handle in found.items():
            if container_id not in self.containers:
                self._adopt(handle)

    def _adopt(self, handle: Handle) -> None:
        try:
            probe = CgroupProbe(handle.cgroup)
        except CgroupError as exc:
            log.debug("container %s not ready: %s", handle.id[:12], exc)
            return
        try:
            reading = probe.read()
            self.guard.watch(handle)
        except (CgroupError, OSError) as exc:
            log.warning("cannot manage %s: %s", handle.id[:12], exc)
            probe.close()
            return
        self.containers[handle.id] = _Managed(handle, probe, reading)
        self._unreported_gone.discard(handle.id)
        self._unreported_new[handle.id] = self._info(handle, reading)

    def _drop(self, container_id: str) -> None:
        managed = self.containers.pop(container_id)
        managed.probe.close()
        self.guard.unwatch(container_id)
        self.writer.forget(container_id)
        self._managed_ids.discard(container_id)
        if self._unreported_new.pop(container_id, None) is None:
            self._unreported_gone.add(container_id)

    def _sample(self) -> list[Sample]:
        samples = []
        for container_id, managed in list(self.containers.items()):
            try:
                reading = managed.probe.read()
            except CgroupError:
                self._drop(container_id)  # vanished between discovery and now
                continue
            if container_id not in self._unreported_new:
                samples.append(delta(container_id, managed.last, reading))
            managed.last = reading
        return samples

    def _info(self, handle: Handle, reading: Reading) -> ContainerInfo:
        return ContainerInfo(
            id=handle.id,
            app=handle.app,
            cpu_quota_us=reading.cpu_quota_us,
            memory_limit=reading.memory_limit,
            memory_usage=reading.memory_usage,
            managed=handle.id in self._managed_ids,
        )

    def _report_oom(self, handle: Handle, usage: int, limit: int, granted: int) -> OomReply | None:
        if self.epoch is None:
            return None
        event = OomEvent(node=self.settings.node, epoch=self.epoch, id=handle.id, memory_usage=usage,
                         memory_limit=limit, granted_bytes=granted)
        try:
            return self.link.oom(event)
        except (AllocatorUnavailable, StaleAgent, LookupError) as exc:
            log.warning("OOM report for %s not delivered: %s", handle.id[:12], exc)
            return None
