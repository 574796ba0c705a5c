"""Backend ``docker``: a container is a Docker container of a runtime image.

Limits are set at creation the way OpenWhisk's invoker sets them (memory = memory
+ swap, CPU shares by memory) with CPU as quota/period, never NanoCpus, so Escra
can update them later.  The container's cgroup parent is the node's cgroup, so
its cgroup is ``<node cgroup>/<container id>`` like the local backend's.
Output comes from an attach socket opened before start (nothing is missed), and
death is seen through a pidfd on the container's init process. An idle container is paused as
the local backend's are, through its cgroup's ``cgroup.freeze`` (runc puts it in the v2 hierarchy
on a v1 system too), which takes a fraction of what ``docker pause`` takes.

Every container is confined the way the local backend's sandbox is: a uid of its own (never
root), no capabilities, no new privileges, a read-only root with size-limited tmpfs on /tmp and
on each volume the image declares as its only writable places, and a secret of its own that its
runtime requires on every ``/init`` and ``/run``. They run on the instance's own Docker network,
where no container reaches another and the host firewall
(:mod:`owx.platform.embedded.host_firewall`) keeps them off this machine's services but its open
ports (the gateway's among them), which they reach at the bridge's address: their
``__OW_API_HOST`` names it when the gateway's is this machine's loopback. Containers
carry their instance's label, so a restarted instance removes what its killed predecessor left.
A blackbox action runs only a runtime image owx built (or one built from it), an image the operator
aliased (``owx runtime alias``) or listed (``blackbox_images``); any other image of the machine is a
failed pull to the tenant.
"""

from __future__ import annotations

import errno
import fnmatch
import logging
import os
import secrets
import signal
import struct
import threading
from urllib.parse import urlsplit

import docker
import docker.errors
import docker.types
import requests

from owx.common.cgroups import CgroupError
from owx.common.dockerd import ensure_dockerd
from owx.platform.embedded.container import (
    IMAGE_PULL_ERROR,
    IMAGE_START_ERROR,
    ActionStartupError,
    Backend,
    Container,
    ContainerRequest,
)
from owx.platform.embedded.host_firewall import FirewallError, HostFirewall, docker_bridge
from owx.platform.embedded.identities import Identities
from owx.platform.embedded.instance import Instance
from owx.platform.embedded.proxy import ProxyClient
from owx.platform.embedded.watcher import FdWatcher
from owx.platform.settings import PlatformSettings
from owx.runtimes.image.build import TENSORFLOW_IMAGE, ensure_image, offered
from owx.runtimes.python_action import SECRET_ENV

log = logging.getLogger(__name__)

RUNTIME_PORT = 8080
CONNECT_RETRY_S = 30.0  # the proxy starts listening some time after `docker start`
TENSORFLOW_KIND = "python:tensorflow"
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "0.0.0.0"})  # where a gateway on this machine's loopback listens
STREAM_NAMES = {1: "stdout", 2: "stderr"}
INSTANCE_LABEL = "owx.instance"


class DockerBackend(Backend):
    """Runs runtime images (and blackbox images) on the machine's Docker engine."""

    name = "docker"

    def __init__(self, settings: PlatformSettings, instance: Instance, identities: Identities,
                 watcher: FdWatcher, firewall: HostFirewall | None) -> None:
        super().__init__(watcher)
        self.client = ensure_dockerd()
        self.runtime_image = settings.runtime_image
        self.blackbox_images = tuple(settings.blackbox_images)
        self.tmp_mb = settings.sandbox.tmp_mb
        self.instance = instance.label
        self.identities = identities
        self._ready: set[str] = set()
        self._image_lock = threading.Lock()
        self.reap()
        self.network = self._own_network(identities.uids.start)
        self.host_address = self._bridge_address(firewall)

    def _own_network(self, first_uid: int) -> str:
        """The instance's Docker network (made, or left by a killed predecessor holding the same uids):
        its containers reach no other container on it, and the host firewall knows its bridge."""
        name = f"owx-{first_uid}"
        try:
            self.client.api.inspect_network(name)
        except docker.errors.NotFound:
            self.client.api.create_network(name, driver="bridge", labels={INSTANCE_LABEL: self.instance}, options={
                "com.docker.network.bridge.name": docker_bridge(first_uid),
                "com.docker.network.bridge.enable_icc": "false"})
        return name

    def _bridge_address(self, firewall: HostFirewall | None) -> str | None:
        """This machine's address on the network's bridge, standing for its loopback at the open ports
        (None without a firewall: then no port is opened there)."""
        if firewall is None:
            return None
        configs = (self.client.api.inspect_network(self.network).get("IPAM") or {}).get("Config") or []
        address = next((c["Gateway"] for c in configs if "." in (c.get("Gateway") or "")), None)
        try:
            if address is None:
                raise FirewallError(f"docker network {self.network} names no IPv4 gateway")
            firewall.alias_loopback(address)
        except (FirewallError, OSError) as exc:
            log.warning("Docker actions cannot reach this machine's open ports (the gateway's): %s", exc)
            return None
        return address

    def api_host(self, requested: str) -> str:
        """A loopback ``requested`` (the gateway's default) as the bridge's address: a container's
        loopback is its own."""
        where = urlsplit(requested)
        if self.host_address is None or where.hostname not in LOOPBACK_NAMES:
            return requested
        return where._replace(netloc=f"{self.host_address}:{where.port}" if where.port else self.host_address).geturl()

    def reap(self) -> int:
        """Remove the containers of this instance that a killed predecessor left; how many."""
        left = self.client.api.containers(all=True, filters={"label": f"{INSTANCE_LABEL}={self.instance}"})
        for found in left:
            try:
                self.client.api.remove_container(found["Id"], force=True)
            except docker.errors.APIError as exc:
                log.warning("could not remove docker container %s: %s", found["Id"][:12], exc)
        return len(left)

    def create(self, request: ContainerRequest) -> Container:
        image = self._image_for(request)
        limits = request.limits
        api = self.client.api
        uid = self.identities.take_uid()
        secret = secrets.token_urlsafe(24)
        host_config = api.create_host_config(
            mem_limit=limits.memory_bytes,
            memswap_limit=limits.memory_bytes,
            cpu_shares=limits.cpu_shares,
            cpu_period=limits.cpu_period_us,
            cpu_quota=max(0, limits.cpu_quota_us),  # 0: no quota
            pids_limit=limits.pids_max,
            cgroup_parent="/" + request.cgroup_parent,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            read_only=True,
            tmpfs=self._writable_places(image),
            network_mode=self.network,
            # the output is read from the attach stream, bounded per activation; Docker's own copy
            # (json-file, unbounded by default) would keep everything an action prints on the disk
            log_config=docker.types.LogConfig(type="none"),
        )
        try:
            created = api.create_container(
                image,
                name=f"owx-{request.node}-{secrets.token_hex(6)}",
                labels={**request.labels, "owx.backend": "docker", INSTANCE_LABEL: self.instance},
                host_config=host_config,
                user=f"{uid}:{uid}",
                environment={SECRET_ENV: secret, "HOME": "/tmp", "TMPDIR": "/tmp"},
                detach=True,
            )
        except docker.errors.ImageNotFound:  # no registry to pull from: a missing image is a failed pull
            self.identities.give_back(uid)
            raise ActionStartupError(IMAGE_PULL_ERROR.format(image=image)) from None
        except BaseException as exc:
            self.identities.give_back(uid)
            if (refused := _refused_image(image, exc)) is None:
                raise
            raise refused from exc
        container = DockerContainer(created["Id"], request, self.watcher, self.notifier, self.exits)
        container.uid, container.identities = uid, self.identities
        try:
            container.start(api, secret, self.network)
        except BaseException as exc:
            container.destroy()
            if (refused := _refused_image(image, exc)) is None:
                raise
            raise refused from exc
        return container

    def _writable_places(self, image: str) -> dict[str, str]:
        """``/tmp`` and every volume the image declares, each a tmpfs of ``tmp_mb`` (charged to the
        container's memory): Docker would give a declared volume a directory on the host's disk,
        outside every limit, and keep it after the container."""
        try:
            declared = self.client.api.inspect_image(image)["Config"].get("Volumes") or {}
        except docker.errors.ImageNotFound:
            declared = {}  # the create fails as a failed pull
        return {path: f"size={self.tmp_mb}m,mode=1777" for path in ["/tmp", *declared]}

    def _image_for(self, request: ContainerRequest) -> str:
        if request.kind == "blackbox":
            if not request.image:
                raise ValueError("a blackbox action needs an image")
            if not self._offered(request.image):
                raise ActionStartupError(IMAGE_PULL_ERROR.format(image=request.image))
            return request.image
        image = TENSORFLOW_IMAGE if request.kind == TENSORFLOW_KIND else self.runtime_image
        with self._image_lock:
            if image not in self._ready:
                ensure_image(image, client=self.client)
                self._ready.add(image)
        return image

    def _offered(self, image: str) -> bool:
        """Whether tenants may run ``image``: one the operator lists, or one labelled as offered (a
        runtime owx built, an alias). A missing image is offered: its create fails as a failed pull."""
        if any(fnmatch.fnmatchcase(image, pattern) for pattern in self.blackbox_images):
            return True
        try:
            return offered(self.client.api.inspect_image(image)["Config"].get("Labels"))
        except docker.errors.ImageNotFound:
            return True

    def close(self) -> None:
        super().close()
        try:
            self.client.api.remove_network(self.network)
        except docker.errors.APIError as exc:  # a container still attached: the next holder of the uids reuses it
            log.warning("could not remove docker network %s: %s", self.network, exc)
        self.client.close()


def _refused_image(image: str, exc: BaseException) -> ActionStartupError | None:
    """What dockerd refused for the image's sake (a 4xx: no command, an entrypoint that is not there)
    is the action's failure, as OpenWhisk's BlackboxStartupError is; None: the platform's."""
    if isinstance(exc, docker.errors.APIError) and exc.is_client_error():
        return ActionStartupError(IMAGE_START_ERROR.format(image=image, reason=exc.explanation or exc))
    return None


class DockerContainer(Container):
    backend_name = "docker"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._api: docker.APIClient | None = None
        self._attach = None  # keeps the attach socket (and its HTTP response) alive
        self.uid: int | None = None
        self.identities: Identities | None = None

    def start(self, api: docker.APIClient, secret: str, network: str) -> None:
        """Attach to the output, start, and watch the init process (its runtime at its address on ``network``)."""
        self._api = api
        self._attach = api.attach_socket(self.id, params={"stdout": 1, "stderr": 1, "stream": 1})
        fd = self._attach.fileno()
        os.set_blocking(fd, False)
        self._watcher.watch_stream(fd, _Demuxer(self).feed, lambda: self.tenant)
        api.start(self.id)
        state = api.inspect_container(self.id)
        if not state["State"]["Running"]:
            raise ActionStartupError(IMAGE_START_ERROR.format(image=state["Config"]["Image"],
                                                              reason="its command ended at once"))
        address = state["NetworkSettings"]["Networks"][network]["IPAddress"]
        self.proxy = ProxyClient(address, RUNTIME_PORT, connect_retry_s=CONNECT_RETRY_S, alive=self.is_alive,
                                 secret=secret)
        self._watch(state["State"]["Pid"])

    def _signal_kill(self) -> None:
        if self.pid and self.is_alive():
            try:
                os.kill(self.pid, signal.SIGKILL)  # the container's init: the whole container goes
                return
            except ProcessLookupError:
                return
        if self._api is not None and self.pid is None:
            try:
                self._api.kill(self.id)
            except (docker.errors.APIError, requests.exceptions.RequestException):
                pass  # gone, or dockerd is: removing it says which

    def _release(self) -> None:
        removed = self._api is None or self._remove()
        if removed and self.uid is not None and self.identities is not None:
            self.identities.give_back(self.uid)
            self.uid = None
        if self._attach is not None:
            self._watcher.unwatch(self._attach.fileno())
            for closable in (self._attach, getattr(self._attach, "_sock", None)):
                if closable is not None:
                    closable.close()
            self._attach = None

    def _remove(self) -> bool:
        """Remove the container from Docker; False when it could not be (dockerd is away): it may live
        on, so its uid stays taken, and the instance's next start removes it (:meth:`DockerBackend.reap`)."""
        assert self._api is not None
        try:
            self._api.remove_container(self.id, force=True)
        except docker.errors.NotFound:
            pass
        except (docker.errors.APIError, requests.exceptions.RequestException) as exc:
            log.warning("could not remove docker container %s: %s", self.id[:12], exc)
            return False
        return True

    def _apply_memory_limit(self, memory_bytes: int) -> None:
        assert self._api is not None
        try:
            self._api.update_container(self.id, mem_limit=memory_bytes, memswap_limit=memory_bytes)
        except docker.errors.APIError as exc:
            raise CgroupError(errno.EBUSY, f"docker refused memory {memory_bytes} for {self.id[:12]}: {exc}") from None

    def _exit_code(self) -> int | None:
        return None  # known to Docker only; asking it here would delay the death notice


class _Demuxer:
    """Splits Docker's multiplexed attach stream (8-byte frame headers) into stdout and stderr."""

    HEADER = struct.Struct(">BxxxL")

    def __init__(self, container: Container) -> None:
        self.container = container
        self.buffer = b""

    def feed(self, chunk: bytes) -> bool:
        """Take a chunk of the attach stream; True when its reader may slow down (see LogCollector.held)."""
        if not chunk:
            for stream in STREAM_NAMES.values():
                self.container.logs.feed(stream, b"")
            return False
        self.buffer += chunk
        while len(self.buffer) >= self.HEADER.size:
            kind, size = self.HEADER.unpack_from(self.buffer)
            end = self.HEADER.size + size
            if len(self.buffer) < end:
                break
            payload, self.buffer = self.buffer[self.HEADER.size : end], self.buffer[end:]
            self.container.logs.feed(STREAM_NAMES.get(kind, "stdout"), payload)
        return self.container.logs.held()
