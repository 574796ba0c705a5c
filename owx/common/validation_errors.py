"""pydantic's complaints as one line a 400's message can hold."""

from __future__ import annotations

from pydantic import ValidationError


def problems(exc: ValidationError, whole: str = "value") -> str:
    """``field.path: message; ...`` (``whole`` names a complaint about the value itself; a validator's
    own message without pydantic's "Value error, " before it)."""
    return "; ".join(f"{'.'.join(str(p) for p in error['loc']) or whole}: {error['msg'].removeprefix('Value error, ')}"
                     for error in exc.errors())
