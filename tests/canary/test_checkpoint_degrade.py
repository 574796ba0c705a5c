"""An unreachable or failing store: the action runs on without checkpoints, warns, and
nothing already checkpointed is lost."""

from __future__ import annotations

import io
import time
import uuid
from pathlib import Path

import pytest
from ckpt_support import RedisServer, free_port, function_keys, seg, segment_files

from owx.canary.checkpoint import (
    ENV_FUNCTION_ID,
    ENV_STORE,
    WARNING_PREFIX,
    Checkpointer,
    open_checkpoint_store,
)
from owx.canary.checkpoint.files import function_dir


@pytest.fixture
def private_redis(tmp_path: Path):
    server = RedisServer(tmp_path / "redis").start()
    yield server
    server.stop()


def env_for(url: str) -> dict[str, str]:
    return {ENV_FUNCTION_ID: f"fn-{uuid.uuid4().hex}", ENV_STORE: url}


def test_unreachable_redis_degrades_to_running_without_checkpoints(tmp_path):
    stderr = io.StringIO()
    env = env_for(f"redis://127.0.0.1:{free_port()}/0?blobs={tmp_path}&timeout=0.3")
    started = time.monotonic()
    with Checkpointer.from_env(env, stderr=stderr) as ckpt:
        assert not ckpt.enabled
        assert ckpt.restore() is None
        total = 0
        for i in range(10):
            total += i
            assert ckpt.save(f"step-{i}", total=total) is None
    assert total == 45 and time.monotonic() - started < 2
    [warning] = ckpt.warnings
    assert warning.startswith("checkpoints disabled, running without them: cannot open the store: redis checkpoint store")
    assert stderr.getvalue() == WARNING_PREFIX + warning + "\n"


def test_redis_going_away_mid_run_skips_saves_and_resumes_when_it_returns(private_redis, tmp_path):
    env = env_for(f"{private_redis.url}?blobs={tmp_path}/blobs&timeout=0.3")
    with Checkpointer.from_env(env, stderr=io.StringIO()) as ckpt:
        ckpt.retry_s = 0.2
        ckpt.save("before", x=1, blob=b"a" * 500_000)
        ckpt.store.flush(5)
        private_redis.stop()  # saves its data and goes away
        assert ckpt.save("during", x=2) is None
        assert ckpt.save("during-2", x=3) is None and ckpt.skipped == 2
        assert len(ckpt.warnings) == 1 and "checkpoint 'during' not saved" in ckpt.warnings[0]
        private_redis.start()
        with open_checkpoint_store(env[ENV_STORE]) as store:
            latest = store.latest(env[ENV_FUNCTION_ID])
            assert latest.state == "before" and latest.values == {"x": 1, "blob": b"a" * 500_000}
        time.sleep(0.25)
        assert ckpt.save("after", x=4).state == "after"
        assert "reachable again" in ckpt.warnings[-1]
    with open_checkpoint_store(env[ENV_STORE]) as store:
        assert store.latest(env[ENV_FUNCTION_ID]).values == {"x": 4}


def test_a_store_lost_before_restore_keeps_existing_checkpoints_from_being_superseded(private_redis, tmp_path):
    env = env_for(f"{private_redis.url}?blobs={tmp_path}/blobs&timeout=0.3")
    with Checkpointer.from_env(env, stderr=io.StringIO()) as first:
        first.save("epoch-40", epoch=40)
    with Checkpointer.from_env(env, stderr=io.StringIO()) as second:
        private_redis.stop()
        assert second.restore() is None  # start fresh...
        assert not second.enabled and "checkpoints disabled" in second.warnings[0]
        private_redis.start()
        assert second.save("epoch-1", epoch=1) is None  # ...without overwriting epoch 40
    with open_checkpoint_store(env[ENV_STORE]) as store:
        assert store.latest(env[ENV_FUNCTION_ID]).values == {"epoch": 40}


def test_redis_refusing_writes_mid_save_keeps_the_previous_checkpoint(private_redis, tmp_path):
    import redis

    env = env_for(f"{private_redis.url}?blobs={tmp_path}/blobs&timeout=1&keep=2&history_s=0")
    fid = env[ENV_FUNCTION_ID]
    admin = redis.Redis.from_url(private_redis.url)
    with Checkpointer.from_env(env, stderr=io.StringIO()) as ckpt:
        ckpt.retry_s = 0
        ckpt.save("good", blob=b"g" * 400_000)
        ckpt.store.flush(5)
        used = admin.info("memory")["used_memory"]
        admin.config_set("maxmemory-policy", "noeviction")
        admin.config_set("maxmemory", used + 1_000_000)  # room for small writes, not for 3 MB
        assert ckpt.save("too-much", blob=b"t" * 3_000_000) is None
        assert "used memory > 'maxmemory'" in ckpt.warnings[0]
        with open_checkpoint_store(env[ENV_STORE]) as store:
            assert store.latest(fid).values == {"blob": b"g" * 400_000}
        admin.config_set("maxmemory", 0)
        assert_later_saves_leave_no_leftovers(ckpt, fid)


def test_a_failing_spool_mid_save_keeps_the_previous_checkpoint(tmp_path):
    env = env_for(f"sqlite:///{tmp_path}/c.db?keep=2&history_s=0")
    fid = env[ENV_FUNCTION_ID]
    with Checkpointer.from_env(env, stderr=io.StringIO()) as ckpt:
        ckpt.retry_s = 0
        ckpt.save("good", blob=b"g" * 400_000)
        ckpt.store.flush(5)
        spool_dir = ckpt.store.segments.spool.root / function_dir(fid)
        spool_dir.rmdir()
        spool_dir.write_text("in the way")  # the spool can no longer be written
        assert ckpt.save("lost", blob=b"l" * 400_000) is None
        assert "cannot write checkpoint segment" in ckpt.warnings[0]
        assert ckpt.restore() == {"blob": b"g" * 400_000}
        spool_dir.unlink()
        assert_later_saves_leave_no_leftovers(ckpt, fid)


def assert_later_saves_leave_no_leftovers(ckpt, fid):
    """After the fault clears, new saves work and only the kept checkpoints' data remains."""
    for k in range(3):
        assert ckpt.save(f"later-{k}", blob=bytes([k]) * 400_000) is not None
    ckpt.store.flush(5)
    store = ckpt.store
    kept = [info.seq for info in store.history(fid)]
    assert segment_files(store, fid) == {"blob": {seg(s) for s in kept}, "spool": set()}
    assert function_keys(store, fid) == {f"index/{fid}", f"seq/{fid}", *(f"ckpt/{fid}/{s}" for s in kept)}
