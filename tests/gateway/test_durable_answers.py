"""A blocking invoke answers only once its record is committed, and no worker thread waits for
that commit: a slow database holds answers back, never the activations of other callers; an
answer that waits too long for the database is a 503, and the activation is still recorded."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import pytest

from tests.fixtures.polling import wait_for
from tests.gateway.conftest import RunningGateway, start_gateway

CODE = "def main(args):\n    return {'n': args.get('n', 0)}\n"
WORKERS = 2
STORE_WAIT_S = 2.0


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory) -> Iterator[RunningGateway]:
    server, running = start_gateway(tmp_path_factory.mktemp("durable"), gateway={"workers": WORKERS,
                                                                                        "store_wait_s": STORE_WAIT_S})
    http = running.session()
    assert http.put(running.api("actions/echo?overwrite=true"), json={"exec": {"kind": "python:3", "code": CODE}}).ok
    assert http.post(running.api("actions/echo?blocking=true"), json={"n": 0}).status_code == 200  # warm
    yield running
    server.stop()


@contextmanager
def commits_held(gateway: RunningGateway) -> Iterator[None]:
    """The activation store's writer stops before each commit until the block ends (a database
    that has stalled)."""
    writer = gateway.service.activations._writer  # type: ignore[attr-defined]
    commit, release = writer._commit, threading.Event()

    def held(rows):
        release.wait()
        commit(rows)

    writer._commit = held
    try:
        yield
    finally:
        release.set()
        writer._commit = commit


def test_a_blocking_invoke_answers_only_once_its_record_is_committed(two_workers: RunningGateway) -> None:
    http = two_workers.session()
    with ThreadPoolExecutor(1) as pool:
        with commits_held(two_workers):
            answer = pool.submit(http.post, two_workers.api("actions/echo?blocking=true"), json={"n": 7}, timeout=60)
            time.sleep(1.5)
            assert not answer.done(), "answered before its record was committed"
        reply = answer.result(30)
    assert reply.status_code == 200, reply.text
    record = http.get(two_workers.api(f"activations/{reply.json()['activationId']}")).json()
    assert record["response"]["result"] == {"n": 7}


def test_workers_are_free_while_records_wait_for_the_database(two_workers: RunningGateway) -> None:
    """Three times as many blocking invokes as workers all run while no commit gets through."""
    sessions = [two_workers.session() for _ in range(3 * WORKERS)]
    invoker = two_workers.service.invoker
    writer = two_workers.service.activations._writer  # type: ignore[attr-defined]
    with ThreadPoolExecutor(len(sessions)) as pool:
        with commits_held(two_workers):
            answers = [pool.submit(s.post, two_workers.api("actions/echo?blocking=true"), json={"n": i}, timeout=60)
                       for i, s in enumerate(sessions)]
            deadline = time.monotonic() + 20
            while not (len(writer._records) == len(sessions) and invoker.load() == (0, 0)):  # all ran, none committed
                assert time.monotonic() < deadline, (
                    f"{len(writer._records)} records queued, workers (running, queued) {invoker.load()}")
                time.sleep(0.05)
            assert not any(a.done() for a in answers)
        replies = [a.result(30) for a in answers]
    assert [r.status_code for r in replies] == [200] * len(sessions)
    assert sorted(r.json()["response"]["result"]["n"] for r in replies) == list(range(len(sessions)))


def test_an_invoke_the_database_does_not_take_in_time_answers_503_and_is_recorded_later(
        two_workers: RunningGateway) -> None:
    http = two_workers.session()
    with commits_held(two_workers):
        started = time.monotonic()
        reply = http.post(two_workers.api("actions/echo"), json={"n": 9}, timeout=STORE_WAIT_S + 10)
        waited = time.monotonic() - started
    assert reply.status_code == 503, reply.text
    assert STORE_WAIT_S <= waited < STORE_WAIT_S + 5
    body = reply.json()
    activation_id = reply.headers["x-openwhisk-activation-id"]
    assert set(body) == {"error", "code"} and activation_id in body["error"]
    wait_for(lambda: http.get(two_workers.api(f"activations/{activation_id}")).status_code != 404, timeout=30,
             what="the activation to be recorded", interval=0.1)
    two_workers.service.activations._writer.flush(30)  # type: ignore[attr-defined]
    stored = http.get(two_workers.api(f"activations/{activation_id}"))  # from the database: nothing is queued
    assert stored.json()["response"]["result"] == {"n": 9}
