"""Nodes, death notification, replicas and resize accounting: the hooks Canary and Escra use."""

from __future__ import annotations

import os
import signal
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from platform_helpers import ECHO, SLEEP, OnDeath, pid_alive, request, run_waited, spec
from tests.fixtures.polling import wait_for

from owx.common.cgroups import Cgroup
from owx.platform.embedded.container_limits import MB
from owx.platform.interface import NoRoom
from owx.platform.ledger import NodeLedger
from owx.platform.types import SUCCESS, ContainerDeath


def test_two_nodes_have_separate_cgroup_parents(make_platform):
    platform = make_platform(nodes=2)
    outcomes = [platform.run(spec(ECHO), request()) for _ in range(2)]  # least loaded: one on each
    assert {o.node for o in outcomes} == {"node0", "node1"}
    for info in platform.containers():
        assert info.cgroup.startswith(f"owx-test-platform/{info.node}/")
        assert info.pid in Cgroup(info.cgroup).pids()


def test_warm_node_is_preferred(make_platform):
    platform = make_platform(nodes=2)
    action = spec(ECHO)
    first = platform.run(action, request())
    platform.run(spec(ECHO), request())  # loads the other node
    assert platform.run(action, request()).node == first.node


def test_every_death_is_reported_once_with_its_container(make_platform):
    """How fast deaths are seen is a figure of ``owx bench canary`` (detection time), not a timed test."""
    platform = make_platform()
    seen: list[ContainerDeath] = []
    arrived = threading.Event()

    def listener(death: ContainerDeath) -> None:
        seen.append(death)
        arrived.set()

    platform.subscribe(OnDeath(listener))
    for _ in range(3):
        outcome = platform.run(spec(ECHO), request())
        pid = next(c.pid for c in platform.containers() if c.id == outcome.container_id)
        arrived.clear()
        os.kill(pid, signal.SIGKILL)
        assert arrived.wait(5), "no death notification"
        assert (seen[-1].container_id, seen[-1].reason) == (outcome.container_id, "exited")
    assert len(seen) == 3


def test_node_kill_kills_everything_and_traffic_moves(make_platform):
    platform = make_platform(nodes=2)
    deaths: list[ContainerDeath] = []
    platform.subscribe(OnDeath(deaths.append))
    node0 = platform.node("node0")
    for _ in range(2):
        node0.pool.run(spec(ECHO), request())
    busy = spec(SLEEP)
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(node0.pool.run, busy, request(s=10))
        wait_for(lambda: any(c.in_flight for c in node0.pool.containers()), what="the long activation")
        pids = [c.pid for c in node0.pool.containers()]
        node0.kill()
        interrupted = running.result(timeout=5)
    assert interrupted.status == "action developer error" and interrupted.failure == "exited"
    wait_for(lambda: len(deaths) == 3, what="three death notices")
    assert {d.reason for d in deaths} == {"node-lost"} and {d.node for d in deaths} == {"node0"}
    assert not any(pid_alive(pid) for pid in pids)
    assert not node0.alive
    assert platform.run(spec(ECHO), request()).node == "node1"


def test_replica_takes_no_traffic_until_claimed(make_platform):
    platform = make_platform(nodes=2)
    action = spec(ECHO)
    replica = platform.prewarm(action, node="node1")
    assert replica.state == "replica" and replica.node == "node1" and replica.action_key == action.key
    normal = platform.run(action, request())
    assert normal.container_id != replica.id
    pool = platform.node("node1").pool
    assert pool.claim_replica(action) == replica.id
    assert pool.claim_replica(action) is None  # claimed once
    claimed = pool.run(action, request(x=1), claim=replica.id)
    assert claimed.status == SUCCESS and claimed.container_id == replica.id
    assert claimed.init_ms is None  # it was initialised already


def test_replica_needs_room_in_the_budget(make_platform):
    platform = make_platform(user_memory_mb=256)
    action = spec(SLEEP, memory_mb=256)
    with ThreadPoolExecutor(1) as pool:
        busy = pool.submit(platform.run, action, request(s=1))
        wait_for(lambda: platform.node("node0").pool.used_bytes() == 256 * MB, what="the busy container")
        with pytest.raises(NoRoom):
            platform.prewarm(spec(ECHO, memory_mb=128))
        assert busy.result().status == SUCCESS


def test_resize_keeps_the_budget_accounting(make_platform):
    platform = make_platform(user_memory_mb=512)
    pool = platform.node("node0").pool
    small = spec(SLEEP, memory_mb=256)
    platform.run(small, request(s=0))
    (info,) = pool.containers()
    assert platform.resize(info.id, memory_bytes=128 * MB, cpu_quota_us=50_000)
    assert Cgroup(info.cgroup).memory().limit == 128 * MB
    assert Cgroup(info.cgroup).cpu_quota()[0] == 50_000
    assert pool.used_bytes() == 128 * MB
    # Escra grows the container itself and tells the ledger afterwards.
    Cgroup(info.cgroup).set_memory_limit(384 * MB)
    NodeLedger(platform.ledger, "node0").on_resize(info.id, 384 * MB)
    assert pool.used_bytes() == 384 * MB
    assert pool.containers()[0].memory_bytes == 384 * MB
    # Now a second 256 MB container does not fit while the first is busy: it waits, not over-admits.
    with ThreadPoolExecutor(2) as executor:
        busy = executor.submit(pool.run, small, request(s=0.8))
        wait_for(lambda: pool.containers()[0].in_flight == 1, what="the first container to be busy")
        other = executor.submit(run_waited, pool, spec(ECHO, memory_mb=256), request())
        assert busy.result().status == SUCCESS
        waited, wait_ms = other.result()
    assert waited.status == SUCCESS and wait_ms >= 400
    assert not platform.resize("no-such-container", memory_bytes=MB)
