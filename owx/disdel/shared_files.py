"""Files in the job's shared directory, written so that any action can read them and a later one
can replace them: every action runs as a uid of its own, and a retried one (after an OOM kill or a
timeout) is another uid than the attempt it replaces."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path


def write_shared(path: str | Path, write: Callable[[Path], object]) -> Path:
    """``write(tmp)`` to a name of this writer's own beside ``path`` (with ``path``'s suffix, which
    savers such as Keras' look at), made world-readable, then renamed over ``path``: readers never see
    half a file, and a file an earlier attempt left, owned by another uid, is replaced, not written into
    (which its owner's mode may forbid, and ``chmod`` of it always does). A failed write leaves nothing."""
    path = Path(path)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}-{secrets.token_hex(4)}{path.suffix}")
    try:
        write(tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path
