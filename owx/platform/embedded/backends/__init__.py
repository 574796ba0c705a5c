"""Container backends: one module each, all implementing ``platform.embedded.container.Backend``.

``process`` runs Python kinds as sandboxed runtime processes in cgroups; ``docker`` runs any
kind (and blackbox images) on the machine's Docker engine. :class:`Backends` picks one per kind.
"""

from __future__ import annotations

import os
import shutil
import threading

from owx.common.dockerd import DEFAULT_SOCKET
from owx.platform.embedded.container import Backend
from owx.platform.embedded.host_firewall import HostFirewall
from owx.platform.embedded.identities import Identities
from owx.platform.embedded.instance import Instance
from owx.platform.embedded.watcher import FdWatcher
from owx.platform.settings import PlatformSettings
from owx.platform.types import PYTHON_KINDS


class Backends:
    """The backends of one embedded platform, made when first needed, chosen per kind.

    ``docker_only`` (platform kind ``docker``): every kind runs in Docker. Otherwise Python kinds
    run as processes and other kinds (blackbox) in Docker where a Docker engine can be run.
    """

    def __init__(self, settings: PlatformSettings, docker_only: bool, instance: Instance,
                 identities: Identities, watcher: FdWatcher) -> None:
        self.settings = settings
        self.firewall: HostFirewall | None = None  # the platform's, once it has one: Docker's bridge is aliased there
        self.watcher = watcher
        self.docker_only = docker_only
        self.instance = instance
        self.identities = identities
        self._made: dict[str, Backend] = {}
        self._lock = threading.Lock()

    @property
    def default_name(self) -> str:
        return "docker" if self.docker_only else "process"

    def name_for(self, kind: str) -> str:
        return "process" if kind in PYTHON_KINDS and not self.docker_only else "docker"

    def unsupported(self, kind: str) -> str | None:
        """Why actions of ``kind`` cannot run here (None if they can)."""
        if self.name_for(kind) == "docker" and not docker_present():
            return (f"kind '{kind}' runs in Docker and this machine has no Docker engine "
                    "(install docker.io, or use a Python kind)")
        return None

    def for_kind(self, kind: str) -> Backend:
        name = self.name_for(kind)
        with self._lock:
            backend = self._made.get(name)
            if backend is None:
                backend = self._made[name] = self._make(name)
            return backend

    def _make(self, name: str) -> Backend:
        if name == "process":
            from owx.platform.embedded.backends.process import ProcessBackend

            return ProcessBackend(self.settings, self.instance, self.identities, self.watcher)
        from owx.platform.embedded.backends.docker import DockerBackend

        return DockerBackend(self.settings, self.instance, self.identities, self.watcher, self.firewall)

    def close(self) -> None:
        with self._lock:
            made, self._made = list(self._made.values()), {}
        for backend in made:
            backend.close()


def docker_present() -> bool:
    """Whether this machine has a Docker engine: one that runs, one named by DOCKER_HOST, or dockerd to start."""
    return bool(shutil.which("dockerd") or os.environ.get("DOCKER_HOST") or os.path.exists(DEFAULT_SOCKET))
