"""owx's deployments in one upstream namespace (owx's own, or a tenant's account: :mod:`.accounts`):
each action revision deployed once, deployed again if deleted behind owx's back."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from owx.platform.interface import PlatformError
from owx.platform.openwhisk.client import UpstreamClient
from owx.platform.openwhisk.naming import UpstreamName, upstream_name
from owx.platform.types import ActionSpec

log = logging.getLogger(__name__)

# The upstream action's body for a spec deployed as a target.
ActionBody = Callable[[ActionSpec, UpstreamName], dict[str, Any]]


class Deployments:
    """What owx deployed through ``client`` (one upstream namespace); thread-safe."""

    def __init__(self, client: UpstreamClient, prefix: str, action_body: ActionBody) -> None:
        self.client = client
        self._prefix = prefix
        self._action_body = action_body
        self._deployed: set[str] = set()
        self._deploying: dict[str, threading.Lock] = {}  # one per path being deployed
        self._packages: set[str] = set()
        self._lock = threading.Lock()

    def target(self, spec: ActionSpec) -> UpstreamName:
        """Where ``spec``'s revision lives in this namespace (deployed or not)."""
        return upstream_name(self._prefix, spec)

    def has(self, target: UpstreamName) -> bool:
        return target.path in self._deployed

    def holds(self, package: str) -> bool:
        """Whether owx deployed into ``package`` here since it started."""
        return package in self._packages

    def ensure(self, spec: ActionSpec) -> UpstreamName:
        """Deploy ``spec``'s revision unless it is. Concurrent first uses (an invoke beside a keep-warm)
        deploy it once: a second PUT would be an update there, which drops warm containers."""
        target = self.target(spec)
        if target.path in self._deployed:
            return target
        with self._lock:
            deploying = self._deploying.setdefault(target.path, threading.Lock())
        with deploying:
            if target.path in self._deployed:  # deployed by whoever held the lock before
                return target
            if target.package not in self._packages:
                self.client.put_package(target.package)
                with self._lock:
                    self._packages.add(target.package)
            self.client.put_action(target.path, self._action_body(spec, target))
            with self._lock:
                self._deployed.add(target.path)
                self._deploying.pop(target.path, None)  # a deploy after a 404 may have made its own
        return target

    def forget(self, target: UpstreamName) -> None:
        """``target`` was deleted upstream behind owx's back: its next use deploys it again."""
        with self._lock:
            self._deployed.discard(target.path)
            self._packages.discard(target.package)

    def delete(self, package: str, prefix: str) -> None:
        """Delete every deployment in ``package`` whose name starts with ``prefix``."""
        try:
            names = [n for n in self.client.list_actions(package) if n.startswith(prefix)]
            for name in names:
                self.client.delete_action(f"{package}/{name}")
                with self._lock:
                    self._deployed.discard(f"{package}/{name}")
        except PlatformError as exc:
            log.warning("could not delete the upstream deployments %s/%s*: %s", package, prefix, exc)
