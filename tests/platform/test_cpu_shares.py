"""A node's CPU weight is shared fairly among tenants: each tenant's containers together hold one
share (split among them by memory), whatever their number."""

from __future__ import annotations

import secrets
from concurrent.futures import ThreadPoolExecutor

from platform_helpers import ECHO, request

from owx.common.cgroups import Cgroup
from owx.platform.embedded.container_limits import TOTAL_SHARES
from owx.platform.embedded.cpu_shares import tenant_shares
from owx.platform.types import SUCCESS, ActionSpec

BURN = ("import time\n"
        "def main(args):\n"
        "    end, n = time.time() + args['s'], 0\n"
        "    while time.time() < end:\n"
        "        n += 1\n"
        "    return {'n': n}\n")


def action(namespace: str, code: str = ECHO, memory_mb: int = 256, caller: str | None = None) -> ActionSpec:
    """An action of ``namespace`` (invoked by ``caller``, another namespace, if given)."""
    key = f"{namespace}/a{secrets.token_hex(4)}@1" + (f"#{caller}" if caller else "")
    return ActionSpec(key=key, kind="python:3", code=code, memory_mb=memory_mb, timeout_ms=60_000)


def shares(platform, container_id: str) -> int:
    (info,) = [c for c in platform.containers() if c.id == container_id]
    return int((Cgroup(info.cgroup).dir("cpu") / "cpu.shares").read_text())


def test_a_tenants_shares_are_split_by_memory_and_add_up_to_one_tenants_weight() -> None:
    assert tenant_shares({"x": 256, "y": 256, "z": 512}) == {"x": 256, "y": 256, "z": 512}
    assert tenant_shares({"only": 128}) == {"only": TOTAL_SHARES}


def test_each_tenants_containers_hold_one_tenants_weight_as_they_come_and_go(make_platform) -> None:
    platform = make_platform(user_memory_mb=2048)
    a = [platform.run(action("tenant-a"), request()).container_id for _ in range(3)]
    b = platform.run(action("tenant-b"), request()).container_id
    called = platform.run(action("tenant-a", caller="tenant-b"), request()).container_id  # b calls a's action
    assert [shares(platform, cid) for cid in a] == [TOTAL_SHARES // 3] * 3
    assert shares(platform, b) == shares(platform, called) == TOTAL_SHARES // 2
    assert platform.remove(a[0])
    assert [shares(platform, cid) for cid in a[1:]] == [TOTAL_SHARES // 2] * 2


def test_a_tenant_busy_in_many_containers_gets_no_more_cpu_than_another_busy_in_one(make_platform) -> None:
    """Four containers of tenant A and one of tenant B burn CPU at once on two cores: with OpenWhisk's
    shares (by memory alone) B's one would get a fifth of it; with a weight per tenant, about half."""
    platform = make_platform(user_memory_mb=2048)
    burners = [action("tenant-a", BURN) for _ in range(4)] + [action("tenant-b", BURN)]
    with ThreadPoolExecutor(len(burners)) as runs:
        outcomes = list(runs.map(lambda spec: platform.run(spec, request(s=4.0)), burners))
    assert all(outcome.status == SUCCESS for outcome in outcomes)
    groups = {c.id: Cgroup(c.cgroup) for c in platform.containers()}
    used = [groups[outcome.container_id].cpu().usage_ns for outcome in outcomes]
    assert used[-1] / sum(used) > 1 / 3, f"tenant B's container had {used[-1] / sum(used):.2f} of the CPU"
