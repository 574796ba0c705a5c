"""Per-activation log collection from a container's stdout and stderr, as OpenWhisk does it.

The runtime writes ``XXX_THE_END_OF_A_WHISK_ACTIVATION_XXX`` on both streams after each
activation.  Lines are timestamped when they arrive and grouped into segments that a
sentinel closes; one activation takes the oldest closed segment of each stream, merged
by arrival time.  Each segment keeps at most the activation's log limit; anything past
it is dropped and the activation gets OpenWhisk's truncation message instead.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timezone

from owx.platform.types import LOG_TRUNCATED_MESSAGE

SENTINEL = "XXX_THE_END_OF_A_WHISK_ACTIVATION_XXX"
STREAMS = ("stdout", "stderr")
MISSING_LOGS_MESSAGE = "The action did not initialize or run as expected. Log data might be missing."


def timestamp(epoch: float) -> str:
    """OpenWhisk's log timestamp: ISO-8601 UTC with a ``Z``."""
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(slots=True)
class _Segment:
    lines: list[tuple[float, str, str]] = field(default_factory=list)  # (arrival, stream, text)
    size: int = 0
    truncated: bool = False


class _Stream:
    """Undecoded tail and segments of one stream."""

    def __init__(self) -> None:
        self.partial = b""
        self.closed: deque[_Segment] = deque()
        self.open = _Segment()


class LogCollector:
    """Fed raw bytes per stream by the fd watcher; hands out one activation's lines at a time."""

    def __init__(self, limit_bytes: int = 10 * 1024 * 1024) -> None:
        self.limit_bytes = limit_bytes  # set to the action's log limit when the container is initialised
        self._streams = {name: _Stream() for name in STREAMS}
        self._cond = threading.Condition()
        self._ended = False

    # -- producer side (watcher thread) -------------------------------------
    def feed(self, stream: str, chunk: bytes) -> None:
        """Add raw output of ``stream``; ``b""`` marks the end of that stream."""
        now = time.time()
        with self._cond:
            state = self._streams[stream]
            if not chunk:
                if state.partial:
                    self._add_line(state, stream, state.partial, now)
                    state.partial = b""
                return
            *complete, state.partial = (state.partial + chunk).split(b"\n")
            for raw in complete:
                self._add_line(state, stream, raw, now)
            if len(state.partial) > self.limit_bytes:  # a huge line without newline: cut it now
                self._add_line(state, stream, state.partial, now)
                state.partial = b""
            self._cond.notify_all()

    def end(self) -> None:
        """The container is gone: nothing more will arrive."""
        with self._cond:
            for name, state in self._streams.items():
                if state.partial:
                    self._add_line(state, name, state.partial, time.time())
                    state.partial = b""
            self._ended = True
            self._cond.notify_all()

    def _add_line(self, state: _Stream, stream: str, raw: bytes, when: float) -> None:
        text = raw.decode("utf-8", errors="replace").rstrip("\r")
        if text.strip() == SENTINEL:
            state.closed.append(state.open)
            state.open = _Segment()
            return
        segment = state.open
        if segment.truncated:
            return
        if segment.size + len(raw) > self.limit_bytes:
            segment.truncated = True
            return
        segment.size += len(raw)
        segment.lines.append((when, stream, text))

    # -- consumer side -------------------------------------------------------
    def collect(self, wait_s: float, limit_bytes: int | None = None) -> list[str]:
        """One activation's log lines, waiting up to ``wait_s`` for both sentinels.

        Without sentinels (the action died or hung) it returns what arrived so far
        followed by OpenWhisk's missing-data warning.
        """
        limit = self.limit_bytes if limit_bytes is None else limit_bytes
        deadline = time.monotonic() + wait_s
        with self._cond:
            while not all(s.closed for s in self._streams.values()) and not self._ended:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            complete = all(s.closed for s in self._streams.values())
            segments = [s.closed.popleft() if s.closed else self._take_open(s) for s in self._streams.values()]
        return _format(segments, limit, complete)

    def discard_pending(self) -> None:
        """Forget buffered output (a stem cell's start-up chatter before its first action)."""
        with self._cond:
            for state in self._streams.values():
                state.closed.clear()
                state.open = _Segment()

    @staticmethod
    def _take_open(state: _Stream) -> _Segment:
        segment, state.open = state.open, _Segment()
        return segment


def _format(segments: list[_Segment], limit: int, complete: bool) -> list[str]:
    merged = sorted((line for seg in segments for line in seg.lines), key=lambda item: item[0])
    out: list[str] = []
    used = 0
    truncated = any(seg.truncated for seg in segments)
    for when, stream, text in merged:
        used += len(text.encode())
        if used > limit:
            truncated = True
            break
        out.append(f"{timestamp(when)} {stream}: {text}")
    now = timestamp(time.time())
    if truncated:
        out.append(f"{now} stderr: {LOG_TRUNCATED_MESSAGE.format(limit=limit)}")
    elif not complete:
        out.append(f"{now} stderr: {MISSING_LOGS_MESSAGE}")
    return out
