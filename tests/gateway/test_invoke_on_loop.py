"""A warm invoke never leaves the gateway's event loop: admission, the run on its warm container and
the record all happen on the loop's thread; what must read the store (a caller or an action not seen
lately) does so on one of the server's threads, never on the loop."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any

from tests.gateway.conftest import RunningGateway

LOOP_THREAD = "owx-loop"  # the gateway's event loop (owx.gateway.service.Gateway.open)


def _threads_of(calls: list[str], function: Callable[..., Any]) -> Callable[..., Any]:
    """``function``, noting the thread of every call in ``calls``."""
    def noted(*args: Any, **kwargs: Any) -> Any:
        calls.append(threading.current_thread().name)
        return function(*args, **kwargs)
    return noted


def test_cache_misses_read_the_store_on_a_thread_and_warm_invokes_run_on_the_loop(gateway: RunningGateway,
                                                                                monkeypatch) -> None:
    tenant = gateway.tenant(f"loop-{uuid.uuid4().hex[:6]}")  # its key is in no cache yet
    http = tenant.session()
    name = f"echo-{uuid.uuid4().hex[:6]}"
    code = "def main(args):\n    return {'n': args.get('n', 0) + 1}\n"
    assert http.put(tenant.api(f"actions/{name}"), json={"exec": {"kind": "python:3", "code": code}}).ok
    service = gateway.service
    store_reads: list[str] = []
    admissions: list[str] = []
    platform_runs: list[str] = []
    warm_runs: list[str] = []
    monkeypatch.setattr(service.auth.store, "get", _threads_of(store_reads, service.auth.store.get))
    monkeypatch.setattr(service.catalog.store, "get", _threads_of(store_reads, service.catalog.store.get))
    monkeypatch.setattr(service.invoker, "admit", _threads_of(admissions, service.invoker.admit))
    monkeypatch.setattr(service.platform, "run", _threads_of(platform_runs, service.platform.run))
    monkeypatch.setattr(service.platform, "run_warm", _threads_of(warm_runs, service.platform.run_warm))
    service.auth._cache.clear()  # the PUT above cached the key: the first invoke must look it up again
    answers = [http.post(tenant.api(f"actions/{name}"), params={"blocking": "true", "result": "true"}, json={"n": n})
               for n in range(3)]
    assert [(a.status_code, a.json()) for a in answers] == [(200, {"n": 1}), (200, {"n": 2}), (200, {"n": 3})]
    assert store_reads and LOOP_THREAD not in store_reads  # the cold caller and action were read on a thread
    assert admissions == [LOOP_THREAD] * 3
    assert len(platform_runs) == 1 and platform_runs[0] != LOOP_THREAD  # the cold start, on a worker thread
    assert warm_runs == [LOOP_THREAD] * 3  # asked each time; the two warm ones ran from the loop
    code_v2 = code.replace("+ 1", "+ 2")  # a new revision: the action is no longer cached, the caller still is
    assert http.put(tenant.api(f"actions/{name}"), params={"overwrite": "true"},
                    json={"exec": {"kind": "python:3", "code": code_v2}}).ok
    store_reads.clear()
    answer = http.post(tenant.api(f"actions/{name}"), params={"blocking": "true", "result": "true"}, json={"n": 0})
    assert (answer.status_code, answer.json()) == (200, {"n": 2})
    assert store_reads and LOOP_THREAD not in store_reads
    stranger = http.post(tenant.api(f"actions/{name}"), auth=(str(uuid.uuid4()), "k" * 64))
    assert stranger.status_code == 401 and LOOP_THREAD not in store_reads
