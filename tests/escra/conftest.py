"""Fixtures for Escra tests: real cgroups under ``owx-test-escra/<run>``, real processes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid

import pytest
import requests

from owx.common import bearer, cgroups
from owx.common.cgroups import Cgroup

from tests.fixtures.polling import wait_for

PREFIX = "owx-test-escra"


@pytest.fixture(scope="session", autouse=True)
def _root_and_cgroups():
    if not cgroups.available():
        pytest.fail("Escra tests need root and a writable /sys/fs/cgroup")
    # Weighted like eight busy tasks: on a shared node the tests' containers still reach their own
    # quotas (the figures the tests read), whatever else runs.
    Cgroup(PREFIX).create().set_cpu_shares(8192)
    yield
    if not Cgroup(PREFIX).children():
        Cgroup(PREFIX).destroy()


@pytest.fixture
def cgroup_root():
    """A private cgroup root; everything below it is killed and removed afterwards."""
    root = f"{PREFIX}/{uuid.uuid4().hex[:8]}"
    Cgroup(root).create()
    yield root
    _destroy_tree(Cgroup(root))


def _destroy_tree(group: Cgroup) -> None:
    for child in group.children():
        _destroy_tree(child)
    group.destroy()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ControllerProcess:
    """``owx agent --controller`` as a real process on a fixed port; restartable."""

    def __init__(self, *args: str, token: str | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.args = args
        self.token = token
        self.proc: subprocess.Popen | None = None

    def start(self) -> "ControllerProcess":
        cmd = [sys.executable, "-m", "owx.cli", "agent", "--controller", "--port", str(self.port), *self.args]
        env = {**os.environ, **({"OWX_ESCRA_TOKEN": self.token} if self.token else {})}
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        try:
            wait_for(self._ready, timeout=20, interval=0.1)
        except BaseException:
            self.stop()  # not ready in time: the fixture never gets it to stop
            raise
        return self

    def _ready(self) -> bool:
        assert self.proc.poll() is None, f"controller exited: {self.proc.stderr.read().decode()}"
        try:
            return requests.get(f"{self.url}/v1/state", headers=bearer.header(self.token), timeout=0.5).status_code == 200
        except requests.RequestException:
            return False

    def state(self) -> dict:
        return requests.get(f"{self.url}/v1/state", headers=bearer.header(self.token), timeout=2).json()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)


@pytest.fixture
def controller():
    procs: list[ControllerProcess] = []

    def make(*args: str, token: str | None = None) -> ControllerProcess:
        proc = ControllerProcess(*args, token=token).start()
        procs.append(proc)
        return proc

    yield make
    for proc in procs:
        proc.stop()


@pytest.fixture
def local_escra(cgroup_root):
    """Factory: an allocator object and a node agent over LocalLink, managing ``<cgroup_root>/n1/*``."""
    from owx.escra_agent.agent import NodeAgent
    from owx.escra_agent.allocator import ResourceAllocator
    from owx.escra_agent.link import LocalLink
    from owx.escra_agent.messages import AppLimits
    from owx.escra_agent.settings import MIB, AgentSettings, AllocatorParams

    agents = []

    def make(cpu_cores: float = 2.0, memory_mb: int = 1024, containers: int | None = 2, ledger=None, **params):
        allocator = ResourceAllocator(AllocatorParams(**params))
        allocator.add_application(
            AppLimits(name="app", cpu_cores=cpu_cores, memory_bytes=memory_mb * MIB, expected_containers=containers),
            ledger=ledger,
        )
        agent = NodeAgent(AgentSettings(node="n1", cgroup_root=cgroup_root, app="app"), LocalLink(allocator)).start()
        agents.append(agent)
        return allocator, agent

    yield make
    for agent in agents:
        agent.stop()


@pytest.fixture
def container(cgroup_root):
    """Factory: a container cgroup on node n1 (``<cgroup_root>/n1/<name>``) and its processes."""
    from owx.bench.escra.procs import spawn_in

    procs = []

    def make(name: str, *argv: str, **popen):
        group = Cgroup(f"{cgroup_root}/n1/{name}").create()
        if argv:
            procs.append(spawn_in(group, list(argv), **popen))
        return group, (procs[-1] if argv else None)

    yield make
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
