"""Canary over an upstream OpenWhisk: a stateful action whose upstream container is killed resumes
from its latest checkpoint, and its result is committed once; one tenant's actions reach no other
tenant's checkpoints in the store they share."""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from pathlib import Path

from owx.bench.canary.redis_server import RedisServer
from owx.bench.gateway_process import GatewayProcess
from owx.canary.checkpoint import CheckpointStore, StoreUnavailable, open_checkpoint_store
from owx.canary.redis_tenants import RedisTenants
from tests.fixtures.polling import wait_for
from tests.upstream.conftest import CHECKPOINT_BUDGET_MB, admin_create, record_of

STATEFUL = '''
import socket, time
from owx.canary.checkpoint import Checkpointer

def main(args):
    steps = args.get("steps", 40)
    with Checkpointer.from_env() as ckpt:
        state = ckpt.restore() or {"i": 0, "total": 0}
        resumed_at = state["i"]
        while state["i"] < steps:
            time.sleep(args.get("delay", 0.1))
            state["total"] += state["i"] * state["i"]
            state["i"] += 1
            state["container"] = socket.gethostname()  # the sandbox's hostname is its container id
            ckpt.save("step-%d" % state["i"], **state)
    return {"total": state["total"], "resumed_at": resumed_at, "container": socket.gethostname()}
'''


def _kill_container(name: str) -> int:
    """SIGKILL every process of the container ``name`` (found by its cgroups); how many there were. A
    cgroup that goes away while it is read (its container, or another, just ended) holds none: os.walk
    skips a directory it can no longer list, where Path.glob raised."""
    killed = 0
    groups = [Path(parent) / name for parent, children, _ in os.walk("/sys/fs/cgroup") if name in children]
    for group in groups:
        try:
            pids = (group / "cgroup.procs").read_text().split()
        except OSError:  # ENOENT once it is gone, ENODEV while it is being removed
            continue
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
                killed += 1
    return killed


def _tenant_store(redis: RedisServer, namespace: str) -> CheckpointStore:
    """``namespace``'s checkpoint store, opened as its actions open it, once owx let them in (before
    their first run)."""
    url = RedisTenants(redis.url).url_for(namespace)

    def opened() -> CheckpointStore | None:
        try:
            return open_checkpoint_store(url)
        except StoreUnavailable:
            return None

    return wait_for(opened, timeout=120, interval=0.2, what=f"owx to let {namespace}'s actions into the store")


def annotation(record: dict, key: str):
    return next((a["value"] for a in record["annotations"] if a["key"] == key), None)


def test_a_killed_upstream_container_resumes_from_its_checkpoint(wrapper: GatewayProcess, upstream: GatewayProcess,
                                                                 redis: RedisServer) -> None:
    http = wrapper.session()
    name = f"stateful-{uuid.uuid4().hex[:6]}"
    assert http.put(wrapper.api(f"actions/{name}"), json={
        "exec": {"kind": "python:3", "code": STATEFUL},
        "annotations": [{"key": "canary", "value": {"checkpoint": "explicit"}}]}).ok
    # 40 steps of 0.5 s: the kill lands mid-run even when the whole suite delays this test's polling by seconds
    activation_id = http.post(wrapper.api(f"actions/{name}"), json={"steps": 40, "delay": 0.5}).json()["activationId"]
    with _tenant_store(redis, "guest") as store:  # the default namespace's
        deadline = time.monotonic() + 180  # a loaded machine (the whole suite) may start it late
        latest = None
        while time.monotonic() < deadline and (latest is None or latest.seq < 5):
            time.sleep(0.05)
            latest = store.latest(activation_id)
        assert latest is not None and latest.seq >= 5, (
            "no checkpoints of the running function", latest,
            http.get(wrapper.api(f"activations/{activation_id}")).text[:500],
            (wrapper.data_dir / "gateway.log").read_text()[-2000:])
        killed = latest.values["container"]
        assert latest.seq < 40, f"the activation ended before the test killed it (first seen at step {latest.seq})"
    assert _kill_container(killed), (  # the stand-in OpenWhisk's container
        f"no processes of container {killed}", http.get(wrapper.api(f"activations/{activation_id}")).text[:500],
        (wrapper.data_dir / "gateway.log").read_text()[-2000:], (upstream.data_dir / "gateway.log").read_text()[-2000:])
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        answer = http.get(wrapper.api(f"activations/{activation_id}"))
        if answer.status_code == 200:
            break
        time.sleep(0.2)
    record = answer.json()
    assert record["response"]["success"], record["response"]
    result = record["response"]["result"]
    assert result["total"] == sum(i * i for i in range(40))
    assert result["resumed_at"] >= 5 and result["container"] != killed  # resumed elsewhere, not from scratch
    assert annotation(record, "attempts") == 2
    assert annotation(record, "checkpointRestored") >= 5
    failure = annotation(record, "canary")["failures"][0]
    assert failure["reason"] == "exited"
    # Canary kept the runtime warm upstream with keep-warm activations (OpenWhisk lets no client pick a container);
    # they are fired without waiting, so their records may come after the action's own on a loaded machine

    def warmed() -> bool:
        records = upstream.session().get(upstream.api("activations"), params={"docs": "true", "limit": 200}).json()
        return any(r["response"]["result"] == {"warm": True} for r in records)

    wait_for(warmed, timeout=60, what="the record of a keep-warm activation upstream")


PROBE = '''
import os
from urllib.parse import parse_qs, urlsplit

import redis
from owx.canary.checkpoint import Checkpointer


def main(args):
    url = os.environ["__OW_CANARY_STORE"]  # what Canary gave this tenant
    own = parse_qs(urlsplit(url).query)["prefix"][0]
    store = redis.Redis.from_url(url.split("?")[0], socket_timeout=5)
    victim = args["prefix"] + "index/" + args["function"]

    def attempt(*command, client=store):
        try:
            return "ok %r" % (client.execute_command(*command),)
        except Exception as exc:
            return "%s: %s" % (type(exc).__name__, exc)

    filled, refused = 0, None  # fill the store under its own prefix, one MiB after another
    while filled < args["fill_mb"] and refused is None:
        refused = attempt("SET", own + "fill/%d" % filled, os.urandom(1 << 20))
        refused, filled = (None, filled + 1) if refused.startswith("ok") else (refused, filled)
    return {
        "fill": [filled, refused],
        "own": [attempt("SET", own + "probe", "x"), attempt("GET", own + "probe")],
        "read": attempt("GET", victim), "write": attempt("SET", victim, "{}"), "delete": attempt("DEL", victim),
        "keys": attempt("KEYS", "*"), "scan": attempt("SCAN", "0"), "dbsize": attempt("DBSIZE"),
        "script": attempt("EVAL", "return redis.call('GET', KEYS[1])", 1, victim),
        "clients": attempt("CLIENT", "LIST"), "config": attempt("CONFIG", "GET", "requirepass"),
        "acl": attempt("ACL", "SETUSER", "mine", "on", ">pw", "~*", "+@all"), "flush": attempt("FLUSHALL"),
        "monitor": attempt("MONITOR"),
        "default user": attempt("PING", client=redis.Redis(host=store.connection_pool.connection_kwargs["host"],
                                                             port=store.connection_pool.connection_kwargs["port"])),
    }
'''


def test_a_tenant_s_action_reaches_only_its_own_checkpoints_within_its_budget(wrapper: GatewayProcess, redis: RedisServer) -> None:
    alice = admin_create(wrapper.data_dir, "alice")
    mallory = admin_create(wrapper.data_dir, "mallory")
    tenants = RedisTenants(redis.url)
    canary = [{"key": "canary", "value": {"checkpoint": "explicit"}}]
    name = f"stateful-{uuid.uuid4().hex[:6]}"
    assert wrapper.session(alice).put(wrapper.api(f"actions/{name}"), json={
        "exec": {"kind": "python:3", "code": STATEFUL}, "annotations": canary}).ok
    assert wrapper.session(mallory).put(wrapper.api("actions/probe"), json={
        "exec": {"kind": "python:3", "code": PROBE}, "annotations": canary}).ok
    # 60 steps of 0.5 s: her run (and its checkpoints) outlasts the probe even on a loaded machine
    running = wrapper.session(alice).post(wrapper.api(f"actions/{name}"), json={"steps": 60, "delay": 0.5})
    activation_id = running.json()["activationId"]
    with _tenant_store(redis, "alice") as store:
        wait_for(lambda: store.latest(activation_id) is not None, timeout=120, what="alice's first checkpoint")
        probed = wrapper.session(mallory).post(wrapper.api("actions/probe"), params={"blocking": "true"}, json={
            "prefix": tenants.user("alice")[2], "function": activation_id, "fill_mb": 8 * CHECKPOINT_BUDGET_MB},
            timeout=120)
        assert probed.status_code == 200, probed.text
        outcomes = probed.json()["response"]["result"]
        filled, refused = outcomes.pop("fill")  # past its budget, its writes are refused: a MiB or two late at most
        assert CHECKPOINT_BUDGET_MB - 1 <= filled <= CHECKPOINT_BUDGET_MB + 2 and "NoPermissionError" in refused, \
            (filled, refused)
        assert outcomes.pop("own") == ["NoPermissionError: this user has no permissions to run the 'set' command",
                                       "ok None"]  # it still reads its own keys: it is logged in
        assert "Authentication" in outcomes.pop("default user")
        assert all(outcome.startswith("NoPermissionError") for outcome in outcomes.values()), outcomes
        assert store.latest(activation_id) is not None  # alice's checkpoints are still there
    record = record_of(wrapper, activation_id, alice, within_s=120)
    assert record["response"]["success"], record["response"]
    assert record["response"]["result"]["total"] == sum(i * i for i in range(60))
    assert not [line for line in record["logs"] if "owx-canary-warning" in line]  # each of her saves went in
