"""Activation log lines as OpenWhisk records hold them, and what one line costs against the log limit.

OpenWhisk's log store counts every line with its envelope (the JSON the line travels in plus its
newline), so empty lines are not free. owx counts a line as the bytes it takes inside the stored
record: its JSON string (quotes and escapes included) and a separator. An empty stdout line costs
39 bytes, so a 10 MB limit holds about 270,000 of them.
"""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime
from json.encoder import (
    encode_basestring as _quote,  # the JSON string literal, non-ASCII kept
)

from owx.platform.types import LOG_TRUNCATED_MESSAGE


def timestamp(epoch: float) -> str:
    """OpenWhisk's log timestamp: ISO-8601 UTC with microseconds and a ``Z`` (27 characters)."""
    fraction, whole = math.modf(epoch)
    second, micro = divmod(int(whole) * 1_000_000 + round(fraction * 1e6), 1_000_000)  # datetime's rounding
    cached = _last_second
    if cached[0] != second:  # formatting the date and time costs ~6 us: once a second, not once a line
        cached = _second_text(second)
    return f"{cached[1]}.{micro:06d}Z"


def _second_text(second: int) -> tuple[int, str]:
    global _last_second
    _last_second = (second, datetime.fromtimestamp(second, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S"))
    return _last_second


_last_second: tuple[int, str] = (-1, "")  # the last second formatted (replaced whole: safe across threads)


def line(epoch: float, stream: str, text: str) -> str:
    """One record line: ``<timestamp> <stream>: <text>``."""
    return f"{timestamp(epoch)} {stream}: {text}"


def cost(record_line: str) -> int:
    """Bytes ``record_line`` takes in a stored record: its JSON string and a separator."""
    quoted = _quote(record_line)
    return (len(quoted) if quoted.isascii() else len(quoted.encode("utf-8", "replace"))) + 1


def cost_of_lines(prefix: str, text: str) -> int:
    """What the record lines ``prefix + line``, for each line of ``text``, cost together (`cost`
    summed, for a ``prefix`` JSON leaves as it is: a stamp and a stream), from one JSON string of
    ``text``: its escaped newlines, two characters each, stand for each line's quotes and separator."""
    return (text.count("\n") + 1) * (len(prefix) + 1) + cost(text) - 1


def truncated(limit_bytes: int) -> str:
    """The line that ends logs cut at ``limit_bytes`` (OpenWhisk's message, on stderr, stamped now)."""
    return line(time.time(), "stderr", LOG_TRUNCATED_MESSAGE.format(limit=limit_bytes))


def within(lines: list[str], limit_bytes: int) -> list[str]:
    """``lines`` up to ``limit_bytes`` of `cost`; when more would not fit, the ones that do and then
    the truncation line (itself not counted, as in OpenWhisk)."""
    kept: list[str] = []
    used = 0
    for record_line in lines:
        used += cost(record_line)
        if used > limit_bytes:
            kept.append(truncated(limit_bytes))
            break
        kept.append(record_line)
    return kept
