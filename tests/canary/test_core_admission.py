"""Admission of stateful work: queued instead of 429, jobs admitted whole (gang), no deadlock.

One node with room for two 256 MB functions, and a namespace limit of three concurrent
invocations. The jobs' functions meet at a barrier (files in a directory they share: their
namespace's directory, the only place the sandboxes of one namespace share): a job that
started only part of its functions would wait there until its barrier times out.
"""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from canary_support import start_canary_gateway
from tests.fixtures.polling import wait_for

BARRIER = '''
import os, time

def main(args):
    directory, job, n = args["dir"], args["job"], args["n"]
    open(os.path.join(directory, "%s-%d" % (job, args["i"])), "w").close()
    deadline = time.time() + 10
    while len([f for f in os.listdir(directory) if f.startswith(job + "-")]) < n:
        if time.time() > deadline:
            raise RuntimeError("barrier of %s timed out: part of the job never started" % job)
        time.sleep(0.02)
    time.sleep(args.get("hold", 0.3))
    return {"job": job, "i": args["i"]}
'''
SLEEP = "import time\ndef main(args):\n    time.sleep(args.get('s', 1))\n    return {'slept': args.get('s', 1)}\n"


@pytest.fixture(scope="module")
def gw():
    gateway = start_canary_gateway(nodes=1, user_memory_mb=512, gateway={"concurrent_invocations": 3})
    yield gateway
    gateway.stop()


@pytest.fixture()
def http(gw):
    return gw.session()


@pytest.fixture()
def barrier_dir(gw):
    shared = gw.platform.namespace_dir(gw.namespace)
    directory = tempfile.mkdtemp(prefix="barrier-", dir=shared)
    os.chmod(directory, 0o2770)  # the namespace's group (inherited from its directory) writes here
    return directory


def _job(gw, http, action, directory, n, hold=0.3):
    job = uuid.uuid4().hex[:8]
    params = [{"dir": directory, "job": job, "n": n, "i": i, "hold": hold} for i in range(n)]
    response = http.post(gw.api("canary/jobs"), json={"action": action, "params": params})
    assert response.status_code == 202, response.text
    return response.json()


def _records(gw, http, ids):
    return [gw.wait_record(http, aid) for aid in ids]


def test_competing_jobs_run_whole_one_after_the_other(gw, http, barrier_dir):
    action = gw.put_action(http, BARRIER, canary=True, memory=256)
    jobs = [_job(gw, http, action, barrier_dir, 2, hold=0.5) for _ in range(2)]
    for job in jobs:
        records = _records(gw, http, job["activationIds"])
        assert all(r["response"]["success"] for r in records), [r["response"] for r in records]
    first, second = (http.get(gw.api(f"canary/job_info/{j['jobId']}")).json() for j in jobs)
    assert first["state"] == second["state"] == "done" and first["succeeded"] == second["succeeded"] == 2
    assert second["admitted"] >= first["finished"] - 50  # the second job waited for the first one's memory


def test_job_larger_than_free_memory_waits_then_runs_whole(gw, http, barrier_dir):
    long_one = gw.put_action(http, SLEEP, canary=True, memory=256)
    action = gw.put_action(http, BARRIER, canary=True, memory=256)
    running = http.post(gw.api(f"actions/{long_one}"), json={"s": 1.5}).json()["activationId"]
    wait_for(lambda: http.get(gw.api(f"canary/function_info/{running}")).json().get("state") == "running",
               what="the long function")
    job = _job(gw, http, action, barrier_dir, 2)
    time.sleep(0.5)
    queued = http.get(gw.api(f"canary/job_info/{job['jobId']}")).json()
    assert queued["state"] == "queued" and queued["admitted"] is None  # one slot free, two needed
    records = _records(gw, http, job["activationIds"])
    assert all(r["response"]["success"] for r in records)
    long_record = gw.wait_record(http, running)
    assert min(r["start"] for r in records) >= long_record["end"] - 50


def test_stateful_invocations_queue_instead_of_429(gw, http):
    action = gw.put_action(http, SLEEP, canary=True, memory=128)
    with ThreadPoolExecutor(8) as pool:
        responses = list(pool.map(lambda _: http.post(gw.api(f"actions/{action}"), json={"s": 0.4}), range(8)))
    assert [r.status_code for r in responses] == [202] * 8  # limit is 3 at once
    records = _records(gw, http, [r.json()["activationId"] for r in responses])
    assert all(r["response"]["success"] for r in records)
    spans = sorted((r["start"], r["end"]) for r in records)
    assert max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans) <= 3  # never more than the limit


def test_plain_actions_still_get_429(gw, http):
    action = gw.put_action(http, SLEEP, memory=128)
    statuses = [http.post(gw.api(f"actions/{action}"), json={"s": 1}).status_code for _ in range(4)]
    assert statuses[:3] == [202] * 3 and statuses[3] == 429


def test_bad_jobs_are_refused(gw, http):
    stateful = gw.put_action(http, SLEEP, canary=True, memory=256)
    plain = gw.put_action(http, SLEEP, memory=256)
    never = http.post(gw.api("canary/jobs"), json={"action": stateful, "params": [{}] * 3})
    assert never.status_code == 400 and "never fit" in never.json()["error"]
    assert http.post(gw.api("canary/jobs"), json={"action": plain, "params": [{}]}).status_code == 400
    assert http.post(gw.api("canary/jobs"), json={"action": stateful, "params": []}).status_code == 400
    assert http.post(gw.api("canary/jobs"), json={"action": stateful}).status_code == 400
    assert http.post(gw.api("canary/jobs"), json={"action": "missing", "params": [{}]}).status_code == 404
    # each activation's parameters within an invoke's payload limit (1 MB), as an invoke's body is
    large = http.post(gw.api("canary/jobs"), json={"action": stateful, "params": [{}, {"x": "y" * (3 << 20)}]})
    assert large.status_code == 413 and large.json()["error"].startswith("Request larger than allowed"), large.text


def test_request_replication_copies_that_could_never_run_at_once_are_a_400():
    """Each copy holds its memory at once: copies that no node set could hold together were held past
    the nodes' budget (8 x 512 MB on a 2 GB node), at every other tenant's cost. Refused when stored."""
    gw = start_canary_gateway(nodes=1, user_memory_mb=1024)
    try:
        http = gw.session()

        def put(copies: int):
            body = {"exec": {"kind": "python:3", "code": "def main(a):\n    return a\n"}, "limits": {"memory": 512},
                    "annotations": [{"key": "canary", "value": {"fault_tolerance": "request-replication",
                                                                "copies": copies}}]}
            return http.put(gw.api(f"actions/rr-{uuid.uuid4().hex[:6]}"), json=body)

        assert put(2).status_code == 200
        refused = put(3)
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"] == ("3 copies of 512 MB (request-replication) can never run at once in the "
                                           "platform's memory.")
    finally:
        gw.stop()


def test_a_job_over_the_rate_is_refused_before_any_of_it_is_journalled():
    """Its activations were journalled, then the rate refused the job (429): the client was told no,
    yet the next start would have recorded each of them as failed (the gateway died)."""
    gw = start_canary_gateway(nodes=1, user_memory_mb=1024, gateway={"invocations_per_minute": 3})
    try:
        http = gw.session()
        stateful = gw.put_action(http, SLEEP, canary=True, memory=128)
        refused = http.post(gw.api("canary/jobs"), json={"action": stateful, "params": [{"s": 0}] * 4})
        assert refused.status_code == 429, refused.text
        assert gw.service.activations.unfinished() == []
        assert http.get(gw.api("canary/job_info")).json() == []
    finally:
        gw.stop()
