"""OOM rescue timed from the kernel's event, not from the agent's own wake-up.

Three clocks see one episode (all ``CLOCK_MONOTONIC``, comparable across processes):

* the task stamps its progress before every 64 KiB it touches, so a stall is a
  gap between two stamps;
* an independent observer (:mod:`owx.bench.escra.observer`) blocked on its own
  event registration stamps the kernel's OOM event;
* the agent logs when it woke for the event and when the raised limit was written.

The rescue time is *the event's first sighting in user space (normally the
observer's stamp) → the task's first progress after it*; the agent's wake-up and
write are reported beside it, so the difference shows.
"""

from __future__ import annotations

import bisect
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from owx.bench.escra.procs import python, spawn_in
from owx.bench.escra.stack import EscraStack

from owx.common.cgroups import Cgroup
from owx.escra_agent.settings import MIB, AllocatorParams
from owx.escra_agent.telemetry import UNLIMITED_FLOOR

# Maps ARGV[1] MiB untouched, sleeps ARGV[2] s, prints "grow", then touches the mapping page by page,
# stamping CLOCK_MONOTONIC before every 16 pages (64 KiB); prints the stamps at the end.
STAMPER = """
import array, mmap, sys, time
pages = int(sys.argv[1]) * 256
area = mmap.mmap(-1, pages * 4096)
stamps = array.array("q", bytes(8 * (pages // 16 + 1)))
clock = time.monotonic_ns
time.sleep(float(sys.argv[2]))
print("grow", flush=True)
for chunk in range(pages // 16):
    stamps[chunk] = clock()
    for page in range(chunk * 16, chunk * 16 + 16):
        area[page * 4096] = 1
stamps[-1] = clock()
print(" ".join(map(str, stamps)), flush=True)
"""


SAME_EVENT_NS = 50_000_000  # an observer stamp and an agent wake-up this close are one event


@dataclass(frozen=True)
class Episode:
    """One OOM event of one task; ``None`` where a step never happened (the task was killed)."""

    stalled_ns: int  # the task's last progress before the event
    event_ns: int  # the kernel's event as first seen from user space (observer or agent)
    resumed_ns: int | None  # the task's first progress after it
    agent_woke_ns: int | None = None
    raised_ns: int | None = None
    source: str | None = None  # "reserve" (local) or "allocator" (asked over the network)

    @property
    def rescue_ms(self) -> float:
        """Kernel event → the task runs again (infinite if it never did)."""
        return (self.resumed_ns - self.event_ns) / 1e6 if self.resumed_ns else float("inf")

    @property
    def stall_ms(self) -> float:
        """What the task lost: last progress before → first progress after."""
        return (self.resumed_ns - self.stalled_ns) / 1e6 if self.resumed_ns else float("inf")

    def agent_wake_ms(self) -> float | None:
        return None if self.agent_woke_ns is None else (self.agent_woke_ns - self.event_ns) / 1e6

    def agent_write_ms(self) -> float | None:
        return None if self.raised_ns is None else (self.raised_ns - self.agent_woke_ns) / 1e6


class Observer:
    """The observer process for one cgroup; :meth:`stop` returns its event stamps."""

    def __init__(self, group: Cgroup) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "owx.bench.escra.observer", group.relpath],
                                     stdout=subprocess.PIPE, text=True)
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"OOM observer for {group} did not start")

    def stop(self) -> list[int]:
        self.proc.terminate()
        out, _ = self.proc.communicate(timeout=10)
        return [int(line) for line in out.split()]


@dataclass(frozen=True)
class Growth:
    """What one growing task left behind."""

    stamps: list[int]  # empty if the task died before printing them
    events: list[int]
    killed: bool


def grow(group: Cgroup, mib: int, delay_s: float = 0.2) -> Growth:
    """Run the stamper in ``group`` under an observer until it has touched ``mib`` MiB or died."""
    observer = Observer(group)
    try:
        task = spawn_in(group, python(STAMPER, str(mib), str(delay_s)), stdout=subprocess.PIPE, text=True)
        out, _ = task.communicate(timeout=120)
    finally:
        events = observer.stop()
    lines = out.split("\n")
    stamps = [int(s) for s in lines[1].split()] if len(lines) > 1 and lines[1] else []
    return Growth(stamps, events, killed=task.returncode != 0 or group.memory().oom_kills > 0)


def episodes(growth: Growth, agent_log: list[dict]) -> list[Episode]:
    """Pair each observed event with the agent's record of it and the task's stall around it.

    The event's time is the earliest moment user space saw it: the observer's
    stamp, or the agent's wake-up if the agent woke first (on a busy node either
    may be delayed).  Two sightings inside one stall are one episode.  A killed
    task printed no stamps: each of its events is an episode that never resumed.
    """
    if not growth.stamps:
        return [Episode(event, event, None) for event in growth.events]
    found: list[Episode] = []
    gaps: set[int] = set()
    unmatched = list(agent_log)
    for event in growth.events:
        record = min(unmatched, key=lambda r: abs(r["event_ns"] - event), default=None)
        if record is not None and abs(record["event_ns"] - event) <= SAME_EVENT_NS:
            unmatched.remove(record)
        else:
            record = None
        seen = min(event, record["event_ns"]) if record else event
        at = bisect.bisect_right(growth.stamps, seen)
        if not 0 < at < len(growth.stamps) or at in gaps:
            continue  # outside the growth (start-up, exit) or the same stall again
        gaps.add(at)
        found.append(Episode(growth.stamps[at - 1], seen, growth.stamps[at],
                             agent_woke_ns=record["event_ns"] if record else None,
                             raised_ns=record["raised_ns"] if record else None,
                             source=record["source"] if record else None))
    return found


def read_agent_log(path: Path, container: str) -> list[dict]:
    """The agent's rescue records (``--event-log``) of one container."""
    if not path.exists():
        return []
    records = (json.loads(line) for line in path.read_text().splitlines() if line)
    return [r for r in records if r["container"] == container]


OOM_BUDGET_MIB = 4096
OOM_CONTAINERS = 8
# 16 cores: each container's eq. 2.1 quota (2 cores) covers the node, and with quotas never shrinking
# (kappa 0) CPU throttling cannot delay a rescued task: the figure is the memory mechanism's alone.
OOM_APP = f"name=oom,cpu=16,memory-mb={OOM_BUDGET_MIB},containers={OOM_CONTAINERS}"
OOM_ALLOCATOR = ("--kappa", "0")


@dataclass
class Rescues:
    """Every OOM episode of every round, and how many tasks were killed."""

    episodes: list[Episode]
    rounds: int
    killed: int


def measure(run: str, node: str, rounds: int, grow_mib: int, rescue: bool = True) -> Rescues:
    """``rounds`` tasks each grow by ``grow_mib`` MiB from the eq. 2.2 initial limit.

    With ``rescue`` the containers are Escra's (the agent guards them); without,
    they sit outside the agent's node with the same initial limit, as under a
    platform with static limits.
    """
    log = Path(tempfile.mkdtemp(prefix="owx-bench-escra-")) / "rescues.jsonl"
    stack = EscraStack(run, node, OOM_APP, str(log), controller_args=OOM_ALLOCATOR) if rescue else None
    found, killed = [], 0
    try:
        for index in range(rounds):
            name = f"oom{index}"
            if stack is not None:
                group = Cgroup(f"{run}/{node}/{name}").create()
                stack.wait_managed(name=name)
                _wait(lambda: 0 < group.memory().limit < UNLIMITED_FLOOR and stack.state()["apps"]["oom"]["reserved_bytes"] > 0)
            else:
                group = Cgroup(f"{run}/unguarded/{name}").create()
                group.set_memory_limit(initial_limit())
            try:
                growth = grow(group, grow_mib)
            finally:
                group.destroy()
            found += episodes(growth, read_agent_log(log, name))
            killed += growth.killed
    finally:
        if stack is not None:
            stack.close()
    return Rescues(found, rounds, killed)


def initial_limit() -> int:
    """Eq. 2.2 for the OOM application: its budget less σ, split over its containers, in whole pages."""
    sigma = AllocatorParams().sigma
    return int(OOM_BUDGET_MIB * MIB * (1 - sigma)) // OOM_CONTAINERS // 4096 * 4096


def _wait(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError("the agent did not set up the OOM container")
        time.sleep(0.05)
