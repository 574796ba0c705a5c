"""What an action's own activations measured, per action revision and input size class, kept in the
gateway's entity store (collection ``disdel.limits``), and the limits it implies."""

from __future__ import annotations

import json
import math
import threading
from dataclasses import dataclass, field
from typing import Any

from owx.gateway.stores import Conflict, EntityStore

COLLECTION = "disdel.limits"
KEPT = 20  # measurements kept per class: the newest
MB = 1024 * 1024


def size_class(args: Any) -> int:
    """The input's size class: its JSON length's binary order of magnitude (0, 1, 2-3, 4-7, ... bytes)."""
    return len(json.dumps(args, separators=(",", ":"), default=str)).bit_length()


@dataclass
class Measurements:
    """One class's measured peaks (bytes) and durations (ms), and the limits it failed with."""

    peaks: list[int] = field(default_factory=list)
    durations: list[int] = field(default_factory=list)
    failed_memory_mb: int = 0  # the largest memory it ran out of
    failed_timeout_ms: int = 0  # the longest timeout it ran out of

    @classmethod
    def of(cls, doc: dict[str, Any]) -> "Measurements":
        return cls(list(doc.get("peaks", ())), list(doc.get("durations", ())), int(doc.get("failed_memory_mb", 0)),
                   int(doc.get("failed_timeout_ms", 0)))

    def as_doc(self) -> dict[str, Any]:
        return {"peaks": self.peaks[-KEPT:], "durations": self.durations[-KEPT:],
                "failed_memory_mb": self.failed_memory_mb, "failed_timeout_ms": self.failed_timeout_ms}

    def memory_mb(self, margin: float, growth: float) -> int | None:
        """The memory the measurements call for (None: nothing measured nor failed): the largest peak
        with ``margin``, and more than any limit it ran out of (``growth`` times it)."""
        wanted = [math.ceil(max(self.peaks) * margin / MB)] if self.peaks else []
        if self.failed_memory_mb:
            wanted.append(math.ceil(self.failed_memory_mb * growth))
        return _round_up(max(wanted), 16) if wanted else None

    def timeout_ms(self, margin: float, growth: float, minimum_ms: int) -> int | None:
        """The timeout they call for: the longest run with ``margin`` (at least ``minimum_ms``), and more
        than any timeout it ran out of."""
        wanted = [max(minimum_ms, math.ceil(max(self.durations) * margin))] if self.durations else []
        if self.failed_timeout_ms:
            wanted.append(math.ceil(self.failed_timeout_ms * growth))
        return max(wanted) if wanted else None


class LimitHistory:
    """Measurements by (namespace, ``action@revision``, size class) in an entity store."""

    def __init__(self, store: EntityStore) -> None:
        self.store = store
        self._lock = threading.Lock()  # read-modify-write of one gateway's activations

    def get(self, namespace: str, action: str, size: int) -> Measurements:
        entity = self.store.get(namespace, COLLECTION, _name(action, size))
        return Measurements.of(entity.doc) if entity else Measurements()

    def learn(self, namespace: str, action: str, size: int, *, peak_bytes: int | None = None,
              duration_ms: int | None = None, failed_memory_mb: int = 0, failed_timeout_ms: int = 0) -> None:
        """Add one activation's measurements (or the limit it failed with)."""
        name = _name(action, size)
        with self._lock:
            for _ in range(5):  # another gateway on the same store may write in between
                entity = self.store.get(namespace, COLLECTION, name)
                known = Measurements.of(entity.doc) if entity else Measurements()
                if peak_bytes:
                    known.peaks.append(int(peak_bytes))
                if duration_ms is not None:
                    known.durations.append(int(duration_ms))
                known.failed_memory_mb = max(known.failed_memory_mb, failed_memory_mb)
                known.failed_timeout_ms = max(known.failed_timeout_ms, failed_timeout_ms)
                try:
                    self.store.put(namespace, COLLECTION, name, known.as_doc(), entity.rev if entity else None)
                    return
                except Conflict:
                    continue


def _name(action: str, size: int) -> str:
    return f"{action}/size-{size}"


def _round_up(value: int, step: int) -> int:
    return -(-value // step) * step
