"""The core module's state and contracts on a three-node gateway: tables over HTTP and the SDK,
annotation validation, replica placement, replication factors, exactly-once commits."""

from __future__ import annotations

import json
import threading
import uuid

import pytest
import requests
from canary_support import COUNTER, annotation, expected_total, start_canary_gateway
from tests.fixtures.polling import wait_for

from owx.canary.commits import Commit, ResultLedger
from owx.canary.replication import decide, placement, required_replicas
from owx.canary.sdk import CanaryClient, stateful
from owx.gateway.sdk import Client


@pytest.fixture(scope="module")
def gw():
    gateway = start_canary_gateway(nodes=3)
    yield gateway
    gateway.stop()


@pytest.fixture()
def http(gw):
    return gw.session()


@pytest.fixture()
def client(gw):
    sdk = Client(gw.url, gw.auth)
    yield sdk
    sdk.close()


@pytest.mark.parametrize("value, message", [
    ({"replication": "sometimes"}, "replication"),
    ({"interval_s": -1}, "interval_s"),
    ({"interval_s": "1"}, "interval_s"),  # each option in its own JSON type: nothing is coerced
    ({"fault_tolerance": "request-replication", "copies": 2.0}, "copies"),
    ({"checkpoint": "explicit", "colour": "red"}, "colour"),
    ("yes", "must be true or an object"),
    ({"fault_tolerance": "request-replication", "copies": 1}, "copies"),
])
def test_malformed_annotation_is_a_400_and_nothing_is_stored(gw, http, value, message):
    name = f"bad-{uuid.uuid4().hex[:8]}"
    body = {"exec": {"kind": "python:3", "code": COUNTER}, "annotations": [{"key": "canary", "value": value}]}
    response = http.put(gw.api(f"actions/{name}"), json=body)
    assert response.status_code == 400 and message in response.json()["error"]
    assert http.get(gw.api(f"actions/{name}")).status_code == 404


def test_sequences_cannot_be_stateful(gw, http):
    component = gw.put_action(http, canary=True)
    body = {"exec": {"kind": "sequence", "components": [f"/guest/{component}"]},
            "annotations": [{"key": "canary", "value": True}]}
    response = http.put(gw.api(f"actions/seq-{uuid.uuid4().hex[:6]}"), json=body)
    assert response.status_code == 400 and "sequence" in response.json()["error"]


def test_the_annotation_is_checked_whatever_the_content_type_and_on_an_update(gw, http):
    """The action as it would be stored is checked: a form content type (curl's default) or an update
    that adds the annotation to a stored sequence gets the same 400, and nothing changes."""
    name = f"form-{uuid.uuid4().hex[:8]}"
    body = {"exec": {"kind": "python:3", "code": COUNTER}, "annotations": [{"key": "canary", "value": "garbage"}]}
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    response = http.put(gw.api(f"actions/{name}"), data=json.dumps(body), headers=form)
    assert response.status_code == 400 and "must be true or an object" in response.json()["error"]
    assert http.get(gw.api(f"actions/{name}")).status_code == 404
    sequence = f"seq-{uuid.uuid4().hex[:6]}"
    component = gw.put_action(http)
    created = http.put(gw.api(f"actions/{sequence}"),
                       json={"exec": {"kind": "sequence", "components": [f"/guest/{component}"]}})
    assert created.status_code == 200
    update = http.put(gw.api(f"actions/{sequence}"), params={"overwrite": "true"},
                      json={"annotations": [{"key": "canary", "value": True}]})
    assert update.status_code == 400 and "sequence" in update.json()["error"]
    assert http.get(gw.api(f"actions/{sequence}")).json()["annotations"] == created.json()["annotations"]


def test_who_may_put_the_action_is_answered_before_its_annotation(gw, http):
    """401 without a key and 403 in another namespace, as for any other malformed body."""
    body = {"exec": {"kind": "python:3", "code": COUNTER}, "annotations": [{"key": "canary", "value": "garbage"}]}
    assert requests.put(gw.api("actions/anonymous"), json=body).status_code == 401
    elsewhere = f"{gw.url}/api/v1/namespaces/somebody-else/actions/theirs"
    answer = http.put(elsewhere, json=body)
    assert answer.status_code == 403 and answer.headers["X-Request-ID"] == answer.json()["code"]


def test_tables_over_http_and_sdk(gw, http, client):
    name = gw.put_action(http, canary={"checkpoint": "explicit", "replication": "lenient"})
    record = http.post(gw.api(f"actions/{name}"), params={"blocking": "true"}, json={"steps": 5, "delay": 0}).json()
    aid = record["activationId"]
    overview = http.get(gw.api("canary")).json()
    assert set(overview["tables"]) == {"worker_info", "job_info", "function_info", "checkpoint_info",
                                       "replication_info"}
    workers = http.get(gw.api("canary/worker_info")).json()
    assert sorted(w["worker_id"] for w in workers) == ["node0", "node1", "node2"]
    assert not [value for w in workers for value in w.values() if "/" in str(value)]  # no path of the host
    function = http.get(gw.api(f"canary/function_info/{aid}")).json()
    assert function["state"] == "succeeded" and function["job_id"] == aid and function["worker"] in {
        "node0", "node1", "node2"}
    job = http.get(gw.api(f"canary/job_info/{aid}")).json()
    assert job["replication"] == "lenient" and job["state"] == "done" and job["function_ids"] == [aid]
    checkpoints = http.get(gw.api(f"canary/checkpoint_info/{aid}")).json()
    assert checkpoints["latest_seq"] == 5 and checkpoints["latest_state"] == "step-5"
    assert http.get(gw.api("canary/no_such_table")).status_code == 404
    assert http.get(gw.api("canary/function_info/nope")).status_code == 404
    for refused in ("%00", "x" * 1100):  # ids the store refuses: a 400, not a 500
        assert http.get(gw.api(f"canary/checkpoint_info/{refused}")).status_code == 400

    canary = CanaryClient(client)
    assert canary.row("function_info", aid) == function
    assert {r["function_id"] for r in canary.rows("function_info", limit=200)} >= {aid}
    assert canary.overview()["stats"]["commits"] >= 1


def test_stateful_decorator_runs_a_job(gw, client):
    @stateful(client=client, name=f"sq-{uuid.uuid4().hex[:8]}", checkpoint="explicit", memory=128)
    def squares(n):
        from owx.canary.checkpoint import Checkpointer
        with Checkpointer.from_env() as ckpt:
            state = ckpt.restore() or {"i": 0, "acc": 0}
            while state["i"] < n:
                state["acc"] += state["i"] ** 2
                state["i"] += 1
                ckpt.save("i", **state)
        return state["acc"]

    assert squares.invoke(4) == expected_total(4)
    assert squares.job([{"n": n} for n in (3, 5, 7)]) == [expected_total(n) for n in (3, 5, 7)]
    jobs = CanaryClient(client).rows("job_info", limit=200)
    assert any(j["functions"] == 3 and j["action"].endswith(squares.name) and j["state"] == "done" for j in jobs)
    with pytest.raises(ValueError):
        stateful(replication="never")(lambda: 0)


def test_replicas_start_on_a_function_node_then_spread(gw, http):
    name = gw.put_action(http, canary={"checkpoint": "explicit", "replication": "aggressive"})
    job = http.post(gw.api("canary/jobs"), json={"action": name, "params": [{"steps": 40, "delay": 0.05}] * 2}).json()

    def replicas():
        rows = http.get(gw.api("canary/replication_info"), params={"limit": 200}).json()
        return sorted((r for r in rows if r["runtime_key"].startswith(f"guest/{name}@")), key=lambda r: r["created"])

    rows = wait_for(lambda: len(replicas()) >= 2 and replicas(), what="two replicas")
    workers = {http.get(gw.api(f"canary/function_info/{aid}")).json()["worker"] for aid in job["activationIds"]}
    assert len(workers) == 2  # the job's functions are spread over two nodes
    assert {rows[0]["worker"], rows[1]["worker"]} & workers and rows[0]["worker"] != rows[1]["worker"]
    for aid in job["activationIds"]:
        assert gw.wait_record(http, aid)["response"]["success"]


def test_replication_factors_of_the_strategies():
    assert [required_replicas("lenient", n, 0.5) for n in (1, 4, 16)] == [1, 1, 1]
    assert [required_replicas("aggressive", n, 0.0) for n in (1, 4, 16)] == [2, 2, 8]
    assert [required_replicas("dynamic", 16, f) for f in (0.0, 0.05, 0.15, 0.5)] == [1, 2, 5, 8]
    assert required_replicas("dynamic", 0, 0.5) == 0
    grow = decide("dynamic", active=4, scheduled=4, replicas=1, failure_rate=0.25)
    assert grow.required == 4 and grow.launch == 3 and grow.current_factor < grow.new_factor
    enough = decide("lenient", active=4, scheduled=1, replicas=1, failure_rate=0.5)
    assert enough.launch == 0
    second = decide("dynamic", active=1, scheduled=1, replicas=1, failure_rate=0.5)  # 2 required, 1 there
    assert second.required == 2 and second.launch == 1
    assert placement(3, ["node1"], ["node0", "node1", "node2"], []) == ["node1", "node0", "node2"]
    assert placement(1, ["node1"], ["node0", "node1"], ["node1"]) == ["node0"]


def test_request_replication_commits_one_result_and_discards_the_other(gw, http):
    name = gw.put_action(http, canary={"fault_tolerance": "request-replication", "copies": 2})
    before = http.get(gw.api("canary")).json()["stats"]["duplicates_discarded"]
    record = http.post(gw.api(f"actions/{name}"), params={"blocking": "true"}, json={"steps": 10, "delay": 0.02}).json()
    assert record["response"]["result"]["total"] == expected_total(10)
    wait_for(lambda: http.get(gw.api("canary")).json()["stats"]["duplicates_discarded"] == before + 1,
               what="the second copy's result to be discarded")
    records = http.get(gw.api("activations"), params={"name": name, "limit": 200}).json()
    assert [r["activationId"] for r in records] == [record["activationId"]]
    assert annotation(record, "canary")["faultTolerance"] == "request-replication"


def test_concurrent_commits_of_one_activation_have_one_winner(gw):
    ledger = ResultLedger(gw.service.entities)
    aid = uuid.uuid4().hex
    wins: list[bool] = []
    start = threading.Barrier(12)

    def commit(attempt: int) -> None:
        start.wait()
        wins.append(ledger.commit("guest", Commit(aid, attempt, "success", f"c{attempt}", 0)))

    threads = [threading.Thread(target=commit, args=(i,)) for i in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(wins) == [False] * 11 + [True]
    assert ledger.committed("guest", aid).container == f"c{ledger.committed('guest', aid).attempt}"


def test_a_stateful_action_is_held_to_the_gateways_result_limit_not_a_default():
    """Canary runs its functions with the gateway's ``max_payload_bytes``: with 3 MB allowed, a 2 MB
    result is kept whole, and a 4 MB one is cut at 3 MB."""
    gateway = start_canary_gateway(gateway={"max_payload_bytes": 3 * 1024 * 1024})
    try:
        http = gateway.session()
        code = "def main(args):\n    return {'x': 'y' * args['mb'] * 1024 * 1024}\n"
        name = gateway.put_action(http, code=code, canary=True)
        kept = http.post(gateway.api(f"actions/{name}"), params={"blocking": "true"}, json={"mb": 2}).json()
        assert kept["response"]["success"] and len(kept["response"]["result"]["x"]) == 2 * 1024 * 1024
        cut = http.post(gateway.api(f"actions/{name}"), params={"blocking": "true"}, json={"mb": 4}).json()
        sent = 4 * 1024 * 1024 + len('{"x": ""}')  # as the runtime sent it
        assert cut["response"]["result"]["error"].startswith(
            f"The action produced a response that exceeded the allowed length: {sent} > {3 * 1024 * 1024} bytes.")
    finally:
        gateway.stop()


def test_a_function_recorded_unfinished_is_counted_once_in_its_job_if_it_ends_after(gw, http):
    """A stopping gateway records what still runs as unfinished and tells Canary, which ends the rows
    as failed; the function may still end on its own before the process does: the job counts it once,
    as its first end (the record's first write wins too)."""
    name = gw.put_action(http, canary={"checkpoint": "explicit"})
    aid = http.post(gw.api(f"actions/{name}"), json={"steps": 20, "delay": 0.05}).json()["activationId"]
    wait_for(lambda: http.get(gw.api(f"canary/function_info/{aid}")).json().get("state") == "running", 30,
             "the function never ran")
    gw.core.unfinished(gw.namespace, aid)
    assert gw.wait_record(http, aid)["response"]["success"]  # recorded once it ended: its rows' end came first
    job = http.get(gw.api(f"canary/job_info/{aid}")).json()
    assert (job["state"], job["failed"], job["succeeded"]) == ("done", 1, 0), job
    assert http.get(gw.api(f"canary/function_info/{aid}")).json()["state"] == "failed"
