"""CPU quota follows demand: up when throttled, down when slack."""

from __future__ import annotations

import os
import signal
import time

from conftest import wait_for
from escra_procs import BUSY, IDLE, python


def test_quota_rises_when_throttled_and_falls_when_idle(local_escra, container):
    allocator, agent = local_escra(cpu_cores=2.0, containers=8)  # eq. 2.1: 2 cores / 8 = 25 ms per period
    group, proc = container("c1", *python(BUSY))
    wait_for(lambda: "c1" in allocator.view().containers)
    raised = wait_for(lambda: group.cpu_quota()[0] >= 80_000 and group.cpu_quota()[0], timeout=5)
    assert raised <= 200_000  # never above the application's global limit

    os.kill(proc.pid, signal.SIGSTOP)  # demand drops to zero
    try:
        low = wait_for(lambda: group.cpu_quota()[0] <= 10_000 and group.cpu_quota()[0], timeout=5)
        assert low >= 5_000  # min_quota_us
        assert allocator.view().apps["app"]["cpu_unallocated_us"] >= 190_000
    finally:
        os.kill(proc.pid, signal.SIGCONT)


def test_initial_limits_follow_equations_2_1_and_2_2(local_escra, container):
    allocator, _ = local_escra(cpu_cores=2.0, memory_mb=1024, containers=8, sigma=0.25)
    group, _ = container("c1", *python(IDLE))
    wait_for(lambda: group.cpu_quota()[0] == 25_000)  # 2 cores / 8 containers
    assert group.memory().limit == (1024 << 20) * 3 // 4 // 8  # global · (1 − σ) / 8
    assert allocator.view().containers["c1"]["memory_limit"] == group.memory().limit


def test_two_containers_share_one_global_cpu_limit(local_escra, container):
    allocator, agent = local_escra(cpu_cores=1.0, containers=2)
    a, _ = container("a", *python(BUSY))
    b, _ = container("b", *python(BUSY))
    wait_for(lambda: len(allocator.view().containers) == 2)
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        total = max(0, a.cpu_quota()[0]) + max(0, b.cpu_quota()[0])
        assert total <= 100_000 + 1_000  # one core between them, whatever each one's demand
        time.sleep(0.05)
