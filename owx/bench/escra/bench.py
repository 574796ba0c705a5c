"""owx bench escra: CPU tracking, slack and performance vs static and VPA-like limits, OOM rescue, agent cost.

Everything is real: action containers are cgroups under ``owx-bench-escra/<run>``
with Python workers burning CPU and touching memory; Escra runs as
``owx agent --controller`` plus ``owx agent`` processes.  The 60 s recommender is
run time-scaled: a run of ``--duration`` seconds applies it every
``60 * duration / 300`` s, i.e. as often, relative to run length, as a 60 s
recommender in a 5-minute run.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
from owx.bench.escra.procs import BUSY, python, spawn_in
from owx.bench.escra.stack import EscraStack
from owx.bench.escra.workload import ActionContainer, Recommender, Sampler, apply_limits, drive, pattern

from owx.common.cgroups import Cgroup

MIB = 1 << 20
OUT = Path("bench-out")
RUN = f"owx-bench-escra/{uuid.uuid4().hex[:6]}"
NODE = "bench"
CONTAINERS, WORKERS, BASE_MB, RATE = 2, 2, 30, 8.0


def pct(values, q) -> float:
    return float(np.percentile(values, q)) if len(values) else float("nan")


# -- figure 2.2: tracking a demand that steps between 1 and 2 busy cores --------------------
def tracking(step_s: float, steps: int) -> dict:
    group = Cgroup(f"{RUN}/{NODE}/track").create()
    procs = [spawn_in(group, python(BUSY)) for _ in range(2)]
    stack = EscraStack(RUN, NODE, "name=track,cpu=2,memory-mb=1024,containers=1")
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
    ticks = sampler.ticks[0]
    _plot_tracking(ticks, demand)
    slack = [t.quota_cores - t.used_cores for t in ticks[10:]]
    throttled_share = sum(1 for t in ticks[10:] if t.used_cores >= 0.97 * t.quota_cores) / max(1, len(ticks) - 10)
    return {"cpu_slack_p50": pct(slack, 50), "cpu_slack_p99": pct(slack, 99), "at_limit_share": throttled_share,
            "used_cores_mean": float(np.mean([t.used_cores for t in ticks[10:]]))}


def _plot_tracking(ticks, demand: list[tuple[float, int]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 3.5))
    ax.plot([t.t for t in ticks], [t.quota_cores for t in ticks], label="Escra CPU limit")
    ax.plot([t.t for t in ticks], [t.used_cores for t in ticks], label="CPU usage")
    ax.step([t for t, _ in demand], [n for _, n in demand], where="post", linestyle=":", color="grey",
            label="demand (busy processes; the node is shared)")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("cores")
    ax.set_title("Escra CPU tracking (demand steps between 1 and 2 busy cores)")
    ax.set_ylim(0, 2.6)  # the application's limit is 2 cores; room above for the legend
    ax.legend(loc="upper left", ncol=3, fontsize="small")
    fig.tight_layout()
    fig.savefig(OUT / "escra_cpu_tracking.png", dpi=120)
    plt.close(fig)


# -- slack and performance ---------------------------------------------------------------
def run_config(kind: str, config: str, duration: float, static: list[tuple[float, int]] | None) -> dict:
    """One run of one workload under one allocation policy; returns metrics."""
    containers = [ActionContainer(Cgroup(f"{RUN}/{NODE}/{config}-{i}"), WORKERS, BASE_MB) for i in range(CONTAINERS)]
    groups = [c.group for c in containers]
    stack = recommender = None
    try:
        if config in ("static", "vpa-1s", "vpa-60s"):
            for group, (cores, memory) in zip(groups, static):
                apply_limits(group, cores, memory)
        if config == "escra":
            budget_mb = sum(memory for _, memory in static) // MIB
            stack = EscraStack(RUN, NODE, f"name=bench,cpu=2,memory-mb={budget_mb},containers={CONTAINERS}")
            stack.wait_managed(CONTAINERS)
        sampler = Sampler(groups).start()
        if config.startswith("vpa"):
            interval = 1.0 if config == "vpa-1s" else 60.0 * duration / 300.0
            # start from the profiled peak (not 1.5x): what a recommender converges to
            for group, (cores, memory) in zip(groups, static):
                apply_limits(group, cores / 1.5, int(memory / 1.5))
            recommender = Recommender(groups, sampler, interval=interval, window=10.0).start()
        requests = pattern(kind, RATE, duration, CONTAINERS, seed=7)
        drive(requests, containers)
        if recommender:
            recommender.stop()
        sampler.stop()
        oom_kills = sum(g.memory().oom_kills for g in groups)
    finally:
        if stack:
            stack.close()
        for container in containers:
            container.close()
    done = [r for r in requests if r.done is not None]
    ticks = [t for series in sampler.ticks for t in series]
    return {
        "cpu_slack_p50": pct([t.quota_cores - t.used_cores for t in ticks], 50),
        "cpu_slack_p99": pct([t.quota_cores - t.used_cores for t in ticks], 99),
        "mem_slack_p50_mib": pct([(t.mem_limit - t.mem_usage) / MIB for t in ticks], 50),
        "mem_slack_p99_mib": pct([(t.mem_limit - t.mem_usage) / MIB for t in ticks], 99),
        "throughput": len(done) / duration,
        "offered": len(requests) / duration,
        "p99_ms": pct([(r.done - r.at) * 1000 for r in done], 99),
        "failed": sum(r.failed for r in requests),
        "oom_kills": oom_kills,
    }


def profile(kind: str, duration: float) -> list[tuple[float, int]]:
    """Peak CPU (cores, 100 ms) and memory per container with no limits."""
    containers = [ActionContainer(Cgroup(f"{RUN}/profile-{i}"), WORKERS, BASE_MB) for i in range(CONTAINERS)]
    sampler = Sampler([c.group for c in containers]).start()
    try:
        drive(pattern(kind, RATE, duration, CONTAINERS, seed=3), containers, drain_s=0.5)
    finally:
        sampler.stop()
        for container in containers:
            container.close()
    return sampler.peaks()


def compare(kind: str, duration: float, profile_s: float) -> dict[str, dict]:
    peaks = profile(kind, profile_s)
    static = [(cores * 1.5, int(memory * 1.5)) for cores, memory in peaks]
    return {config: run_config(kind, config, duration, static) for config in ("static", "vpa-1s", "vpa-60s", "escra")}


# -- OOM rescue latency: event -> the paused process runs again ---------------------------
# Burns CPU for ARGV[2] seconds, says "grow", then allocates ARGV[1] MiB stamping each MiB.
STAMPER = """
import sys, time
end = time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    pass
print("grow", flush=True)
chunks = []
for _ in range(int(sys.argv[1])):
    chunk = bytearray(1 << 20); chunk[::4096] = b"x" * 256
    chunks.append(chunk)
    sys.stdout.write(f"{time.monotonic_ns()}\\n")
sys.stdout.flush()
"""


def oom_rescue(rounds: int, warmup_s: float) -> dict:
    """Rescue latency of a process whose memory grows after ``warmup_s`` s of running.

    A process that grows right after its container starts (``warmup_s`` 0) still
    has its CPU quota ramping up from the eq. 2.1 share, so a rescued task may
    also wait for the next CFS period; ``throttled`` counts the periods in which
    the quota, not memory, held it back while it grew.
    """
    log = Path(tempfile.mkdtemp(prefix="owx-bench-escra-")) / "rescues.jsonl"
    stack = EscraStack(RUN, NODE, "name=oom,cpu=2,memory-mb=4096,containers=8", str(log))
    latencies, kills, stamps_ns, throttled = [], 0, [], 0
    try:
        for index in range(rounds):
            name = f"oom-{warmup_s:g}-{index}".replace(".", "_")
            group = Cgroup(f"{RUN}/{NODE}/{name}").create()
            idle = spawn_in(group, python("import time; time.sleep(60)"))
            stack.wait_managed(name=name)
            time.sleep(0.5)  # the agent holds its rescue reserve
            stamps = spawn_in(group, python(STAMPER, "700", str(warmup_s)), stdout=subprocess.PIPE, text=True)
            assert stamps.stdout.readline().strip() == "grow", "stamper did not start"
            before = group.cpu().throttled_periods
            stamps_ns += [int(line) for line in stamps.stdout]
            stamps.wait()
            throttled += group.cpu().throttled_periods - before
            kills += group.memory().oom_kills + (stamps.returncode != 0)
            idle.kill()
            idle.wait()
            group.destroy()
        time.sleep(0.2)
        for line in log.read_text().splitlines():
            event = json.loads(line)
            after = [t for t in stamps_ns if t > event["event_ns"]]
            if after:
                latencies.append((min(after) - event["event_ns"]) / 1e6)
    finally:
        stack.close()
    return {"events": len(latencies), "p50_ms": pct(latencies, 50), "p99_ms": pct(latencies, 99),
            "max_ms": max(latencies, default=float("nan")), "oom_kills": kills, "throttled": throttled}


# -- the agent's own CPU for 50 idle containers --------------------------------------------
def agent_cost(count: int, seconds: float) -> dict:
    groups = [Cgroup(f"{RUN}/{NODE}/idle-{i}").create() for i in range(count)]
    procs = [spawn_in(g, ["sleep", "3600"]) for g in groups]
    stack = EscraStack(RUN, NODE, f"name=idle,cpu=2,memory-mb=8192,containers={count}")
    try:
        stack.wait_managed(count, timeout=20)
        time.sleep(1.0)
        agent_before, ctl_before, t0 = _cpu_s(stack.agent.pid), _cpu_s(stack.controller.pid), time.monotonic()
        time.sleep(seconds)
        elapsed = time.monotonic() - t0
        agent = (_cpu_s(stack.agent.pid) - agent_before) / elapsed
        controller = (_cpu_s(stack.controller.pid) - ctl_before) / elapsed
    finally:
        stack.close()
        for proc in procs:
            proc.kill()
            proc.wait()
        for group in groups:
            group.destroy()
    return {"agent_core_share": agent, "allocator_core_share": controller}


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- report ------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=15.0, help="seconds per workload run (default 15)")
    parser.add_argument("--profile", type=float, default=8.0, help="seconds of the unlimited profiling run")
    parser.add_argument("--workloads", default="fixed,exponential,bursty")
    args = parser.parse_args(argv)
    OUT.mkdir(exist_ok=True)
    Cgroup(RUN).create()
    started = time.monotonic()
    try:
        track = tracking(step_s=4.0, steps=5)
        print(f"\n== CPU tracking (fig 2.2) -> {OUT / 'escra_cpu_tracking.png'}")
        print(f"   slack p50 {track['cpu_slack_p50']:.2f} cores, p99 {track['cpu_slack_p99']:.2f}; at limit {track['at_limit_share']:.0%} of periods; "
              f"mean usage {track['used_cores_mean']:.2f} cores")
        results = {}
        for kind in args.workloads.split(","):
            results[kind] = compare(kind, args.duration, args.profile)
            _print_table(kind, results[kind])
        rescue = oom_rescue(rounds=3, warmup_s=1.5)
        fresh = oom_rescue(rounds=3, warmup_s=0.0)
        for label, row in (("running container", rescue), ("growing at start", fresh)):
            print(f"\n== OOM rescue, {label}: {row['events']} events, event->running p50 {row['p50_ms']:.2f} ms, "
                  f"p99 {row['p99_ms']:.2f} ms, max {row['max_ms']:.2f} ms, kills {row['oom_kills']}, "
                  f"CPU-throttled periods while growing {row['throttled']}")
        cost = agent_cost(50, 10.0)
        print(f"\n== 50 idle containers: agent {cost['agent_core_share']:.1%} of a core, "
              f"allocator {cost['allocator_core_share']:.1%}")
    finally:
        for child in Cgroup(RUN).children():
            for grandchild in child.children():
                grandchild.destroy()
            child.destroy()
        Cgroup(RUN).destroy()
        if not Cgroup(RUN).children() and not Cgroup(RUN.split("/")[0]).children():
            Cgroup(RUN.split("/")[0]).destroy()
    goals = _goals(results, rescue, fresh, cost)
    (OUT / "escra.json").write_text(json.dumps({"tracking": track, "workloads": results, "oom": rescue, "oom_at_start": fresh,
                                                "cost": cost}, indent=2))
    print(f"\n(total {time.monotonic() - started:.0f} s; 60 s recommender time-scaled to every {60 * args.duration / 300:.1f} s)")
    return 0 if all(goals) else 1


def _print_table(kind: str, rows: dict[str, dict]) -> None:
    base = rows["static"]
    print(f"\n== workload {kind} (offered {base['offered']:.0f} req/s)")
    print(f"   {'config':8} {'cpu slack p50/p99 (cores)':>26} {'mem slack p50/p99 (MiB)':>25} {'req/s':>7} {'vs static':>9} {'p99 ms':>8} {'OOM kills':>9}")
    for name, row in rows.items():
        print(f"   {name:8} {row['cpu_slack_p50']:12.2f} /{row['cpu_slack_p99']:6.2f}      {row['mem_slack_p50_mib']:11.0f} /{row['mem_slack_p99_mib']:6.0f}    "
              f"{row['throughput']:7.1f} {row['throughput'] / base['throughput']:9.2f} {row['p99_ms']:8.0f} {row['oom_kills']:9d}")
    print(f"   escra CPU slack p50 = {rows['escra']['cpu_slack_p50'] / base['cpu_slack_p50']:.0%} of static's; "
          f"memory slack p50 = {rows['escra']['mem_slack_p50_mib'] / base['mem_slack_p50_mib']:.0%} of static's")


def _goals(results: dict, rescue: dict, fresh: dict, cost: dict) -> list[bool]:
    escra = [rows["escra"] for rows in results.values()]
    static = [rows["static"] for rows in results.values()]
    checks = [
        ("0 OOM kills with Escra while the pool has memory",
         sum(r["oom_kills"] for r in escra) + rescue["oom_kills"] + fresh["oom_kills"] == 0),
        ("Escra CPU slack p50 <= 25% of static 1.5x (every workload)",
         all(e["cpu_slack_p50"] <= 0.25 * s["cpu_slack_p50"] for e, s in zip(escra, static))),
        ("Escra throughput >= 95% of static (every workload)",
         all(e["throughput"] >= 0.95 * s["throughput"] for e, s in zip(escra, static))),
        ("OOM rescue p99 <= 5 ms (running container)", rescue["p99_ms"] <= 5.0),
        ("agent <= 5% of one core for 50 containers", cost["agent_core_share"] <= 0.05),
    ]
    print()
    for label, ok in checks:
        print(f"{'PASS' if ok else 'FAIL'}  {label}")
    return [ok for _, ok in checks]


if __name__ == "__main__":
    raise SystemExit(main())
