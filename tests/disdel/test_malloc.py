"""A DiSDeL action's process keeps glibc's mmap threshold where owx.common.malloc pins it."""

from __future__ import annotations

import subprocess
import sys

# Allocate and free 16 MiB (glibc would then raise its threshold to 16 MiB), then hold 8 MiB:
# prints how many bytes glibc holds in mapped blocks (mallinfo2's hblkhd) while the 8 MiB are held.
PROBE = """
import ctypes, sys
if sys.argv[1] == "action":
    import owx.disdel.actions
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                                                "uordblks", "fordblks", "keepcost")]
libc.mallinfo2.restype = Info
libc.free(libc.malloc(16 << 20))
held = libc.malloc(8 << 20)
print(libc.mallinfo2().hblkhd)
libc.free(held)
"""


def _mapped_bytes(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True).stdout
    return int(out.strip())


def test_large_blocks_stay_mapped_after_a_large_free_in_an_action_process():
    assert _mapped_bytes("action") >= 8 << 20


def test_without_the_pin_glibc_moves_them_to_the_heap():
    # The control: a plain interpreter raises the threshold, so the same 8 MiB come from the heap.
    assert _mapped_bytes("plain") < 8 << 20
