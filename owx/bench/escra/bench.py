"""owx bench escra: Escra against static limits under closed-loop load, OOM rescue from the kernel's event.

Everything is real: containers are cgroups under ``owx-bench-escra/<run>`` with
Python workers burning CPU and touching memory; Escra runs as
``owx agent --controller`` plus an ``owx agent`` process.

Sections (a control run does only the section whose gates it breaks):

* ``tracking``: fig. 2.2, one container's limit following a stepping demand (reported);
* ``cpu``: per workload shape, an Escra and a static application with the same
  budget, side by side under the same closed-loop clients (see ``compare``);
  gates: Escra's p99 latency <= 1.2x static's, throughput >= 0.95x static's,
  median CPU slack <= 25% of static's;
* ``oom``: tasks growing past their limit, rescue timed from the kernel's event
  (see ``rescue``); gates: p99 <= 5 ms, no task killed;
* ``cost``: the agent's CPU for 50 idle containers; gate <= 5% of a core.
"""

from __future__ import annotations

import argparse
import os
import signal
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from pathlib import Path

from owx.bench.escra import compare, plots, rescue
from owx.bench.escra.compare import percentile
from owx.bench.escra.procs import BUSY, python, spawn_in
from owx.bench.escra.stack import EscraStack
from owx.bench.escra.workload import SHAPES, Sampler
from owx.bench.results import Report

from owx.common.cgroups import Cgroup, CgroupError
from owx.escra_agent.settings import AllocatorParams

BENCH_ROOT = "owx-bench-escra"
RUN = f"{BENCH_ROOT}/{uuid.uuid4().hex[:6]}"
NODE = "bench"
SECTIONS = ("tracking", "cpu", "oom", "cost")
P99_FACTOR, THROUGHPUT_SHARE, SLACK_SHARE = 1.2, 0.95, 0.25
RESCUE_P99_MS = 5.0
AGENT_CORE_SHARE = 0.05
# From the comparison on, the bench (clients, Escra, containers) weighs like 32 busy tasks, so other
# work on this shared node does not hold its containers below their own limits (which still cap them).
CPU_SHARES = 32768
RT_RUNTIME_US = 100_000  # per second, for threads that mostly sleep


@dataclass(frozen=True)
class Control:
    """A run with one mechanism broken on purpose: it must fail the gates of its section."""

    section: str
    what: str
    controller_args: tuple[str, ...] = ()
    agent_args: tuple[str, ...] = ()


ALLOCATOR_CPU_PARAMS = {"upsilon", "gamma", "kappa", "window", "fair_share", "min_quota_us"}  # printed: defaults of a normal run
CONTROLS = {
    "no-scale-up": Control("cpu", "upsilon = 0 and no fair share: a throttled container's quota never grows",
                           controller_args=("--upsilon", "0", "--no-fair-share")),
    "no-fair-share": Control("cpu", "a throttled container grows by the paper's raise only, never straight to its equal split",
                             controller_args=("--no-fair-share",)),
    "no-scale-down": Control("cpu", "kappa = 0: quotas never shrink, idle containers keep what they got",
                             controller_args=("--kappa", "0")),
    "no-rescue": Control("oom", "no agent guards the growing tasks: the kernel OOM-kills at the limit"),
    "busy-poll": Control("cost", "the agent samples every 1 ms instead of every 100 ms", agent_args=("--period", "0.001")),
}


# -- fig. 2.2: tracking a demand that steps between 1 and 2 busy cores ---------------------------
def tracking(report: Report, step_s: float = 4.0, steps: int = 5) -> None:
    stack = EscraStack(RUN, NODE, "name=track,cpu=2,memory-mb=1024,containers=1")
    group = Cgroup(f"{RUN}/{NODE}/track").create()
    procs = [spawn_in(group, python(BUSY)) for _ in range(2)]
    try:
        stack.wait_managed(1)
        sampler = Sampler([group]).start()
        t0, demand = time.monotonic(), []  # (seconds, busy processes) at each step
        for step in range(steps):
            os.kill(procs[1].pid, signal.SIGSTOP if step % 2 == 0 else signal.SIGCONT)
            demand.append((time.monotonic() - t0, 1 if step % 2 == 0 else 2))
            time.sleep(step_s)
        demand.append((time.monotonic() - t0, demand[-1][1]))
        sampler.stop()
    finally:
        stack.close()
        for proc in procs:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
            proc.wait()
        group.destroy()
    ticks = sampler.ticks[0][10:]  # after the first second
    plots.tracking(sampler.ticks[0], demand, report.plot_path("fig2_2_cpu_tracking"))
    report.figure("tracking: CPU slack p50", percentile([compare.slack(t) for t in ticks], 50), "cores")
    report.figure("tracking: CPU slack p99", percentile([compare.slack(t) for t in ticks], 99), "cores")
    report.figure("tracking: periods at the limit", sum(t.used_cores >= 0.97 * t.quota_cores for t in ticks) / len(ticks), "share")


# -- Escra vs static, same budget, same clients ----------------------------------------------------
def cpu(report: Report, shape_name: str, duration_s: float, control: Control | None) -> None:
    shape = SHAPES[shape_name]
    runs = compare.compare(shape, duration_s, RUN, NODE, control.controller_args if control else ())
    escra, static = runs["escra"], runs["static"]
    print(" | ".join(f"{shape.name} {r.name}: {r.throughput():.1f} req/s, p99 {r.latency_ms(99):.0f} ms" for r in (escra, static)),
          flush=True)
    for run in (escra, static):
        prefix = f"{shape.name} {run.name}"
        allocated, used = run.mean_cores()
        report.figure(f"{prefix}: throughput", run.throughput(), "req/s")
        for q in (50, 99, 99.9):
            report.figure(f"{prefix}: latency p{q:g}", run.latency_ms(q), "ms")
        report.figure(f"{prefix}: CPU slack p50", percentile(run.cpu_slack(), 50), "cores")
        report.figure(f"{prefix}: CPU slack p99", percentile(run.cpu_slack(), 99), "cores")
        report.figure(f"{prefix}: memory slack p50", percentile(run.memory_slack_mib(), 50), "MiB")
        report.figure(f"{prefix}: memory slack p99", percentile(run.memory_slack_mib(), 99), "MiB")
        report.figure(f"{prefix}: mean CPU allocated", allocated, "cores")
        report.figure(f"{prefix}: mean CPU used", used, "cores")
        report.figure(f"{prefix}: failed requests", run.failed)
        report.figure(f"{prefix}: OOM kills", run.oom_kills)
    memory_ratio = percentile(escra.memory_slack_mib(), 50) / percentile(static.memory_slack_mib(), 50)
    report.figure(f"{shape.name}: Escra memory slack p50 / static's", memory_ratio)
    report.goal(f"{shape.name}: Escra p99 latency <= {P99_FACTOR}x static's", escra.latency_ms(99) / static.latency_ms(99),
                P99_FACTOR, "x")
    report.goal(f"{shape.name}: Escra throughput >= {THROUGHPUT_SHARE}x static's", escra.throughput() / static.throughput(),
                THROUGHPUT_SHARE, "x", higher_is_better=True)
    report.goal(f"{shape.name}: Escra CPU slack p50 <= {SLACK_SHARE:.0%} of static's",
                percentile(escra.cpu_slack(), 50) / percentile(static.cpu_slack(), 50), SLACK_SHARE, "x")
    plots.timeline(runs, compare.budget_cores(shape) / compare.CONTAINERS, duration_s,
                   report.plot_path(f"{shape.name}_timeline"))
    plots.cdfs(runs, report.plot_path(f"{shape.name}_fig2_6_to_2_8_cdfs"))


# -- OOM rescue from the kernel's event ------------------------------------------------------------
def oom(report: Report, rounds: int, grow_mib: int, guarded: bool) -> None:
    result = rescue.measure(RUN, NODE, rounds, grow_mib, rescue=guarded)
    found = result.episodes
    rescued = [e for e in found if e.resumed_ns]
    report.figure("oom: events observed", len(found))
    report.figure("oom: events the task survived", len(rescued))
    report.figure("oom: rescued from the agent's reserve", sum(e.source == "reserve" for e in found))
    report.figure("oom: rescued by asking the allocator", sum(e.source == "allocator" for e in found))
    report.figure("oom: events without an agent record", sum(e.source is None for e in found))
    for label, values in (("kernel event -> task runs", [e.rescue_ms for e in found]),
                          ("task stall (last -> first progress)", [e.stall_ms for e in found]),
                          ("kernel event -> agent wakes", [e.agent_wake_ms() for e in found if e.agent_woke_ns]),
                          ("agent wakes -> limit written", [e.agent_write_ms() for e in found if e.raised_ns])):
        for q in (50, 99) if values else ():
            report.figure(f"oom: {label}, p{q}", percentile(values, q), "ms")
    report.goal(f"oom: rescue p99, kernel event -> task runs, <= {RESCUE_P99_MS:g} ms",
                percentile([e.rescue_ms for e in found], 99) if found else float("inf"), RESCUE_P99_MS, "ms")
    report.goal(f"oom: tasks killed of {result.rounds}", result.killed, 0)
    plots.rescue(found, report.plot_path("oom_rescue"))


# -- the agent's own CPU for 50 idle containers -----------------------------------------------------
def cost(report: Report, count: int, seconds: float, control: Control | None) -> None:
    groups = [Cgroup(f"{RUN}/{NODE}/idle-{i}").create() for i in range(count)]
    procs = [spawn_in(g, ["sleep", "3600"]) for g in groups]
    stack = EscraStack(RUN, NODE, f"name=idle,cpu=2,memory-mb=8192,containers={count}",
                       agent_args=control.agent_args if control else ())
    try:
        stack.wait_managed(count)
        time.sleep(1.0)
        agent_before, ctl_before, t0 = _cpu_s(stack.agent.pid), _cpu_s(stack.controller.pid), time.monotonic()
        time.sleep(seconds)
        elapsed = time.monotonic() - t0
        agent = (_cpu_s(stack.agent.pid) - agent_before) / elapsed
        allocator = (_cpu_s(stack.controller.pid) - ctl_before) / elapsed
    finally:
        stack.close()
        for proc in procs:
            proc.kill()
            proc.wait()
        for group in groups:
            group.destroy()
    report.figure(f"cost: allocator CPU, {count} idle containers", allocator, "cores")
    report.goal(f"cost: agent CPU, {count} idle containers, <= {AGENT_CORE_SHARE:.0%} of a core", agent, AGENT_CORE_SHARE,
                "cores")


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def weighted() -> Iterator[None]:
    """This process, the Escra processes it starts and its containers in one cgroup weighing CPU_SHARES.

    Real-time threads (the agent's OOM thread, the OOM observer) keep their priority in it.
    """
    Cgroup(BENCH_ROOT).set_cpu_shares(CPU_SHARES)
    driver = Cgroup(f"{RUN}/driver").create()
    for group in (Cgroup(BENCH_ROOT), Cgroup(RUN), driver):
        group.set_rt_runtime(RT_RUNTIME_US)
    driver.add(os.getpid())
    try:
        yield
    finally:
        Cgroup("").add(os.getpid())


def _destroy_tree(group: Cgroup) -> None:
    for child in group.children():
        _destroy_tree(child)
    group.destroy()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="owx bench escra", description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of closed-loop load per shape (default 60)")
    parser.add_argument("--shapes", default="steady,bursty", help=f"workload shapes, of {','.join(SHAPES)}")
    parser.add_argument("--rounds", type=int, default=10, help="growing tasks in the OOM section (default 10)")
    parser.add_argument("--grow-mb", type=int, default=1200, help="MiB each growing task touches (default 1200)")
    parser.add_argument("--control", choices=sorted(CONTROLS), help="break one mechanism on purpose (must fail)")
    args = parser.parse_args(argv)
    control = CONTROLS.get(args.control)
    sections = (control.section,) if control else SECTIONS
    shapes = args.shapes.split(",")
    report = Report("escra", control=args.control, parameters={
        "sections": sections,
        "control": control.what if control else None,
        "containers per application": compare.CONTAINERS,
        "budget": f"{compare.BUDGET_FACTOR}x the containers' mean CPU demand; static splits it equally",
        "static memory per container (MiB)": compare.STATIC_MEMORY_MIB,
        "shapes": {name: asdict(SHAPES[name]) | {"budget_cores": compare.budget_cores(SHAPES[name])} for name in shapes},
        "duration_s": args.duration,
        "oom": {"rounds": args.rounds, "grow_mib": args.grow_mb, "app": rescue.OOM_APP, "allocator": rescue.OOM_ALLOCATOR,
                "initial_limit_mib": rescue.initial_limit() / (1 << 20)},
        "allocator": AllocatorParams().model_dump(include=ALLOCATOR_CPU_PARAMS) | {"period_ms": 100},
        "bench cgroup cpu.shares": CPU_SHARES,
    })
    report.figure("load average (1 min) at start", os.getloadavg()[0])
    Cgroup(RUN).create()
    try:
        if "tracking" in sections:
            tracking(report)  # a 2-core demand on a 2-core node: at the default weight
        with weighted():
            if "cpu" in sections:
                for shape in shapes:
                    cpu(report, shape, args.duration, control)
            if "oom" in sections:
                oom(report, args.rounds, args.grow_mb, guarded=args.control != "no-rescue")
            if "cost" in sections:
                cost(report, 50, 10.0, control)
    finally:
        _destroy_tree(Cgroup(RUN))
        if not Cgroup(BENCH_ROOT).children():
            with suppress(CgroupError):  # busy in another hierarchy: a run that was killed left groups there
                Cgroup(BENCH_ROOT).destroy()
    report.figure("load average (1 min) at end", os.getloadavg()[0])
    return report.finish()


if __name__ == "__main__":
    raise SystemExit(main())
