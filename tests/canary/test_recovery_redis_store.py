"""Recovery with the checkpoint store in a real redis-server, configured without a blob
directory: each namespace's blobs go to its own directory, which its sandboxed actions can
write (they flush their large values there themselves). With a password, owx logs in with it and
the actions with their namespace's own Redis user."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
import redis
from canary_support import annotation, kill_running, start_canary_gateway

from owx.bench.canary.redis_server import RedisServer
from owx.canary.redis_tenants import RedisTenants

# Explicit checkpoints holding a 1 MiB array (beyond the KV's inline limit: a segment that is
# staged in Redis, then flushed to the blob tier by the action's own store).
LARGE_STATE = '''
import time
import numpy as np
from owx.canary.checkpoint import Checkpointer

def main(args):
    with Checkpointer.from_env() as ckpt:
        state = ckpt.restore() or {"i": 0, "data": np.zeros(2**18, np.float32)}
        resumed_at = state["i"]
        while state["i"] < args["steps"]:
            time.sleep(0.05)
            state["data"] = state["data"] + 1
            state["i"] += 1
            ckpt.save("step-%d" % state["i"], **state)
    return {"resumed_at": resumed_at, "sum": float(state["data"].sum()), "warnings": ckpt.warnings}
'''


@pytest.fixture(scope="module", params=["shared", "a user per namespace"])
def gw(request, redis_server, tmp_path_factory):
    protected = None
    if request.param == "a user per namespace":
        protected = RedisServer(Path(tmp_path_factory.mktemp("redis")), password=secrets.token_hex(16))
    gateway = start_canary_gateway(nodes=2, canary={"store_url": (protected or redis_server).url})
    yield gateway
    gateway.stop()
    if protected is not None:
        protected.stop()


def test_a_killed_action_resumes_from_its_large_checkpoint_in_redis(gw, caplog):
    http = gw.session()
    name = gw.put_action(http, code=LARGE_STATE, canary={"checkpoint": "explicit"}, memory=256)
    aid = http.post(gw.api(f"actions/{name}"), json={"steps": 30}).json()["activationId"]
    kill_running(gw, name, aid, after_checkpoints=5)
    record = gw.wait_record(http, aid)

    assert record["response"]["success"], record
    result = record["response"]["result"]
    assert result["warnings"] == []  # the store opened and flushed inside the sandbox
    assert result["resumed_at"] >= 5
    assert result["sum"] == 30.0 * 2**18
    assert annotation(record, "attempts") == 2
    unready = [r.getMessage() for r in caplog.records if "is not ready" in r.getMessage()]
    assert not unready, unready  # the namespace's user is defined before its store's worker logs in
    # the gateway's store worker read the checkpoint it resumed from (under /root, an interpreter's
    # packages are root's alone: the worker imports the Redis client before it drops root)
    assert annotation(record, "canary")["failures"][0]["checkpointSeq"] >= 5


def test_a_namespaces_user_is_defined_once_for_many_quick_runs(gw):
    """Each attempt let the namespace into the store with an ACL SETUSER (a round trip and a write of
    Redis' users); within ``GRANT_EVERY_S`` one definition serves every run."""
    url = gw.service.settings.canary.store_url
    admin = redis.Redis.from_url(url)

    def definitions() -> int:
        return admin.info("commandstats").get("cmdstat_acl|setuser", {}).get("calls", 0)

    http = gw.session()
    name = gw.put_action(http, code=LARGE_STATE, canary={"checkpoint": "explicit"}, memory=256)
    before = definitions()
    for _ in range(6):
        record = http.post(gw.api(f"actions/{name}"), params={"blocking": "true"}, json={"steps": 1}).json()
        assert record["response"]["success"], record
    assert definitions() - before <= (2 if RedisTenants.isolates(url) else 0)  # a shared store has no users
