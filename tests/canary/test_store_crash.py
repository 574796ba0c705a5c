"""Crashes of the writer and of the flusher never leave a checkpoint pointing at missing
data, and their leftovers are collected."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import uuid

import pytest
from ckpt_support import function_keys, seg, segment_files

from owx.canary.checkpoint import open_checkpoint_store

KB = 1024


def blob(k: int, size: int = 400 * KB) -> bytes:
    return bytes([k % 256]) * size


@pytest.fixture
def fid() -> str:
    return f"fn-{uuid.uuid4().hex}"


def assert_clean(store, fid: str) -> None:
    """Only the retained checkpoints have data, all of it in the blob tier."""
    kept = [info.seq for info in store.history(fid)]
    assert segment_files(store, fid) == {"blob": {seg(s) for s in kept}, "spool": set()}
    assert function_keys(store, fid) == {f"index/{fid}", f"seq/{fid}", *(f"ckpt/{fid}/{s}" for s in kept)}


def test_writer_dying_before_the_flush(store_url, fid):
    url = store_url(keep=3, history_s=0)
    dying = open_checkpoint_store(url)
    dying._flusher.submit = lambda *args: None  # the process dies right after publishing
    info = dying.save(fid, "s", {"blob": blob(1)})
    assert dying.segments.is_staged(info.refs[0].location)
    dying.close()
    with open_checkpoint_store(url) as recovered:
        assert recovered.latest(fid).values == {"blob": blob(1)}
        assert recovered.flush(10)  # reading it resubmitted the flush
        assert recovered.history(fid)[0].refs[0].location.startswith("blob:")
        assert recovered.latest(fid).values == {"blob": blob(1)}
        assert_clean(recovered, fid)


def test_flusher_dying_after_the_copy_before_the_switch(store_url, fid):
    url = store_url(keep=3, history_s=0)
    dying = open_checkpoint_store(url)
    dying._flusher.submit = lambda *args: None
    info = dying.save(fid, "s", {"blob": blob(2)})
    dying.segments.copy_to_blobs(info.refs[0].location, fid, info.seq)  # ...and then it dies
    dying.close()
    with open_checkpoint_store(url) as recovered:
        assert recovered.latest(fid).values == {"blob": blob(2)}
        assert recovered.flush(10)
        assert_clean(recovered, fid)
        assert recovered.latest(fid).values == {"blob": blob(2)}


def test_flusher_dying_after_the_switch_before_dropping_the_staged_copy(store_url, fid):
    url = store_url(keep=3, history_s=0)
    dying = open_checkpoint_store(url)
    dying._flusher.submit = lambda *args: None
    info = dying.save(fid, "s", {"blob": blob(3)})
    key = f"ckpt/{fid}/{info.seq}"
    raw = dying.kv.get(key)
    from owx.canary.checkpoint.model import Record

    location = dying.segments.copy_to_blobs(info.refs[0].location, fid, info.seq)
    assert dying.kv.cas(key, raw, Record.loads(raw).with_segment(location).dumps())  # ...dies here
    dying.close()
    with open_checkpoint_store(url) as recovered:
        assert recovered.latest(fid).values == {"blob": blob(3)}
        for k in range(4, 8):  # newer checkpoints push the damaged one out; its leftovers go with it
            recovered.save(fid, f"s{k}", {"blob": blob(k)})
        assert recovered.flush(10)
        assert_clean(recovered, fid)


def test_writer_dying_before_publishing_leaves_nothing_behind(store_url, fid):
    url = store_url(keep=2, history_s=0)
    with open_checkpoint_store(url) as store:
        store.save(fid, "first", {"blob": blob(1)})
        seq = store.kv.incr(f"seq/{fid}")  # a save that staged its data and died unpublished
        store.segments.write(fid, seq, [blob(9)], "kv" if store._stage_to == "kv" else "spool")
        store.kv.put(f"ckpt/{fid}/{seq}", b"half-written")
        assert store.latest(fid).state == "first"
        for k in range(3):
            store.save(fid, f"later-{k}", {"blob": blob(k)})
        assert store.flush(10)
        assert_clean(store, fid)


WRITER = textwrap.dedent("""
    import sys
    from owx.canary.checkpoint import open_checkpoint_store

    store = open_checkpoint_store(sys.argv[1])
    fid, k = sys.argv[2], int(sys.argv[3])
    while True:
        store.save(fid, f"k-{k}", {"k": k, "blob": bytes([k % 256]) * 1_500_000})
        print(k, flush=True)
        k += 1
""")


def test_sigkilled_writers_never_leave_a_dangling_checkpoint(store_url, fid, tmp_path):
    url = store_url(keep=3, history_s=0)
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    killed_pids, unflushed = [], 0
    for round_ in range(5):
        writer = subprocess.Popen(
            [sys.executable, str(script), url, fid, str(round_ * 100)], stdout=subprocess.PIPE, text=True
        )
        printed = [int(writer.stdout.readline()) for _ in range(2 + round_)]
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait()
        killed_pids.append(writer.pid)
        with open_checkpoint_store(url) as store:
            store._flusher.submit = lambda *args: None  # inspect exactly what the dead writer left
            unflushed += store.segments.is_staged(store.history(fid)[0].refs[0].location)
            latest = store.latest(fid)
            assert latest.values["k"] >= printed[-1] and latest.state == f"k-{latest.values['k']}"
            for info in store.history(fid):
                values = store.load(fid, info.seq).values
                assert info.state == f"k-{values['k']}" and values["blob"] == bytes([values["k"] % 256]) * 1_500_000
    if store._stage_to == "kv":  # (a spool flush is a hard link: too quick to be hit reliably)
        assert unflushed >= 1  # at least one writer died with its newest checkpoint still staged
    with open_checkpoint_store(url) as store:
        for k in range(3):
            store.save(fid, f"final-{k}", {"k": 1000 + k, "blob": blob(k)})
        assert store.flush(10)
        kept = [info.seq for info in store.history(fid)]
        files = segment_files(store, fid)
        leftovers = {name for name in files["blob"] | files["spool"] if name.endswith(".tmp")}
        # a writer killed mid-write leaves its temporary file until it is STALE_TMP_S old
        assert all(any(f".{pid}-" in name for pid in killed_pids) for name in leftovers)
        assert files["blob"] - leftovers == {seg(s) for s in kept} and files["spool"] - leftovers == set()
        assert function_keys(store, fid) == {f"index/{fid}", f"seq/{fid}", *(f"ckpt/{fid}/{s}" for s in kept)}
