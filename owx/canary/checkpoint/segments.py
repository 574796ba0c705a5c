"""Where a checkpoint's segment (its large values) lives, named by a location string.

``kv:<key>``     staged in the KV tier (reachable from every node at once)
``spool:<path>`` staged in a local spool directory (the fast path of the embedded store)
``blob:<path>``  in the blob tier, its final place

A segment is staged when the checkpoint is saved and moved to the blob tier later by the
flusher; both copies are complete before any record points to them. A network store without a
blob tier keeps its segments in the KV for good (``kv:`` is then final): its tenants share no
directory, only the KV, where each reaches its own keys.
"""

from __future__ import annotations

from collections.abc import Sequence

from owx.canary.checkpoint.errors import CorruptCheckpoint, StoreUnavailable
from owx.canary.checkpoint.files import Chunk, SegmentFiles
from owx.canary.checkpoint.kv import KV

KV_PREFIX = "kv:"
SPOOL_PREFIX = "spool:"
BLOB_PREFIX = "blob:"


def stage_key(function_id: str, seq: int) -> str:
    return f"stage/{function_id}/{seq}"


class Segments:
    """The three homes of segments of one store (the spool and the blob tier are optional)."""

    def __init__(self, kv: KV, spool: SegmentFiles | None, blobs: SegmentFiles | None) -> None:
        self.kv = kv
        self.spool = spool
        self.blobs = blobs

    def write(self, function_id: str, seq: int, chunks: Sequence[Chunk], where: str) -> str:
        """Write a segment to ``where`` (``kv``, ``spool`` or ``blob``) and return its location."""
        if where == "kv":
            key = stage_key(function_id, seq)
            self.kv.put_chunks(key, chunks)
            return KV_PREFIX + key
        files = self._files(where)
        rel = files.relpath(function_id, seq)
        files.write(rel, chunks)
        return (SPOOL_PREFIX if where == "spool" else BLOB_PREFIX) + rel

    def read(self, location: str) -> bytes | bytearray | None:
        """The segment's bytes, or None if nothing is (any longer) at ``location``."""
        if location.startswith(KV_PREFIX):
            return self.kv.get_buffer(location.removeprefix(KV_PREFIX))
        for prefix, files in ((SPOOL_PREFIX, self.spool), (BLOB_PREFIX, self.blobs)):
            if location.startswith(prefix) and files is not None:
                return files.read(location.removeprefix(prefix))
        raise CorruptCheckpoint(f"unknown segment location {location!r}")

    def is_staged(self, location: str | None) -> bool:
        """True for a segment that waits to be moved to the blob tier."""
        return location is not None and self.blobs is not None and not location.startswith(BLOB_PREFIX)

    def _files(self, where: str) -> SegmentFiles:
        files = self.spool if where == "spool" else self.blobs
        if files is None:
            raise StoreUnavailable(f"this checkpoint store has no {'spool' if where == 'spool' else 'blob tier'}")
        return files

    def copy_to_blobs(self, location: str, function_id: str, seq: int) -> str | None:
        """Copy a staged segment into the blob tier; its blob location, or None if the staged
        copy is gone (flushed or pruned by someone else)."""
        blobs = self._files("blob")
        rel = blobs.relpath(function_id, seq)
        if location.startswith(SPOOL_PREFIX):
            if not self._files("spool").copy_into(location.removeprefix(SPOOL_PREFIX), blobs, rel):
                return None
        else:
            data = self.read(location)
            if data is None:
                return None
            blobs.write(rel, [data])
        return BLOB_PREFIX + rel

    def discard_staged(self, function_id: str, seqs: Sequence[int], below: int = 0) -> None:
        """Remove the staged copies of ``seqs``, and spooled segment files numbered under ``below``."""
        self.kv.delete(stage_key(function_id, s) for s in seqs)
        if self.spool is not None:
            self.spool.remove(function_id, seqs, below)

    def remove(self, function_id: str, seqs: Sequence[int], below: int = 0) -> None:
        """Remove every copy of the segments of ``seqs``, and segment files numbered under ``below``."""
        self.discard_staged(function_id, seqs, below)
        if self.blobs is not None:
            self.blobs.remove(function_id, seqs, below)

    def remove_function(self, function_id: str) -> None:
        for files in (self.spool, self.blobs):
            if files is not None:
                files.remove_function(function_id)
