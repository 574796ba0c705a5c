"""glibc's allocator, set so that a training action's memory is the same from run to run.

glibc serves a large request from its heap or from a fresh mapping depending on a
threshold that it raises each time a mapped block is freed.  TensorFlow frees large
tensors all through training, so the threshold climbs at moments that depend on thread
timing.  Tensors then land in the heap, where freed space fragments, and the peak of
identical runs differed by up to 80 MiB (conv models, anonymous memory).  A fixed
threshold (glibc's own initial value) maps every large tensor and unmaps it when it is
freed.  Peaks then repeat within a few MiB, and they are lower.  That is what lets a
limit be estimated from a short measured run.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import cache

M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)
MMAP_THRESHOLD_BYTES = 128 * 1024


@cache
def _libc() -> ctypes.CDLL | None:
    """The C library, looked up once (``find_library`` runs ``ldconfig``)."""
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name) if name else None
    except OSError:
        return None


def fix_mmap_threshold() -> bool:
    """Pin the mmap threshold (this also stops glibc from adjusting it); False where libc is not glibc."""
    libc = _libc()
    try:
        return libc is not None and libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1
    except AttributeError:  # no mallopt: not glibc
        return False


def trim() -> None:
    """Give the heap's free memory back to the OS (glibc only)."""
    libc = _libc()
    try:
        if libc is not None:
            libc.malloc_trim(0)
    except AttributeError:
        pass
