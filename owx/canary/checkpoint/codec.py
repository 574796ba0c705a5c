"""Serialization of checkpoint values into self-describing frames.

A frame is ``header | part lengths | parts``. ``bytes`` and ``bytearray`` values are
stored raw; everything else is pickled with protocol 5, and the buffers pickle hands
out of band (NumPy arrays, :class:`pickle.PickleBuffer`) become parts of their own, so
large arrays are never copied into the pickle stream. Frames are written as a list of
chunks (no concatenation) and decoded from one buffer: out-of-band buffers of a
writable source become zero-copy views, so restored arrays are writable without a copy.
"""

from __future__ import annotations

import pickle
import struct
from dataclasses import dataclass
from typing import Any

from owx.canary.checkpoint.errors import CorruptCheckpoint, InvalidCheckpoint

MAGIC = b"OWXV"
VERSION = 1
_HEAD = struct.Struct("<4sBBHI")  # magic, version, kind, reserved, number of parts
_LEN = struct.Struct("<Q")

KIND_PICKLE = 0
KIND_BYTES = 1
KIND_BYTEARRAY = 2


@dataclass(frozen=True)
class Frame:
    """One encoded value: a kind and its parts, not yet joined."""

    kind: int
    parts: tuple[memoryview, ...]

    @property
    def prefix(self) -> bytes:
        head = _HEAD.pack(MAGIC, VERSION, self.kind, 0, len(self.parts))
        return head + b"".join(_LEN.pack(p.nbytes) for p in self.parts)

    @property
    def nbytes(self) -> int:
        return _HEAD.size + _LEN.size * len(self.parts) + sum(p.nbytes for p in self.parts)

    def chunks(self) -> list[bytes | memoryview]:
        """The frame as a list of buffers, for vectored writes."""
        return [self.prefix, *self.parts]

    def tobytes(self) -> bytes:
        return b"".join(self.chunks())


def encode(name: str, value: Any) -> Frame:
    """Encode one value; raises :class:`InvalidCheckpoint` naming the value if it cannot be."""
    if isinstance(value, bytes):
        return Frame(KIND_BYTES, (memoryview(value),))
    if isinstance(value, bytearray):
        return Frame(KIND_BYTEARRAY, (memoryview(value),))
    buffers: list[memoryview] = []

    def out_of_band(buffer: pickle.PickleBuffer) -> bool:
        try:
            buffers.append(buffer.raw())
        except BufferError:  # not contiguous: let pickle copy it in-band
            return True
        return False

    try:
        stream = pickle.dumps(value, protocol=5, buffer_callback=out_of_band)
    except (pickle.PicklingError, TypeError, AttributeError, RecursionError) as exc:
        raise InvalidCheckpoint(
            f"checkpoint value {name!r} of type {type(value).__name__} cannot be serialized: {exc}"
        ) from exc
    return Frame(KIND_PICKLE, (memoryview(stream), *buffers))


def decode(data: bytes | bytearray | memoryview) -> Any:
    """Decode a frame produced by :func:`encode`; raises :class:`CorruptCheckpoint`."""
    view = memoryview(data).cast("B")
    if view.nbytes < _HEAD.size:
        raise CorruptCheckpoint(f"value frame of {view.nbytes} bytes is truncated")
    magic, version, kind, _, count = _HEAD.unpack_from(view)
    if magic != MAGIC or version != VERSION:
        raise CorruptCheckpoint(f"not a checkpoint value frame (magic {bytes(magic)!r}, version {version})")
    offset = _HEAD.size + _LEN.size * count
    lengths = [_LEN.unpack_from(view, _HEAD.size + _LEN.size * i)[0] for i in range(count)]
    if offset + sum(lengths) != view.nbytes or count == 0:
        raise CorruptCheckpoint(f"value frame lengths {lengths} do not match its {view.nbytes} bytes")
    parts = []
    for length in lengths:
        parts.append(view[offset : offset + length])
        offset += length
    if kind == KIND_BYTES:
        return bytes(parts[0])
    if kind == KIND_BYTEARRAY:
        return bytearray(parts[0])
    if kind != KIND_PICKLE:
        raise CorruptCheckpoint(f"unknown value kind {kind}")
    buffers = [bytearray(p) if view.readonly else p for p in parts[1:]]
    try:
        return pickle.loads(parts[0], buffers=buffers)
    except Exception as exc:  # a pickle stream can fail in many ways; all mean corrupt data
        raise CorruptCheckpoint(f"value frame cannot be unpickled: {exc}") from exc
