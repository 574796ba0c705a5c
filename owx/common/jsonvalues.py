"""JSON values owx accepts, stores and forwards: finite numbers, valid Unicode, bounded nesting.

Python's ``json`` reads ``NaN``, ``Infinity`` and ``1e400`` (as a float infinity), and lone
surrogates (``"\\ud800"``), none of which a store can write back as JSON, and it recurses
without a bound below the interpreter's. Everything that crosses the API, and every action
result, passes through here first.

orjson parses and encodes on the hot path (five to ten times Python's ``json`` here): it refuses
NaN, infinities and lone surrogates itself, and its C parser checks the nesting too, of text with
more than ``MAX_DEPTH`` brackets (`_fast_loads`); text of more than ``MAX_CONTAINERS`` arrays and objects
is refused before any is built. Two cases go to Python's ``json`` instead, which
keeps what orjson would change: integers of more than 18 digits (orjson reads them as floats, or
cannot write them) and anything orjson refuses (for the exact reason in the error). Text with such
integers is checked by orjson first, with each of them read as ``0`` (the same structure), so that
Python's parser is given only valid JSON and its value needs no walk (a megabyte of ``[]`` with one
long integer took a second of the loop walked).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import orjson

MAX_DEPTH = 100  # nesting of arrays and objects; real payloads stay far below
MAX_CONTAINERS = 1_000_000  # arrays and objects in one text: 15 million of them (44 MB of []) took 8 s to build
_DIGIT_MARKS = bytes(0x30 if 0x30 <= byte <= 0x39 else 0x2E for byte in range(256))  # digits as "0", the rest "."
_LONG_RUN = b"0" * 19  # 19 digits in a row, once `_DIGIT_MARKS` translated the text
_LONG_NUMBER = re.compile(rb"[0-9]{19,}")
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')  # a JSON string (unrolled: linear, 0.3 s for 47 MB)


class InvalidJson(ValueError):
    """The text is not JSON owx accepts; the message says why."""


def _constant(name: str) -> float:
    raise InvalidJson(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise InvalidJson(f"the number {text[:40]} is out of range")
    return value


def loads(raw: bytes | str) -> Any:
    """Parse ``raw`` strictly; `InvalidJson` with the reason otherwise."""
    if isinstance(raw, bytes):
        # a translation and a substring search: a regular expression's search took 150 ms of 10 MB
        # (a record's logs), holding the interpreter lock every tenant's requests wait for
        long_digits = raw.translate(_DIGIT_MARKS).find(_LONG_RUN) >= 0
        try:
            value = _fast_loads(_LONG_NUMBER.sub(b"0", raw) if long_digits else raw)
        except (orjson.JSONDecodeError, _NotWrapped):
            pass  # Python's json says exactly why
        else:
            return _python_loads(raw) if long_digits else value
    try:
        value = json.loads(raw, parse_constant=_constant, parse_float=_finite)
    except RecursionError:
        raise InvalidJson(f"nested deeper than {MAX_DEPTH} levels") from None
    except InvalidJson:
        raise
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError, int too long, bad UTF-8
        raise InvalidJson(str(exc)) from None
    problem_found = problem(value)
    if problem_found:
        raise InvalidJson(problem_found)
    return value


def _python_loads(raw: bytes) -> Any:
    """Python's parse of JSON orjson found valid, keeping integers of any length (no walk needed)."""
    try:
        return json.loads(raw, parse_float=_finite)
    except ValueError as exc:  # an integer past Python's digit limit
        raise InvalidJson(str(exc)) from None


class _NotWrapped(ValueError):
    """Text that parsed only thanks to the wrapping brackets around it (such as ``1],[2``): not JSON."""


def _orjson_depth() -> int | None:
    """How many levels of nesting this orjson parses (it refuses deeper), or None when it parses 4,096."""
    def parses(levels: int) -> bool:
        try:
            orjson.loads(b"[" * levels + b"]" * levels)
        except orjson.JSONDecodeError:
            return False
        return True

    low, high = 1, 4096
    if parses(high):
        return None
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if parses(middle) else (low, middle - 1)
    return low


_ORJSON_DEPTH = _orjson_depth()
_WRAPS = None if _ORJSON_DEPTH is None or _ORJSON_DEPTH <= MAX_DEPTH else _ORJSON_DEPTH - MAX_DEPTH


def _fast_loads(raw: bytes) -> Any:
    """orjson's parse, held to ``MAX_DEPTH`` without walking the value: text with more brackets than
    that is parsed inside as many arrays as orjson's own depth limit leaves ``MAX_DEPTH`` levels for,
    so that its C parser refuses deeper nesting (a walk over 1 MB of ``[]`` took the loop half a
    second); the arrays around it are then taken off."""
    brackets = raw.count(b"[") + raw.count(b"{")
    if brackets <= MAX_DEPTH:
        return orjson.loads(raw)
    if brackets > MAX_CONTAINERS:  # or brackets in strings, as in an action's code: counted without them
        outside = _STRING.sub(b"", raw)
        if outside.count(b"[") + outside.count(b"{") > MAX_CONTAINERS:
            raise InvalidJson(f"more than {MAX_CONTAINERS} arrays and objects")
    if _WRAPS is None:
        value = orjson.loads(raw)
        if found := problem(value):
            raise InvalidJson(found)
        return value
    try:
        value = orjson.loads(b"[" * _WRAPS + raw + b"]" * _WRAPS)
    except orjson.JSONDecodeError as exc:
        if "depth" not in str(exc):  # orjson names its depth limit; else parse alone: not JSON, or too deep
            orjson.loads(raw)
        raise InvalidJson(f"nested deeper than {MAX_DEPTH} levels") from None
    for _ in range(_WRAPS):
        if not isinstance(value, list) or len(value) != 1:
            raise _NotWrapped
        value = value[0]
    return value


def dumps(value: Any) -> bytes:
    """``value`` (valid, see `problem`) as compact UTF-8 JSON, as the stores write it."""
    try:
        return orjson.dumps(value)
    except TypeError:  # an integer beyond 64 bits
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def problem(value: Any) -> str | None:
    """Why ``value`` is not storable JSON (non-finite number, lone surrogate, too deep, not a
    JSON type), or None. Iterative, so any depth is examined without recursion."""
    pending: list[tuple[Any, int]] = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, str):
            if not _valid_text(item):
                return "a string holds a lone surrogate (not valid Unicode)"
        elif isinstance(item, bool) or item is None or isinstance(item, int):
            continue
        elif isinstance(item, float):
            if not math.isfinite(item):
                return f"{item} is not a JSON number"
        elif isinstance(item, (list, tuple, dict)):
            if depth > MAX_DEPTH:
                return f"nested deeper than {MAX_DEPTH} levels"
            if isinstance(item, dict):
                for key, child in item.items():
                    if not isinstance(key, str):
                        return f"object key {key!r:.40} is not a string"
                    if not _valid_text(key):
                        return "an object key holds a lone surrogate (not valid Unicode)"
                    pending.append((child, depth + 1))
            else:
                pending.extend((child, depth + 1) for child in item)
        else:
            return f"{type(item).__name__} is not a JSON type"
    return None


def encoded_size(value: Any) -> int:
    """Bytes of ``value`` as compact UTF-8 JSON (how the stores write it); ``value`` must be valid."""
    return len(dumps(value))


def _valid_text(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
