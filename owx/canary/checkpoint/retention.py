"""How many checkpoints of a function to keep (Canary's n, 3 by default).

The paper adjusts n "based on the application data to be checkpointed and the frequency
of states". The rule here, applied on every publish to the index including the new entry:

1. start from ``keep`` (3);
2. frequent checkpoints keep more: enough to span ``history_s`` seconds of history
   (``ceil(history_s / mean interval)``), capped at ``keep_max`` — a handful of
   sub-second checkpoints would otherwise leave no older state to fall back to;
3. large checkpoints keep fewer: at most ``budget // mean size``, never fewer than one —
   the latest checkpoint is always kept.

Means are taken over the retained entries, so any process computes the same n from the
index alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from owx.canary.checkpoint.model import IndexEntry
from owx.canary.checkpoint.options import StoreOptions


def keep_count(entries: Sequence[IndexEntry], options: StoreOptions) -> int:
    """The number of newest entries to retain."""
    n = options.keep
    if len(entries) >= 2:
        span = entries[-1].timestamp - entries[0].timestamp
        interval = span / (len(entries) - 1)
        wanted = options.keep_max if interval <= 0 else math.ceil(options.history_s / interval)
        n = max(n, min(wanted, options.keep_max))
    if entries:
        mean_size = sum(e.size for e in entries) / len(entries)
        if mean_size > 0:
            n = min(n, max(1, int(options.budget // mean_size)))
    return max(1, n)
