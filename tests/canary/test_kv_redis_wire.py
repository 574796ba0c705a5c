"""The Redis KV tier's own wire paths for large values (a SET sent from the chunks, a GET read
straight into a buffer), against a real redis-server, RESP2 and RESP3."""

from __future__ import annotations

import uuid

import pytest
import redis

from owx.canary.checkpoint.errors import StoreUnavailable
from owx.canary.checkpoint.kv_redis import RedisKV


PREFIX = f"owx-test-wire:{uuid.uuid4().hex[:8]}:"


@pytest.fixture(params=[2, 3])
def kv(redis_server, request):
    store = RedisKV(f"{redis_server.url}?protocol={request.param}", f"{PREFIX}{request.param}:", 5.0)
    yield store
    store.close()


def test_a_large_value_written_in_chunks_reads_back_whole_and_writable(kv):
    chunks = [b"head", memoryview(bytes(range(256)) * 20_000), bytearray(b"\r\n$-1\r\n tail")]
    kv.put_chunks("segment", chunks)
    value = kv.get_buffer("segment")
    assert value == b"".join(chunks) and isinstance(value, bytearray)
    assert kv.get("segment") == value  # the client library reads what the raw SET wrote


def test_a_missing_key_is_none_and_an_error_reply_leaves_the_connection_usable(kv, redis_server, request):
    assert kv.get_buffer("never-written") is None
    kv.put_chunks("empty", [b""])
    assert kv.get_buffer("empty") == b""
    redis.Redis.from_url(redis_server.url).rpush(f"{PREFIX}{request.node.callspec.params['kv']}:a-list", 1)
    with pytest.raises(StoreUnavailable, match="WRONGTYPE"):
        kv.get_buffer("a-list")
    kv.put_chunks("after", [b"fine"])
    assert kv.get_buffer("after") == b"fine"
