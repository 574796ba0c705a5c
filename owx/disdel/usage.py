"""Memory use of the calling process's own container, read from its memory cgroup."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from owx.common.cgroups import Cgroup, CgroupError, is_v2


def own_cgroup(proc_cgroup: Path = Path("/proc/self/cgroup")) -> Cgroup | None:
    """The memory cgroup this process runs in (None when it cannot be found)."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if (is_v2() and controllers == "") or "memory" in controllers.split(","):
            return Cgroup(path)
    return None


def peak_bytes(group: Cgroup | None) -> int | None:
    """The group's peak usage so far (``memory.max_usage_in_bytes`` / ``memory.peak``)."""
    if group is None:
        return None
    try:
        return group.memory().max_usage
    except CgroupError:
        return None


class MemorySampler:
    """Samples a cgroup's current usage in a background thread (for memory-over-time plots)."""

    def __init__(self, group: Cgroup | None, interval_s: float = 0.25, max_samples: int = 2000) -> None:
        self.group = group
        self.interval_s = interval_s
        self.max_samples = max_samples
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="disdel-memory-sampler", daemon=True)

    def __enter__(self) -> "MemorySampler":
        if self.group is not None:
            self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self._sample()

    def _sample(self) -> None:
        if self.group is None or len(self.samples) >= self.max_samples:
            return
        try:
            self.samples.append((time.time(), self.group.memory().usage))
        except CgroupError:
            pass

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval_s)
