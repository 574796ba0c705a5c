"""A directory of checkpoint segments: the blob tier, and the local spool.

Each segment is one file ``<function dir>/<seq>.seg`` written atomically (a temporary
file in the same directory, then a rename), so a reader sees a whole segment or none.
Files are not fsynced: the page cache is the hot path, the rename is the publish.
Names are deterministic per (function, seq), so leftovers of a crashed writer are found
and removed by the same code that prunes old checkpoints.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from owx.canary.checkpoint.errors import StoreUnavailable

Chunk = bytes | bytearray | memoryview

#: seconds after which a temporary segment file counts as left behind by a dead writer
STALE_TMP_S = 120.0


def function_dir(function_id: str) -> str:
    """A filesystem-safe, collision-free directory name for a function ID."""
    return hashlib.sha256(function_id.encode()).hexdigest()[:32]


def make_dirs(directory: Path) -> None:
    """Create ``directory`` and missing parents, owned like the nearest existing ancestor:
    actions may run as another user than the platform (which also writes here, when it
    flushes), and both must always be able to write."""
    if directory.is_dir():
        return
    missing = []
    while not directory.exists():
        missing.append(directory)
        directory = directory.parent
    if not directory.is_dir():
        raise NotADirectoryError(f"{directory} is not a directory")
    owner = directory.stat()
    for path in reversed(missing):
        path.mkdir(exist_ok=True)
        if os.geteuid() == 0:
            os.chown(path, owner.st_uid, owner.st_gid)


class SegmentFiles:
    """Segment files under one root directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        try:
            make_dirs(root)
        except OSError as exc:
            raise StoreUnavailable(f"checkpoint directory {root} cannot be created: {exc}") from exc

    def relpath(self, function_id: str, seq: int) -> str:
        return f"{function_dir(function_id)}/{seq:012d}.seg"

    def write(self, rel: str, chunks: Sequence[Chunk]) -> None:
        """Write a segment atomically."""
        final = self.root / rel
        tmp = final.with_name(f"{final.name}.{os.getpid()}-{threading.get_ident()}.tmp")
        try:
            make_dirs(final.parent)
            with open(tmp, "wb", buffering=0) as out:
                for chunk in chunks:
                    view = memoryview(chunk).cast("B")
                    while view:
                        view = view[out.write(view):]
            os.replace(tmp, final)
        except OSError as exc:
            _discard(tmp)
            raise StoreUnavailable(f"cannot write checkpoint segment {final}: {exc}") from exc

    def read(self, rel: str) -> bytearray | None:
        """The whole segment in a writable buffer, or None if it does not exist."""
        path = self.root / rel
        try:
            with open(path, "rb", buffering=0) as src:
                size = os.fstat(src.fileno()).st_size
                data = bytearray(size)
                view, done = memoryview(data), 0
                while done < size:
                    n = src.readinto(view[done:])
                    if not n:
                        break
                    done += n
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreUnavailable(f"cannot read checkpoint segment {path}: {exc}") from exc
        return data if done == size else data[:done]

    def copy_into(self, rel: str, target: SegmentFiles, target_rel: str) -> bool:
        """Place a copy of a segment into ``target`` atomically: a hard link when both are on
        one filesystem, else a copy. False if the segment does not exist."""
        src = self.root / rel
        final = target.root / target_rel
        tmp = final.with_name(f"{final.name}.{os.getpid()}-{threading.get_ident()}.tmp")
        try:
            make_dirs(final.parent)
            tmp.unlink(missing_ok=True)
            try:
                os.link(src, tmp)
            except OSError as exc:
                if isinstance(exc, FileNotFoundError):
                    return False
                shutil.copyfile(src, tmp)
            os.replace(tmp, final)
            tmp.unlink(missing_ok=True)  # rename does nothing when both names link one file
        except FileNotFoundError:
            _discard(tmp)
            return False
        except OSError as exc:
            _discard(tmp)
            raise StoreUnavailable(f"cannot copy checkpoint segment {src} to {final}: {exc}") from exc
        return True

    def remove(self, function_id: str, seqs: Sequence[int], below: int = 0) -> None:
        """Remove the segments of ``seqs`` and of every number under ``below`` (what a writer
        killed between copying a segment and pruning it left), and temporary files that crashed
        writers left (older than :data:`STALE_TMP_S`; younger ones may belong to a writer still at work)."""
        directory = self.root / function_dir(function_id)
        doomed = {f"{seq:012d}.seg" for seq in seqs}
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise StoreUnavailable(f"cannot list checkpoint directory {directory}: {exc}") from exc
        stale_before = time.time() - STALE_TMP_S
        for name in names:
            path = directory / name
            try:
                if (name in doomed or _numbered_below(name, below)
                        or (name.endswith(".tmp") and path.stat().st_mtime < stale_before)):
                    path.unlink()
            except FileNotFoundError:
                pass

    def remove_function(self, function_id: str) -> None:
        shutil.rmtree(self.root / function_dir(function_id), ignore_errors=True)


def _numbered_below(name: str, below: int) -> bool:
    """True for a segment file (``<seq>.seg``) of a number under ``below``."""
    stem, _, suffix = name.partition(".")
    return suffix == "seg" and stem.isdigit() and int(stem) < below


def _discard(path: Path) -> None:
    """Remove a temporary file after a failure, if it can be."""
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass
