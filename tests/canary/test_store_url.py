"""Opening checkpoint stores from URLs, and what a bad URL says."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from ckpt_support import free_port

from owx.canary.checkpoint import BadStoreURL, StoreUnavailable, open_checkpoint_store
from owx.canary.checkpoint.options import parse_size


def test_sqlite_url_defaults_its_blob_tier_next_to_the_database(tmp_path: Path):
    with open_checkpoint_store(f"sqlite:///{tmp_path}/sub/c.db") as store:
        assert store.segments.blobs.root == tmp_path / "sub" / "c.db.blobs"
        assert store.segments.spool.root == tmp_path / "sub" / "c.db.blobs" / ".spool"
        assert store.options.keep == 3
        assert (tmp_path / "sub" / "c.db").exists()


def test_options_come_from_the_query(tmp_path: Path):
    url = f"sqlite:///{tmp_path}/c.db?blobs={tmp_path}/b&spool={tmp_path}/s&keep=4&keep_max=6&inline_max=64KiB&budget=2g&stage=none"
    with open_checkpoint_store(url) as store:
        o = store.options
        assert (o.keep, o.keep_max, o.inline_max, o.budget, o.stage) == (4, 6, 64 * 1024, 2 * 1024**3, "none")
        assert store.segments.spool.root == tmp_path / "s"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("", "must be a non-empty string"),
        ("mysql://db/x", "unknown checkpoint store 'mysql'"),
        ("sqlite://relative/db", "needs an absolute file path"),
        ("sqlite:///{tmp}/c.db?kep=3", "unknown store option 'kep'"),
        ("sqlite:///{tmp}/c.db?keep=5&keep_max=4", r"keep \(5\) must not exceed keep_max \(4\)"),
        ("sqlite:///{tmp}/c.db?keep=0", "keep must be at least 1"),
        ("sqlite:///{tmp}/c.db?budget=lots", "not a size: 'lots'"),
        ("sqlite:///{tmp}/c.db?keep=three", "keep='three' is not a number"),
        ("sqlite:///{tmp}/c.db?blobs=relative/dir", "blobs must be an absolute path"),
        ("sqlite:///{tmp}/c.db?stage=disk", "stage must be auto, kv, spool or none"),
        ("sqlite:///{tmp}/c.db?keep=3&keep=4", "given more than once: keep"),
        ("redis://127.0.0.1:{port}/0?stage=spool", "stage=spool needs a spool or blob directory"),
        ("ignite://nohostport?blobs=/tmp/x", "needs host:port nodes"),
    ],
)
def test_bad_urls_are_refused_with_a_clear_message(url, message, tmp_path, redis_server):
    url = url.format(tmp=tmp_path, port=redis_server.port)
    with pytest.raises(BadStoreURL, match=message):
        open_checkpoint_store(url)


def test_an_unreachable_redis_is_reported_quickly(tmp_path):
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match="redis checkpoint store .* connecting failed"):
        open_checkpoint_store(f"redis://127.0.0.1:{free_port()}/0?blobs={tmp_path}&timeout=0.5")
    assert time.monotonic() - started < 2


def test_an_unreachable_ignite_is_reported(tmp_path):
    with pytest.raises(StoreUnavailable, match="ignite checkpoint store .* connecting failed"):
        open_checkpoint_store(f"ignite://127.0.0.1:{free_port()}?blobs={tmp_path}&timeout=0.5")


def test_an_unwritable_sqlite_location_is_unavailable(tmp_path):
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(StoreUnavailable, match="cannot create its directory"):
        open_checkpoint_store(f"sqlite:///{tmp_path}/file/c.db")


@pytest.mark.parametrize(("text", "size"), [("10", 10), ("10MB", 10 * 2**20), ("256KiB", 256 * 2**10), ("1g", 2**30)])
def test_sizes(text, size):
    assert parse_size(text) == size


