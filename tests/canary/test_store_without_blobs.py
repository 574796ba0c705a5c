"""A network checkpoint store without a blob tier (no ``blobs=``) keeps large values in the KV for
good: what a tenant's actions in front of an OpenWhisk use, so that they share no directory."""

from __future__ import annotations

import threading
import uuid
from urllib.parse import urlencode

import numpy as np
import pytest
from ckpt_support import function_keys

from owx.canary.checkpoint import CheckpointTooLarge, open_checkpoint_store

MB = 1024 * 1024


@pytest.fixture
def url(redis_server) -> str:
    options = {"prefix": f"owx-test:{uuid.uuid4().hex[:12]}:", "keep": 2, "keep_max": 2, "history_s": 0}
    return f"{redis_server.url}?{urlencode(options)}"


@pytest.fixture
def fid() -> str:
    return f"fn-{uuid.uuid4().hex}"


def test_large_values_are_kept_in_the_kv_and_read_by_another_process_s_store(url, fid):
    weights = np.random.default_rng(3).normal(size=(1024, 1280))  # 10 MB
    with open_checkpoint_store(url) as writer:
        info = writer.save(fid, "epoch-1", {"epoch": 1, "weights": weights})
        assert writer.flush(10)
        location = writer.history(fid)[0].refs[0].location
        assert location == f"kv:stage/{fid}/{info.seq}" and not writer.segments.is_staged(location)
    with open_checkpoint_store(url) as reader:  # a replica elsewhere: nothing of it is on a disk
        restored = reader.latest(fid)
        assert restored.state == "epoch-1" and restored.values["epoch"] == 1
        np.testing.assert_array_equal(restored.values["weights"], weights)


def test_pruning_and_deleting_remove_the_segments_from_the_kv(url, fid):
    with open_checkpoint_store(url) as store:
        infos = [store.save(fid, f"s{k}", {"blob": bytes([k]) * (2 * MB)}) for k in range(5)]
        kept = [i.seq for i in infos[-2:]]
        assert store.load(fid, infos[0].seq) is None and store.latest(fid).values["blob"] == bytes([4]) * (2 * MB)
        assert function_keys(store, fid) == {f"index/{fid}", f"seq/{fid}",
                                             *(f"ckpt/{fid}/{s}" for s in kept), *(f"stage/{fid}/{s}" for s in kept)}
        store.delete(fid)
        assert function_keys(store, fid) == set() and store.latest(fid) is None


def test_concurrent_saves_of_one_function_leave_a_readable_history(url, fid):
    with open_checkpoint_store(url) as store:
        def saver(worker: int) -> None:
            for k in range(10):
                store.save(fid, f"w{worker}-{k}", {"worker": worker, "blob": bytes([worker]) * MB})

        threads = [threading.Thread(target=saver, args=(w,)) for w in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        history = store.history(fid)
        assert len(history) == 2
        for info in history:
            checkpoint = store.load(fid, info.seq)
            assert checkpoint.values["blob"] == bytes([checkpoint.values["worker"]]) * MB


def test_a_checkpoint_over_stage_max_is_refused_before_anything_is_written(redis_server, fid):
    with open_checkpoint_store(f"{redis_server.url}?prefix=owx-test:{uuid.uuid4().hex[:12]}:&stage_max=1MB") as store:
        with pytest.raises(CheckpointTooLarge, match="limit of 1048576 bytes"):
            store.save(fid, "s", {"blob": bytes(2 * MB)})
        assert function_keys(store, fid) == set()
        store.save(fid, "s", {"blob": bytes(MB // 2)})  # under it: kept
        assert store.latest(fid).values["blob"] == bytes(MB // 2)
