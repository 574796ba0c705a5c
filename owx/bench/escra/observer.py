"""An OOM observer independent of the agent: ``python -m owx.bench.escra.observer CGROUP``.

It registers its own event descriptor on the cgroup (v1: an eventfd on
``memory.oom_control``; v2: inotify on ``memory.events``), prints ``ready``,
then one ``CLOCK_MONOTONIC`` nanosecond stamp per wake-up until killed.  It runs
real-time above the agent's OOM thread, so its stamp is the earliest moment
user space can know of the kernel's event.
"""

from __future__ import annotations

import os
import select
import sys
import time

from owx.common.cgroups import Cgroup

PRIORITY = 20  # SCHED_FIFO, above the agent's OOM thread (10)


def main(relpath: str) -> None:
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(PRIORITY))
    except OSError:
        print("observer: no real-time priority", file=sys.stderr)
    fd = Cgroup(relpath).oom_eventfd()
    print("ready", flush=True)
    while True:
        select.select([fd], [], [])
        stamp = time.monotonic_ns()
        try:
            os.read(fd, 4096)
        except BlockingIOError:
            continue
        print(stamp, flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
