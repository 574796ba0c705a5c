"""Run DiSDeL's worker functions in a child process inside a fresh memory cgroup.

This is how owx measures memory outside the gateway: the estimator's calibration, the "TensorFlow in a bare process" runs of the benchmark, and
the tests.  The child joins the cgroup between fork and exec (as the gateway's local
backend does), so its whole life (interpreter, imports, data, training) is charged to
the group, and the
peak is ``memory.max_usage_in_bytes`` (``memory.peak`` on v2) of that group.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Any

from owx.common.cgroups import Cgroup

TASKS = ("train", "aggregate", "calibrate")


@dataclass(frozen=True)
class IsolatedRun:
    """Outcome of one child process."""

    result: dict[str, Any] | None
    peak_bytes: int
    duration_s: float
    returncode: int
    oom_kills: int
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.result is not None


def run_isolated(task: str, params: dict[str, Any], *, prefix: str = "owx-disdel", memory_limit: int | None = None,
                 timeout_s: float = 600.0, env: dict[str, str] | None = None) -> IsolatedRun:
    """Run ``task`` (``train``, ``aggregate`` or ``calibrate``) with ``params`` in a new cgroup."""
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; one of {TASKS}")
    group = Cgroup(f"{prefix}/{uuid.uuid4().hex[:12]}").create()
    try:
        if memory_limit is not None:
            group.set_memory_limit(memory_limit)
        child_env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})}
        start = time.monotonic()
        child = subprocess.Popen([sys.executable, "-m", __name__, task], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_env,
                                 preexec_fn=lambda: group.add(os.getpid()))
        try:
            out, err = child.communicate(json.dumps(params).encode(), timeout=timeout_s)
        except subprocess.TimeoutExpired:
            child.kill()
            out, err = child.communicate()
        duration = time.monotonic() - start
        stat = group.memory()
        lines = out.decode().strip().splitlines()
        result = json.loads(lines[-1]) if child.returncode == 0 and lines else None
        return IsolatedRun(result, stat.max_usage, duration, child.returncode, stat.oom_kills,
                           err.decode(errors="replace")[-4000:])
    finally:
        group.destroy()


def _main(task: str) -> None:
    from owx.disdel.actions import aggregate, calibrate, train

    entries = {"train": train.main, "aggregate": aggregate.main, "calibrate": calibrate.main}
    print(json.dumps(entries[task](json.loads(sys.stdin.read()))))


if __name__ == "__main__":
    _main(sys.argv[1])
