"""Container resource limits derived from action memory the way OpenWhisk's invoker does.

OpenWhisk (``ContainerPoolConfig.cpuShare``) gives a container
``max(1024 / (userMemory // memory), 2)`` CPU shares, so CPU weight is proportional
to reserved memory and a pool full of containers sums to about 1024 shares.  With
``userCpus`` configured it also caps each container at ``userCpus * memory /
userMemory`` CPUs; owx expresses that cap as a CFS quota/period pair (never
Docker's NanoCpus, which would block later quota updates by Escra).
"""

from __future__ import annotations

from dataclasses import dataclass

from owx.common.cgroups import CFS_PERIOD_US, UNLIMITED

MB = 1024 * 1024
TOTAL_SHARES = 1024
MIN_SHARES = 2
MIN_QUOTA_US = 1000  # the kernel refuses CFS quotas below 1 ms


@dataclass(frozen=True, slots=True)
class ContainerLimits:
    """What a backend applies to a new container."""

    memory_bytes: int  # hard limit, swap included
    cpu_shares: int
    cpu_quota_us: int  # -1: unlimited
    cpu_period_us: int
    pids_max: int


def cpu_shares(memory_mb: int, user_memory_mb: int) -> int:
    """OpenWhisk's share of 1024 for a container reserving ``memory_mb`` of ``user_memory_mb``."""
    containers_per_budget = max(1, user_memory_mb // memory_mb)
    return max(TOTAL_SHARES // containers_per_budget, MIN_SHARES)


def cpu_quota_us(memory_mb: int, user_memory_mb: int, user_cpus: float | None) -> int:
    """CFS quota per period for ``userCpus * memory / userMemory`` CPUs, or -1 without ``user_cpus``."""
    if user_cpus is None:
        return UNLIMITED
    return max(MIN_QUOTA_US, int(user_cpus * memory_mb / user_memory_mb * CFS_PERIOD_US))


def limits_for(memory_mb: int, user_memory_mb: int, user_cpus: float | None, pids_max: int) -> ContainerLimits:
    return ContainerLimits(
        memory_bytes=memory_mb * MB,
        cpu_shares=cpu_shares(memory_mb, user_memory_mb),
        cpu_quota_us=cpu_quota_us(memory_mb, user_memory_mb, user_cpus),
        cpu_period_us=CFS_PERIOD_US,
        pids_max=pids_max,
    )
