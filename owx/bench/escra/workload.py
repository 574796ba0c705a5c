"""Action containers doing real CPU + memory work, request patterns, and a 100 ms slack sampler."""

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

# One request per stdin line "<id> <cpu_ms> <mem_mb>": touch mem_mb MiB, burn cpu_ms of CPU time, answer the id.
WORKER = """
import sys, time
base = bytearray(int(sys.argv[1]) << 20); base[::4096] = b"x" * len(base[::4096])
print("ready", flush=True)
for line in sys.stdin:
    rid, cpu_ms, mem_mb = line.split()
    buf = bytearray(int(mem_mb) << 20); buf[::4096] = b"x" * len(buf[::4096])
    end = time.thread_time() + int(cpu_ms) / 1000
    while time.thread_time() < end:
        pass
    del buf
    sys.stdout.write(rid + "\\n"); sys.stdout.flush()
"""


@dataclass
class Request:
    at: float  # seconds after the run starts
    container: int
    cpu_ms: int
    mem_mb: int
    done: float | None = None
    failed: bool = False


class ActionContainer:
    """A cgroup with ``workers`` processes serving requests; a worker killed by OOM is restarted."""

    def __init__(self, group: Cgroup, workers: int, base_mb: int) -> None:
        self.group = group.create()
        self.base_mb = base_mb
        self.restarts = 0
        self._lock = threading.Lock()
        self._workers: list[_Worker] = [self._spawn() for _ in range(workers)]

    def _spawn(self) -> "_Worker":
        proc = spawn_in(self.group, python(WORKER, str(self.base_mb)), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "ready", "worker did not start"
        worker = _Worker(proc)
        worker.thread = threading.Thread(target=self._read, args=(worker,), daemon=True)
        worker.thread.start()
        return worker

    def _read(self, worker: "_Worker") -> None:
        for line in worker.proc.stdout:
            with self._lock:
                request = worker.outstanding.pop(int(line), None)
            if request is not None:
                request.done = time.monotonic()
        with self._lock:
            for request in worker.outstanding.values():
                request.failed = True
            worker.outstanding.clear()
            worker.dead = True

    def submit(self, rid: int, request: Request) -> None:
        with self._lock:
            for index, worker in enumerate(self._workers):
                if worker.dead:
                    self.restarts += 1
                    self._workers[index] = worker = self._spawn()
            worker = min(self._workers, key=lambda w: len(w.outstanding))
            worker.outstanding[rid] = request
        try:
            worker.proc.stdin.write(f"{rid} {request.cpu_ms} {request.mem_mb}\n")
            worker.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            request.failed = True

    def close(self) -> None:
        for worker in self._workers:
            worker.proc.kill()
            worker.proc.wait()
        self.group.destroy()


@dataclass
class _Worker:
    proc: subprocess.Popen
    outstanding: dict[int, Request] = field(default_factory=dict)
    dead: bool = False
    thread: threading.Thread | None = None


def pattern(kind: str, rate: float, duration: float, containers: int, seed: int) -> list[Request]:
    """Arrivals per container: ``fixed`` spacing, ``exponential`` gaps, or ``bursty`` (base + periodic bursts).

    The paper's shapes scaled to 2 cores: bursty sends rate/3 with a 3 s burst at 3× rate every 8 s.
    Each request needs 10 ms of CPU time and touches an exponentially sized buffer (mean 12 MiB, ≤ 64 MiB).
    """
    rng = random.Random(seed)
    requests = []
    for container in range(containers):
        t = rng.uniform(0, 1 / rate)
        while t < duration:
            requests.append(Request(t, container, 10, min(64, 1 + int(rng.expovariate(1 / 12)))))
            if kind == "fixed":
                t += 1 / rate
            elif kind == "exponential":
                t += rng.expovariate(rate)
            else:
                in_burst = (t % 8.0) < 3.0
                t += rng.expovariate(rate * 3 if in_burst else rate / 3)
    return sorted(requests, key=lambda r: r.at)


def drive(requests: list[Request], containers: list[ActionContainer], drain_s: float = 2.0) -> float:
    """Send every request at its time (open loop); returns the run's start (monotonic)."""
    start = time.monotonic()
    for rid, request in enumerate(requests):
        pause = start + request.at - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        request.at += start
        containers[request.container].submit(rid, request)
    time.sleep(drain_s)
    return start


@dataclass
class Tick:
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

    def start(self) -> "Sampler":
        self._thread.start()
        return self

    def _run(self) -> None:
        last = [p.read() for p in self.probes]
        t0 = time.monotonic()
        while not self._stop.wait(self.period):
            for index, probe in enumerate(self.probes):
                now = probe.read()
                interval = (now.at_ns - last[index].at_ns) / 1e9
                used = (now.usage_ns - last[index].usage_ns) / 1e9 / interval
                quota = now.cpu_quota_us / 100_000 if now.cpu_quota_us > 0 else float("inf")
                self.ticks[index].append(Tick(time.monotonic() - t0, used, quota, now.memory_usage, now.memory_limit))
                last[index] = now

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        for probe in self.probes:
            probe.close()

    def peaks(self, since: float = 0.0) -> list[tuple[float, int]]:
        """(peak cores, peak bytes) per cgroup over ticks after ``since`` seconds."""
        out = []
        for ticks in self.ticks:
            recent = [t for t in ticks if t.t >= since] or ticks[-1:]
            out.append((max((t.used_cores for t in recent), default=0.0), max((t.mem_usage for t in recent), default=0)))
        return out


class Recommender:
    """VPA/Autopilot-like: every ``interval`` s set limits to the recent window's peak × (1 + margin)."""

    def __init__(self, groups: list[Cgroup], sampler: Sampler, interval: float, window: float, margin: float = 0.1) -> None:
        self.groups, self.sampler = groups, sampler
        self.interval, self.window, self.margin = interval, window, margin
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "Recommender":
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            now = self.sampler.ticks[0][-1].t if self.sampler.ticks[0] else 0.0
            for group, (cores, memory) in zip(self.groups, self.sampler.peaks(since=now - self.window)):
                apply_limits(group, cores * (1 + self.margin), int(memory * (1 + self.margin)))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def apply_limits(group: Cgroup, cores: float, memory: int) -> None:
    """Set a quota and a memory limit; a shrink below usage is refused by the kernel and skipped."""
    group.set_cpu_quota(max(5_000, int(cores * 100_000)))
    try:
        group.set_memory_limit(max(32 * MIB, memory) // 4096 * 4096)
    except OSError:
        pass
