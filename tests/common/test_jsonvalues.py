"""The JSON owx accepts: nesting held to MAX_DEPTH by orjson's own parser (no walk over the values
a tenant sends), and nothing that parses only inside the arrays that check wraps around it."""

from __future__ import annotations

import pytest

from owx.common import jsonvalues
from owx.common.jsonvalues import MAX_DEPTH, InvalidJson, loads

NESTED = f"nested deeper than {MAX_DEPTH} levels"


def arrays(levels: int) -> bytes:
    return b"[" * levels + b"]" * levels


def objects(levels: int) -> bytes:
    return b'{"a":' * levels + b"1" + b"}" * levels


@pytest.mark.parametrize("text", [arrays(MAX_DEPTH), objects(MAX_DEPTH),
                                  b"[" + b",".join([arrays(MAX_DEPTH - 1)] * 50) + b"]"])
def test_nesting_up_to_the_limit_is_read(text):
    assert loads(text) is not None


@pytest.mark.parametrize("text", [arrays(MAX_DEPTH + 1), objects(MAX_DEPTH + 1), arrays(2000), objects(60_000),
                                  b"[" + b",".join([arrays(MAX_DEPTH)] * 50) + b"]",
                                  b"[" * (MAX_DEPTH + 1) + b"12345678901234567890" + b"]" * (MAX_DEPTH + 1)])
def test_nesting_past_the_limit_is_refused(text):
    with pytest.raises(InvalidJson, match=NESTED):
        loads(text)


@pytest.mark.parametrize("text, reason", [
    (b"1],[2" + b" " * 200 + b"[]" * 60, "Extra data"),
    (b"],[" + b"{}" * 60, "Expecting value"),
    (b"[" * 60 + b"[]," * 30 + b"1" + b"]" * 59, "Expecting"),  # one bracket short
    (b"   " + b"[]" * 60, "Extra data"),
])
def test_text_that_only_the_wrapping_arrays_would_complete_is_not_json(text, reason):
    with pytest.raises(InvalidJson, match=reason):
        loads(text)


def test_a_megabyte_of_small_values_is_checked_without_walking_them(monkeypatch):
    """A walk over 1 MB of ``[]`` took the gateway's loop half a second; orjson's parser checks it."""
    def walked(value):
        raise AssertionError("the values were walked")

    monkeypatch.setattr(jsonvalues, "problem", walked)
    value = loads(b"[" + b"[]," * 350_000 + b"[]]")
    assert len(value) == 350_001


def test_text_with_integers_past_64_bits_is_checked_without_walking_it(monkeypatch):
    """Such integers go to Python's parser (orjson would change them); their text was walked after it,
    a second of the loop for a megabyte of ``[]`` and one such integer. orjson checks it first."""
    def walked(value):
        raise AssertionError("the values were walked")

    monkeypatch.setattr(jsonvalues, "problem", walked)
    value = loads(b'{"a": [' + b"[]," * 350_000 + b'123456789012345678901234567890], "b": -12345678901234567890.5}')
    assert value["a"][-1] == 123456789012345678901234567890 and len(value["a"]) == 350_001
    assert value["b"] == -12345678901234567890.5


def test_more_arrays_and_objects_than_the_bound_are_refused_before_any_is_built():
    """44 MB of ``[]`` (an action's PUT may be 48 MB) took 8 s of the GIL to build; brackets inside
    strings, as in an action's code, do not count."""
    with pytest.raises(InvalidJson, match="more than 1000000 arrays and objects"):
        loads(b"[" + b"[]," * (jsonvalues.MAX_CONTAINERS + 1) + b"[]]")
    code = b"f([a,{b:[1]}]);" * (jsonvalues.MAX_CONTAINERS // 2)
    assert loads(b'{"code": "' + code + b'"}')["code"] == code.decode()
