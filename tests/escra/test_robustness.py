"""Bad input and restarts: vanished containers, unreachable or restarted allocator, restarted agent."""

from __future__ import annotations

import time

from tests.fixtures.polling import wait_for
from owx.bench.escra.procs import BUSY, IDLE, python

from owx.common.cgroups import Cgroup
from owx.escra_agent.agent import NodeAgent
from owx.escra_agent.link import HttpLink, LocalLink
from owx.escra_agent.messages import Directives, LimitUpdate
from owx.escra_agent.settings import AgentSettings

APP = "name=app,cpu=2,memory-mb=1024,containers=4"


def test_container_vanishing_mid_update_is_skipped_and_forgotten(local_escra, container):
    allocator, agent = local_escra()
    group, proc = container("gone", *python(IDLE))
    wait_for(lambda: "gone" in allocator.view().containers)
    proc.kill()
    proc.wait()
    handle = agent.containers["gone"].handle
    group.destroy()
    agent.writer.apply(handle, LimitUpdate(id="gone", cpu_quota_us=50_000, memory_limit=64 << 20))  # logged, not raised
    wait_for(lambda: "gone" not in allocator.view().containers)
    assert agent._thread.is_alive()


def test_unreachable_allocator_keeps_limits_then_registers_when_it_appears(controller, container, cgroup_root):
    server = controller("--define-app", APP)
    port, url = server.port, server.url
    server.stop()
    group, _ = container("c1", *python(IDLE))
    group.set_cpu_quota(70_000)
    settings = AgentSettings(node="n1", cgroup_root=cgroup_root, app="app", allocator_url=url)
    agent = NodeAgent(settings, HttpLink(url, 0.2)).start()
    try:
        time.sleep(1.0)
        assert agent._thread.is_alive()
        assert group.cpu_quota()[0] == 70_000  # nobody changed it
        server.start()
        assert server.port == port
        wait_for(lambda: "c1" in server.state()["containers"], timeout=10)
    finally:
        agent.stop()


def test_allocator_restart_makes_agents_register_again_with_their_limits(controller, container, cgroup_root):
    server = controller("--define-app", APP)
    group, _ = container("c1", *python(BUSY))
    settings = AgentSettings(node="n1", cgroup_root=cgroup_root, app="app")
    agent = NodeAgent(settings, HttpLink(server.url)).start()
    try:

        def applied() -> bool:
            granted = server.state()["containers"].get("c1", {}).get("memory_limit")
            return granted is not None and group.memory().limit == granted

        wait_for(applied)  # registered, and the agent has written the granted limit into the cgroup
        first_epoch = server.state()["epoch"]
        server.stop()
        time.sleep(0.3)  # a directive already on its way lands before the limit is read
        memory = group.memory().limit
        server.start()
        state = wait_for(lambda: "c1" in server.state()["containers"] and server.state(), timeout=10)
        assert state["epoch"] != first_epoch
        assert state["containers"]["c1"]["memory_limit"] == memory  # adopted, not reset by eq. 2.2
        assert agent.epoch == state["epoch"]
    finally:
        agent.stop()


def test_restarted_agent_rediscovers_every_container(local_escra, container, cgroup_root):
    allocator, agent = local_escra()
    for name in ("a", "b", "c"):
        container(name, *python(IDLE))
    wait_for(lambda: len(allocator.view().containers) == 3)

    def applied() -> bool:  # the agent writes the granted limits after the allocator lists them
        granted = allocator.view().containers
        return all(Cgroup(f"{cgroup_root}/n1/{k}").memory().limit == v["memory_limit"] for k, v in granted.items())

    wait_for(applied)
    before = allocator.view().containers
    agent.stop()
    fresh = NodeAgent(AgentSettings(node="n1", cgroup_root=cgroup_root, app="app"), LocalLink(allocator)).start()
    try:
        wait_for(lambda: set(fresh.containers) == {"a", "b", "c"})
        time.sleep(0.3)
        after = allocator.view().containers
        assert set(after) == set(before) == {"a", "b", "c"}
        in_force = {k: Cgroup(f"{cgroup_root}/n1/{k}").memory().limit for k in after}
        assert {k: v["memory_limit"] for k, v in after.items()} == in_force  # the kernel's limits, not reset
    finally:
        fresh.stop()


def test_update_for_unknown_container_is_ignored(local_escra, container):
    allocator, agent = local_escra()
    agent.apply(Directives(epoch=allocator.epoch, updates=[LimitUpdate(id="nobody", cpu_quota_us=10_000)]))
    assert agent._thread.is_alive()
