"""One Redis store, many tenants: each namespace's URL logs in as a user that reaches that namespace's
checkpoints only and runs only the checkpoint client's commands (a real redis-server with a password)."""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import redis

from owx.bench.canary.redis_server import RedisServer
from owx.canary.checkpoint import StoreUnavailable, open_checkpoint_store
from owx.canary.redis_tenants import RedisTenants
from owx.canary.store_worker import StoreWorker


@pytest.fixture
def tenants(password_redis: RedisServer) -> Iterator[RedisTenants]:
    made = RedisTenants(f"{password_redis.url}?prefix=owx-test:{uuid.uuid4().hex[:8]}:")
    yield made
    made.close()


def client_of(url: str) -> redis.Redis:
    return redis.Redis.from_url(url.split("?")[0])


def test_each_namespace_reads_its_own_checkpoints_and_no_other_s(tenants: RedisTenants):
    for namespace in ("alice", "bob"):
        tenants.ensure(namespace)
    weights = np.random.default_rng(0).normal(size=(1024, 1280))  # 10 MB: kept in Redis, no blob directory
    with open_checkpoint_store(tenants.url_for("alice")) as alice:
        alice.save("train", "epoch-1", {"weights": weights, "epoch": 1})
    with open_checkpoint_store(tenants.url_for("bob")) as bob:
        assert bob.latest("train") is None  # the same function ID is another key under bob's prefix
        bob.save("train", "epoch-7", {"epoch": 7})
    mallory = client_of(tenants.url_for("bob"))
    victim = f"{tenants.user('alice')[2]}index/train"
    for command in (("GET", victim), ("SET", victim, "{}"), ("DEL", victim), ("KEYS", "*"), ("SCAN", "0"),
                    ("EVAL", "return redis.call('GET', KEYS[1])", 1, victim), ("CONFIG", "GET", "requirepass"),
                    ("CLIENT", "LIST"), ("ACL", "SETUSER", "mine", "on", ">pw", "~*", "+@all"), ("FLUSHALL",),
                    ("MONITOR",)):
        with pytest.raises(redis.exceptions.NoPermissionError):
            mallory.execute_command(*command)
    with open_checkpoint_store(tenants.url_for("alice")) as alice:
        restored = alice.latest("train")
        assert restored.state == "epoch-1"
        np.testing.assert_array_equal(restored.values["weights"], weights)


def test_users_come_back_after_the_store_forgot_them(tenants: RedisTenants, password_redis: RedisServer):
    tenants.ensure("alice")
    name, _, _ = tenants.user("alice")
    redis.Redis.from_url(password_redis.url).execute_command("ACL", "DELUSER", name)  # what a restarted Redis knows
    with pytest.raises(StoreUnavailable):
        open_checkpoint_store(tenants.url_for("alice"))
    tenants.ensure("alice")  # before the namespace's next run
    with open_checkpoint_store(tenants.url_for("alice")) as alice:
        alice.save("f", "s", {"k": 1})
        assert alice.latest("f").values == {"k": 1}


def test_every_gateway_with_the_store_s_url_derives_the_same_users(password_redis: RedisServer):
    first, second = RedisTenants(password_redis.url), RedisTenants(password_redis.url)
    namespace = "team a@example.com"  # characters an OpenWhisk namespace may hold
    assert first.url_for(namespace) == second.url_for(namespace)
    assert first.user(namespace) != first.user("team b@example.com")
    other = RedisTenants(password_redis.url.replace(password_redis.password, "another-password"))
    assert other.user(namespace)[1] != first.user(namespace)[1]  # passwords come from owx's own
    second.ensure(namespace)
    with open_checkpoint_store(first.url_for(namespace)) as store:
        store.save("f", "s", {"k": 2})
    for made in (first, second, other):
        made.close()


def test_a_user_the_store_refuses_to_make_is_logged_not_raised(password_redis: RedisServer, caplog):
    wrong = RedisTenants(password_redis.url.replace(password_redis.password, "not-the-password"))
    with caplog.at_level(logging.WARNING):
        wrong.ensure("alice")
    assert "cannot define the user of namespace 'alice'" in caplog.text
    assert "not-the-password" not in caplog.text
    wrong.close()


def test_a_store_without_a_password_has_no_tenant_users():
    assert not RedisTenants.isolates("redis://127.0.0.1:6379/0")
    assert not RedisTenants.isolates("ignite://127.0.0.1:10800")
    assert RedisTenants.isolates("redis://:pw@127.0.0.1:6379/0") and RedisTenants.isolates("rediss://owx:pw@h:1/0")


def test_the_store_worker_takes_the_namespaces_login_out_of_sight_of_ps(tenants: RedisTenants, tmp_path: Path):
    """The gateway reads a namespace's checkpoints through a worker with the namespace's rights: its
    login goes in the worker's environment, which only its own uid and root read, not in its command
    line, which every process of the host reads."""
    uid = gid = 61_111
    directory = tmp_path / "namespace"
    directory.mkdir()
    os.chown(directory, 0, gid)
    directory.chmod(0o2770)
    tenants.ensure("alice")
    worker = StoreWorker(tenants.url_for("alice"), directory, directory / "canary", (uid, gid))
    try:
        assert worker.history("f") == []
        password = tenants.user("alice")[1].encode()
        workers = [line for line in map(_read, Path("/proc").glob("[0-9]*/cmdline")) if b"owx.canary.store_worker" in line]
        assert workers and not any(password in line for line in workers)
    finally:
        worker.close()


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:  # the process ended
        return b""
