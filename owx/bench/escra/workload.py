"""Closed-loop load on action containers, and a 100 ms sampler of their limits and usage.

Every client owns one worker process inside its container (a server thread, in
effect) and sends its next request only when the previous one was answered,
after an exponential think time.  A container whose CPU quota is too small
therefore answers later *and* fewer times: starvation shows in latency and in
throughput, and no backlog hides behind a drain period.
"""

from __future__ import annotations

import random
import subprocess
import threading
import time
from dataclasses import dataclass, field

from owx.bench.escra.procs import python, spawn_in

from owx.common.cgroups import Cgroup
from owx.escra_agent.telemetry import CgroupProbe

MIB = 1 << 20

# One request per stdin line "<cpu_ms> <mem_mb>": touch mem_mb MiB and burn CPU until cpu_ms of this
# thread's CPU time (the touching included) have gone by, then answer with an empty line.
WORKER = """
import sys, time
print("ready", flush=True)
for line in sys.stdin:
    cpu_ms, mem_mb = line.split()
    end = time.thread_time() + int(cpu_ms) / 1000
    buf = bytearray(int(mem_mb) << 20); buf[::4096] = b"x" * len(buf[::4096])
    while time.thread_time() < end:
        pass
    del buf
    sys.stdout.write("\\n"); sys.stdout.flush()
"""


@dataclass(frozen=True)
class Shape:
    """Which clients of a container are active when (the paper's workloads, closed-loop).

    ``base`` clients are always active; the others only during a burst of
    ``burst_s`` seconds every ``period_s`` seconds, container ``i``'s bursts
    shifted by ``i · period_s / containers`` (so the application's demand moves
    between its containers).  Each request needs ``cpu_ms`` of CPU and touches
    1 + Exp(``mem_mean_mb``) MiB (at most ``mem_cap_mb``).
    """

    name: str
    clients: int
    base: int
    think_ms: float
    period_s: float = 0.0
    burst_s: float = 0.0
    cpu_ms: int = 10
    mem_mean_mb: float = 8.0
    mem_cap_mb: int = 32

    def active(self, container: int, containers: int, client: int, t: float) -> bool:
        if client < self.base:
            return True
        offset = container * self.period_s / containers
        return (t - offset) % self.period_s < self.burst_s

    def mean_demand_cores(self) -> float:
        """CPU one container needs on average when nothing throttles it."""
        duty = self.burst_s / self.period_s if self.period_s else 0.0
        mean_clients = self.base + (self.clients - self.base) * duty
        return mean_clients * self.cpu_ms / (self.cpu_ms + self.think_ms)


# The paper's Fixed workload, closed-loop: a constant population of clients.
STEADY = Shape("steady", clients=13, base=13, think_ms=990)
# The paper's Burst workload (a base rate plus a 12x burst for 10 s of every 20 s), closed-loop:
# one client always, twelve during a burst; same mean demand per container as STEADY.
BURSTY = Shape("bursty", clients=12, base=1, think_ms=490, period_s=20.0, burst_s=10.0)
SHAPES = {shape.name: shape for shape in (STEADY, BURSTY)}


@dataclass(frozen=True)
class Answered:
    """One request as its client saw it (monotonic seconds)."""

    container: int
    sent: float
    done: float

    @property
    def latency_ms(self) -> float:
        return (self.done - self.sent) * 1000


class _Worker:
    def __init__(self, group: Cgroup) -> None:
        self.proc = spawn_in(group, python(WORKER), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"worker in {group} did not start")

    def ask(self, cpu_ms: int, mem_mb: int) -> bool:
        """Send one request and wait for its answer; False if the worker died (OOM-killed)."""
        try:
            self.proc.stdin.write(f"{cpu_ms} {mem_mb}\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            return False
        return self.proc.stdout.readline() == "\n"

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


class ActionContainer:
    """A cgroup with one worker process per client."""

    def __init__(self, group: Cgroup, workers: int) -> None:
        self.group = group.create()
        self.workers = [_Worker(self.group) for _ in range(workers)]

    def close(self) -> None:
        for worker in self.workers:
            worker.close()
        self.group.destroy()


@dataclass
class App:
    """One application's containers and what its clients saw."""

    name: str
    containers: list[ActionContainer]
    answered: list[Answered] = field(default_factory=list)
    failed: int = 0


class ClosedLoad:
    """Drives several applications with the same shape, seeds and start instant."""

    def __init__(self, shape: Shape, apps: list[App], duration_s: float, seed: int) -> None:
        self.shape, self.apps, self.duration_s, self.seed = shape, apps, duration_s, seed
        self._lock = threading.Lock()

    def run(self, start: float) -> None:
        """Clients run from ``start`` (monotonic) for the duration; returns once every answer is in."""
        threads = []
        for app in self.apps:
            for index, container in enumerate(app.containers):
                for client, worker in enumerate(container.workers):
                    # the same seed in every application: the same think times and request sizes
                    rng = random.Random(f"{self.seed}/{index}/{client}")
                    args = (app, index, len(app.containers), client, worker, rng, start)
                    threads.append(threading.Thread(target=self._client, args=args, daemon=True))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def _client(self, app: App, index: int, containers: int, client: int, worker: _Worker,
                rng: random.Random, start: float) -> None:
        shape, end = self.shape, start + self.duration_s
        while True:
            think = rng.expovariate(1000 / shape.think_ms)
            mem_mb = min(shape.mem_cap_mb, 1 + int(rng.expovariate(1 / shape.mem_mean_mb)))
            time.sleep(max(0.0, start - time.monotonic()) + think)
            now = time.monotonic()
            if now >= end:
                return
            if not shape.active(index, containers, client, now - start):
                continue  # an inactive client keeps drawing think times: it rejoins within one
            if not worker.ask(shape.cpu_ms, mem_mb):
                with self._lock:
                    app.failed += 1
                return
            with self._lock:
                app.answered.append(Answered(index, now, time.monotonic()))


@dataclass(frozen=True)
class Tick:
    """One container over one sampling period: CPU in cores, memory in bytes."""

    t: float
    used_cores: float
    quota_cores: float
    mem_usage: int
    mem_limit: int


class Sampler:
    """Every 100 ms: CPU used and allowed (cores), memory used and allowed, per cgroup."""

    def __init__(self, groups: list[Cgroup], period: float = 0.1) -> None:
        self.period = period
        self.probes = [CgroupProbe(g) for g in groups]
        self.ticks: list[list[Tick]] = [[] for _ in groups]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._t0 = time.monotonic()

    def start(self, t0: float | None = None) -> "Sampler":
        """Sample from now on; tick times count from ``t0`` (monotonic, default now)."""
        self._t0 = time.monotonic() if t0 is None else t0
        self._thread.start()
        return self

    def _run(self) -> None:
        last = [p.read() for p in self.probes]
        while not self._stop.wait(self.period):
            for index, probe in enumerate(self.probes):
                now = probe.read()
                interval = (now.at_ns - last[index].at_ns) / 1e9
                used = (now.usage_ns - last[index].usage_ns) / 1e9 / interval
                quota = now.cpu_quota_us / 100_000 if now.cpu_quota_us > 0 else float("inf")
                self.ticks[index].append(Tick(now.at_ns / 1e9 - self._t0, used, quota, now.memory_usage, now.memory_limit))
                last[index] = now

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        for probe in self.probes:
            probe.close()
