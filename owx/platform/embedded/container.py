"""The two interfaces a backend implements: ``Backend`` makes ``Container`` objects.

A container is one action runtime (a process tree in a cgroup, or a Docker
container) with its proxy client, its log collector and its death watch.  The
shared behaviour lives here; a backend module adds how to start, kill, resize
and remove one.
"""

from __future__ import annotations

import logging
import os
import select
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

from owx.common.cgroups import Cgroup, CgroupError
from owx.platform.embedded.container_limits import ContainerLimits
from owx.platform.embedded.logs import LogCollector
from owx.platform.embedded.proxy import ProxyClient, ProxyResponse
from owx.platform.types import DeathReason
from owx.platform.embedded.watcher import FdWatcher

log = logging.getLogger(__name__)

# Called once when a container stops: (container, reason, exit code or None).
ExitListener = Callable[["Container", DeathReason, "int | None"], None]


class ActionStartupError(RuntimeError):
    """A container cannot start for a reason of the action, not of the platform (OpenWhisk's
    BlackboxStartupError): its activation is a developer error (502) with this message."""


IMAGE_PULL_ERROR = "Failed to pull container image '{image}'."
IMAGE_START_ERROR = "Failed to start a container of image '{image}': {reason}"


@dataclass(frozen=True, slots=True)
class ContainerRequest:
    """What a backend needs to make one container."""

    node: str
    cgroup_parent: str  # relative cgroup path; the container's group is <cgroup_parent>/<id>
    kind: str
    image: str | None
    limits: ContainerLimits
    labels: dict[str, str]


class Container(ABC):
    """One action runtime: ``init``, ``run``, logs, liveness, death notice, resize, destroy."""

    backend_name: str = ""

    def __init__(self, cid: str, request: ContainerRequest, watcher: FdWatcher, notifier: Executor,
                 exits: Executor) -> None:
        self.id = cid
        self.node = request.node
        self.kind = request.kind
        self.request = request
        self.memory_bytes = request.limits.memory_bytes
        self.cgroup = Cgroup(f"{request.cgroup_parent}/{cid}")
        self.pid: int | None = None
        self.logs = LogCollector()
        # the tenant it runs for (``ActionSpec.tenant``: the caller of a published action, not its
        # owner): its gid, its directory, its shares; once assigned
        self.namespace: str | None = None
        self.paused = False  # its processes frozen while it is idle (see pause)
        self.proxy: ProxyClient | None = None
        self._watcher = watcher
        self._notifier = notifier
        self._exits = exits
        self._listeners: list[ExitListener] = []
        self._dead = threading.Event()
        self._alive = True  # False once ``_dead`` is set (read on every warm activation: no Event method call)
        self.died_at: float | None = None  # time.time() when the platform saw the container die
        self._kill_reason: DeathReason | None = None
        self._planned = False  # destroyed on purpose: listeners are not told
        self._destroyed = False
        self._oom_seen = False
        self._kills_known: int | None = None  # the OOM kill count as last read (None: read it)
        self.exit_reason: DeathReason | None = None  # set when the container has stopped
        self._pidfd: int | None = None
        self._oomfd: int | None = None
        self._lock = threading.Lock()

    # -- protocol ------------------------------------------------------------
    def assign(self, namespace: str, own_code: bool = True) -> None:
        """Hand the container to ``namespace`` before its ``/init`` (a stem cell learns it when claimed);
        ``own_code``: the action is the namespace's own (else another's published action, which gets
        nothing of the namespace's but its memory and CPU shares). Backends whose containers get their
        identity at creation only note it here."""
        self.namespace = namespace

    @property
    def tenant(self) -> str:
        """Whose share of the loop reading the container's output takes (:class:`FdWatcher`): the
        tenant it runs for (the caller of a published action, not its owner), its own before it has one."""
        return self.namespace or self.id

    def init(self, value: dict[str, Any], timeout: float) -> ProxyResponse:
        """``POST /init``; raises ProxyTimeout / ProxyUnreachable."""
        assert self.proxy is not None
        return self.proxy.init(value, timeout)

    def run(self, payload: dict[str, Any], timeout: float, parsed_bytes: int | None = None) -> ProxyResponse:
        """``POST /run``; raises ProxyTimeout / ProxyUnreachable; an answer longer than ``parsed_bytes``
        is not parsed (`UnreadAnswer`)."""
        assert self.proxy is not None
        return self.proxy.run(payload, timeout, parsed_bytes)

    def run_async(self, body: bytes, timeout: float, parsed_bytes: int | None = None) -> Awaitable[ProxyResponse]:
        """``POST /run`` of an encoded payload, from the platform's event loop; the same as :meth:`run`."""
        assert self.proxy is not None
        return self.proxy.run_async(body, timeout, parsed_bytes)

    def drain_output(self) -> None:
        """Feed the log collector what the container's output holds right now, from the platform's
        event loop, as the fd watcher reads it (:meth:`FdWatcher.read_now`): a runtime writes its
        sentinels as soon as its ``/run`` answer is sent, so once the answer is read its activation's
        lines are usually complete without waiting for the next readiness event. Backends that
        cannot read their output directly do nothing."""

    # -- liveness ------------------------------------------------------------
    def is_alive(self) -> bool:
        return self._alive

    def wait_dead(self, timeout: float | None) -> bool:
        """Block until the container has stopped; True if it has."""
        return self._dead.wait(timeout)

    def on_exit(self, listener: ExitListener) -> None:
        """Call ``listener(container, reason, exit_code)`` once when the container stops by itself
        or is killed for a reason (timeout, node lost); not when it is destroyed on purpose."""
        self._listeners.append(listener)

    def oom_kills(self) -> int:
        """OOM kills counted by the kernel in this container's cgroup (0 once the group is gone)."""
        try:
            self._kills_known = self.cgroup.oom_kills()
        except CgroupError:
            self._kills_known = 0
        return self._kills_known

    def oom_kills_before_run(self) -> int:
        """:meth:`oom_kills` before an activation, read only when it may have changed: every kill is an
        OOM event the container hears of (without its event descriptor, read every time; a run that
        fails reads the count afresh, :meth:`oom_kills`)."""
        if self._kills_known is None or self._oomfd is None:
            return self.oom_kills()
        return self._kills_known

    # -- control -------------------------------------------------------------
    def pause(self) -> None:
        """Stop every process of the idle container until :meth:`resume` (OpenWhisk pauses idle
        containers): what an action left running after its activation (a daemon, a busy thread)
        takes no CPU and prints nothing meanwhile. A no-op where the backend cannot."""
        if not self.paused and self._freeze(True):
            self.paused = True

    def resume(self) -> None:
        """Let a paused container's processes run again (before its next activation)."""
        if self.paused:
            self.paused = False
            self._freeze(False)

    def _freeze(self, frozen: bool) -> bool:
        """Freeze or thaw the container's processes through its cgroup (both backends' containers are
        in the v2 hierarchy, runc puts Docker's there on a v1 system too); False where it cannot."""
        try:
            return self.cgroup.freeze(frozen)
        except CgroupError as exc:
            log.info("could not %s container %s: %s", "pause" if frozen else "resume", self.id, exc)
            return False

    def kill(self, reason: DeathReason) -> None:
        """Stop the container now because of ``reason``; listeners hear that reason."""
        with self._lock:
            if self._kill_reason is None:
                self._kill_reason = reason
        self._signal_kill()

    def destroy(self) -> None:
        """Stop and remove the container on purpose (eviction, shutdown); idempotent."""
        with self._lock:
            if self._destroyed:
                return
            self._destroyed = True
            # a process that already died by itself is a death to report, even if the pool destroys it first
            self._planned = self._kill_reason is None and not self._exited_already()
        self._signal_kill()
        if self.pid is not None:  # watched: its death is heard (one that never started has none)
            self._dead.wait(5.0)
        self._release()
        self._close_watch_fds()
        if self.proxy is not None:
            self.proxy.close()

    def _exited_already(self) -> bool:
        if self._pidfd is None:
            return False
        try:
            return bool(select.select([self._pidfd], [], [], 0)[0])
        except (OSError, ValueError):
            return False

    def set_memory_limit(self, memory_bytes: int) -> None:
        """Change the hard memory limit (swap included); raises CgroupError when refused."""
        self._apply_memory_limit(memory_bytes)
        self.memory_bytes = memory_bytes

    # -- for backends ---------------------------------------------------------
    def _watch(self, pid: int) -> None:
        """Start the death watch of process ``pid`` (and OOM events of the cgroup)."""
        self.pid = pid
        try:
            self._pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            self._on_exit()
            return
        try:
            self._oomfd = self.cgroup.oom_eventfd()
            self._watcher.watch_event(self._oomfd, self._on_oom_event, once=False)
        except CgroupError:
            self._oomfd = None
        # the exit is handled off the loop: telling the exit code may wait for the zygote's report
        self._watcher.watch_event(self._pidfd, lambda: self._exits.submit(self._on_exit))

    def _on_oom_event(self) -> None:
        self._oom_seen = True
        self._kills_known = None

    def _on_exit(self) -> None:
        if self._dead.is_set():
            return
        self.died_at = time.time()  # when the watcher saw it: listeners run later, on the notifier
        if self._oomfd is not None and _drain(self._oomfd):  # an OOM event in the same epoll batch
            self._oom_seen = True
        try:  # the kernel's kill counter is exact (Escra's rescued OOM events kill nobody) ...
            oom_killed = self.cgroup.oom_kills() > 0
        except CgroupError:  # ... but a Docker container's group may be gone already
            oom_killed = self._oom_seen
        code = self._exit_code()
        reason: DeathReason = self._kill_reason or ("oom" if oom_killed else "exited")
        self.exit_reason = reason
        self._alive = False
        self._dead.set()
        self.logs.end()
        for fd in (self._pidfd, self._oomfd):
            if fd is not None:
                self._watcher.unwatch(fd)
        if self._planned:
            return
        for listener in self._listeners:
            self._notifier.submit(_safe_call, listener, self, reason, code)

    def _close_watch_fds(self) -> None:
        for fd in (self._pidfd, self._oomfd):
            if fd is not None:
                self._watcher.unwatch(fd)
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._pidfd = self._oomfd = None

    @abstractmethod
    def _signal_kill(self) -> None:
        """Send SIGKILL to everything in the container (no waiting)."""

    @abstractmethod
    def _release(self) -> None:
        """Free what the container holds (cgroup, files, Docker object) once it is dead."""

    @abstractmethod
    def _apply_memory_limit(self, memory_bytes: int) -> None:
        """Write the new memory limit where the backend keeps it."""

    @abstractmethod
    def _exit_code(self) -> int | None:
        """The exit status of the runtime process, if the backend knows it."""


def _drain(fd: int) -> bool:
    """Consume pending events of a non-blocking event descriptor; True if there were any."""
    try:
        return bool(os.read(fd, 4096))
    except OSError:
        return False


def _safe_call(listener: ExitListener, container: Container, reason: DeathReason, code: int | None) -> None:
    try:
        listener(container, reason, code)
    except Exception:
        log.exception("container exit listener failed for %s", container.id)


class Backend(ABC):
    """Makes containers on this machine; one module per backend."""

    name: str = ""

    def __init__(self, watcher: FdWatcher) -> None:
        self.watcher = watcher  # the platform's, on its event loop
        self.notifier = ThreadPoolExecutor(max_workers=2, thread_name_prefix=f"owx-{self.name}-notify")
        self.exits = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"owx-{self.name}-exits")

    @abstractmethod
    def create(self, request: ContainerRequest) -> Container:
        """Start a container for ``request``; it is ready for ``init`` when this returns."""

    def api_host(self, requested: str) -> str:
        """``__OW_API_HOST`` as this backend's containers reach it (``requested``: as this machine does)."""
        return requested

    def close(self) -> None:
        """Stop the backend's threads (containers are destroyed by their pools)."""
        self.exits.shutdown(wait=True)
        self.notifier.shutdown(wait=True)
