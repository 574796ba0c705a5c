"""A Docker container found by label is resized, and Docker's recorded limits follow."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from tests.fixtures.polling import wait_for

from owx.escra_agent.agent import NodeAgent
from owx.escra_agent.allocator import ResourceAllocator
from owx.escra_agent.discovery import DockerDiscovery
from owx.escra_agent.link import LocalLink
from owx.escra_agent.messages import AppLimits
from owx.escra_agent.settings import MIB, AgentSettings
from tests.fixtures.sleep_image import SLEEP_IMAGE, sleep_image


@pytest.fixture(scope="module")
def docker_client():
    from owx.common.dockerd import ensure_dockerd

    client = ensure_dockerd()
    sleep_image(client)
    return client


def test_labelled_docker_container_is_resized_and_docker_records_it(docker_client, cgroup_root):
    node = f"n-{uuid.uuid4().hex[:6]}"
    container = docker_client.containers.run(
        SLEEP_IMAGE, ["/bin/sleep", "3600"], detach=True, labels={"owx.node": node, "owx.app": "app"},
        cpu_period=100_000, cpu_quota=150_000, mem_limit="512m", memswap_limit="512m",
    )
    allocator = ResourceAllocator()
    allocator.add_application(AppLimits(name="app", cpu_cores=1.0, memory_bytes=1024 * MIB, expected_containers=4))
    settings = AgentSettings(node=node, cgroup_root=cgroup_root, app="app", docker=True, docker_sync_s=0.3)
    agent = NodeAgent(settings, LocalLink(allocator), docker=DockerDiscovery(node, "app", client=docker_client)).start()
    try:
        wait_for(lambda: container.id in allocator.view().containers, timeout=10)
        group = agent.containers[container.id].handle.cgroup
        assert group.dir("memory") == Path("/sys/fs/cgroup/memory/docker") / container.id
        expected_memory = (1024 * MIB) * 8 // 10 // 4 // 4096 * 4096  # eq. 2.2
        wait_for(lambda: group.memory().limit == expected_memory)

        def recorded():
            container.reload()
            host = container.attrs["HostConfig"]
            return host["Memory"] == group.memory().limit and host["CpuQuota"] == group.cpu_quota()[0]

        wait_for(recorded, timeout=10)  # docker inspect shows what the cgroup holds
    finally:
        agent.stop()
        container.remove(force=True)
