"""Entity versions as OpenWhisk keeps them: ``major.minor.patch``, bumped on every update unless the
PUT body names one."""

from __future__ import annotations

import re
from typing import Any

FIRST = "0.0.1"
MALFORMED = "semantic version malformed"
_PART = re.compile(r"[+-]?[0-9]+")
_INT_MAX = 2**31 - 1  # OpenWhisk's parts are Java ints


def parse(text: str) -> str:
    """``text`` as OpenWhisk reads a version: up to three dot-separated integers (missing ones 0, more
    ignored), none negative and not all 0, written back as ``major.minor.patch``; ValueError if not."""
    parts = text.split(".")
    while parts and not parts[-1]:  # Java's split drops trailing empty parts
        parts.pop()
    parts = parts[:3]
    if not all(_PART.fullmatch(part) for part in parts):
        raise ValueError(MALFORMED)
    numbers = [int(part) for part in parts] + [0] * (3 - len(parts))
    if any(n < 0 or n > _INT_MAX for n in numbers) or not any(numbers):
        raise ValueError(MALFORMED)
    return ".".join(map(str, numbers))


def next_version(given: str | None, current: dict[str, Any] | None) -> str:
    """The version an entity gets on a PUT: the one the body gave, else the stored document's next
    patch (``FIRST`` for a new entity: ``current`` None or empty)."""
    if given is not None:
        return given
    if not current:
        return FIRST
    try:
        major, minor, patch = parse(current.get("version", FIRST)).split(".")
    except ValueError:  # stored before versions were checked (owx kept any string for triggers and rules)
        return FIRST
    return f"{major}.{minor}.{int(patch) + 1}"
