"""An activation owx accepted waits while the upstream refuses it without running it (throttled: 429,
away: unreachable), sending it again for ``upstream.retry_s``, instead of failing at once. With
``retry_s`` 0 (the control) the same refusals are failed activations. Tenants sharing owx's key take
turns: one tenant's flood of refused activations takes no more of what the upstream frees than
another tenant's single one."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from owx.bench.gateway_process import GatewayProcess, start_gateway_process
from owx.platform.openwhisk.retry_turns import RetryTurns
from tests.upstream.conftest import (
    ECHO,
    UPSTREAM_AUTH,
    UPSTREAM_CONCURRENCY,
    admin_create,
    record_of,
    slow_burst,
)

BURST = 6  # non-blocking invokes sent at once: the upstream refuses all but UPSTREAM_CONCURRENCY
FLOOD = 24  # one tenant's slow invokes, sent over a second: 12 s of the upstream's two slots
FAIR_S = 6.5  # the other tenant's one invoke, taking turns with the flood: in within the first five or six freed pairs


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
    for front in (patient, impatient):  # deployed upstream while it is there
        assert front.session().put(front.api(f"actions/{name}"), json={"exec": {"kind": "python:3", "code": ECHO}}).ok
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


def test_a_tenant_s_flood_takes_no_more_of_the_freed_slots_than_another_s_one_activation(
        patient: GatewayProcess) -> None:
    alice = admin_create(patient.data_dir, "alice-floods")
    http = patient.session()
    echo = f"echo-{uuid.uuid4().hex[:6]}"
    assert http.put(patient.api(f"actions/{echo}"), json={"exec": {"kind": "python:3", "code": ECHO}}).ok
    assert http.post(patient.api(f"actions/{echo}"), params={"blocking": "true"}).status_code == 200  # warm
    # sent over a second, as a steady flood comes: her waiting activations go again at scattered moments,
    # not all at the same ones (which would leave the moments between them to the other tenant)
    flood = slow_burst(patient, FLOOD, alice, spread_s=1.0, deployed=True)
    time.sleep(0.3)  # two of alice's hold the upstream's slots for owx's key; her others are refused
    started = time.monotonic()
    answer = http.post(patient.api(f"actions/{echo}"), params={"blocking": "true", "result": "true"}, json={"n": 7})
    took = time.monotonic() - started
    assert answer.status_code == 200 and answer.json() == {"n": 7}, answer.text
    print("TOOK", round(took, 2))
    print("TOOK", round(took, 2))
    assert took < FAIR_S, f"the other tenant's invoke waited {took:.2f} s behind alice's flood"
    records = [record_of(patient, activation_id, alice, within_s=180) for activation_id in flood]
    assert [r["response"]["status"] for r in records] == ["success"] * FLOOD  # hers all ran in turn


def test_each_tenant_s_waiting_activations_take_an_equal_share_of_the_turns() -> None:
    turns = RetryTurns(poll_s=0.1)
    deadline = time.monotonic() + 60
    for _ in range(4):
        turns.join("key", "alice")
    alone = [turns.wait_s("key", "alice", deadline) for _ in range(4)]
    assert alone[0] < 0.1 / 4 * 1.5 and alone[-1] < 0.1 * 1.5  # alone: each of hers goes again after poll_s
    for _ in range(18):
        turns.join("key", "alice")
    turns.join("key", "bob")
    bob = [turns.wait_s("key", "bob", deadline) for _ in range(3)]  # 22 of alice's and bob's one wait
    gaps = [later - earlier for earlier, later in zip(bob, bob[1:])]
    assert all(0.1 * 2 / 23 * 0.9 < gap < 0.1 * 2 / 23 * 1.5 for gap in gaps), gaps  # half the turns are bob's
    turns.join("other key", "alice")
    assert turns.wait_s("other key", "alice", deadline) < 0.15  # another upstream namespace: its own turns
    soon = time.monotonic() + 0.05
    assert turns.wait_s("key", "alice", soon) <= 0.05  # her next turn is after its deadline: a last try then
    assert turns.wait_s("key", "alice", time.monotonic() - 0.001) is None  # its deadline passed: refused
    turns.leave("key", "bob")
    alice = [turns.wait_s("key", "alice", deadline) for _ in range(3)]
    gaps = [later - earlier for earlier, later in zip(alice, alice[1:])]
    assert all(0.1 / 22 * 0.9 < gap < 0.1 / 22 * 1.5 for gap in gaps), gaps  # bob gone: all turns are hers
