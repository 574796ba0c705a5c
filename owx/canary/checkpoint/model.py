"""What the checkpoint store keeps and returns.

A checkpoint is ``{seq, state, timestamp, values}``. In the KV tier its record holds the
small values inline and, for the large ones, ``{name, location}`` (Algorithm 4 of Canary):
the large values of one checkpoint are packed into one *segment* that lives first in a
staging area (the KV itself, or a local spool) and then in the blob tier.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from typing import Any

from owx.canary.checkpoint.errors import CorruptCheckpoint


@dataclass(frozen=True)
class BlobRef:
    """Where a value too large for the KV tier lives: a byte range of a segment."""

    name: str
    location: str
    offset: int
    length: int


@dataclass(frozen=True)
class CheckpointInfo:
    """A checkpoint's metadata, without its values."""

    function_id: str
    seq: int
    state: str
    timestamp: float
    size: int
    inline: tuple[str, ...]
    refs: tuple[BlobRef, ...]


@dataclass(frozen=True)
class Checkpoint:
    """A restored checkpoint: its metadata and its decoded values (in saved order)."""

    info: CheckpointInfo
    values: dict[str, Any]

    @property
    def seq(self) -> int:
        return self.info.seq

    @property
    def state(self) -> str:
        return self.info.state


@dataclass(frozen=True)
class Record:
    """The KV-tier form of one checkpoint.

    ``values`` lists ``(name, inline frame or None, offset, length)`` in saved order;
    values without an inline frame are the byte range ``offset:offset+length`` of ``segment``.
    """

    seq: int
    state: str
    timestamp: float
    size: int
    segment: str | None
    values: tuple[tuple[str, bytes | None, int, int], ...]

    def dumps(self) -> bytes:
        return pickle.dumps(
            (1, self.seq, self.state, self.timestamp, self.size, self.segment, self.values), protocol=5
        )

    @classmethod
    def loads(cls, data: bytes) -> Record:
        try:
            version, *fields = pickle.loads(data)
        except Exception as exc:  # anything unpicklable here is a damaged record
            raise CorruptCheckpoint(f"checkpoint record cannot be read: {exc}") from exc
        if version != 1:
            raise CorruptCheckpoint(f"checkpoint record version {version} is not supported")
        return cls(*fields)

    def with_segment(self, segment: str) -> Record:
        return Record(self.seq, self.state, self.timestamp, self.size, segment, self.values)

    def info(self, function_id: str) -> CheckpointInfo:
        inline = tuple(name for name, frame, _, _ in self.values if frame is not None)
        refs = tuple(
            BlobRef(name, self.segment or "", offset, length)
            for name, frame, offset, length in self.values
            if frame is None
        )
        return CheckpointInfo(function_id, self.seq, self.state, self.timestamp, self.size, inline, refs)


@dataclass(frozen=True)
class IndexEntry:
    """One published checkpoint in a function's index."""

    seq: int
    timestamp: float
    size: int


@dataclass
class Index:
    """A function's published checkpoints (oldest first) and its garbage-collection floor.

    Every sequence number below ``floor`` has been cleaned up; numbers between ``floor``
    and the oldest entry belong to pruned or abandoned checkpoints whose data may remain.
    """

    entries: list[IndexEntry] = field(default_factory=list)
    floor: int = 1

    def dumps(self) -> bytes:
        return pickle.dumps((1, [(e.seq, e.timestamp, e.size) for e in self.entries], self.floor), protocol=5)

    @classmethod
    def loads(cls, data: bytes | None) -> Index:
        if data is None:
            return cls()
        try:
            version, entries, floor = pickle.loads(data)
        except Exception as exc:
            raise CorruptCheckpoint(f"checkpoint index cannot be read: {exc}") from exc
        if version != 1:
            raise CorruptCheckpoint(f"checkpoint index version {version} is not supported")
        return cls([IndexEntry(*e) for e in entries], floor)
