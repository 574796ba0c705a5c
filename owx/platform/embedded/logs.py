"""Per-activation log collection from a container's stdout and stderr, as OpenWhisk does it.

The runtime writes ``XXX_THE_END_OF_A_WHISK_ACTIVATION_XXX`` on both streams after each
activation.  Lines are stamped when they arrive and grouped into segments that a sentinel
closes; one activation takes the oldest closed segment of each stream, merged by arrival time.

Memory stays bounded whatever the action prints.  Each line counts its full cost against the
activation's log limit (`owx.platform.loglines.cost`: an empty line is not free), a segment
stops keeping lines once the limit is reached (the activation then gets OpenWhisk's truncation
message), a line without a newline is cut at the limit, and segments waiting to be collected
are bounded in number and bytes (an action printing sentinels of its own gains nothing).
"""

from __future__ import annotations

import heapq
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from owx.platform import loglines
from owx.platform.types import LOG_FAILURE_MESSAGE

SENTINEL = "XXX_THE_END_OF_A_WHISK_ACTIVATION_XXX"
_SENTINEL_BYTES = SENTINEL.encode()
_SENTINEL_LINE = _SENTINEL_BYTES + b"\n"
STREAMS = ("stdout", "stderr")
MAX_PENDING_SEGMENTS = 1024  # closed, not yet collected segments per stream (one per activation in flight)
MAX_PENDING_LIMITS = 4  # bytes they may hold together, in log limits
FREE_BYTES = 1024 * 1024  # an activation's output read as it comes, in record bytes; the rest in turns (`held`)
_SENTINEL_LINE_MAX = len(SENTINEL) + 64  # longest partial line that may still turn out to be a sentinel
_STAMP = len(loglines.timestamp(0))  # record lines start with a fixed-width, sortable timestamp


@dataclass(slots=True)
class _Segment:
    lines: list[str] = field(default_factory=list)  # record lines, in arrival order
    size: int = 0  # their cost
    truncated: bool = False


@dataclass(slots=True)
class _Stream:
    """Undecoded tail and segments of one stream."""

    partial: bytearray = field(default_factory=bytearray)
    discarding: bool = False  # the current line is past the limit: drop it up to its newline
    closed: deque[_Segment] = field(default_factory=deque)
    pending_bytes: int = 0  # cost held in ``closed``
    open: _Segment = field(default_factory=_Segment)


class LogCollector:
    """Fed raw bytes per stream by the fd watcher; hands out one activation's lines at a time."""

    def __init__(self, limit_bytes: int = 10 * 1024 * 1024) -> None:
        self.limit_bytes = limit_bytes  # set to the action's log limit when the container is initialised
        self._streams = {name: _Stream() for name in STREAMS}
        self._lock = threading.RLock()  # alone where nobody waits (cheaper to enter than the condition)
        self._cond = threading.Condition(self._lock)
        self._waiting = 0  # threads waiting in `collect`: only they need a notification
        self._ended = False
        self._on_complete: list[Callable[[], None]] = []

    # -- producer side (the platform's event loop) -------------------------------------
    def feed(self, stream: str, chunk: bytes) -> bool:
        """Add raw output of ``stream``; ``b""`` marks the end of that stream. True when its reader
        may slow down now (see :meth:`held`)."""
        with self._lock:
            state = self._streams[stream]
            if chunk == _SENTINEL_LINE and not state.partial and not state.discarding:
                self._close(state)  # most chunks: an activation's end, alone
            elif not self._add_chunk(state, _Prefix(stream), chunk):
                return self._held(state)
            if self._waiting:
                self._cond.notify_all()
            waiting = self._complete_callbacks()
            held = self._held(state)
        for callback in waiting:
            callback()
        return held

    def _add_chunk(self, state: _Stream, prefix: _Prefix, chunk: bytes) -> bool:
        """Take ``chunk`` into ``state``; True if it completed lines."""
        if not chunk:
            self._flush(state, prefix)
            return False
        newline = chunk.rfind(b"\n")
        if newline < 0:
            self._extend(state, chunk, prefix)
            return False
        if state.open.truncated and _SENTINEL_BYTES not in state.partial[-len(_SENTINEL_BYTES):] + chunk:
            lines = None  # past the limit and no sentinel in sight: every line this completes is dropped
        elif state.discarding:  # the first line this completes is the end of one cut: it is dropped
            cut = chunk.find(b"\n", 0, newline)
            lines = None if cut < 0 else chunk[cut + 1:newline]
        else:
            lines = bytes(state.partial) + chunk[:newline]
        state.partial.clear()
        state.discarding = False
        if lines is not None:
            self._add_lines(state, lines, prefix)
        self._extend(state, chunk[newline + 1:], prefix)
        return True

    def end(self) -> None:
        """The container is gone: nothing more will arrive."""
        with self._lock:
            for name, state in self._streams.items():
                self._flush(state, _Prefix(name))
            self._ended = True
            self._cond.notify_all()
            waiting = self._complete_callbacks()
        for callback in waiting:
            callback()

    def _complete_callbacks(self) -> list[Callable[[], None]]:
        if not self._on_complete or not self._complete():
            return []
        waiting, self._on_complete = self._on_complete, []
        return waiting

    def _flush(self, state: _Stream, prefix: _Prefix) -> None:
        """The stream ended: its unfinished line, if any, is a line."""
        if state.partial and not state.discarding:
            self._add_lines(state, bytes(state.partial), prefix)
        state.partial.clear()
        state.discarding = False

    def _extend(self, state: _Stream, piece: bytes, prefix: _Prefix) -> None:
        """Add bytes of the unfinished line, cutting it when it cannot be kept whole."""
        if state.discarding or not piece:
            return
        state.partial += piece
        truncated = state.open.truncated
        if len(state.partial) > (_SENTINEL_LINE_MAX if truncated else max(self.limit_bytes, _SENTINEL_LINE_MAX)):
            if not truncated:
                self._add_lines(state, bytes(state.partial), prefix)  # cannot fit: the segment truncates
            state.partial.clear()  # neither kept nor a sentinel: skip the rest of this line
            state.discarding = True

    def _add_lines(self, state: _Stream, lines: bytes, prefix: _Prefix) -> None:
        """Complete lines, joined by newlines (the last without its own), all arrived at the time in
        ``prefix``: the sentinels among them close segments, the lines between are `_add_run`."""
        start = 0  # where the lines not yet added begin
        found = lines.find(_SENTINEL_BYTES)
        while found >= 0:
            begin = lines.rfind(b"\n", 0, found) + 1
            end = lines.find(b"\n", found)
            end = len(lines) if end < 0 else end
            if lines[begin:end].strip() == _SENTINEL_BYTES:
                if begin > start:
                    self._add_run(state.open, lines[start:begin - 1], prefix)
                self._close(state)
                start = end + 1
            found = lines.find(_SENTINEL_BYTES, end)
        if start <= len(lines):
            self._add_run(state.open, lines[start:], prefix)

    def _add_run(self, segment: _Segment, lines: bytes, prefix: _Prefix) -> None:
        """Lines none of which is a sentinel, joined by newlines: all at once if they fit in the limit
        (most output: short lines cost a fifth of taking them one by one), else one by one up to it."""
        if segment.truncated:
            return
        text = lines.decode("utf-8", errors="replace")  # as each line alone: a newline ends any sequence
        if "\r" in text:
            text = "\n".join([line.rstrip("\r") for line in text.split("\n")])
        start = prefix.text
        size = loglines.cost_of_lines(start, text)
        if segment.size + size <= self.limit_bytes:
            segment.lines.extend([start + line for line in text.split("\n")])
            segment.size += size
            return
        for line in text.split("\n"):
            record_line = start + line
            cost = loglines.cost(record_line)
            if segment.size + cost > self.limit_bytes:
                segment.truncated = True
                return
            segment.size += cost
            segment.lines.append(record_line)

    def _close(self, state: _Stream) -> None:
        segment, state.open = state.open, _Segment()
        if self._crowded(state, segment.size) and state.closed:
            state.closed[-1].truncated = True  # its lines are dropped, and the latest segment says so
            return
        state.closed.append(segment)
        state.pending_bytes += segment.size

    # -- consumer side -------------------------------------------------------
    def when_complete(self, callback: Callable[[], None]) -> bool:
        """True if an activation's lines are complete (both sentinels seen, or the container ended);
        else False, and ``callback()`` is called once they are (on the feeding thread)."""
        with self._lock:
            if self._complete():
                return True
            self._on_complete.append(callback)
            return False

    def held(self, stream: str | None = None) -> bool:
        """Whether the reader of ``stream`` (None: of one carrying both, held if either is) may slow
        down now: its activation already printed ``FREE_BYTES`` (each activation's first lines are
        read as they come), or printed past the log limit (what arrives is dropped), or the segments
        waiting to be collected fill their bound (an action printing sentinels of its own). Its
        lines then arrive later, none is lost: the action waits for its pipe."""
        with self._lock:
            states = self._streams.values() if stream is None else (self._streams[stream],)
            return any(self._held(state) for state in states)

    def _held(self, state: _Stream) -> bool:
        return state.open.truncated or state.open.size > FREE_BYTES or self._crowded(state)

    def _crowded(self, state: _Stream, adding: int = 0) -> bool:
        """Whether ``state``'s waiting segments are at their bound (with ``adding`` bytes more)."""
        return (len(state.closed) >= MAX_PENDING_SEGMENTS
                or state.pending_bytes + adding > MAX_PENDING_LIMITS * self.limit_bytes)

    def complete(self) -> bool:
        """Whether an activation's lines are all here (both sentinels seen, or the container ended)."""
        with self._lock:
            return self._complete()

    def _complete(self) -> bool:
        for state in self._streams.values():
            if not state.closed:
                return self._ended
        return True

    def collect(self, wait_s: float, limit_bytes: int | None = None) -> list[str]:
        """One activation's log lines, waiting up to ``wait_s`` for both sentinels.

        Without sentinels (the action died or hung) it returns what arrived so far
        followed by OpenWhisk's missing-data warning.
        """
        with self._lock:
            if wait_s > 0 and not self._complete():
                self._wait_complete(time.monotonic() + wait_s)
            return self._taken(limit_bytes)

    def take(self, limit_bytes: int | None = None) -> list[str] | None:
        """One activation's log lines if they are all here now (:meth:`complete`), else None (and
        nothing is taken): :meth:`collect` without a wait, for the event loop."""
        with self._lock:
            return self._taken(limit_bytes) if self._complete() else None

    def _taken(self, limit_bytes: int | None) -> list[str]:
        """Take one activation's lines, what is missing said at their end (under the lock)."""
        limit = self.limit_bytes if limit_bytes is None else limit_bytes
        complete = all(s.closed for s in self._streams.values())
        segments = [self._take(s) for s in self._streams.values()]
        if complete and not _printed(segments):
            return []  # most activations print nothing
        return _format(segments, limit, complete)

    def _wait_complete(self, deadline: float) -> None:
        """Wait until an activation's lines are complete, or ``deadline`` (under the lock)."""
        while not self._complete():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self._waiting += 1
            try:
                self._cond.wait(remaining)
            finally:
                self._waiting -= 1

    def discard_pending(self) -> None:
        """Forget buffered output (a stem cell's start-up chatter before its first action)."""
        with self._lock:
            for name in STREAMS:
                self._streams[name] = _Stream()
            self._on_complete.clear()

    @staticmethod
    def _take(state: _Stream) -> _Segment:
        if state.closed:
            segment = state.closed.popleft()
            state.pending_bytes -= segment.size
            return segment
        segment, state.open = state.open, _Segment()
        return segment


class _Prefix:
    """A record line's ``<timestamp> <stream>: `` for output that arrived now, formatted only if a
    line needs it (most chunks are a sentinel alone)."""

    __slots__ = ("_stamp", "_stream", "_text")

    def __init__(self, stream: str) -> None:
        self._stream, self._stamp, self._text = stream, time.time(), None

    @property
    def text(self) -> str:
        if self._text is None:
            self._text = loglines.line(self._stamp, self._stream, "")
        return self._text


def _printed(segments: list[_Segment]) -> bool:
    """Whether the taken segments hold a line or were cut."""
    for segment in segments:
        if segment.lines or segment.truncated:
            return True
    return False


def _format(segments: list[_Segment], limit: int, complete: bool) -> list[str]:
    """The taken segments' lines merged by arrival, within ``limit``, with what is missing said at the end
    (the segments' own lists may be reused: they were taken)."""
    printed = [seg.lines for seg in segments if seg.lines]
    merged = printed[0] if len(printed) == 1 else list(heapq.merge(*printed, key=lambda line: line[:_STAMP]))
    # the lines' costs were counted as they came: only output over the limit is counted again, to cut it
    out = merged if sum(seg.size for seg in segments) <= limit else loglines.within(merged, limit)
    if len(out) == len(merged) and any(seg.truncated for seg in segments):
        out.append(loglines.truncated(limit))
    elif len(out) == len(merged) and not complete:
        out.append(loglines.line(time.time(), "stderr", LOG_FAILURE_MESSAGE))
    return out
