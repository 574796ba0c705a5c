"""``owx bench canary --sweep``: recovery of stateful functions under injected failures, per strategy.

(``owx bench canary`` without ``--sweep`` runs :mod:`owx.bench.canary.evidence`: long TensorFlow
training, exactly-once checked from outside owx, a whole-node failure.)

A real gateway (two nodes, real cgroups and runtime processes, the embedded checkpoint
store) runs 100+ invocations of four stateful workloads (iterative solver, web-service
queries on SQLite, zlib compression, BFS) per strategy — Canary with dynamic, aggressive
and lenient replication, and the baselines retry, request replication and
active-standby — while a fault injector SIGKILLs the containers of a seeded random
share of the invocations (the failure rate) at random moments of their run.

Reported per run: mean recovery time of the failed invocations (from when the work lost
to the failure was last secured — the restored checkpoint, or the start of the killed
execution — until it was taken up again: see :func:`recovery_time`), makespan against the
failure-free run (retry strategy at 0%: plain OpenWhisk), cost at $0.000017 per GB-s,
lost and duplicated results. Plots like figures 6.3–6.10 of the Canary chapter go to
``bench-out/``. Goals (PASS/FAIL): recovery time <= 20% of retry's at 15%; makespan <=
1.10x failure-free at 15%; 0 lost and 0 duplicated results in every run; 10 MB
checkpoint write and restore <= 50 ms each.

The goal runs (failure-free, Canary and retry at 15%, and ``--pairs`` - 1 more failure-free /
Canary pairs run back to back) have ``--invocations`` (default 100); the other runs half as many (rounded up to whole
rounds of the four workloads), so every strategy sees 100+ invocations over its failure rates. Options: ``--invocations N``,
``--rates 0,0.15,0.5`` (the Canary / retry sweep), ``--store redis|sqlite``, ``--quick``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import secrets
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


from owx.bench.canary import checkpoint as canary_checkpoint
from owx.bench.canary import plots as canary_plots
from owx.bench.canary.containers import ContainerFiles
from owx.bench.canary.faults import CostMeter, FaultInjector, Target, choose_targets
from owx.bench.canary.redis_server import RedisServer
from owx.bench.canary.workloads import CHECKPOINT_MODE, WORKLOADS, answer, expected, make_graph

from owx.settings import Settings
from owx.gateway.catalog import annotation
from owx.gateway.server import GatewayServer
from owx.gateway.service import Gateway

STRATEGIES = {  # name -> canary annotation fields
    "dynamic": {"replication": "dynamic", "fault_tolerance": "canary"},
    "aggressive": {"replication": "aggressive", "fault_tolerance": "canary"},
    "lenient": {"replication": "lenient", "fault_tolerance": "canary"},
    "retry": {"fault_tolerance": "retry"},
    "request-replication": {"fault_tolerance": "request-replication", "copies": 2},
    "active-standby": {"fault_tolerance": "active-standby"},
}
SEEDS = 5
INTERVAL_S = 0.05
MEMORY_MB = 512
OUT = Path("bench-out")


@dataclass
class Run:
    strategy: str
    rate: float
    invocations: int
    makespan_s: float
    cost_usd: float
    kills: int
    lost: int
    duplicated: int
    recovery_s: dict[str, list[float]] = field(default_factory=dict)  # per workload, failed invocations
    lost_work_s: list[float] = field(default_factory=list)  # per failed invocation: secured -> killed
    detection_s: list[float] = field(default_factory=list)  # killed -> the platform reported the death
    durations: dict[str, list[float]] = field(default_factory=dict)

    @property
    def mean_recovery_s(self) -> float:
        values = [v for vs in self.recovery_s.values() for v in vs]
        return statistics.fmean(values) if values else 0.0

    @property
    def mean_lost_work_s(self) -> float:
        """The part of the recovery time that was work done again (the rest is the take-over)."""
        return statistics.fmean(self.lost_work_s) if self.lost_work_s else 0.0

    @property
    def mean_detection_s(self) -> float:
        return statistics.fmean(self.detection_s) if self.detection_s else 0.0


class Bench:
    """One gateway, the deployed workloads, and runs of strategies at failure rates."""

    def __init__(self, workdir: Path, store: str) -> None:
        self.workdir = workdir
        self.redis = None
        if store == "redis":
            self.redis = RedisServer(workdir / "redis", password=secrets.token_hex(16))
        # a user per namespace (owx logs in with the password); blobs: the namespace's directory
        canary = {"store_url": self.redis.url} if self.redis else {}
        self.cgroup_root = f"owx-bench-canary-{os.getpid()}"
        settings = Settings(data_dir=workdir / "gw", gateway={"port": 0, "concurrent_invocations": 4}, canary=canary,
                            platform={"nodes": 2, "user_memory_mb": 4096, "stem_cells": 1,
                                      "cgroup_root": self.cgroup_root})
        self.service = Gateway.open(settings)
        self.identity = self.service.default_identity()
        self.server = GatewayServer(self.service, "127.0.0.1", 0)
        self.server.start_background()
        self.url = f"http://127.0.0.1:{self.server.port}/api/v1/namespaces/_"
        import requests

        self.http = requests.Session()
        self.http.auth = tuple(self.identity.auth.split(":", 1))  # type: ignore[assignment]
        namespace_dir = self.service.platform.namespace_dir(self.identity.namespace)
        assert namespace_dir is not None, "the sweep needs the embedded platform's namespace directories"
        self.data = namespace_dir / "bench-canary"  # mounted into the namespace's sandboxes: inputs, pid files
        (self.data / "pids").mkdir(parents=True, exist_ok=True)
        for path in (self.data, self.data / "pids"):
            os.chmod(path, 0o777)
        self.expected_s: dict[str, float] = {}
        self._answers: dict[tuple[str, int], dict[str, Any]] = {}
        for strategy, fields in STRATEGIES.items():
            for workload, code in WORKLOADS.items():
                canary = {"checkpoint": CHECKPOINT_MODE[workload], "interval_s": INTERVAL_S, **fields}
                body = {"exec": {"kind": "python:3", "code": code}, "limits": {"memory": MEMORY_MB, "timeout": 120_000},
                        "annotations": [{"key": "canary", "value": canary}]}
                response = self.http.put(f"{self.url}/actions/{workload}-{strategy}?overwrite=true", json=body)
                response.raise_for_status()

    def answer(self, workload: str, seed: int) -> dict[str, Any]:
        key = (workload, seed)
        if key not in self._answers:
            self._answers[key] = expected(workload, self.params(workload, seed))
        return self._answers[key]

    def params(self, workload: str, seed: int) -> dict[str, Any]:
        return {"dir": str(self.data), "seed": seed, "key": uuid.uuid4().hex}

    def run(self, strategy: str, rate: float, invocations: int) -> Run:
        plan = [(list(WORKLOADS)[i % len(WORKLOADS)], (i // len(WORKLOADS)) % SEEDS) for i in range(invocations)]
        moments = choose_targets(invocations, rate, seed=invocations)
        meter = CostMeter(self.service.platform).start()
        ids = []
        for workload, seed in plan:
            response = self.http.post(f"{self.url}/actions/{workload}-{strategy}", json=self.params(workload, seed))
            response.raise_for_status()
            ids.append(response.json()["activationId"])
        targets = [Target(aid, fraction, self.expected_s.get(workload, 1.0))
                   for aid, (workload, _), fraction in zip(ids, plan, moments) if fraction is not None]
        injector = FaultInjector(ContainerFiles(self.data / "pids", self.cgroup_root), targets).start()
        records = [self._wait(aid) for aid in ids]
        injector.stop()
        cost = meter.stop()
        return self._measure(strategy, rate, plan, ids, records, targets, cost)

    def _wait(self, activation_id: str, timeout: float = 600) -> dict[str, Any] | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            record = self.service.activations.get(self.identity.namespace, activation_id)
            if record is not None:
                return record
            time.sleep(0.02)
        return None

    def _measure(self, strategy, rate, plan, ids, records, targets, cost) -> Run:
        killed = {t.activation_id: t for t in targets if t.killed_at is not None}
        lost = 0
        durations: dict[str, list[float]] = defaultdict(list)
        recovery: dict[str, list[float]] = {w: [] for w in WORKLOADS}
        lost_work: list[float] = []
        detection: list[float] = []
        for aid, (workload, seed), record in zip(ids, plan, records):
            ok = record is not None and record["response"]["success"] and \
                answer(record["response"]["result"]) == self.answer(workload, seed)
            lost += not ok
            if record is None:
                continue
            durations[workload].append((record["end"] - record["start"]) / 1000)
            if ok and aid in killed:
                result, target = record["response"]["result"], killed[aid]
                recovery[workload].append(recovery_time(result, target))
                if result["resumed_time"] > target.killed_at:
                    lost_work.append(target.killed_at - (result["restored_time"] or target.started_at))
                detected = [f["detectedAt"] / 1000 for f in annotation(record, "canary")["failures"]]
                detection.extend(d - target.killed_at for d in detected[:1])
        own = set(ids)
        stored = Counter(r["activationId"] for r in self.service.activations.list(
            self.identity.namespace, since=min(r["start"] for r in records if r)) if r["activationId"] in own)
        duplicated = sum(n - 1 for n in stored.values())
        done = [r for r in records if r]
        makespan = (max(r["end"] for r in done) - min(r["start"] for r in done)) / 1000
        return Run(strategy, rate, len(ids), makespan, cost, len(killed), lost, duplicated, recovery, lost_work,
                   detection, dict(durations))

    def close(self) -> None:
        self.server.stop()
        if self.redis is not None:
            self.redis.stop()


def recovery_time(result: dict[str, Any], target: Target) -> float:
    """Seconds from when the work lost to the failure was last secured until it was taken up again.

    The work done since the restored checkpoint (since the start of the killed execution
    without one) is lost and done again, so the function is back where it failed after
    ``resumed - secured``: detection, restart on a replica or a new container, restore,
    and re-execution. An answer from an execution that was not hit (request replication)
    recovered nothing.
    """
    if result["resumed_time"] <= target.killed_at:
        return 0.0
    secured = result["restored_time"] or target.started_at
    return max(0.0, result["resumed_time"] - secured)


def print_run(run: Run, baseline: Run) -> None:
    per = " ".join(f"{w}={statistics.fmean(v) * 1000:5.0f}" if v else f"{w}=    -" for w, v in run.recovery_s.items())
    print(f"{run.strategy:>19} {run.rate:5.0%} n={run.invocations:<4} kills={run.kills:<3} "
          f"recovery={run.mean_recovery_s * 1000:6.0f} ms ({per}; redone {run.mean_lost_work_s * 1000:4.0f}, detection {run.mean_detection_s * 1000:3.0f}) makespan={run.makespan_s:6.2f} s "
          f"({run.makespan_s / baseline.makespan_s:4.2f}x) cost=${run.cost_usd:.5f} "
          f"({run.cost_usd / baseline.cost_usd:4.2f}x) lost={run.lost} dup={run.duplicated}", flush=True)


def main(argv: list[str] | None = None) -> int:
    """``--sweep [options]``: this strategy sweep; otherwise the evidence bench."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] != ["--sweep"]:
        from owx.bench.canary import evidence

        return evidence.main(argv)
    return sweep(argv[1:])


def sweep(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="owx bench canary --sweep", description=__doc__.splitlines()[0])
    parser.add_argument("--invocations", type=int, default=100)
    parser.add_argument("--rates", default="0,0.15,0.5", help="failure rates of the canary/retry sweep")
    parser.add_argument("--quick", action="store_true", help="fewer invocations and runs (a smoke run)")
    parser.add_argument("--pairs", type=int, default=3,
                        help="(failure-free, Canary at 15%%) pairs behind the makespan goal, the first one included")
    parser.add_argument("--store", choices=("redis", "sqlite"), default="redis",
                        help="KV tier of the checkpoints: a private redis-server (in memory, as the paper's "
                             "Ignite) or the embedded SQLite file")
    args = parser.parse_args(argv)
    invocations = 24 if args.quick else args.invocations
    part = -(-invocations // (2 * len(WORKLOADS))) * len(WORKLOADS)  # runs off the goals' path: half, rounded up
    rates = [float(r) for r in args.rates.split(",")]
    others = [0.15] if args.quick else [0.15, 0.5]
    scaling = [(12, 0.05), (24, 0.1)] if args.quick else [(16, 0.05), (32, 0.1), (64, 0.2)]
    OUT.mkdir(exist_ok=True)
    started = time.monotonic()

    print("== 10 MB checkpoint write / restore (embedded store) ==", flush=True)
    checkpoint_results = canary_checkpoint.measure_checkpoint_latency(repeats=10 if args.quick else 20)
    checkpoint_ok = canary_checkpoint.report(checkpoint_results, 10 * 1024 * 1024)

    workdir = Path(tempfile.mkdtemp(prefix="owx-bench-canary-"))
    bench = Bench(workdir, args.store)
    runs: list[Run] = []
    scaled: list[Run] = []
    try:
        for seed in range(SEEDS):
            make_graph(bench.data, seed)
        for workload in WORKLOADS:  # the failure-free answers, computed outside the platform
            for seed in range(SEEDS):
                bench.answer(workload, seed)
        print("== warm-up (not measured) ==", flush=True)
        for strategy in STRATEGIES:
            bench.run(strategy, 0.0, 8)
        print(f"== failure-free run (retry at 0%: plain OpenWhisk), {invocations} invocations ==", flush=True)
        baseline = bench.run("retry", 0.0, invocations)
        bench.expected_s = {w: statistics.median(d) for w, d in baseline.durations.items()}
        runs.append(baseline)
        print_run(baseline, baseline)
        print("== strategies under failures ==", flush=True)
        plan = [(s, r, invocations if r == 0.15 else part) for r in rates for s in ("dynamic", "retry")
                if (s, r) != ("retry", 0.0)]
        plan += [(s, r, part) for r in others for s in ("aggressive", "lenient", "request-replication", "active-standby")]
        for strategy, rate, count in sorted(plan, key=lambda p: (p[1], p[0] != "dynamic")):
            run = bench.run(strategy, rate, count)
            runs.append(run)
            print_run(run, baseline)
        print(f"== {args.pairs - 1} more pair(s) of the failure-free run and Canary at 15%, back to back "
              "(makespan: this machine's speed drifts between minutes) ==", flush=True)
        repeat = []
        for _ in range(args.pairs - 1):
            repeat += [bench.run("retry", 0.0, invocations), bench.run("dynamic", 0.15, invocations)]
            for run in repeat[-2:]:
                print_run(run, baseline)
        print("== scaling: invocations and failure rate together ==", flush=True)
        for count, rate in scaling:
            for strategy in ("dynamic", "retry"):
                run = bench.run(strategy, rate, count)
                scaled.append(run)
                print_run(run, baseline)
    finally:
        bench.close()
        shutil.rmtree(workdir, ignore_errors=True)

    (OUT / "canary_runs.json").write_text(json.dumps(
        {"runs": [dataclasses.asdict(r) for r in runs], "repeat": [dataclasses.asdict(r) for r in repeat],
         "scaled": [dataclasses.asdict(r) for r in scaled]}, indent=1))
    paths = canary_plots.draw(runs, scaled, baseline, OUT)
    print("plots: " + ", ".join(str(p) for p in paths))
    return report(runs, repeat, scaled, baseline, checkpoint_ok, time.monotonic() - started)


def report(runs: list[Run], repeat: list[Run], scaled: list[Run], baseline: Run, checkpoint_ok: bool,
           elapsed: float) -> int:
    def find(strategy: str, rate: float) -> Run:
        return next(r for r in runs if r.strategy == strategy and r.rate == rate)

    canary, retry = find("dynamic", 0.15), find("retry", 0.15)
    results = []
    ratio = canary.mean_recovery_s / retry.mean_recovery_s if retry.mean_recovery_s else float("inf")
    results.append((f"recovery time at 15% <= 20% of retry's: {ratio:.0%} "
                    f"({canary.mean_recovery_s * 1000:.0f} vs {retry.mean_recovery_s * 1000:.0f} ms)", ratio <= 0.2))
    pairs = [(baseline, canary)] + list(zip(repeat[0::2], repeat[1::2]))
    ratio = sum(c.makespan_s for _, c in pairs) / sum(b.makespan_s for b, _ in pairs)
    detail = ", ".join(f"{c.makespan_s:.1f}/{b.makespan_s:.1f} s" for b, c in pairs)
    results.append((f"makespan at 15% <= 1.10x failure-free: {ratio:.3f}x (sum over {len(pairs)} pairs: {detail})",
                    ratio <= 1.10))
    every = runs + repeat + scaled
    lost, duplicated = sum(r.lost for r in every), sum(r.duplicated for r in every)
    results.append((f"0 lost and 0 duplicated results in {len(every)} runs: lost={lost} duplicated={duplicated}",
                    lost == 0 and duplicated == 0))
    results.append(("10 MB checkpoint write and restore <= 50 ms each (see above)", checkpoint_ok))
    print(f"== goals ({elapsed:.0f} s) ==")
    for text, passed in results:
        print(f"  {'PASS' if passed else 'FAIL'}  {text}")
    return 0 if all(passed for _, passed in results) else 1


if __name__ == "__main__":
    sys.exit(main())
