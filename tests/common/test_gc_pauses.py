"""The collector's thresholds in ``owx up``: while a flood of activations queues up and drains, no
collection scans many objects (a collection's pause grows with what it scans), and none is a full one.

Each case runs in a fresh interpreter (the collector's state is the process's) and counts the
objects every collection scans, which does not depend on the machine's speed."""

from __future__ import annotations

import json
import subprocess
import sys

FLOOD = """
import gc, json, sys
from collections import deque
from owx.common import gc_pauses

if sys.argv[1] == "owx":
    gc_pauses.keep_pauses_short()
else:
    gc.collect(); gc.freeze(); gc.set_threshold(*map(int, sys.argv[1].split(",")))
scanned = {0: [], 1: [], 2: []}

def watch(phase, info):
    if phase == "start":
        generation = info["generation"]
        scanned[generation].append(sum(len(gc.get_objects(g)) for g in range(generation + 1)))

gc.callbacks.append(watch)
queue = deque()
for i in range(400_000):  # activations queue up and run, the oldest first, 100,000 waiting at most
    queue.append({"id": i, "args": [i], "headers": [("name", "value")]})
    if len(queue) > 100_000:
        queue.popleft()
gc.callbacks.remove(watch)
print(json.dumps([max(scanned[1], default=0), len(scanned[2])]))
"""


def _flood(thresholds: str) -> tuple[int, int]:
    """(most objects a middle-generation collection scanned, full collections) during the flood."""
    ran = subprocess.run([sys.executable, "-c", FLOOD, thresholds], capture_output=True, text=True, timeout=300,
                         check=True)
    most, full = json.loads(ran.stdout)
    return most, full


def test_no_collection_scans_a_flood_of_activations() -> None:
    most, full = _flood("owx")
    assert most <= 20_000, f"a middle-generation collection scanned {most} objects"
    assert full == 0


def test_the_thresholds_before_and_pythons_own_fail_it() -> None:
    # the young threshold of 10,000 with Python's middle one of 10: 40-86 ms stalls in the bench's flood
    most, _ = _flood("10000,10,10")
    assert most > 100_000
    _, full = _flood("700,10,10")  # Python's own: full collections of the whole queue
    assert full >= 1
