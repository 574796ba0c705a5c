"""Short pauses of Python's cyclic garbage collector in a long-running server.

A collection stops every thread of the process, the event loop's too, for as long as it scans. In
a gateway flooded with queued activations (``owx bench invoke``'s flood: some 100,000 tracked
objects) a full collection stalled the loop for 56-115 ms, the longest wait any request saw. Three
remedies, applied once start-up is done:

- what start-up made (modules, apps, settings; it lives as long as the process) is frozen, so no
  collection scans it again;
- the young generation is collected every ``YOUNG_THRESHOLD`` allocations and the middle one every
  ``MIDDLE_THRESHOLD`` young collections, so a middle collection scans at most a few thousand
  objects. With the young threshold at 10,000 and Python's middle threshold of 10, the middle
  generation held up to about 100,000 of the flood's objects, and its collections stalled the loop
  for 40-86 ms;
- the old generation is collected after ``OLD_THRESHOLD`` middle collections: a full collection,
  the long one, may then come once per 1,000,000 allocations, as with the thresholds before
  (10,000, 10, 10) and a fourteenth as often as with Python's own (700, 10, 10).
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 2_000
MIDDLE_THRESHOLD = 2
OLD_THRESHOLD = 250


def keep_pauses_short() -> None:
    """Freeze what exists now and set the three generations' thresholds (call once, after start-up)."""
    gc.collect()  # what start-up left as garbage is not frozen with the rest
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, MIDDLE_THRESHOLD, OLD_THRESHOLD)
