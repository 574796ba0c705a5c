"""What the checkpoint store keeps and returns.

A checkpoint is ``{seq, state, timestamp, values}``. In the KV tier its record holds the
small values inline and, for the large ones, ``{name, location}`` (Algorithm 4 of Canary):
the large values of one checkpoint are packed into one *segment* that lives first in a
staging area (the KV itself, or a local spool) and then in the blob tier.

Records and indexes are JSON (a record's inline frames follow its JSON header as bytes), never
pickles: the gateway reads them from stores a tenant's actions write, and unpickling runs code.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass, field
from typing import Any

from owx.canary.checkpoint.errors import CorruptCheckpoint

FORMAT = 2  # 1: pickled (before); older data is reported as corrupt
_HEADER_LENGTH = struct.Struct("<I")


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
        table = [[name, None if frame is None else len(frame), offset, length]
                 for name, frame, offset, length in self.values]
        header = json.dumps([FORMAT, self.seq, self.state, self.timestamp, self.size, self.segment, table],
                            separators=(",", ":")).encode()
        frames = b"".join(frame for _, frame, _, _ in self.values if frame is not None)
        return _HEADER_LENGTH.pack(len(header)) + header + frames

    @classmethod
    def loads(cls, data: bytes) -> Record:
        try:
            (length,) = _HEADER_LENGTH.unpack_from(data)
            version, seq, state, timestamp, size, segment, table = json.loads(data[4:4 + length])
        except (struct.error, ValueError, TypeError) as exc:
            raise CorruptCheckpoint(f"checkpoint record cannot be read: {exc}") from exc
        _check(version == FORMAT, f"checkpoint record format {version!r:.20} is not supported")
        _check(_counts(seq, size) and isinstance(state, str) and _time(timestamp)
               and (segment is None or isinstance(segment, str)) and isinstance(table, list), "checkpoint record")
        position, values = 4 + length, []
        for row in table:
            _check(isinstance(row, list) and len(row) == 4, "checkpoint record's value table")
            name, inline, offset, value_length = row
            _check(isinstance(name, str) and _counts(offset, value_length)
                   and (inline is None or _counts(inline)), "checkpoint record's value table")
            frame = None if inline is None else bytes(data[position:position + inline])
            position += inline or 0
            values.append((name, frame, offset, value_length))
        _check(position == len(data), "checkpoint record's frames")
        return cls(seq, state, float(timestamp), size, segment, tuple(values))

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
        entries = [[e.seq, e.timestamp, e.size] for e in self.entries]
        return json.dumps([FORMAT, entries, self.floor], separators=(",", ":")).encode()

    @classmethod
    def loads(cls, data: bytes | None) -> Index:
        if data is None:
            return cls()
        try:
            version, entries, floor = json.loads(data)
        except (ValueError, TypeError) as exc:
            raise CorruptCheckpoint(f"checkpoint index cannot be read: {exc}") from exc
        _check(version == FORMAT, f"checkpoint index format {version!r:.20} is not supported")
        _check(_counts(floor) and isinstance(entries, list) and all(
            isinstance(e, list) and len(e) == 3 and _counts(e[0], e[2]) and _time(e[1]) for e in entries),
            "checkpoint index")
        return cls([IndexEntry(seq, float(timestamp), size) for seq, timestamp, size in entries], floor)


def _counts(*values: Any) -> bool:
    """Whether every value is a whole number of at least 0 (not a bool)."""
    return all(type(value) is int and value >= 0 for value in values)


def _time(value: Any) -> bool:
    return type(value) in (int, float) and math.isfinite(value)


def _check(holds: bool, what: str) -> None:
    if not holds:
        raise CorruptCheckpoint(what if what.endswith("supported") else f"{what} is malformed")
