"""OOM rescue (timed from the kernel's event), OOM that proceeds, periodic reclaim, refused shrink."""

from __future__ import annotations

import subprocess
import time

from tests.fixtures.polling import wait_for
from owx.bench.escra.procs import ALLOC, IDLE, python
from owx.bench.escra.rescue import episodes, grow

from owx.common.cgroups import Cgroup
from owx.escra_agent.messages import Directives, LimitUpdate

MIB = 1 << 20


def test_oom_rescue_keeps_a_process_alive_beyond_its_limit(local_escra, container):
    allocator, agent = local_escra(memory_mb=1024, containers=8)  # initial limit 102 MiB
    group, _ = container("idle", *python(IDLE))
    wait_for(lambda: "idle" in agent.containers and agent.guard.reserve("app") > 0)
    group, proc = container("hog", *python(ALLOC, "300"), stdout=subprocess.PIPE)
    wait_for(lambda: "hog" in allocator.view().containers)
    assert proc.stdout.readline() == b"allocated\n"
    assert proc.poll() is None
    memory = group.memory()
    assert memory.oom_kills == 0
    assert memory.limit > 300 * MIB
    app = allocator.view().apps["app"]
    assert app["oom_granted"] >= 1 and app["oom_denied"] == 0  # rescued, never refused


def test_oom_proceeds_when_the_pool_is_empty(local_escra, container):
    allocator, agent = local_escra(memory_mb=256, containers=1, node_reserve_bytes=0)
    group, proc = container("hog", *python(ALLOC, "600"), stdout=subprocess.PIPE)
    assert proc.wait(timeout=20) == -9  # killed by the kernel's OOM killer
    assert group.memory().oom_kills >= 1
    assert allocator.view().apps["app"]["oom_denied"] >= 1


def test_periodic_reclaim_returns_slack_to_the_pool(local_escra, container):
    allocator, agent = local_escra(memory_mb=2048, containers=2, reclaim_interval_s=2.0)  # the initial limit lasts a tick
    group, _ = container("idle", *python(IDLE))
    wait_for(lambda: group.memory().limit == (2048 << 20) * 8 // 10 // 2 // 4096 * 4096)
    free_before = allocator.view().apps["app"]["memory_free"]
    limit = wait_for(lambda: group.memory().limit < 100 * MIB and group.memory().limit, timeout=10)
    assert abs(limit - (group.memory().usage + 50 * MIB)) < 8 * MIB  # usage + δ
    app = wait_for(lambda: allocator.view().apps["app"]["reclaimed_bytes"] > 0 and allocator.view().apps["app"])
    assert app["memory_free"] > free_before + 600 * MIB


def test_refused_shrink_keeps_the_limit_and_the_books_follow(local_escra, container):
    allocator, agent = local_escra(memory_mb=1024, containers=2)
    group, proc = container("hog", *python(ALLOC, "100"), stdout=subprocess.PIPE)
    assert proc.stdout.readline() == b"allocated\n"
    # the allocator grants the limit before the agent writes it: wait until the cgroup holds it
    limit = wait_for(lambda: (granted := allocator.view().containers.get("hog", {}).get("memory_limit"))
                     and group.memory().limit == granted and granted)
    agent.apply(Directives(epoch=allocator.epoch, updates=[LimitUpdate(id="hog", memory_limit=20 * MIB)]))
    assert group.memory().limit == limit
    assert proc.poll() is None
    time.sleep(0.3)
    assert allocator.view().containers["hog"]["memory_limit"] == group.memory().limit


def test_a_rescued_task_keeps_running_and_each_stall_is_timed_from_the_kernels_event(local_escra, container):
    allocator, agent = local_escra(memory_mb=1024, containers=8)  # initial limit 102 MiB
    group, _ = container("grower")
    wait_for(lambda: "grower" in agent.containers and agent.guard.reserve("app") > 0
             and 0 < group.memory().limit < 200 * MIB)
    growth = grow(group, 300)
    assert not growth.killed and group.memory().limit > 300 * MIB
    found = episodes(growth, [])
    assert found, "the observer saw no OOM event"
    for episode in found:  # the task stalled before the kernel's event and ran again after it
        assert episode.stalled_ns <= episode.event_ns < episode.resumed_ns


def test_without_a_rescue_the_task_is_killed_and_its_rescue_never_ends(cgroup_root):
    group = Cgroup(f"{cgroup_root}/unguarded").create()
    group.set_memory_limit(100 * MIB)
    growth = grow(group, 300)
    assert growth.killed
    found = episodes(growth, [])
    assert found and all(episode.rescue_ms == float("inf") for episode in found)
