"""The CheckpointStore contract, run against every backend (sqlite, redis, and ignite
when OWX_TEST_IGNITE is set)."""

from __future__ import annotations

import threading
import tracemalloc
import uuid

import numpy as np
import pytest
from ckpt_support import function_keys, seg, segment_files

from owx.canary.checkpoint import (
    CheckpointTooLarge,
    InvalidCheckpoint,
    open_checkpoint_store,
)
from owx.canary.checkpoint.model import Index, IndexEntry

KB = 1024
MB = 1024 * KB


@pytest.fixture
def fid() -> str:
    return f"fn-{uuid.uuid4().hex}"


def big(k: int, size: int = 600 * KB) -> bytes:
    return bytes([k % 256]) * size


def test_save_then_latest_returns_every_value(open_store, fid):
    store = open_store()
    assert store.latest(fid) is None
    weights = np.random.default_rng(1).normal(size=(256, 512))
    values = {"epoch": 3, "loss": [0.5, 0.25], "weights": weights, "raw": big(7), "buf": bytearray(b"abc"), "meta": {"lr": 0.1}}
    info = store.save(fid, "epoch-3", values)
    restored = store.latest(fid)
    assert restored is not None and restored.seq == info.seq and restored.state == "epoch-3"
    assert list(restored.values) == list(values)  # saved order
    assert restored.values["epoch"] == 3 and restored.values["loss"] == [0.5, 0.25] and restored.values["meta"] == {"lr": 0.1}
    assert restored.values["raw"] == big(7) and restored.values["buf"] == bytearray(b"abc")
    np.testing.assert_array_equal(restored.values["weights"], weights)
    restored.values["weights"][0, 0] = 42.0  # restored arrays are writable
    assert restored.info.timestamp == info.timestamp and restored.info.size == info.size


def test_latest_is_the_newest_save_and_older_ones_stay_loadable(open_store, fid):
    store = open_store(keep=3, history_s=0)
    infos = [store.save(fid, f"step-{k}", {"k": k, "blob": big(k)}) for k in range(3)]
    assert store.latest(fid).values["k"] == 2
    assert [i.seq for i in store.history(fid)] == [i.seq for i in reversed(infos)]
    assert store.load(fid, infos[0].seq).values["blob"] == big(0)


def test_only_the_latest_n_are_kept_and_pruned_ones_lose_their_blobs(open_store, fid):
    store = open_store(keep=3, keep_max=3, history_s=0)
    infos = [store.save(fid, f"step-{k}", {"k": k, "blob": big(k)}) for k in range(7)]
    assert store.flush(10)
    kept = [i.seq for i in infos[-3:]]
    assert [i.seq for i in store.history(fid)] == kept[::-1]
    assert store.load(fid, infos[0].seq) is None
    assert segment_files(store, fid) == {"blob": {seg(s) for s in kept}, "spool": set()}
    assert function_keys(store, fid) == {f"index/{fid}", f"seq/{fid}", *(f"ckpt/{fid}/{s}" for s in kept)}


def test_frequent_small_checkpoints_keep_more_and_large_ones_fewer(open_store, fid):
    frequent = open_store(keep=3, keep_max=8, history_s=3600)
    for k in range(12):
        frequent.save(fid, f"s{k}", {"k": k})
    assert len(frequent.history(fid)) == 8
    large = open_store(keep=3, history_s=0, budget=1 * MB, inline_max=1 * KB)
    other = fid + "-large"
    for k in range(5):
        large.save(other, f"s{k}", {"blob": big(k, 400 * KB)})
    assert len(large.history(other)) == 2  # 1 MB budget / 400 KB checkpoints


def test_values_over_the_kv_limit_go_to_the_blob_tier(open_store, fid):
    store = open_store(inline_max=64 * KB, record_max=100 * KB)
    values = {"small": 1, "mid1": big(1, 60 * KB), "mid2": big(2, 60 * KB), "large": big(3, 200 * KB)}
    info = store.save(fid, "s", values)
    assert set(info.inline) == {"small", "mid1"}  # mid2 would push the record over record_max
    assert {r.name for r in info.refs} == {"mid2", "large"}
    assert store.flush(10)
    [flushed] = store.history(fid)
    assert {r.location for r in flushed.refs} == {f"blob:{flushed.refs[0].location.split(':', 1)[1]}"}
    assert all(r.location.endswith(seg(info.seq)) for r in flushed.refs)
    assert segment_files(store, fid)["blob"] == {seg(info.seq)}
    assert store.latest(fid).values == values


def test_latest_right_after_save_is_always_complete(open_store, fid):
    store = open_store(keep=3, history_s=0)
    for k in range(25):
        store.save(fid, f"s{k}", {"k": k, "blob": big(k, 300 * KB)})
        latest = store.latest(fid)
        assert latest.values["k"] == k and latest.values["blob"] == big(k, 300 * KB)
    assert store.flush(10)


def test_a_store_opened_later_sees_the_checkpoints(store_url, fid):
    url = store_url()
    with open_checkpoint_store(url) as first:
        first.save(fid, "a", {"x": 1, "blob": big(1)})
        first.save(fid, "b", {"x": 2, "blob": big(2)})
    with open_checkpoint_store(url) as second:
        latest = second.latest(fid)
        assert latest.state == "b" and latest.values == {"x": 2, "blob": big(2)}
        assert second.save(fid, "c", {"x": 3}).seq == latest.seq + 1


def test_concurrent_saves_of_different_functions_do_not_mix(open_store, fid):
    store = open_store(keep=3, history_s=0)
    fids = [f"{fid}-{t}" for t in range(4)]
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            for k in range(12):
                store.save(fids[t], f"s{k}", {"t": t, "k": k, "blob": big(t * 16 + k, 300 * KB)})
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert store.flush(10)
    for t, f in enumerate(fids):
        latest = store.latest(f)
        assert latest.values == {"t": t, "k": 11, "blob": big(t * 16 + 11, 300 * KB)}
        kept = [i.seq for i in store.history(f)]
        assert kept == [12, 11, 10]
        assert segment_files(store, f) == {"blob": {seg(s) for s in kept}, "spool": set()}


def test_concurrent_saves_of_one_function_leave_a_consistent_history(open_store, fid):
    store = open_store(keep=3, history_s=0)

    def work(t: int) -> None:
        for k in range(10):
            store.save(fid, f"t{t}-{k}", {"t": t, "k": k, "blob": big(k, 300 * KB)})

    threads = [threading.Thread(target=work, args=(t,)) for t in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert store.flush(10)
    history = store.history(fid)
    assert [i.seq for i in history] == [30, 29, 28]
    for info in history:
        values = store.load(fid, info.seq).values
        assert info.state == f"t{values['t']}-{values['k']}" and values["blob"] == big(values["k"], 300 * KB)
    assert segment_files(store, fid) == {"blob": {seg(s) for s in (28, 29, 30)}, "spool": set()}
    assert function_keys(store, fid) == {f"index/{fid}", f"seq/{fid}", *(f"ckpt/{fid}/{s}" for s in (28, 29, 30))}


def test_oversized_checkpoint_is_refused_and_the_previous_one_kept(open_store, fid):
    store = open_store(max_bytes="1MB")
    store.save(fid, "ok", {"blob": big(1, 500 * KB)})
    with pytest.raises(CheckpointTooLarge, match=r"over the store's limit of 1048576 bytes \(largest value: 'huge'\)"):
        store.save(fid, "too-big", {"small": 1, "huge": big(2, 2 * MB)})
    latest = store.latest(fid)
    assert latest.state == "ok" and latest.values["blob"] == big(1, 500 * KB)


@pytest.mark.parametrize(
    ("state", "values", "message"),
    [
        ("s", {1: "x"}, "checkpoint value name must be a non-empty string, got 1"),
        ("s", {"": "x"}, "checkpoint value name must be a non-empty string"),
        ("s", {"f": lambda: 0}, "checkpoint value 'f' of type function cannot be serialized"),
        ("s", {"lock": threading.Lock()}, "checkpoint value 'lock' of type lock cannot be serialized"),
        (7, {"x": 1}, "checkpoint state must be a non-empty string, got 7"),
        ("s", [("x", 1)], "checkpoint values must be a mapping"),
    ],
)
def test_malformed_saves_raise_clear_errors_and_keep_the_previous_checkpoint(open_store, fid, state, values, message):
    store = open_store()
    store.save(fid, "good", {"x": 1})
    with pytest.raises(InvalidCheckpoint, match=message):
        store.save(fid, state, values)
    latest = store.latest(fid)
    assert latest.state == "good" and latest.values == {"x": 1}


def test_delete_removes_every_trace(open_store, fid):
    store = open_store(keep=2, history_s=0)
    for k in range(4):
        store.save(fid, f"s{k}", {"blob": big(k)})
    store.delete(fid)
    assert store.latest(fid) is None
    assert function_keys(store, fid) == set()
    assert segment_files(store, fid) == {"blob": set(), "spool": set()}
    assert store.save(fid, "again", {"x": 1}).seq == 1


def test_what_an_action_writes_around_the_store_bounds_none_of_its_readers_work(open_store, fid):
    """The gateway reads and deletes a namespace's checkpoints, which its actions write directly: a
    counter set to millions or an index of hundreds of entries costs the reader what a store used
    as this one holds (before, a delete went through 3,000,000 numbers and history read every entry)."""
    store = open_store(keep=2, keep_max=3, history_s=0)
    for k in range(3):
        store.save(fid, f"s{k}", {"x": k})
    record = store.kv.get(store._record_key(fid, 3))
    forged = Index([IndexEntry(seq, 1.0 + seq, 10) for seq in range(1, 501)], 1)
    store.kv.put(store._index_key(fid), forged.dumps())
    for seq in range(4, 501):
        store.kv.put(store._record_key(fid, seq), record)
    assert len(store.history(fid)) == 3  # keep_max entries at most
    store.kv.put(store._seq_key(fid), b"3000000")
    tracemalloc.start()
    try:
        store.delete(fid)
        assert tracemalloc.get_traced_memory()[1] < 16 * 1024 * 1024
    finally:
        tracemalloc.stop()
    assert store.latest(fid) is None
    store.kv.put(store._seq_key(fid), b"not a number")
    store.delete(fid)  # and no ValueError


def test_delete_waits_for_a_flush_under_way_and_leaves_no_trace(open_store, fid):
    store = open_store(keep=2, history_s=0)
    copying, release = threading.Event(), threading.Event()
    copy = store.segments.copy_to_blobs

    def slow_copy(*args):
        copying.set()
        release.wait(5)
        return copy(*args)

    store.segments.copy_to_blobs = slow_copy
    store.save(fid, "s0", {"blob": big(0)})
    assert copying.wait(5)  # the flusher is copying the segment into the blob tier
    deleted = threading.Thread(target=store.delete, args=(fid,))
    deleted.start()
    deleted.join(0.3)
    assert deleted.is_alive()  # delete waits for the flush under way
    release.set()
    deleted.join(10)
    assert function_keys(store, fid) == set()
    assert segment_files(store, fid) == {"blob": set(), "spool": set()}


def test_segments_a_killed_flusher_left_under_the_kept_ones_are_pruned(open_store, fid):
    store = open_store(keep=2, keep_max=2, history_s=0)
    for k in range(3):
        store.save(fid, f"s{k}", {"blob": big(k)})
    assert store.flush(10)
    orphan = store.segments.blobs.relpath(fid, 1)  # what a writer killed after copying, before pruning, leaves
    store.segments.blobs.write(orphan, [big(1)])
    infos = [store.save(fid, f"s{k}", {"blob": big(k)}) for k in range(3, 5)]
    assert store.flush(10)
    assert segment_files(store, fid)["blob"] == {seg(i.seq) for i in infos}


def test_a_damaged_latest_checkpoint_falls_back_to_the_previous_one(open_store, fid):
    warnings: list[str] = []
    store = open_store(keep=3, history_s=0)
    store._warn = warnings.append
    store.save(fid, "older", {"blob": big(1)})
    newest = store.save(fid, "newest", {"blob": big(2)})
    assert store.flush(10)
    [location] = {ref.location for ref in store.history(fid)[0].refs}
    path = store.segments.blobs.root / location.removeprefix("blob:")
    path.write_bytes(path.read_bytes()[:1000])  # e.g. truncated by a power loss
    latest = store.latest(fid)
    assert latest.state == "older" and latest.values["blob"] == big(1)
    assert any(f"skipping checkpoint {newest.seq}" in w for w in warnings)
