"""Encoding of checkpoint values: raw bytes, pickle with out-of-band buffers, damage detection."""

from __future__ import annotations

import numpy as np
import pytest

from owx.canary.checkpoint import CorruptCheckpoint
from owx.canary.checkpoint.codec import KIND_BYTES, KIND_PICKLE, decode, encode


def test_bytes_are_stored_raw_without_a_copy():
    value = b"x" * 1000
    frame = encode("v", value)
    assert frame.kind == KIND_BYTES and frame.parts[0].obj is value
    assert decode(frame.tobytes()) == value


def test_array_data_travels_out_of_band_and_decodes_zero_copy_from_a_writable_buffer():
    array = np.arange(1_000_000, dtype=np.float64)
    frame = encode("w", {"w": array})
    assert frame.kind == KIND_PICKLE and len(frame.parts) == 2 and frame.parts[1].nbytes == array.nbytes
    assert frame.parts[0].nbytes < 1000  # the pickle stream itself holds no array data
    buffer = bytearray(frame.tobytes())
    restored = decode(buffer)["w"]
    np.testing.assert_array_equal(restored, array)
    assert np.shares_memory(restored, np.frombuffer(buffer, dtype=np.uint8))
    assert restored.flags.writeable


def test_non_contiguous_arrays_and_read_only_sources_still_work():
    array = np.arange(100.0).reshape(10, 10)[:, ::2]
    restored = decode(encode("a", array).tobytes())  # bytes: read-only source
    np.testing.assert_array_equal(restored, array)
    assert restored.flags.writeable


@pytest.mark.parametrize("damage", [lambda b: b[:10], lambda b: b"XXXX" + b[4:], lambda b: b[:-1], lambda b: b[:20] + b"\0" * (len(b) - 20)])
def test_damaged_frames_are_reported(damage):
    data = encode("v", {"a": list(range(100))}).tobytes()
    with pytest.raises(CorruptCheckpoint):
        decode(damage(data))
