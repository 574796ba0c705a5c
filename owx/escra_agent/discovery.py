"""Finding the action containers on this node: embedded-platform cgroups and Docker containers."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from owx.common.cgroups import Cgroup

log = logging.getLogger(__name__)

_VALID_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
NODE_LABEL = "owx.node"
ACTION_LABEL = "owx.action"
APP_LABEL = "owx.app"
WHISK_PREFIX = "wsk"  # OpenWhisk invokers name action containers wsk<invoker>_<n>_<ns>_<action>


@dataclass(frozen=True)
class Handle:
    """One managed container: its id, application, cgroup and (for Docker) engine id."""

    id: str
    app: str
    cgroup: Cgroup
    docker_id: str | None = None


class EmbeddedDiscovery:
    """The embedded platform's containers: every group under ``<cgroup_root>/<node>/``."""

    def __init__(self, cgroup_root: str, node: str, app: str) -> None:
        self.parent = Cgroup(f"{cgroup_root}/{node}")
        self.app = app
        self._handles: dict[str, Handle] = {}  # of the last scan: a scan every period makes only new ones

    def scan(self) -> dict[str, Handle]:
        known = self._handles
        self._handles = {name: known.get(name) or Handle(name, self.app, Cgroup(f"{self.parent.relpath}/{name}"))
                         for name in self.parent.child_names() if _VALID_ID.match(name)}
        return dict(self._handles)


class DockerDiscovery:
    """Running Docker containers labelled for this node or named by an OpenWhisk invoker."""

    def __init__(self, node: str, app: str, client=None) -> None:
        import docker

        self.node = node
        self.app = app
        self.client = client or docker.from_env(timeout=5)

    def scan(self) -> dict[str, Handle]:
        found = {}
        seen = {c.id: c for c in self.client.containers.list(filters={"label": f"{NODE_LABEL}={self.node}"})}
        for container in self.client.containers.list(filters={"name": WHISK_PREFIX}):
            if container.name.startswith(WHISK_PREFIX):
                seen.setdefault(container.id, container)
        for container in self.client.containers.list(filters={"label": ACTION_LABEL}):
            if container.labels.get(NODE_LABEL, self.node) == self.node:
                seen.setdefault(container.id, container)
        for cid, container in seen.items():
            parent = (container.attrs.get("HostConfig") or {}).get("CgroupParent") or "docker"
            app = container.labels.get(APP_LABEL, self.app)
            found[cid] = Handle(cid, app, Cgroup(f"{parent}/{cid}"), docker_id=cid)
        return found

    def update(self, docker_id: str, cpu_quota_us: int | None, memory_limit: int | None) -> None:
        """Record limits in Docker (what ``docker inspect`` shows and a restart re-applies)."""
        kwargs: dict[str, int] = {}
        if cpu_quota_us is not None:
            kwargs.update(cpu_quota=cpu_quota_us, cpu_period=100_000)
        if memory_limit is not None:
            kwargs.update(mem_limit=memory_limit, memswap_limit=memory_limit)
        self.client.api.update_container(docker_id, **kwargs)
