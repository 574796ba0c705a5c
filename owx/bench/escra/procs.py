"""Real processes in real cgroups for Escra's tests and benchmark."""

from __future__ import annotations

import subprocess
import sys

from owx.common.cgroups import Cgroup

# Burns one core until killed.
BUSY = "while True:\n    pass\n"

# Allocates and touches ARGV[1] MiB, 1 MiB at a time, then says so and sleeps.
ALLOC = """
import sys, time
chunks = []
for _ in range(int(sys.argv[1])):
    chunk = bytearray(1 << 20)
    chunk[::4096] = b"x" * len(chunk[::4096])
    chunks.append(chunk)
print("allocated", flush=True)
time.sleep(3600)
"""

# Sleeps forever (an idle action container).
IDLE = "import time\ntime.sleep(3600)\n"


def spawn_in(group: Cgroup, argv: list[str], **popen) -> subprocess.Popen:
    """Start ``argv`` already inside ``group`` (it joins before exec, so no allocation escapes)."""
    joins = "; ".join(f"echo $$ > {d}/cgroup.procs" for d in group.dirs())
    return subprocess.Popen(["sh", "-c", f'{joins} && exec "$@"', "sh", *argv], **popen)


def python(code: str, *args: str) -> list[str]:
    return [sys.executable, "-c", code, *args]
