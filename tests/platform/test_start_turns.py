"""One tenant's burst of cold starts runs a few at a time on a node, so that another tenant's start
does not share the cores with all of them."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from owx.platform.types import SUCCESS, ActionSpec
from platform_helpers import SLEEP, request

BURST = 6


def _starting(platform, tenant: str) -> int:  # type: ignore[no-untyped-def]
    return sum(1 for c in platform.containers() if c.state == "starting" and (c.action_key or "").startswith(f"{tenant}/"))


def test_a_tenants_burst_of_starts_runs_its_share_at_a_time_and_another_tenant_starts_meanwhile(make_platform) -> None:
    platform = make_platform(starts_per_tenant=2)
    burst = [ActionSpec(key=f"guest/a{n}@1", kind="python:3", code=SLEEP, memory_mb=128) for n in range(BURST)]
    other = ActionSpec(key="other/b@1", kind="python:3", code=SLEEP, memory_mb=128)
    seen: list[int] = []
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.is_set():
            seen.append(_starting(platform, "guest"))
            time.sleep(0.001)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        with ThreadPoolExecutor(BURST) as senders:
            started = [senders.submit(platform.run, spec, request(s=0)) for spec in burst]
            while _starting(platform, "guest") < 2:
                time.sleep(0.001)
            theirs = platform.run(other, request(s=0))
            burst_left = sum(1 for future in started if not future.done())
            outcomes = [future.result(60) for future in started]
    finally:
        sampling.set()
        sampler.join()
    assert theirs.status == SUCCESS and theirs.init_ms is not None
    assert all(o.status == SUCCESS and o.init_ms is not None for o in outcomes)
    assert max(seen) == 2  # the burst ran two starts at a time, never more
    assert burst_left > 0  # the other tenant's start did not wait for the whole burst


SLOW_INIT = "import time\ntime.sleep(1.0)\ndef main(args):\n    return {}\n"


def test_starts_waiting_for_their_turn_hold_no_memory_another_tenants_start_needs(make_platform) -> None:
    """The node holds 512 MB; tenant A invokes four 128 MB actions at once, one start at a time (each
    /init takes a second). A's three waiting starts hold nothing, so B's 256 MB start needs no
    memory of theirs: it ends before A's first activation does."""
    platform = make_platform(starts_per_tenant=1, user_memory_mb=512)
    burst = [ActionSpec(key=f"guest/slow{n}@1", kind="python:3", code=SLOW_INIT, memory_mb=128) for n in range(4)]
    other = ActionSpec(key="other/b@1", kind="python:3", code=SLEEP, memory_mb=256)
    with ThreadPoolExecutor(len(burst)) as senders:
        started = [senders.submit(platform.run, spec, request(s=0)) for spec in burst]
        while _starting(platform, "guest") < 1:
            time.sleep(0.001)
        theirs = platform.run(other, request(s=0))
        outcomes = [future.result(60) for future in started]
    assert theirs.status == SUCCESS and all(o.status == SUCCESS for o in outcomes)
    assert theirs.end_ms < min(o.end_ms for o in outcomes)
