"""An activation owx accepted waits while the upstream refuses it without running it (throttled: 429,
away: unreachable), sending it again for ``upstream.retry_s``, instead of failing at once. With
``retry_s`` 0 (the control) the same refusals are failed activations."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from owx.bench.gateway_process import GatewayProcess, start_gateway_process
from tests.upstream.conftest import UPSTREAM_AUTH, UPSTREAM_CONCURRENCY, record_of, slow_burst

BURST = 6  # non-blocking invokes sent at once: the upstream refuses all but UPSTREAM_CONCURRENCY


def _front(workdir: Path, upstream: GatewayProcess, retry_s: float) -> GatewayProcess:
    return start_gateway_process(workdir / f"front-{retry_s:g}",
                                 args=["--upstream", upstream.url, "--upstream-auth", UPSTREAM_AUTH, "--no-extensions"],
                                 env={"OWX_UPSTREAM__RETRY_S": str(retry_s)})


@pytest.fixture(scope="module")
def patient(workdir: Path, narrow_upstream: GatewayProcess) -> Iterator[GatewayProcess]:
    process = _front(workdir, narrow_upstream, 60)
    yield process
    process.stop()


@pytest.fixture(scope="module")
def impatient(workdir: Path, narrow_upstream: GatewayProcess) -> Iterator[GatewayProcess]:
    process = _front(workdir, narrow_upstream, 0)
    yield process
    process.stop()


def _burst_records(front: GatewayProcess) -> list[dict]:
    """Send ``BURST`` non-blocking invokes of a new slow action at once; their records, once stored."""
    return [record_of(front, activation_id) for activation_id in slow_burst(front, BURST)]


def test_activations_the_upstream_throttles_wait_for_it_and_all_run(patient: GatewayProcess) -> None:
    records = _burst_records(patient)
    assert [r["response"]["status"] for r in records] == ["success"] * BURST, [r["response"] for r in records]
    assert sorted(r["response"]["result"]["n"] for r in records) == list(range(BURST))
    # two at a time upstream, a second each: the last ones waited about two seconds, counted as their wait
    waits = sorted(next(a["value"] for a in r["annotations"] if a["key"] == "waitTime") for r in records)
    assert waits[-1] >= 1500, waits


def test_without_retries_the_upstreams_throttling_fails_them(impatient: GatewayProcess) -> None:
    records = _burst_records(impatient)
    failed = [r["response"] for r in records if not r["response"]["success"]]
    assert len(failed) >= BURST - UPSTREAM_CONCURRENCY - 1, [r["response"] for r in records]  # one may slip in late
    assert all(f["status"] == "whisk internal error" and "concurrent" in f["result"]["error"].lower()
               for f in failed), failed


def test_an_upstream_that_is_away_for_a_moment_is_waited_for(narrow_upstream: GatewayProcess,
                                                             patient: GatewayProcess,
                                                             impatient: GatewayProcess) -> None:
    name = f"echo-{uuid.uuid4().hex[:6]}"
    code = "def main(args):\n    return {'n': args.get('n')}\n"
    for front in (patient, impatient):  # deployed upstream while it is there
        assert front.session().put(front.api(f"actions/{name}"), json={"exec": {"kind": "python:3", "code": code}}).ok
        assert front.session().post(front.api(f"actions/{name}"), params={"blocking": "true"}).status_code == 200
    narrow_upstream.stop(timeout_s=5)
    try:
        refused = impatient.session().post(impatient.api(f"actions/{name}"), params={"blocking": "true"})
        assert refused.status_code == 503 and "unreachable" in refused.json()["response"]["result"]["error"]
        answers: dict[str, object] = {}
        blocking = threading.Thread(target=lambda: answers.update(blocking=patient.session().post(
            patient.api(f"actions/{name}"), params={"blocking": "true"}, json={"n": 1}, timeout=120)))
        blocking.start()
        queued = patient.session().post(patient.api(f"actions/{name}"), json={"n": 2})
        assert queued.status_code == 202
        time.sleep(2.0)
        assert blocking.is_alive()  # still waiting for the upstream, not failed
    finally:
        narrow_upstream.restart()
    blocking.join(timeout=90)
    answer = answers["blocking"]
    assert answer.status_code == 200 and answer.json()["response"]["result"] == {"n": 1}, answer.text  # type: ignore[attr-defined]
    assert record_of(patient, queued.json()["activationId"])["response"]["result"] == {"n": 2}
