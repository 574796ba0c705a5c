"""Container pool behaviour on the local backend: reuse, concurrency, stem cells, budget, eviction."""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from platform_helpers import ECHO, SLEEP, pid_alive, request, run_waited, spec
from tests.fixtures.polling import wait_for

from owx.common.cgroups import Cgroup
from owx.platform.embedded.container_limits import MB, TOTAL_SHARES
from owx.platform.types import APPLICATION_ERROR, DEVELOPER_ERROR, SUCCESS


def test_warm_container_is_reused_and_logs_are_per_activation(make_platform):
    platform = make_platform()
    action = spec(ECHO)
    first = platform.run(action, request(n=1))
    second = platform.run(action, request(n=2))
    assert first.status == SUCCESS and first.result == {"echo": {"n": 1}}
    assert second.result == {"echo": {"n": 2}}
    assert second.container_id == first.container_id
    assert first.init_ms is not None and second.init_ms is None
    assert len(first.logs) == 1 and first.logs[0].endswith("stdout: echo {'n': 1}")
    assert len(second.logs) == 1 and second.logs[0].endswith("stdout: echo {'n': 2}")


def test_a_cold_start_waits_while_its_container_is_made_and_starts_with_its_init(make_platform):
    """OpenWhisk's invoker times a cold start so: making the container is waiting, ``/init`` (here the
    module's 0.3 s sleep) is the init time, and the activation starts when ``/init`` is sent."""
    platform = make_platform()
    cold, wait_ms = run_waited(platform, spec("import time\ntime.sleep(0.3)\n" + ECHO), request())
    assert cold.status == SUCCESS and 300 <= cold.init_ms < 1000
    assert wait_ms >= 5  # making a sandboxed process takes longer
    assert cold.end_ms - cold.start_ms >= cold.init_ms


def test_the_deadline_counts_from_the_run_not_from_the_request(make_platform):
    """OpenWhisk's invoker sets ``__OW_DEADLINE`` when it sends ``/run``: starting the container and its
    ``/init`` (here a 0.5 s module sleep) do not take from the action's time."""
    platform = make_platform()
    code = ("import os, time\ntime.sleep(0.5)\n"
            "def main(args):\n    return {'left_ms': int(os.environ['__OW_DEADLINE']) - time.time() * 1000}\n")
    action = spec(code, timeout_ms=20_000)
    cold, warm = platform.run(action, request()), platform.run(action, request())
    assert cold.init_ms >= 500
    assert 19_800 < cold.result["left_ms"] <= 20_000 and 19_800 < warm.result["left_ms"] <= 20_000


def test_container_has_its_own_limited_cgroup(make_platform):
    platform = make_platform(user_memory_mb=2048, pids_max=64)
    platform.run(spec(ECHO, memory_mb=256), request())
    (info,) = platform.containers()
    group = Cgroup(info.cgroup)
    assert info.cgroup.startswith("owx-test-platform/node0/")
    assert info.pid in group.pids()
    assert group.memory().limit == 256 * MB
    if (group.dir("memory") / "memory.memsw.limit_in_bytes").exists():
        assert int((group.dir("memory") / "memory.memsw.limit_in_bytes").read_text()) == 256 * MB
    assert int((group.dir("cpu") / "cpu.shares").read_text()) == TOTAL_SHARES  # its tenant's only container
    assert (group.dir("pids") / "pids.max").read_text().strip() == "64"


def test_error_results_keep_the_container(make_platform):
    platform = make_platform()
    returns_error = platform.run(spec("def main(args):\n    return {'error': 'bad input'}\n", name="e"), request())
    assert returns_error.status == APPLICATION_ERROR and returns_error.result == {"error": "bad input"}
    action = spec("def main(args):\n    raise ValueError('boom')\n")
    first = platform.run(action, request())
    second = platform.run(action, request())
    assert first.status == DEVELOPER_ERROR and "boom" in first.result["error"]
    assert any("Traceback" in line for line in first.logs)
    assert second.container_id == first.container_id


def test_one_activation_at_a_time_without_concurrency(make_platform):
    platform = make_platform()
    action = spec(SLEEP)
    with ThreadPoolExecutor(3) as pool:
        outcomes = list(pool.map(lambda _: platform.run(action, request(s=0.3)), range(3)))
    assert all(o.status == SUCCESS for o in outcomes)
    assert len({o.container_id for o in outcomes}) == 3


def test_concurrency_shares_one_container(make_platform):
    platform = make_platform()
    action = spec(SLEEP, concurrency=4)
    platform.run(action, request(s=0))  # warm it
    started = time.monotonic()
    with ThreadPoolExecutor(4) as pool:
        outcomes = list(pool.map(lambda _: platform.run(action, request(s=0.5)), range(4)))
    elapsed = time.monotonic() - started
    assert all(o.status == SUCCESS for o in outcomes)
    assert len({o.container_id for o in outcomes}) == 1
    assert elapsed < 1.5, f"4 concurrent 0.5 s activations took {elapsed:.2f} s in one container"


def test_stem_cell_is_initialised_with_the_action_and_resized(make_platform):
    platform = make_platform(stem_cells=1, stem_memory_mb=256)
    (stem,) = platform.containers()
    assert stem.state == "stem" and stem.action_key is None
    outcome = platform.run(spec(ECHO, memory_mb=384), request(x=1))
    assert outcome.status == SUCCESS
    assert outcome.container_id == stem.id
    assert Cgroup(stem.cgroup).memory().limit == 384 * MB
    wait_for(lambda: any(c.state == "stem" for c in platform.containers()), what="a replacement stem cell")


def test_full_budget_queues_instead_of_failing(make_platform):
    platform = make_platform(user_memory_mb=512)
    action = spec(SLEEP, memory_mb=256)
    peak = []
    stop = threading.Event()

    def sample() -> None:
        pool = platform.node("node0").pool
        while not stop.is_set():
            peak.append(pool.used_bytes())
            time.sleep(0.005)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        with ThreadPoolExecutor(5) as pool:
            outcomes, waits = zip(*pool.map(lambda _: run_waited(platform, action, request(s=0.4)), range(5)))
    finally:
        stop.set()
        sampler.join()
    assert [o.status for o in outcomes] == [SUCCESS] * 5
    assert max(peak) <= 512 * MB
    assert len({o.container_id for o in outcomes}) == 2  # two fit; the rest waited for them
    assert max(waits) >= 300


def test_idle_container_of_another_action_is_evicted_for_a_waiting_one(make_platform):
    platform = make_platform(user_memory_mb=512)
    first, second, third = (spec(ECHO, memory_mb=256) for _ in range(3))
    a = platform.run(first, request())
    platform.run(second, request())
    pid_a = next(c.pid for c in platform.containers() if c.id == a.container_id)
    outcome, wait_ms = run_waited(platform, third, request())
    assert outcome.status == SUCCESS and wait_ms < 1000
    keys = {c.action_key for c in platform.containers()}
    assert keys == {second.key, third.key}  # the least recently used one went
    wait_for(lambda: not pid_alive(pid_a), what="the evicted process to exit")


def test_action_larger_than_the_budget_is_refused(make_platform):
    platform = make_platform(user_memory_mb=256)
    outcome = platform.run(spec(ECHO, memory_mb=512), request())
    assert outcome.status == "whisk internal error"
    assert "exceeds the node's container budget" in outcome.result["error"]


def test_idle_containers_are_evicted(make_platform):
    platform = make_platform(idle_evict_s=0.3)
    platform.run(spec(ECHO), request())
    (info,) = platform.containers()
    wait_for(lambda: not platform.containers(), timeout=3, what="idle eviction")
    wait_for(lambda: not pid_alive(info.pid), what="the evicted runtime to exit")
    wait_for(lambda: not Cgroup(info.cgroup).exists(), what="its cgroup to be removed")


def test_another_interpreter_runs_sandboxed_as_an_unprivileged_uid(make_platform):
    system_python = "/usr/bin/python3"
    assert os.path.exists(system_python), "the tests need Debian's python3 (apt-get install python3)"
    platform = make_platform(runtime_python=system_python)
    code = ("import os, sys\ndef main(args):\n    open('scratch', 'w').write('ok')\n"
            "    return {'uid': os.getuid(), 'python': sys.executable, 'cwd': os.getcwd()}\n")
    outcome = platform.run(spec(code), request())
    assert outcome.status == SUCCESS, outcome.result
    sandbox = platform.settings.sandbox
    assert sandbox.uid_base <= outcome.result["uid"] < sandbox.uid_base + sandbox.uid_count
    assert outcome.result["python"] == system_python and outcome.result["cwd"] == "/tmp"


def test_runtime_modules_get_bytecode_so_container_starts_do_not_compile() -> None:
    import importlib.util
    import sys
    from pathlib import Path

    import owx.canary.checkpoint.codec as codec
    from owx.platform.embedded.backends.process import compile_owx

    cached = Path(importlib.util.cache_from_source(codec.__file__))
    cached.unlink(missing_ok=True)
    compile_owx(sys.executable)
    assert cached.exists() and cached.stat().st_mtime >= Path(codec.__file__).stat().st_mtime
