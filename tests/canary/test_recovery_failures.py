"""Recovery of stateful actions from real container deaths: SIGKILL, OOM kill, a lost node.

Every test runs a real gateway with two nodes (cgroup parents), real runtime processes and
the embedded SQLite checkpoint store; failures are real signals and real OOM kills.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from canary_support import (
    annotation,
    COUNTER,
    busy_containers,
    expected_total,
    kill_running,
    start_canary_gateway,
    wait_checkpoints,
)

from tests.fixtures.polling import wait_for


@pytest.fixture(scope="module")
def gw():
    gateway = start_canary_gateway(nodes=2)
    yield gateway
    gateway.stop()


@pytest.fixture()
def http(gw):
    return gw.session()


def test_sigkill_resumes_from_the_latest_checkpoint(gw, http):
    name = gw.put_action(http, canary={"checkpoint": "explicit"})
    aid = http.post(gw.api(f"actions/{name}"), json={"steps": 30, "delay": 0.05}).json()["activationId"]
    killed_at = kill_running(gw, name, aid, after_checkpoints=5)
    record = gw.wait_record(http, aid)

    assert record["response"]["success"], record
    result = record["response"]["result"]
    assert result["total"] == expected_total(30)
    assert result["resumed_at"] >= 5  # continued from a checkpoint, not from step 0
    assert annotation(record, "attempts") == 2
    assert annotation(record, "checkpointRestored") == result["resumed_at"]
    failure = annotation(record, "canary")["failures"][0]
    assert failure["reason"] == "exited"
    # detected from the death itself, not from the activation's timeout (how fast: `owx bench canary`)
    assert 0 <= failure["detectedAt"] - killed_at * 1000 <= 2000
    assert failure["replica"] is not None  # resumed on a warm replica, not a cold container
    assert annotation(record, "recoveryTime") == failure["recoveryMs"] < 5000

    # the used replica is recorded as such, and a new one replaced it
    rows = http.get(gw.api("canary/replication_info"), params={"limit": 200}).json()
    mine = [r for r in rows if r["runtime_key"].startswith(f"guest/{name}@")]
    used = [r for r in mine if r["state"] == "used"]
    assert [r["used_by"] for r in used] == [aid]
    assert any(r["created"] > used[0]["ended"] for r in mine if r["state"] != "used")
    function = http.get(gw.api(f"canary/function_info/{aid}")).json()
    assert function["state"] == "succeeded" and function["attempts"] == 2
    assert http.get(gw.api(f"canary/checkpoint_info/{aid}")).json()["latest_seq"] == 30


def test_a_second_failure_waits_for_the_replica_still_starting(gw, http):
    # the runtime takes 2 s to initialise: the replica that replaces the one the first failure
    # used is still starting when the second failure comes, 0.1 s later
    slow_init = "import time\ntime.sleep(2)\n" + COUNTER
    name = gw.put_action(http, code=slow_init, canary={"checkpoint": "explicit"})
    aid = http.post(gw.api(f"actions/{name}"), json={"steps": 30, "delay": 0.05}).json()["activationId"]
    kill_running(gw, name, aid, after_checkpoints=5)
    kill_running(gw, name, aid, after_checkpoints=7)
    record = gw.wait_record(http, aid)

    assert record["response"]["success"], record
    assert record["response"]["result"]["total"] == expected_total(30)
    first, second = annotation(record, "canary")["failures"]
    assert first["replica"] is not None
    assert second["replica"] is not None and second["replica"] != first["replica"]  # not a new container


def test_oom_killed_container_is_recovered(gw, http):
    name = gw.put_action(http, canary={"checkpoint": "explicit"}, memory=128)
    record = http.post(gw.api(f"actions/{name}"), params={"blocking": "true"},
                       json={"steps": 8, "delay": 0.02, "oom_at": 4}).json()
    assert record["response"]["success"], record
    assert record["response"]["result"]["total"] == expected_total(8)
    assert record["response"]["result"]["resumed_at"] == 4
    failure = annotation(record, "canary")["failures"][0]
    assert failure["reason"] == "oom"
    assert annotation(record, "attempts") == 2


def test_lost_node_is_recovered_on_the_other_node(gw, http):
    name = gw.put_action(http, canary={"checkpoint": "explicit", "replication": "aggressive"})
    aid = http.post(gw.api(f"actions/{name}"), json={"steps": 40, "delay": 0.05}).json()["activationId"]
    wait_for(lambda: len([r for r in http.get(gw.api("canary/replication_info"), params={"limit": 200}).json()
                            if r["runtime_key"].startswith(f"guest/{name}@") and r["state"] == "warm"]) >= 2,
               what="two replicas")
    container = wait_for(lambda: busy_containers(gw, name), what="the running function")[0]
    lost = gw.platform.node(container.node)
    try:
        wait_checkpoints(gw, aid, 1)
        lost.kill()
        record = gw.wait_record(http, aid)
        worker = http.get(gw.api(f"canary/worker_info/{container.node}")).json()
        assert worker["alive"] is False
    finally:
        lost.revive()
    assert record["response"]["success"], record
    assert record["response"]["result"]["total"] == expected_total(40)
    assert record["response"]["result"]["resumed_at"] > 0
    failure = annotation(record, "canary")["failures"][0]
    assert failure["reason"] == "node-lost" and failure["node"] == container.node
    assert failure["resumedOn"] != container.node and failure["replica"] is not None
    again = http.post(gw.api(f"actions/{name}"), params={"blocking": "true"}, json={"steps": 2, "delay": 0}).json()
    assert again["response"]["success"]
    assert http.get(gw.api(f"canary/worker_info/{container.node}")).json()["alive"] is True


def test_retry_baseline_starts_over(gw, http):
    name = gw.put_action(http, canary={"checkpoint": "explicit", "fault_tolerance": "retry"})
    aid = http.post(gw.api(f"actions/{name}"), json={"steps": 20, "delay": 0.05}).json()["activationId"]
    container = wait_for(lambda: busy_containers(gw, name), what="the running function")[0]
    time.sleep(0.4)
    os.kill(container.pid, signal.SIGKILL)
    record = gw.wait_record(http, aid)
    assert record["response"]["result"]["total"] == expected_total(20)
    assert record["response"]["result"]["resumed_at"] == 0
    assert annotation(record, "attempts") == 2 and annotation(record, "checkpointRestored") is None


def test_active_standby_takes_over_from_scratch(gw, http):
    name = gw.put_action(http, canary={"fault_tolerance": "active-standby"})
    aid = http.post(gw.api(f"actions/{name}"), json={"steps": 60, "delay": 0.05}).json()["activationId"]
    container = wait_for(lambda: busy_containers(gw, name), what="the running function")[0]
    wait_for(lambda: any(c.state == "replica" and f"/{name}@" in (c.action_key or "")
                           for c in gw.platform.containers()), what="a standby")
    os.kill(container.pid, signal.SIGKILL)
    record = gw.wait_record(http, aid)
    assert record["response"]["result"]["total"] == expected_total(60)
    assert record["response"]["result"]["resumed_at"] == 0
    failure = annotation(record, "canary")["failures"][0]
    assert failure["replica"] is not None and annotation(record, "attempts") == 2


def test_plain_actions_keep_at_most_once(gw, http):
    name = gw.put_action(http)  # no canary annotation
    aid = http.post(gw.api(f"actions/{name}"), json={"steps": 20, "delay": 0.05}).json()["activationId"]
    container = wait_for(lambda: busy_containers(gw, name), what="the running action")[0]
    time.sleep(0.2)
    os.kill(container.pid, signal.SIGKILL)
    record = gw.wait_record(http, aid)
    assert record["response"]["status"] == "action developer error"
    keys = {a["key"] for a in record["annotations"]}
    assert not keys & {"attempts", "canary", "checkpointRestored"}
    assert http.get(gw.api(f"canary/function_info/{aid}")).status_code == 404
