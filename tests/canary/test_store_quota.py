"""A namespace's byte budget in the shared Redis checkpoint store: a tenant that fills it loses its
writes, the others keep theirs (a real redis-server with a password and a user per namespace)."""

from __future__ import annotations

import secrets
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
import redis

from owx.bench.canary.redis_server import RedisServer
from owx.canary.checkpoint import StoreUnavailable, open_checkpoint_store
from owx.canary.redis_tenants import RedisTenants
from owx.canary.store_quota import KEY_OVERHEAD, StoreQuota

MiB = 1024 * 1024
BUDGET = 4 * MiB
CLIENTS = 32 * MiB  # what all clients may hold unwritten together
CUT_WITHIN_S = 1.0
OVERSHOOT = 2 * MiB  # values written before the cut, by a client that waits for each answer: one, on a quiet machine  # a cut follows a notification: milliseconds; the bound leaves room for a loaded machine


@pytest.fixture
def tenants(password_redis: RedisServer) -> Iterator[RedisTenants]:
    made = RedisTenants(f"{password_redis.url}?prefix=owx-quota:{uuid.uuid4().hex[:8]}:")
    for namespace in ("alice", "mallory"):
        made.ensure(namespace)
    yield made
    made.close()


@pytest.fixture
def quota(tenants: RedisTenants) -> Iterator[StoreQuota]:
    counting = StoreQuota(tenants, BUDGET, CLIENTS)
    assert counting.wait_counted(10)
    yield counting
    counting.close()


def client(tenants: RedisTenants, namespace: str) -> tuple[redis.Redis, str]:
    """A tenant's own connection, logged in as its user, and its key prefix."""
    return redis.Redis.from_url(tenants.url_for(namespace).split("?")[0]), tenants.user(namespace)[2]


def eventually(condition: Callable[[], bool], within_s: float) -> float:
    """Seconds until ``condition`` held; fails after ``within_s``."""
    start = time.monotonic()
    while not condition():
        assert time.monotonic() - start < within_s, f"not within {within_s} s"
        time.sleep(0.005)
    return time.monotonic() - start


def fill(connection: redis.Redis, prefix: str, values: int) -> int:
    """Send ``values`` values of one MiB at once (pipelined); how many were written before a cut."""
    with connection.pipeline(transaction=False) as pipeline:
        for index in range(values):
            pipeline.set(f"{prefix}fill/{index}", secrets.token_bytes(MiB))
        return sum(answer is True for answer in pipeline.execute(raise_on_error=False))


def writes(connection: redis.Redis, key: str) -> bool:
    try:
        connection.set(key, b"x")
        return True
    except redis.exceptions.NoPermissionError:
        return False


def test_a_namespace_past_its_budget_loses_its_writes_and_no_one_else_does(tenants: RedisTenants,
                                                                           quota: StoreQuota):
    mallory, mine = client(tenants, "mallory")
    alice, hers = client(tenants, "alice")
    written = 0
    try:
        while written < 4 * BUDGET:  # what a tenant filling the store does, one MiB value after another
            mallory.set(f"{mine}fill/{written}", secrets.token_bytes(MiB))
            written += MiB
    except redis.exceptions.NoPermissionError:
        pass
    eventually(lambda: not writes(mallory, f"{mine}more"), CUT_WITHIN_S)
    assert BUDGET < quota.usage("mallory") <= BUDGET + OVERSHOOT
    with pytest.raises(redis.exceptions.NoPermissionError):
        mallory.incrby(f"{mine}counter", 1)
    assert mallory.get(f"{mine}fill/0") is not None  # it still reads its own
    with open_checkpoint_store(tenants.url_for("alice")) as store:  # the others save as before
        store.save("train", "epoch-1", {"weights": secrets.token_bytes(2 * MiB)})
        assert store.latest("train").state == "epoch-1"
    assert writes(alice, f"{hers}after")
    tenants.ensure("mallory")  # its next attempt's grant keeps the cut
    assert not writes(mallory, f"{mine}more")


def test_a_transaction_queuing_more_than_the_clients_bound_is_closed_and_writes_nothing(
        tenants: RedisTenants, quota: StoreQuota, password_redis: RedisServer):
    """Values a MULTI queues are no key until EXEC writes them all at once: the count would see them
    only then, past the budget by all of them; the bound on clients' memory closes the client first."""
    mallory, mine = client(tenants, "mallory")
    admin = redis.Redis.from_url(password_redis.url)
    with pytest.raises(redis.exceptions.ConnectionError):
        with mallory.pipeline(transaction=True) as transaction:
            for index in range(16):  # 128 MiB, queued
                transaction.set(f"{mine}queued/{index}", secrets.token_bytes(8 * MiB))
            transaction.execute()
    assert admin.exists(*(f"{mine}queued/{index}" for index in range(16))) == 0
    assert admin.info("memory")["used_memory"] < CLIENTS + 16 * MiB
    alice, hers = client(tenants, "alice")
    assert writes(alice, f"{hers}after")  # the others' clients are not the ones closed


def test_writes_come_back_once_deletions_bring_the_namespace_under_its_budget(tenants: RedisTenants,
                                                                             quota: StoreQuota):
    mallory, mine = client(tenants, "mallory")
    assert fill(mallory, mine, 5) >= 4  # over the budget
    eventually(lambda: not writes(mallory, f"{mine}more"), CUT_WITHIN_S)
    mallory.delete(*(f"{mine}fill/{index}" for index in range(3)))
    eventually(lambda: writes(mallory, f"{mine}more"), CUT_WITHIN_S)
    assert quota.usage("mallory") < BUDGET


def test_a_failed_save_past_the_budget_is_the_store_s_error_and_loses_nothing_saved(tenants: RedisTenants,
                                                                                   quota: StoreQuota):
    with open_checkpoint_store(tenants.url_for("mallory")) as store:
        store.save("f", "first", {"k": 1})
        mallory, mine = client(tenants, "mallory")
        fill(mallory, mine, 5)
        eventually(lambda: not writes(mallory, f"{mine}more"), CUT_WITHIN_S)
        with pytest.raises(StoreUnavailable, match="more than its budget"):
            store.save("f", "second", {"k": 2})
        assert store.latest("f").values == {"k": 1}


def test_keys_already_in_the_store_count_at_start(tenants: RedisTenants):
    mallory, mine = client(tenants, "mallory")
    assert fill(mallory, mine, 5) == 5  # no count runs yet
    alice, hers = client(tenants, "alice")
    alice.set(f"{hers}small", b"x" * 100)
    counting = StoreQuota(tenants, BUDGET, CLIENTS)
    try:
        assert counting.wait_counted(10)
        assert counting.usage("mallory") >= 5 * MiB
        assert counting.usage("alice") == KEY_OVERHEAD + len(f"{hers}small") + 100
        assert not writes(mallory, f"{mine}more")
        assert writes(alice, f"{hers}more")
    finally:
        counting.close()


def test_without_notifications_the_budget_is_kept_at_each_count(password_redis: RedisServer):
    """A Redis that refuses owx ``CONFIG`` (as managed ones do): the count runs every ``rescan_s``."""
    password = secrets.token_hex(16)
    redis.Redis.from_url(password_redis.url).execute_command("ACL", "SETUSER", "owx-no-config", "reset", "on",
                                                     f">{password}", "~*", "&*", "+@all", "-config")
    url = password_redis.url.replace(f":{password_redis.password}@", f"owx-no-config:{password}@")
    tenants = RedisTenants(f"{url}?prefix=owx-quota:{uuid.uuid4().hex[:8]}:")
    tenants.ensure("mallory")
    counting = StoreQuota(tenants, BUDGET, CLIENTS, rescan_s=0.2)
    try:
        assert counting.wait_counted(10)
        mallory, mine = client(tenants, "mallory")
        fill(mallory, mine, 5)
        eventually(lambda: not writes(mallory, f"{mine}more"), 0.2 + CUT_WITHIN_S)
    finally:
        counting.close()
        tenants.close()
