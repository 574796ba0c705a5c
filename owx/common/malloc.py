"""glibc's allocator, set so that large blocks go back to the system once freed.

glibc serves a large request from its heap or from a fresh mapping depending on a
threshold that it raises each time a mapped block is freed, up to 32 MiB. A fixed
threshold (glibc's own initial value, `fix_mmap_threshold`) maps every large block and
unmaps it when it is freed. Two processes need that:

- a DiSDeL training action: TensorFlow frees large tensors all through training, so the
  threshold climbed at moments that depend on thread timing, tensors then landed in the
  heap, where freed space fragments, and the peaks of identical runs differed by up to
  80 MiB. Pinned, peaks repeat within a few MiB, and they are lower: that is what lets a
  limit be estimated from a short measured run;
- the gateway: records of tens of MB read back, request and answer bodies of megabytes,
  each freed once sent. With the threshold climbing, a tenant reading its large records
  from eight connections left the gateway at 530 MB (190 before), never given back.
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
