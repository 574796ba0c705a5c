"""The activation log: a write-ahead log that makes an activation record or accepted entry
durable with one append, before any database has it.

Why: a database commit costs tens of µs and a thread hand-off per record, most of a warm
invocation's budget; one ``os.write`` to an append-only file costs a few µs. Once `append`
returned, the entry survives the gateway's death (SIGKILL) but not a power cut (no fsync): the
level of the SQLite store's WAL with ``synchronous=NORMAL``. The database is written behind, and
`committed` tells the log what it holds.

Files: segments ``<number>.log`` (zero-padded, increasing) in a directory one process owns. One
line per entry: ``r<TAB>id<TAB>namespace<TAB>name<TAB>start<TAB>json`` for a record (``o`` instead
of ``r``: a record of a web action's outside caller's), ``a<TAB>id<TAB>namespace<TAB>json`` for an
accepted entry. No field holds a tab or a newline
(validation refuses them in namespaces and names, ids never have them, `encode_doc`'s JSON escapes
them), so lines split without parsing JSON. A last line without its newline is an append the
process's death cut short: it was never acknowledged, and is ignored.

An accepted entry is *open* until its activation's record is appended. Once ``segment_bytes`` were
appended to a segment, the next append starts a new one that first holds the open accepted entries
again, so a segment is needed only until the database has committed its records; then `committed`
deletes it.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from owx.gateway.stores.activations import AcceptedRow, ActivationRow, Row
from owx.gateway.stores.base import StoreUnavailable
from owx.gateway.stores.ownership import own

log = logging.getLogger(__name__)

SEGMENT_BYTES = 64 * 1024 * 1024
_SUFFIX = ".log"
_APPEND = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
_CHUNK_BYTES = 1024 * 1024  # per write when a segment starts with many entries


@dataclass(frozen=True)
class Replayed:
    """What a log held at open: the records (first of each id) with their new sequence numbers,
    and the accepted entries that have no record."""

    records: list[tuple[int, ActivationRow]]
    accepted: list[AcceptedRow]
    last_alive_ms: int | None  # when the run that wrote the segments was last known alive (None: no segment)


def encode(row: Row) -> bytes:
    """The log line of ``row``."""
    if isinstance(row, ActivationRow):
        kind = "o" if row.outsider else "r"
        return f"{kind}\t{row.activation_id}\t{row.namespace}\t{row.name}\t{row.start}\t{row.text}\n".encode()
    return f"a\t{row.activation_id}\t{row.namespace}\t{row.text}\n".encode()


def decode(line: bytes) -> Row:
    """The row of one log line (without its newline); `ValueError` if it is not one."""
    kind, rest = line.decode().split("\t", 1)
    if kind in ("r", "o"):
        activation_id, namespace, name, start, text = rest.split("\t", 4)
        return ActivationRow(activation_id, namespace, name, int(start), text, kind == "o")
    if kind == "a":
        activation_id, namespace, text = rest.split("\t", 2)
        return AcceptedRow(activation_id, namespace, text)
    raise ValueError(f"unknown entry kind {kind!r:.20}")


class ActivationLog:
    """Append-only segments in ``directory``; thread-safe (one lock, held for one write)."""

    def __init__(self, directory: Path, segment_bytes: int = SEGMENT_BYTES) -> None:
        self.directory = directory
        self._segment_bytes = segment_bytes
        self._lock = threading.Lock()
        self._owner = own(directory / "lock", f"activation log {directory}")
        self._fd = -1  # the current segment, open from `replay` to `close`
        self._number = 0
        self._size = 0
        self._room = 0  # bytes the current segment takes before the next append starts a new one
        self._seq = 0
        self._last_record = 0  # sequence of the current segment's last record
        self._committed = 0
        self._older: list[tuple[Path, int]] = []  # earlier segments and the sequence of their last record
        self._open: dict[str, AcceptedRow] = {}

    def replay(self) -> Replayed:
        """Read what earlier runs left (call once, before `append`): then write it again to a new
        segment and only then delete the old ones, so a second crash during start-up loses nothing.
        That segment goes like any other once the database has committed its records (`committed`
        with their sequence numbers), and appends go to a segment after it: a restart carries over
        only what the database may lack. Raises `StoreUnavailable` if the segments cannot be read
        or rewritten."""
        with self._lock:
            try:
                old = sorted((p for p in self.directory.iterdir() if p.suffix == _SUFFIX and p.stem.isdigit()),
                             key=lambda p: int(p.stem))
                records: dict[str, ActivationRow] = {}
                accepted: dict[str, AcceptedRow] = {}
                for path in old:
                    for row in _read(path):
                        if isinstance(row, ActivationRow):
                            records.setdefault(row.activation_id, row)
                        else:
                            accepted.setdefault(row.activation_id, row)
                self._open = {aid: entry for aid, entry in accepted.items() if aid not in records}
                last_alive = max((path.stat().st_mtime_ns // 1_000_000 for path in old), default=None)
                number = int(old[-1].stem) + 1 if old else 1
                self._start_segment(number, [*records.values(), *self._open.values()])
                for path in old:
                    path.unlink()
                self._older.append((self._path(number), len(records)))
                self._start_segment(number + 1, self._open.values())
            except OSError as err:
                raise StoreUnavailable(f"cannot replay activation log {self.directory}: {err}") from err
            self._seq = len(records)
            self._drop_committed()  # nothing to commit: gone at once
            return Replayed(list(enumerate(records.values(), 1)), list(self._open.values()), last_alive)

    def append(self, row: Row) -> int:
        """Write ``row`` with one ``os.write``, durable on return; its sequence number (increasing).

        Raises `OSError` if it cannot be written (a full disk), leaving nothing of it in the file."""
        line = encode(row)
        with self._lock:
            if self._fd < 0:
                raise OSError(errno.EBADF, f"activation log {self.directory} is not open")
            if self._room <= 0:
                self._rotate()
            try:
                written = os.write(self._fd, line)
            except OSError:
                self._cut()
                raise
            if written < len(line):
                self._cut()
                raise OSError(errno.ENOSPC, f"activation log {self.directory}: {written} of {len(line)} bytes written")
            self._size += written
            self._room -= written
            self._seq += 1
            if isinstance(row, ActivationRow):
                self._open.pop(row.activation_id, None)
                self._last_record = self._seq
            else:
                self._open[row.activation_id] = row
            return self._seq

    def committed(self, seq: int) -> None:
        """Every record up to sequence ``seq`` is in the database: delete the earlier segments that
        hold no other record. Never raises (a segment that cannot be deleted is tried again later)."""
        with self._lock:
            self._committed = max(self._committed, seq)
            self._drop_committed()

    def beat(self) -> None:
        """Mark its writer alive now, in the current segment's modification time (as every append
        does): after a crash, the latest such time is when the run that died was last known alive."""
        with self._lock:
            if self._fd >= 0:
                os.utime(self._fd)

    def recorded(self, activation_ids: Iterable[str]) -> None:
        """Records the database committed without the log (their `append` failed): their accepted
        entries are no longer open."""
        with self._lock:
            for activation_id in activation_ids:
                self._open.pop(activation_id, None)

    def open_accepted(self) -> list[AcceptedRow]:
        """Accepted entries with no record yet: after `replay`, those a gateway that died left."""
        with self._lock:
            return list(self._open.values())

    def close(self) -> None:
        """Stop writing and give up ownership; the segments stay for the next `replay`. Idempotent."""
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
            self._older = []
            if self._owner >= 0:
                os.close(self._owner)
                self._owner = -1

    def _rotate(self) -> None:
        finished = (self._path(self._number), self._last_record)
        self._start_segment(self._number + 1, self._open.values())
        self._older.append(finished)
        self._last_record = 0
        self._drop_committed()

    def _start_segment(self, number: int, rows: Iterable[Row]) -> None:
        """Make segment ``number``, holding ``rows``, the current one."""
        path = self._path(number)
        fd = os.open(path, _APPEND, 0o600)
        try:
            size = _write_all(fd, rows)
        except BaseException:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise
        if self._fd >= 0:
            os.close(self._fd)
        self._fd, self._number, self._size, self._room = fd, number, size, self._segment_bytes

    def _cut(self) -> None:
        """Take a failed append's partial line out again; if even that fails, write no more to this
        segment (its torn end stays its last line)."""
        try:
            os.ftruncate(self._fd, self._size)
        except OSError:
            self._room = 0

    def _drop_committed(self) -> None:
        kept = []
        for path, last_record in self._older:
            if last_record <= self._committed:
                try:
                    path.unlink(missing_ok=True)
                    continue
                except OSError as err:
                    log.warning("cannot delete activation log segment %s (%s); trying again later", path, err)
            kept.append((path, last_record))
        self._older = kept

    def _path(self, number: int) -> Path:
        return self.directory / f"{number:012d}{_SUFFIX}"


def _read(path: Path) -> Iterator[Row]:
    data = path.read_bytes()
    for number, line in enumerate(data[: data.rfind(b"\n") + 1].split(b"\n")[:-1], 1):
        try:
            yield decode(line)
        except ValueError as err:
            raise StoreUnavailable(f"activation log segment {path} is damaged at line {number}: {err}") from None


def _write_all(fd: int, rows: Iterable[Row]) -> int:
    """Write the lines of ``rows``, a chunk at a time; the bytes written."""
    total, chunk, size = 0, [], 0
    for row in rows:
        chunk.append(line := encode(row))
        size += len(line)
        if size >= _CHUNK_BYTES:
            total += _write_fully(fd, b"".join(chunk))
            chunk, size = [], 0
    return total + _write_fully(fd, b"".join(chunk))


def _write_fully(fd: int, data: bytes) -> int:
    done = 0
    while done < len(data):
        done += os.write(fd, data[done:])
    return done
