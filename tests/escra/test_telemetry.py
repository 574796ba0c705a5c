"""Telemetry deltas read from real cgroups."""

from __future__ import annotations

import time

from owx.bench.escra.procs import BUSY, IDLE, python

from owx.escra_agent.telemetry import CgroupProbe, delta


def test_deltas_show_usage_and_throttling_of_a_capped_busy_process(container):
    group, _ = container("busy", *python(BUSY))
    group.set_cpu_quota(30_000)  # 0.3 core
    probe = CgroupProbe(group)
    time.sleep(0.3)
    before = probe.read()
    time.sleep(1.0)
    sample = delta("busy", before, probe.read())
    elapsed_periods = sample.interval_us / 100_000  # about 10: a loaded machine wakes the sleep late
    assert elapsed_periods - 1.5 <= sample.periods <= elapsed_periods + 1.5
    assert sample.throttled_periods >= 1  # the machine is shared: not every period reaches the quota
    assert sample.throttled_us > 0
    per_period = sample.used_us * 100_000 / sample.interval_us
    assert 0 < per_period < 36_000  # never far above the 30 ms quota (below it when others take the cores)
    assert sample.cpu_quota_us == 30_000
    assert sample.memory_usage > 1 << 20
    probe.close()


def test_idle_process_has_no_throttling_and_unlimited_memory_reads_as_minus_one(container):
    group, _ = container("idle", *python(IDLE))
    group.set_cpu_quota(50_000)
    time.sleep(0.5)  # let the interpreter start
    probe = CgroupProbe(group)
    before = probe.read()
    time.sleep(0.5)
    sample = delta("idle", before, probe.read())
    assert sample.throttled_periods == 0
    assert sample.used_us < 5_000
    assert sample.memory_limit == -1
    probe.close()
