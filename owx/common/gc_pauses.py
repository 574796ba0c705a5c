"""Short pauses of Python's cyclic garbage collector in a long-running server.

A collection stops every thread of the process, the event loop's too, for as long as it scans. In
a gateway flooded with queued activations (``owx bench invoke``'s flood: some 100,000 tracked
objects) a full collection stalled the loop for 56-115 ms, the longest wait any request saw. Two
remedies, applied once start-up is done: what start-up made (modules, apps, settings; it lives as
long as the process) is frozen, so no collection scans it again; and the young generation is
collected every ``young_threshold`` allocations instead of Python's 700, so the older generations,
whose collections are the long ones, fill and are collected a fourteenth as often.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 10_000


def keep_pauses_short(young_threshold: int = YOUNG_THRESHOLD) -> None:
    """Freeze what exists now and raise the young generation's threshold (call once, after start-up)."""
    gc.collect()  # what start-up left as garbage is not frozen with the rest
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(young_threshold, middle, old)
