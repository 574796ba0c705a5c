"""Where a checkpoint's segment (its large values) lives, named by a location string.

``kv:<key>``     staged in the KV tier (reachable from every node at once)
``spool:<path>`` staged in a local spool directory (the fast path of the embedded store)
``blob:<path>``  in the blob tier, its final place

A segment is staged when the checkpoint is saved and moved to the blob tier later by the
flusher; both copies are complete before any record points to them.
"""

from __future__ import annotations

from collections.abc import Sequence

from owx.canary.checkpoint.errors import CorruptCheckpoint
from owx.canary.checkpoint.files import Chunk, SegmentFiles
from owx.canary.checkpoint.kv import KV

KV_PREFIX = "kv:"
SPOOL_PREFIX = "spool:"
BLOB_PREFIX = "blob:"


def stage_key(function_id: str, seq: int) -> str:
    return f"stage/{function_id}/{seq}"


class Segments:
    """The three homes of segments of one store."""

    def __init__(self, kv: KV, spool: SegmentFiles, blobs: SegmentFiles) -> None:
        self.kv = kv
        self.spool = spool
        self.blobs = blobs

    def write(self, function_id: str, seq: int, chunks: Sequence[Chunk], where: str) -> str:
        """Write a segment to ``where`` (``kv``, ``spool`` or ``blob``) and return its location."""
        if where == "kv":
            key = stage_key(function_id, seq)
            self.kv.put_chunks(key, chunks)
            return KV_PREFIX + key
        files = self.spool if where == "spool" else self.blobs
        rel = files.relpath(function_id, seq)
        files.write(rel, chunks)
        return (SPOOL_PREFIX if where == "spool" else BLOB_PREFIX) + rel

    def read(self, location: str) -> bytes | bytearray | None:
        """The segment's bytes, or None if nothing is (any longer) at ``location``."""
        if location.startswith(KV_PREFIX):
            return self.kv.get_buffer(location.removeprefix(KV_PREFIX))
        if location.startswith(SPOOL_PREFIX):
            return self.spool.read(location.removeprefix(SPOOL_PREFIX))
        if location.startswith(BLOB_PREFIX):
            return self.blobs.read(location.removeprefix(BLOB_PREFIX))
        raise CorruptCheckpoint(f"unknown segment location {location!r}")

    @staticmethod
    def is_staged(location: str | None) -> bool:
        return location is not None and not location.startswith(BLOB_PREFIX)

    def copy_to_blobs(self, location: str, function_id: str, seq: int) -> str | None:
        """Copy a staged segment into the blob tier; its blob location, or None if the staged
        copy is gone (flushed or pruned by someone else)."""
        rel = self.blobs.relpath(function_id, seq)
        if location.startswith(SPOOL_PREFIX):
            if not self.spool.copy_into(location.removeprefix(SPOOL_PREFIX), self.blobs, rel):
                return None
        else:
            data = self.read(location)
            if data is None:
                return None
            self.blobs.write(rel, [data])
        return BLOB_PREFIX + rel

    def discard_staged(self, function_id: str, seqs: Sequence[int], below: int = 0) -> None:
        """Remove the staged copies of ``seqs``, and spooled segment files numbered under ``below``."""
        self.kv.delete(stage_key(function_id, s) for s in seqs)
        self.spool.remove(function_id, seqs, below)

    def remove(self, function_id: str, seqs: Sequence[int], below: int = 0) -> None:
        """Remove every copy of the segments of ``seqs``, and segment files numbered under ``below``."""
        self.discard_staged(function_id, seqs, below)
        self.blobs.remove(function_id, seqs, below)

    def remove_function(self, function_id: str) -> None:
        self.spool.remove_function(function_id)
        self.blobs.remove_function(function_id)
