"""Nothing answered for is lost: a gateway killed under load, a gateway stopped with work in flight,
and blocking waits that never hold the threads other requests need."""

from __future__ import annotations

import subprocess
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import requests

from owx.bench.gateway_process import GatewayProcess, start_gateway_process
from owx.common.cgroups import Cgroup
from owx.gateway.pipeline.records import GATEWAY_DIED, GATEWAY_STOPPED

SLEEPER = "import time\ndef main(args):\n    time.sleep(args.get('s', 0.2))\n    return {'slept': args.get('s', 0.2)}\n"


def create(gateway: GatewayProcess, name: str) -> None:
    answer = gateway.session().put(gateway.api(f"actions/{name}"), json={"exec": {"kind": "python:3", "code": SLEEPER}})
    assert answer.ok, answer.text


def record(gateway: GatewayProcess, activation_id: str, timeout_s: float = 30) -> dict:
    http, deadline = gateway.session(), time.monotonic() + timeout_s
    while (answer := http.get(gateway.api(f"activations/{activation_id}"))).status_code == 404:
        assert time.monotonic() < deadline, f"activation {activation_id} was never recorded"
        time.sleep(0.1)
    return answer.json()


def test_a_gateway_killed_under_load_loses_no_activation_it_answered_for(tmp_path) -> None:
    gateway = start_gateway_process(tmp_path / "killed", env={"OWX_GATEWAY__INVOCATIONS_PER_MINUTE": "100000"})
    name = f"load-{uuid.uuid4().hex[:6]}"
    create(gateway, name)
    answers: list[tuple[int, str]] = []
    lock, stop = threading.Lock(), threading.Event()

    def client(blocking: bool) -> None:
        http = gateway.session()
        while not stop.is_set():
            try:
                response = http.post(gateway.api(f"actions/{name}"), params={"blocking": str(blocking).lower()},
                                     json={"s": 0.3}, timeout=30)
            except requests.ConnectionError:
                return  # the gateway is gone: this request was never answered
            with lock:
                answers.append((response.status_code, response.headers["x-openwhisk-activation-id"]))

    with ThreadPoolExecutor(6) as pool:
        for i in range(6):
            pool.submit(client, i % 2 == 0)
        time.sleep(3)
        node = Cgroup(f"{gateway.env['OWX_PLATFORM__CGROUP_ROOT']}/node0")
        left = {group.name for group in node.children()}
        gateway.kill()  # SIGKILL: no goodbye
        stop.set()
    assert {status for status, _ in answers} >= {200, 202}
    assert left
    gateway.restart()
    try:
        assert not left & {group.name for group in node.children()}  # the new process reaped the old containers
        failed = 0
        for status, activation_id in answers:
            found = record(gateway, activation_id)
            if status == 200:
                assert found["response"]["success"], found["response"]
            elif not found["response"]["success"]:
                assert found["response"]["result"]["error"] == GATEWAY_DIED
                failed += 1
        assert failed > 0  # some 202s were still running when it died: recorded as failed, not 404 forever
    finally:
        gateway.stop()


def test_a_blocking_invoke_cut_off_by_a_killed_gateway_is_recorded_as_failed(tmp_path) -> None:
    """Its caller never learnt the activation's id (no answer came), yet the action started: the next
    start records it, so listing the action's activations shows what happened. Its record ends when
    the gateway was last known alive (its log has a one-second heartbeat), not when the next one
    started (here 5 s later)."""
    gateway = start_gateway_process(tmp_path / "cut-off")
    name = f"cut-{uuid.uuid4().hex[:6]}"
    create(gateway, name)
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(gateway.session().post, gateway.api(f"actions/{name}"), params={"blocking": "true"},
                              json={"s": 30}, timeout=60)
        time.sleep(3.0)  # running: a blocking caller waits far longer than a few loop turns, and heartbeats pass
        gateway.kill()
        killed_ms = time.time() * 1000
        try:
            waiting.result(30)
            raise AssertionError("the blocking invoke was answered by a killed gateway")
        except requests.ConnectionError:
            pass
    time.sleep(5.0)
    gateway.restart()
    try:
        listed = gateway.session().get(gateway.api("activations"), params={"name": name, "docs": "true"}).json()
        assert len(listed) == 1, listed
        assert listed[0]["response"]["result"]["error"] == GATEWAY_DIED
        assert killed_ms - 2500 <= listed[0]["end"] <= killed_ms + 100, (listed[0]["end"] - killed_ms)
        assert listed[0]["duration"] == listed[0]["end"] - listed[0]["start"]
    finally:
        gateway.stop()


def test_a_composition_cut_off_by_a_killed_gateway_is_recorded_as_the_sequence_it_is(tmp_path) -> None:
    gateway = start_gateway_process(tmp_path / "composition")
    sleeper, conductor = f"sleeper-{uuid.uuid4().hex[:6]}", f"conductor-{uuid.uuid4().hex[:6]}"
    create(gateway, sleeper)
    steps = f"def main(args):\n    return {{'action': '{sleeper}', 'params': {{'s': 30}}}} if 'slept' not in args else {{}}\n"
    assert gateway.session().put(gateway.api(f"actions/{conductor}"), json={
        "exec": {"kind": "python:3", "code": steps}, "annotations": [{"key": "conductor", "value": True}]}).ok
    accepted = gateway.session().post(gateway.api(f"actions/{conductor}"))
    assert accepted.status_code == 202, accepted.text
    time.sleep(2.0)  # the conductor ran, its component sleeps
    gateway.kill()
    gateway.restart()
    try:
        found = record(gateway, accepted.json()["activationId"])
        assert found["response"]["result"]["error"] == GATEWAY_DIED
        assert {"key": "kind", "value": "sequence"} in found["annotations"], found["annotations"]
    finally:
        gateway.stop()


def test_sigterm_stops_within_ten_seconds_and_records_what_was_unfinished(tmp_path) -> None:
    gateway = start_gateway_process(tmp_path / "stopped", env={"OWX_GATEWAY__WORKERS": "2"})
    name = f"long-{uuid.uuid4().hex[:6]}"
    create(gateway, name)
    http = gateway.session()
    ids = [http.post(gateway.api(f"actions/{name}"), json={"s": 60}).json()["activationId"] for _ in range(4)]
    time.sleep(1.0)  # two run (a namespace gets at most half of two workers: one), the rest queue
    started = time.monotonic()
    gateway.process.terminate()
    try:
        gateway.process.wait(10)
    except subprocess.TimeoutExpired:
        gateway.kill()
        raise AssertionError("the gateway did not stop within 10 s of SIGTERM")
    assert time.monotonic() - started < 10
    stopping = (gateway.data_dir / "gateway.log").read_text()
    assert "Traceback" not in stopping, stopping[-3000:]  # what waited for a slot is not run, nor failed, again
    gateway.restart()
    try:
        for activation_id in ids:
            found = record(gateway, activation_id)
            assert not found["response"]["success"]
            assert found["response"]["result"]["error"] == GATEWAY_STOPPED
    finally:
        gateway.stop()


def test_blocking_invokes_of_one_tenant_do_not_hold_the_threads_others_need(tmp_path) -> None:
    gateway = start_gateway_process(tmp_path / "threads", env={"OWX_GATEWAY__HTTP_THREADS": "2",
                                                               "OWX_PLATFORM__USER_MEMORY_MB": "4096"})
    try:
        name = f"slow-{uuid.uuid4().hex[:6]}"
        create(gateway, name)
        created = subprocess.run(["owx", "admin", "--data-dir", str(gateway.data_dir), "user", "create", "other"],
                                 capture_output=True, text=True, timeout=60)
        assert created.returncode == 0, created.stderr
        other = requests.Session()
        other.auth = tuple(created.stdout.strip().split(":", 1))
        with ThreadPoolExecutor(12) as pool:
            waits = [pool.submit(gateway.session().post, gateway.api(f"actions/{name}"),
                                 params={"blocking": "true"}, json={"s": 4}) for _ in range(12)]
            time.sleep(1.0)  # twelve blocking waits are pending on a server of two threads
            asked = time.monotonic()
            listing = other.get(gateway.api("actions"), timeout=30)
            answered = time.monotonic() - asked
            assert listing.status_code == 200 and answered < 2.0, answered  # not after the 4 s sleeps
            assert all(w.result().status_code == 200 for w in waits)
    finally:
        gateway.stop()


def test_a_stateful_function_cut_off_by_a_killed_gateway_ends_failed_in_canarys_tables(tmp_path) -> None:
    """The next start records it as failed, and Canary's tables say the same: its function row and its
    job's count end, where they stayed 'running' for good."""
    gateway = start_gateway_process(tmp_path / "stateful")
    http = gateway.session()
    name = f"stateful-{uuid.uuid4().hex[:6]}"
    assert http.put(gateway.api(f"actions/{name}"), json={"exec": {"kind": "python:3", "code": SLEEPER},
                                                           "annotations": [{"key": "canary", "value": True}]}).ok
    aid = http.post(gateway.api(f"actions/{name}"), json={"s": 30}).json()["activationId"]
    deadline = time.monotonic() + 30
    while http.get(gateway.api(f"canary/function_info/{aid}")).json().get("state") != "running":
        assert time.monotonic() < deadline, "the function never ran"
        time.sleep(0.1)
    gateway.kill()
    gateway.restart()
    try:
        assert record(gateway, aid)["response"]["result"]["error"] == GATEWAY_DIED
        http = gateway.session()
        function = http.get(gateway.api(f"canary/function_info/{aid}")).json()
        job = http.get(gateway.api(f"canary/job_info/{function['job_id']}")).json()
        assert function["state"] == "failed" and function["ended"] is not None, function
        assert (job["state"], job["failed"]) == ("done", 1), job
    finally:
        gateway.stop()
