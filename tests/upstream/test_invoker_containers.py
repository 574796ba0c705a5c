"""Escra on an OpenWhisk invoker node: ``owx agent`` finds the action containers OpenWhisk's invoker
made (Docker, named ``wsk<invoker>_<n>_<namespace>_<action>``, no labels, Docker's default cgroup
parent) and resizes them out of the invoker's memory budget (its ``userMemory``)."""

from __future__ import annotations

import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
import requests

from owx.common.cgroups import Cgroup
from owx.common.dockerd import ensure_dockerd
from tests.fixtures.sleep_image import sleep_image

MB = 1024 * 1024
USER_MEMORY_MB = 1024  # the invoker's userMemory: the budget Escra shares out


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def escra_on_invoker() -> Iterator[str]:
    """``owx agent --controller`` and one agent for node ``invoker0`` managing Docker containers."""
    port = free_port()
    controller = subprocess.Popen([sys.executable, "-m", "owx.cli", "agent", "--controller", "--port", str(port),
                                   "--define-app", f"name=openwhisk,cpu=2,memory-mb={USER_MEMORY_MB},containers=2"])
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            requests.get(url, timeout=1)
            break
        except requests.ConnectionError:
            time.sleep(0.1)
    agent = subprocess.Popen([sys.executable, "-m", "owx.cli", "agent", "--allocator", url, "--node", "invoker0",
                              "--docker", "--app", "openwhisk", "--cgroup-root", f"owx-test-invoker-{secrets.token_hex(3)}"])
    yield url
    for process in (agent, controller):
        process.terminate()
        process.wait(10)


def test_invoker_named_containers_are_resized_from_user_memory(escra_on_invoker: str) -> None:
    client = ensure_dockerd()
    image = sleep_image(client)
    suffix = secrets.token_hex(3)
    containers = [
        # as OpenWhisk's DockerContainer runs them: --cpu-shares, --memory = --memory-swap, and, when the
        # invoker has userCpus, --cpus (NanoCpus, which Docker will not let anyone update afterwards)
        client.containers.run(image, ["/bin/sleep", "3600"], detach=True, name=f"wsk0_{n}_guest_act{suffix}{n}",
                              cpu_shares=256, mem_limit="256m", memswap_limit="256m", **extra)
        for n, extra in enumerate(({}, {"nano_cpus": 500_000_000}))
    ]
    try:
        share = USER_MEMORY_MB * MB * 8 // 10 // 2 // 4096 * 4096  # eq. 2.2: (1 - σ) of the budget per container
        groups = [Cgroup(f"docker/{c.id}") for c in containers]

        def resized() -> bool:  # given their share, then (idle) reclaimed towards usage + δ
            return all(group.memory().limit <= share for group in groups)

        deadline = time.monotonic() + 20
        while not resized():
            assert time.monotonic() < deadline, [g.memory().limit // MB for g in groups]
            time.sleep(0.2)

        def recorded() -> bool:  # docker inspect follows the cgroup, where Docker allows updates at all
            containers[0].reload()
            return containers[0].attrs["HostConfig"]["Memory"] == groups[0].memory().limit

        deadline = time.monotonic() + 15
        while not recorded():
            assert time.monotonic() < deadline
            time.sleep(0.3)
    finally:
        for container in containers:
            container.remove(force=True)
