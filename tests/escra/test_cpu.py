"""CPU quota follows demand: up when throttled, down when slack, never above the global limit."""

from __future__ import annotations

import os
import signal
import time

from tests.fixtures.polling import wait_for
from owx.bench.escra.procs import BUSY, IDLE, python

from owx.escra_agent.cpu_policy import CpuWindow, next_quota
from owx.escra_agent.messages import Sample
from owx.escra_agent.settings import AllocatorParams

PARAMS = AllocatorParams()  # Υ = 20 (%), γ = 0.2 (of the quota), κ = 0.8, n = 10


def _window(*periods: tuple[int, int, bool], throttled_us: int = 0) -> CpuWindow:
    """A window fed with (quota µs, used µs, throttled) per 100 ms period; the last one spent
    ``throttled_us`` throttled."""
    window = CpuWindow(PARAMS.window)
    for index, (quota, used, throttled) in enumerate(periods):
        sample = Sample(id="c", interval_us=100_000, periods=1, throttled_periods=int(throttled),
                        throttled_us=throttled_us if index == len(periods) - 1 else 0,
                        used_us=used, cpu_quota_us=quota, memory_usage=0, memory_limit=-1)
        window.push(sample, quota)
    return window


def test_raise_claims_throttle_ratio_times_upsilon_percent_of_unallocated():
    once = _window(*[(50_000, 30_000, False)] * 9, (50_000, 50_000, True))
    assert next_quota(50_000, once, 100_000, PARAMS) == 50_000 + 2_000  # 1/10 · 20% · 100 ms
    always = _window(*[(50_000, 50_000, True)] * 10)
    assert next_quota(50_000, always, 100_000, PARAMS) == 50_000 + 20_000  # 10/10 · 20%
    assert next_quota(50_000, always, 0, PARAMS) == 50_000  # nothing unallocated: the quota stays
    greedy = AllocatorParams(upsilon=100)
    assert next_quota(50_000, always, 100_000, greedy) == 150_000  # never more than what is unallocated


def test_a_throttled_container_below_its_equal_split_gets_what_it_asked_for_up_to_the_split():
    clumped = _window(*[(5_000, 1_000, False)] * 9, (5_000, 5_000, True), throttled_us=80_000)
    assert next_quota(5_000, clumped, 100_000, PARAMS, fair_us=19_500) == 19_500  # asked for 85 ms: the split
    assert next_quota(5_000, clumped, 4_000, PARAMS, fair_us=19_500) == 9_000  # no more than is unallocated
    assert next_quota(5_000, clumped, 100_000, AllocatorParams(fair_share=False), fair_us=19_500) == 5_000 + 2_000
    grazed = _window(*[(5_000, 1_000, False)] * 9, (5_000, 5_000, True), throttled_us=3_000)
    assert next_quota(5_000, grazed, 100_000, PARAMS, fair_us=19_500) == 8_000  # asked for 8 ms, not the split
    above = _window(*[(30_000, 30_000, True)] * 10, throttled_us=50_000)
    assert next_quota(30_000, above, 100_000, PARAMS, fair_us=19_500) == 30_000 + 20_000  # the paper's raise


def test_lower_takes_kappa_of_windowed_unused_once_more_than_gamma_of_quota_is_idle():
    idle = _window(*[(100_000, 40_000, False)] * 10)  # 60% of the quota unused in every period
    assert next_quota(100_000, idle, 100_000, PARAMS) == 100_000 - 48_000  # κ · 60 ms
    busy = _window(*[(100_000, 40_000, False)] * 9, (100_000, 85_000, False))  # last period: 15% unused < γ
    assert next_quota(100_000, busy, 100_000, PARAMS) == 100_000
    dipped = _window(*[(100_000, 10_000, False)] * 9, (100_000, 70_000, False))  # would cut below 70 ms just used
    assert next_quota(100_000, dipped, 100_000, PARAMS) == 70_000
    stopped = _window(*[(4_000, 0, False)] * 10)
    assert next_quota(4_000, stopped, 100_000, PARAMS) == PARAMS.min_quota_us  # not 800


def test_quota_rises_when_throttled_and_falls_when_idle(local_escra, container):
    allocator, agent = local_escra(cpu_cores=2.0, containers=20)  # eq. 2.1: 2 cores / 20 = 10 ms per period
    group, proc = container("c1", *python(BUSY))
    wait_for(lambda: "c1" in allocator.view().containers)
    raised = wait_for(lambda: group.cpu_quota()[0] >= 30_000 and group.cpu_quota()[0], timeout=8)
    assert raised <= 200_000  # never above the application's global limit

    os.kill(proc.pid, signal.SIGSTOP)  # demand drops to zero
    try:
        low = wait_for(lambda: group.cpu_quota()[0] <= 10_000 and group.cpu_quota()[0], timeout=15)
        assert low >= PARAMS.min_quota_us
        assert allocator.view().apps["app"]["cpu_unallocated_us"] >= 190_000
    finally:
        os.kill(proc.pid, signal.SIGCONT)


def test_quota_stays_just_above_a_steady_load(local_escra, container):
    """A busy container's limit hugs its usage instead of jumping to the whole budget on a throttle."""
    allocator, _ = local_escra(cpu_cores=2.0, containers=1)  # starts with both cores
    group, _ = container("c1", *python(BUSY))
    wait_for(lambda: "c1" in allocator.view().containers)
    time.sleep(2.0)  # settle from the initial 2-core quota
    quotas, start_ns, start = [], group.cpu().usage_ns, time.monotonic()
    while time.monotonic() - start < 3.0:
        quotas.append(group.cpu_quota()[0])
        time.sleep(0.05)
    used_cores = (group.cpu().usage_ns - start_ns) / 1e9 / (time.monotonic() - start)
    mean_quota_cores = sum(quotas) / len(quotas) / 100_000
    assert 0 <= mean_quota_cores - used_cores <= 0.25, (mean_quota_cores, used_cores)
    assert max(quotas) <= 150_000  # one busy process never gets handed the whole 2-core budget


def test_initial_limits_follow_equations_2_1_and_2_2(local_escra, container):
    allocator, _ = local_escra(cpu_cores=2.0, memory_mb=1024, containers=8, sigma=0.25)
    group, _ = container("c1", *python(IDLE))
    # the agent writes the CPU quota, then the memory limit: wait for both
    wait_for(lambda: group.cpu_quota()[0] == 25_000  # 2 cores / 8 containers
             and group.memory().limit == (1024 << 20) * 3 // 4 // 8)  # global · (1 − σ) / 8
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


def test_a_hog_above_its_split_gives_runtime_back_to_a_newly_busy_container(local_escra, container):
    """One tenant's busy container took the whole budget while it was free; another's that becomes
    busy later gets its equal split back from it within a few periods, not the 1 ms floor."""
    allocator, _ = local_escra(cpu_cores=1.0, containers=2)  # eq. 2.1: 1 core / 2 = 50 ms per period
    hog, _ = container("hog", *python(BUSY))
    wait_for(lambda: hog.cpu_quota()[0] >= 90_000, timeout=8)  # alone and throttled: the whole core
    late, _ = container("late", *python(BUSY))
    wait_for(lambda: "late" in allocator.view().containers)
    shared = wait_for(lambda: late.cpu_quota()[0] >= 40_000 and hog.cpu_quota()[0] <= 60_000, timeout=5)
    assert shared
    quotas = allocator.view().containers
    assert quotas["hog"]["cpu_quota_us"] + quotas["late"]["cpu_quota_us"] <= 100_000  # within the budget
