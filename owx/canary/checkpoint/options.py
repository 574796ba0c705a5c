"""Tuning of a checkpoint store, read from the query string of its URL.

A stdlib dataclass rather than a pydantic model on purpose: this package runs inside
action runtimes, which are stdlib-only (the SQLite store must work there without extras).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Literal

from owx.canary.checkpoint.errors import BadStoreURL

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

Staging = Literal["auto", "kv", "spool", "none"]


@dataclass(frozen=True)
class StoreOptions:
    """Limits and retention of a checkpoint store.

    Retention: ``keep`` latest checkpoints by default; more (up to ``keep_max``) when
    checkpoints are frequent, fewer (down to one) when they are large. See
    :func:`owx.canary.checkpoint.retention.keep_count`.
    """

    blobs: Path | None = None
    """Blob tier directory (a shared filesystem when functions recover on other nodes). A network
    store without one keeps large values in the KV."""
    spool: Path | None = None
    """Local staging directory when ``stage=spool``; defaults to ``<blobs>/.spool``."""
    stage: Staging = "auto"
    """Where large values wait for the asynchronous flush: the KV, a local spool, or nowhere
    (``none``: written to the blob tier before the checkpoint is published). ``auto`` is the
    backend's choice: the KV for network stores, the spool for SQLite."""
    keep: int = 3
    keep_max: int = 10
    history_s: float = 30.0
    """Checkpoints that come faster than ``history_s / keep`` apart keep more history."""
    budget: int = 512 * MiB
    """Upper bound on the bytes of retained checkpoints of one function."""
    inline_max: int = 256 * KiB
    """Largest value kept inside the KV record (the KV tier's per-value limit)."""
    record_max: int = 1 * MiB
    """Largest total of inline values in one record."""
    stage_max: int = 256 * MiB
    """Largest segment that is staged; larger ones go straight to the blob tier. Without a blob
    tier, the largest checkpoint accepted."""
    max_bytes: int = 1 * GiB
    """Largest checkpoint accepted; larger ones are refused with CheckpointTooLarge."""
    timeout: float = 2.0
    """Seconds to connect to / wait on a network KV before it counts as unreachable."""
    prefix: str = "owx:ckpt:"
    """Key prefix (Redis)."""
    cache: str = "owx-checkpoints"
    """Cache name (Ignite)."""

    def __post_init__(self) -> None:
        for name in ("keep", "keep_max", "budget", "inline_max", "record_max", "max_bytes"):
            if getattr(self, name) < 1:
                raise BadStoreURL(f"store option {name} must be at least 1, got {getattr(self, name)}")
        if self.stage_max < 0:
            raise BadStoreURL(f"store option stage_max must not be negative, got {self.stage_max}")
        if self.keep > self.keep_max:
            raise BadStoreURL(f"store option keep ({self.keep}) must not exceed keep_max ({self.keep_max})")
        if not (self.history_s >= 0 and math.isfinite(self.history_s)):
            raise BadStoreURL(f"store option history_s must be a non-negative number, got {self.history_s}")
        if not self.timeout > 0:
            raise BadStoreURL(f"store option timeout must be positive, got {self.timeout}")
        if self.stage not in ("auto", "kv", "spool", "none"):
            raise BadStoreURL(f"store option stage must be auto, kv, spool or none, got {self.stage!r}")

    @classmethod
    def from_query(cls, query: dict[str, str], **defaults: object) -> StoreOptions:
        """Build options from URL query parameters over ``defaults``; unknown names are errors."""
        known = {f.name: f for f in fields(cls)}
        values: dict[str, object] = dict(defaults)
        for name, raw in query.items():
            if name not in known:
                raise BadStoreURL(f"unknown store option {name!r}; known: {', '.join(sorted(known))}")
            values[name] = _convert(name, raw)
        return cls(**values)  # type: ignore[arg-type]


_SIZE = re.compile(r"^\s*(\d+)\s*([kmg]?)(i?b)?\s*$", re.IGNORECASE)
_SIZES = {"budget", "inline_max", "record_max", "stage_max", "max_bytes"}
_INTS = {"keep", "keep_max"}
_FLOATS = {"history_s", "timeout"}
_PATHS = {"blobs", "spool"}


def parse_size(text: str) -> int:
    """``"10MB"``, ``"256KiB"``, ``"1g"`` or a plain byte count (binary multiples)."""
    match = _SIZE.match(text)
    if not match:
        raise BadStoreURL(f"not a size: {text!r} (use bytes or a K/M/G suffix)")
    number, unit, _ = match.groups()
    return int(number) * {"": 1, "k": KiB, "m": MiB, "g": GiB}[unit.lower()]


def _convert(name: str, raw: str) -> object:
    if name in _SIZES:
        return parse_size(raw)
    try:
        if name in _INTS:
            return int(raw)
        if name in _FLOATS:
            return float(raw)
    except ValueError as exc:
        raise BadStoreURL(f"store option {name}={raw!r} is not a number") from exc
    if name in _PATHS:
        path = Path(raw)
        if not path.is_absolute():
            raise BadStoreURL(f"store option {name} must be an absolute path, got {raw!r}")
        return path
    return raw
