"""The activation workers: a namespace's share is capped, others are not delayed behind it, and work
held back by the cap runs as soon as the share frees (no wake-up is lost)."""

from __future__ import annotations

import threading
import time

from owx.gateway.pipeline.workers import FairWorkers


def test_work_held_back_by_the_share_runs_when_the_share_frees() -> None:
    workers = FairWorkers(4, "t-share", per_key=1)
    release = threading.Event()
    first = workers.submit("a", release.wait)
    held = [workers.submit("a", lambda i=i: i) for i in range(5)]
    time.sleep(0.2)
    assert not any(f.done() for f in held)  # a's share (1) is taken
    other = workers.submit("b", lambda: "b")
    assert other.result(5) == "b"  # another namespace is not behind a's backlog
    release.set()
    assert first.result(5) is True
    assert [f.result(5) for f in held] == list(range(5))  # a's queue, in order, once its share freed
    workers.shutdown(5)


def test_no_namespace_exceeds_its_share_of_the_threads() -> None:
    workers = FairWorkers(3, "t-turns", per_key=2)
    running: dict[str, int] = {"a": 0, "b": 0}
    most: dict[str, int] = {"a": 0, "b": 0}
    lock = threading.Lock()

    def job(key: str) -> None:
        with lock:
            running[key] += 1
            most[key] = max(most[key], running[key])
        time.sleep(0.02)
        with lock:
            running[key] -= 1

    futures = [workers.submit(key, lambda key=key: job(key)) for _ in range(20) for key in ("a", "a", "b")]
    for future in futures:
        future.result(30)
    assert most["a"] == 2 and most["b"] <= 2  # a had work for all three threads
    workers.shutdown(5)


def test_shutdown_waits_for_running_work_and_cancels_the_rest() -> None:
    workers = FairWorkers(1, "t-stop")
    running = workers.submit("a", lambda: time.sleep(0.3) or "done")
    queued = workers.submit("a", lambda: "never")
    time.sleep(0.05)
    started = time.monotonic()
    workers.shutdown(5)
    assert running.result(0) == "done" and queued.cancelled()
    assert time.monotonic() - started < 2  # woken when the last running work ended, not at the 5 s limit
