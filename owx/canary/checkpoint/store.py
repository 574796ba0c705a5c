"""``CheckpointStore``: the latest checkpoints of each function, in a KV tier and a blob tier.

Layout in the KV tier (per function ID ``f``):

``seq/f``        a counter that numbers the function's checkpoints
``ckpt/f/<seq>`` the checkpoint record: small values inline, large ones as ``{name, location}``
``index/f``      the published checkpoints (the latest n) and the garbage-collection floor
``stage/f/<seq>`` a segment staged in the KV (or kept there, by a store without a blob tier)

A save writes the large values as one segment to the staging area (the KV, or a local
spool for SQLite), then the record, then publishes it with a compare-and-set on the
index. A reader only follows the index, so it never sees a half-written checkpoint. The
flusher later copies the segment to the blob tier and switches the record's location
with another compare-and-set; the staged copy is deleted only after the switch. At every
instant the record therefore points to a complete copy, whatever process dies when.
Checkpoints that fall out of the latest n, and leftovers of saves that died before
publishing, are deleted (record, staged and blob copies) below the index's floor.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Self

from owx.canary.checkpoint.codec import Frame, decode, encode
from owx.canary.checkpoint.errors import (
    CheckpointTooLarge,
    CorruptCheckpoint,
    InvalidCheckpoint,
    StoreUnavailable,
)
from owx.canary.checkpoint.files import SegmentFiles
from owx.canary.checkpoint.flusher import Flusher
from owx.canary.checkpoint.kv import KV
from owx.canary.checkpoint.model import (
    Checkpoint,
    CheckpointInfo,
    Index,
    IndexEntry,
    Record,
)
from owx.canary.checkpoint.options import StoreOptions
from owx.canary.checkpoint.retention import keep_count
from owx.canary.checkpoint.segments import Segments

log = logging.getLogger(__name__)

#: sequence numbers a delete goes through above the floor: a store used as this one writes far fewer
#: (its saves raise the floor as they go); a counter set higher was set around it
MAX_SEQ_SPAN = 10_000
_CAS_ATTEMPTS = 200
_READ_ATTEMPTS = 20
_MAX_NAME = 1024


class _Vanished(Exception):
    """A record disappeared while being read (pruned meanwhile)."""


def encode_values(values: Mapping[str, Any]) -> dict[str, Frame]:
    """Check names and encode every value; raises :class:`InvalidCheckpoint`."""
    if not isinstance(values, Mapping):
        raise InvalidCheckpoint(f"checkpoint values must be a mapping of names to values, got {type(values).__name__}")
    for name in values:
        check_name("checkpoint value name", name)
    return {name: encode(name, value) for name, value in values.items()}


def check_name(what: str, name: object) -> None:
    if not isinstance(name, str) or not name:
        raise InvalidCheckpoint(f"{what} must be a non-empty string, got {name!r} ({type(name).__name__})")
    if len(name) > _MAX_NAME:
        raise InvalidCheckpoint(f"{what} is {len(name)} characters long, over the limit of {_MAX_NAME}")


class CheckpointStore:
    """The latest checkpoints of every function (see the module docstring for the layout)."""

    def __init__(
        self, kv: KV, options: StoreOptions, *, blobs: Path | None, spool: Path | None,
        on_warning: Callable[[str], None] | None = None,
    ) -> None:
        """``blobs`` None: segments stay in the KV, and checkpoints are limited to ``stage_max``."""
        self.kv = kv
        self.options = options
        self.segments = Segments(kv, SegmentFiles(spool) if spool else None, SegmentFiles(blobs) if blobs else None)
        stage = kv.default_staging if options.stage == "auto" or blobs is None else options.stage
        self._stage_to = "blob" if stage == "none" else stage
        self._max_bytes = options.max_bytes if blobs is not None else min(options.max_bytes, options.stage_max)
        self._warn = on_warning or log.warning
        self._flusher = Flusher(self._flush_one, self._warn)

    # -- keys ---------------------------------------------------------------------------

    @staticmethod
    def _index_key(function_id: str) -> str:
        return f"index/{function_id}"

    @staticmethod
    def _seq_key(function_id: str) -> str:
        return f"seq/{function_id}"

    @staticmethod
    def _record_key(function_id: str, seq: int) -> str:
        return f"ckpt/{function_id}/{seq}"

    # -- writing ------------------------------------------------------------------------

    def save(self, function_id: str, state: str, values: Mapping[str, Any]) -> CheckpointInfo:
        """Checkpoint ``values`` as the function's newest state ``state``."""
        return self.save_frames(function_id, state, encode_values(values))

    def save_frames(self, function_id: str, state: str, frames: Mapping[str, Frame]) -> CheckpointInfo:
        """Like :meth:`save`, for values already encoded with :func:`encode_values`."""
        check_name("function ID", function_id)
        check_name("checkpoint state", state)
        size = sum(frame.nbytes for frame in frames.values())
        if size > self._max_bytes:
            largest = max(frames, key=lambda name: frames[name].nbytes)
            raise CheckpointTooLarge(size, self._max_bytes, largest)
        inline = self._inline_names(frames)
        seq = self.kv.incr(self._seq_key(function_id))
        timestamp = time.time()
        values: list[tuple[str, bytes | None, int, int]] = []
        chunks: list[bytes | memoryview] = []
        offset = 0
        for name, frame in frames.items():
            if name in inline:
                values.append((name, frame.tobytes(), 0, frame.nbytes))
            else:
                values.append((name, None, offset, frame.nbytes))
                chunks.extend(frame.chunks())
                offset += frame.nbytes
        location = None
        if chunks:
            where = self._stage_to if offset <= self.options.stage_max else "blob"
            location = self.segments.write(function_id, seq, chunks, where)
        record = Record(seq, state, timestamp, size, location, tuple(values))
        self.kv.put(self._record_key(function_id, seq), record.dumps())
        if not self._publish(function_id, IndexEntry(seq, timestamp, size)):
            self._remove(function_id, [seq])  # a concurrent save of the same function overtook it
        elif self.segments.is_staged(location):
            self._flusher.submit(function_id, seq)
        return record.info(function_id)

    def _inline_names(self, frames: Mapping[str, Frame]) -> set[str]:
        """Values that stay in the KV record: each under ``inline_max``, smallest first,
        together under ``record_max``."""
        inline, total = set(), 0
        for name in sorted(frames, key=lambda n: frames[n].nbytes):
            size = frames[name].nbytes
            if size > self.options.inline_max or total + size > self.options.record_max:
                break
            inline.add(name)
            total += size
        return inline

    def _publish(self, function_id: str, entry: IndexEntry) -> bool:
        """Add ``entry`` to the index, keeping the latest n; True if ``entry`` is kept."""
        index = self._update_index(function_id, lambda index: self._with_entry(index, entry))
        try:
            self._collect(function_id, index)
        except StoreUnavailable as exc:  # published all the same; the next save collects again
            self._warn(f"removing old checkpoints of {function_id!r} is deferred: {exc}")
        return any(e.seq == entry.seq for e in index.entries)

    def _with_entry(self, index: Index, entry: IndexEntry) -> Index:
        if index.entries and entry.seq < index.entries[0].seq:
            return index  # older than everything kept: its data may already be collected
        entries = sorted([*index.entries, entry], key=lambda e: e.seq)
        return Index(entries[-keep_count(entries, self.options):], index.floor)

    def _update_index(self, function_id: str, change: Callable[[Index], Index]) -> Index:
        """Apply ``change`` to the function's index atomically (compare-and-set, retried)."""
        key = self._index_key(function_id)
        for attempt in range(_CAS_ATTEMPTS):
            raw = self.kv.get(key)
            new = change(Index.loads(raw))
            data = new.dumps()
            if data == raw or self.kv.cas(key, raw, data):
                return new
            if attempt > 3:
                time.sleep(random.uniform(0, 0.002))
        raise StoreUnavailable(f"checkpoint index of {function_id!r} kept changing; gave up after {_CAS_ATTEMPTS} attempts")

    def _collect(self, function_id: str, index: Index) -> None:
        """Delete everything of the sequence numbers between the floor and the oldest kept
        checkpoint, then raise the floor."""
        if not index.entries or index.entries[0].seq <= index.floor:
            return
        top = index.entries[0].seq
        self._remove(function_id, list(range(index.floor, top)), below=top)

        def raise_floor(current: Index) -> Index:
            return Index(current.entries, max(current.floor, top))

        self._update_index(function_id, raise_floor)

    def _remove(self, function_id: str, seqs: list[int], below: int = 0) -> None:
        """Delete the records of ``seqs`` and their segments; segment files numbered under
        ``below`` too (nothing under the oldest kept checkpoint is referenced any more)."""
        self.kv.delete(self._record_key(function_id, s) for s in seqs)
        self.segments.remove(function_id, seqs, below)

    # -- flushing -----------------------------------------------------------------------

    def _flush_one(self, function_id: str, seq: int) -> None:
        """Move one checkpoint's staged segment to the blob tier."""
        key = self._record_key(function_id, seq)
        raw = self.kv.get(key)
        if raw is None:
            return
        record = Record.loads(raw)
        staged = record.segment
        if staged is None or not self.segments.is_staged(staged):
            return
        blob = self.segments.copy_to_blobs(staged, function_id, seq)
        if blob is None:
            return  # the staged copy is gone: another flusher or the pruning got there first
        if self.kv.cas(key, raw, record.with_segment(blob).dumps()):
            self.segments.discard_staged(function_id, [seq])
            return
        current = self.kv.get(key)
        if current is None:
            self.segments.remove(function_id, [seq])  # pruned while copying: drop the copy too
        elif Record.loads(current).segment == blob:
            self.segments.discard_staged(function_id, [seq])

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every staged segment submitted so far is in the blob tier."""
        return self._flusher.drain(timeout)

    # -- reading ------------------------------------------------------------------------

    def latest(self, function_id: str) -> Checkpoint | None:
        """The newest readable checkpoint of the function, or None if it has none.

        A checkpoint whose data cannot be decoded is reported as a warning and the next
        older one is returned instead.
        """
        check_name("function ID", function_id)
        for _ in range(_READ_ATTEMPTS):
            index = Index.loads(self.kv.get(self._index_key(function_id)))
            try:
                for entry in reversed(index.entries):
                    try:
                        return self._load(function_id, entry.seq)
                    except CorruptCheckpoint as exc:
                        self._warn(f"skipping checkpoint {entry.seq} of {function_id!r}: {exc}")
                return None
            except _Vanished:
                continue  # pruned while reading: read the index again
        raise StoreUnavailable(f"checkpoints of {function_id!r} kept changing while being read")

    def load(self, function_id: str, seq: int) -> Checkpoint | None:
        """One checkpoint by number, or None if it is not (any longer) stored."""
        try:
            return self._load(function_id, seq)
        except _Vanished:
            return None

    def history(self, function_id: str) -> list[CheckpointInfo]:
        """Metadata of the retained checkpoints, newest first."""
        index = Index.loads(self.kv.get(self._index_key(function_id)))
        infos = []
        for entry in reversed(index.entries[-self.options.keep_max:]):  # more were written around the store
            raw = self.kv.get(self._record_key(function_id, entry.seq))
            if raw is not None:
                infos.append(Record.loads(raw).info(function_id))
        return infos

    def _load(self, function_id: str, seq: int) -> Checkpoint:
        key = self._record_key(function_id, seq)
        for _ in range(_READ_ATTEMPTS):
            raw = self.kv.get(key)
            if raw is None:
                raise _Vanished(key)
            record = Record.loads(raw)
            segment = None
            if record.segment is not None:
                segment = self.segments.read(record.segment)
                if segment is None:
                    if self.kv.get(key) != raw:
                        continue  # the flusher moved it, or it was pruned: read the record again
                    raise CorruptCheckpoint(f"its data at {record.segment} is missing")
            view = memoryview(segment if segment is not None else b"")
            values = {
                name: decode(frame if frame is not None else view[offset : offset + length])
                for name, frame, offset, length in record.values
            }
            if self.segments.is_staged(record.segment):
                self._flusher.submit(function_id, seq)  # its writer may have died before flushing
            return Checkpoint(record.info(function_id), values)
        raise StoreUnavailable(f"checkpoint {seq} of {function_id!r} kept moving while being read")

    # -- lifecycle ----------------------------------------------------------------------

    def delete(self, function_id: str) -> None:
        """Remove every checkpoint of the function (after it completed for good). This store's
        flushes of the function are dropped first (one under way is waited for), so none of them
        writes a segment back after the function is gone."""
        self._flusher.forget(function_id)
        index = Index.loads(self.kv.get(self._index_key(function_id)))
        try:
            last = int(self.kv.get(self._seq_key(function_id)) or b"0")
        except ValueError:  # no counter: written around the store
            last = index.floor
        kept = {entry.seq for entry in index.entries[-self.options.keep_max:]}
        seqs = sorted(kept.union(range(index.floor, min(last, index.floor + MAX_SEQ_SPAN) + 1)))
        self.kv.delete([self._index_key(function_id), self._seq_key(function_id)])
        self.kv.delete(self._record_key(function_id, s) for s in seqs)
        self.segments.discard_staged(function_id, seqs)
        self.segments.remove_function(function_id)

    def close(self, timeout: float | None = 10.0) -> bool:
        """Flush staged segments (up to ``timeout``) and release connections; True if all
        were flushed (unflushed ones stay readable where they are staged)."""
        flushed = self._flusher.stop(timeout)
        self.kv.close()
        return flushed

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
