"""``owx bench canary``: Canary against retry on long TensorFlow training, checked from outside owx.

A real gateway (embedded platform, ``--nodes`` nodes with real cgroups, checkpoints in a
private redis-server with a blob directory) runs ``--activations`` training activations
(:mod:`owx.bench.canary.training`: 50 epochs, a checkpoint after every epoch) per run:

1. failure-free — the retry strategy without kills: plain OpenWhisk, no checkpoints;
2. Canary — each activation SIGKILLed once, at a seeded random moment of its run
   (uniform over 15–85% of the failure-free duration after the action announced itself), from
   outside owx: every process of its container's cgroup (:mod:`owx.bench.canary.containers`);
3. retry — the same kills, restarted from scratch;
4. node failure — Canary; at a seeded moment every process in one node's cgroup is killed
   at once and the node is marked lost, so work moves to the others.

Every execution appends its epochs' effects and its result to an effect log in a second
redis-server (:mod:`owx.bench.canary.effects`); each run is checked against the stored
records: results and effects lost or doubled. Recovery time as in the strategy sweep
(:func:`owx.bench.canary.bench.recovery_time`): from when the lost work was last secured
(the restored checkpoint, else the start of the killed execution) until it was taken up;
infinite for a killed activation that never succeeded.
Then a 10 MB checkpoint is written and restored against a redis-server from fresh
processes (:mod:`owx.bench.canary.cold_restore`).

Goals: Canary's mean recovery <= 10% of retry's; Canary's makespan <= 1.05x the
failure-free run's; 0 results or effects lost or doubled under Canary, also when a whole
node fails (and the node failure hit at least one activation); cold 10 MB checkpoint
write, restore and restore flushed p50 <= 50 ms each.

Controls (``--control NAME``; each must fail its goals):

* ``no-checkpoint`` — the action neither saves nor restores: Canary's recovery starts from
  scratch (recovery and makespan goals fail) and redoes effects (doubled);
* ``no-recovery`` — ``max_attempts: 1``: a killed activation is not run again (lost);
* ``no-fencing`` — two executions of every activation at once (request replication), the
  first result committed: both executions' effects and results reach the world (doubled).

Ablation ``--control no-kind-zygote``: the platform without TensorFlow's own zygote, so every
replica imports TensorFlow itself (about 5 CPU-seconds on the cores the training uses): what the
zygote is worth in makespan and recovery.

Options: ``--activations N`` (4), ``--concurrency N`` (2), ``--nodes N`` (2), ``--seed N``,
``--repeats N`` (cold checkpoint repeats, 20), ``--quick`` (3 epochs, smoke only: its
figures are not evidence). ``owx bench canary --sweep …`` runs the strategy sweep instead.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import secrets
import shutil
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from owx.bench.canary import cold_restore
from owx.bench.canary.bench import recovery_time
from owx.bench.canary.checkpoint import GOAL_MS
from owx.bench.canary.containers import AnnouncedContainers, kill_subtree
from owx.bench.canary.effects import EffectCheck, check, read_log
from owx.bench.canary.faults import FaultInjector, Target
from owx.bench.canary.harness import GatewayHarness
from owx.bench.canary.redis_server import RedisServer
from owx.bench.canary.training import TRAINING, TrainingWorkload
from owx.bench.results import Report
from owx.common.cgroups import Cgroup
from owx.platform.embedded.backends.process import ProcessBackend
from owx.settings import Settings


KIND = "python:tensorflow"
KIND_PRELOAD = {KIND: ["tensorflow"]}  # the platform setting: replicas start without importing TensorFlow again
MEMORY_MB = 1024
TIMEOUT_MS = 300_000  # OpenWhisk's maximum: one execution of the training takes about a minute
ANNOUNCE_KEY = "announced"
CONTROLS = ("no-checkpoint", "no-recovery", "no-fencing", "no-kind-zygote")
CANARY = {"checkpoint": "explicit", "fault_tolerance": "canary", "replication": "dynamic"}
ACTIONS = {  # action name -> canary annotation
    "train-canary": CANARY,
    "train-retry": {"checkpoint": "explicit", "fault_tolerance": "retry"},
    "train-no-recovery": {**CANARY, "max_attempts": 1},
    "train-no-fencing": {"checkpoint": "explicit", "fault_tolerance": "request-replication", "copies": 2},
}


@dataclass
class TrainingRun:
    """One run of the activations under one strategy."""

    label: str
    makespan_s: float
    durations_s: list[float]
    recovery_s: list[float]
    kills: int
    effects: EffectCheck
    failures_seen: int = 0  # failures the records' canary annotations list
    on_replica: int = 0  # of those, the ones a warm replica took over (the rest waited for a new container)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def mean_recovery_s(self) -> float:
        return statistics.fmean(self.recovery_s) if self.recovery_s else 0.0


class TrainingBench:
    """A gateway with the training actions, a checkpoint Redis and an effect-log Redis."""

    def __init__(self, workdir: Path, workload: TrainingWorkload, nodes: int, concurrency: int,
                 kind_preload: dict[str, list[str]]) -> None:
        self.workdir = workdir
        self.workload = workload
        self.checkpoints = RedisServer(workdir / "redis-checkpoints", password=secrets.token_hex(16))
        self.effects = RedisServer(workdir / "redis-effects")
        self.effect_client = redis.Redis.from_url(self.effects.url)
        cgroup_root = f"owx-bench-canary-ev-{os.getpid()}"
        self.announcements = AnnouncedContainers(self.effect_client, ANNOUNCE_KEY, cgroup_root)
        settings = Settings(
            data_dir=workdir / "gw", gateway={"port": 0, "concurrent_invocations": concurrency},
            limits={"memory_mb": {"max": MEMORY_MB}},
            canary={"store_url": self.checkpoints.url},  # a user per namespace; blobs: the namespace's directory
            platform={"nodes": nodes, "user_memory_mb": 6144, "stem_cells": 0, "zygote_kind_preload": kind_preload,
                      "cgroup_root": cgroup_root,
                      "sandbox": {"host_ports": [self.effects.port]}})  # the actions log their effects there
        try:
            self.gateway = GatewayHarness.start(settings)
            for name, canary in ACTIONS.items():
                self.gateway.deploy(name, KIND, TRAINING, MEMORY_MB, TIMEOUT_MS, canary)
        except BaseException:
            self.checkpoints.stop()
            self.effects.stop()
            raise
        self.expected_s = 60.0
        self._runs = 0

    def wait_for_kind_zygote(self, timeout_s: float = 120.0) -> bool:
        """Wait until the platform forks the training kind's containers with TensorFlow imported
        (its zygote starts with the kind's first container), so that no measured run pays for it."""
        backend = self.gateway.service.platform.backends.for_kind(KIND)
        if not isinstance(backend, ProcessBackend) or backend.zygotes is None:
            return False
        deadline = time.monotonic() + timeout_s
        while not backend.zygotes.preloaded(KIND):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)
        return True

    def params(self, seed: int, checkpoint: bool, key: str) -> dict[str, Any]:
        return {**self.workload.params(seed), "checkpoint": checkpoint, "effects_url": self.effects.url,
                "effects_key": key, "announce_key": ANNOUNCE_KEY}

    def run(self, label: str, action: str, moments: list[float | None], *, checkpoint: bool = True,
            node_kill_s: float | None = None) -> TrainingRun:
        """Invoke one activation per entry of ``moments`` (None: spared; else the fraction of
        the failure-free duration at which it is killed); kill a node ``node_kill_s`` in."""
        self._runs += 1
        key = f"effects-{self._runs}-{label}"
        ids = [self.gateway.invoke(action, self.params(seed, checkpoint, key)) for seed in range(len(moments))]
        targets = [Target(aid, fraction, self.expected_s) for aid, fraction in zip(ids, moments) if fraction is not None]
        injector = FaultInjector(self.announcements, targets).start()
        node_kill = NodeKill(self, node_kill_s) if node_kill_s is not None else None
        records = [self.gateway.wait(aid) for aid in ids]
        injector.stop()
        if node_kill is not None:
            node_kill.join()
            targets = node_kill.targets
        return self._measure(label, ids, records, targets, key, node_kill)

    def _measure(self, label: str, ids: list[str], records: list[dict[str, Any] | None], targets: list[Target],
                 key: str, node_kill: NodeKill | None) -> TrainingRun:
        killed = {t.activation_id: t for t in targets if t.killed_at is not None}
        committed: dict[str, str | None] = {}
        recovery, durations, failures, on_replica = [], [], 0, 0
        for aid, record in zip(ids, records):
            ok = record is not None and record["response"]["success"]
            result = record["response"]["result"] if ok else {}
            committed[aid] = result.get("attempt") if ok else None
            if record is None:
                continue
            durations.append((record["end"] - record["start"]) / 1000)
            listed = [f for a in record.get("annotations", []) if a["key"] == "canary" and isinstance(a["value"], dict)
                      for f in a["value"].get("failures", [])]
            failures += len(listed)
            on_replica += sum(1 for f in listed if f.get("replica"))
            if aid in killed:  # never recovered: an infinite recovery time
                recovery.append(recovery_time(result, killed[aid]) if ok else float("inf"))
        done = [r for r in records if r]
        makespan = (max(r["end"] for r in done) - min(r["start"] for r in done)) / 1000 if done else 0.0
        effects = check(read_log(self.effect_client, key), committed, self.workload.epochs)
        extra = {"node killed": node_kill.node} if node_kill else {}
        return TrainingRun(label, makespan, durations, recovery, len(killed), effects, failures, on_replica, extra)

    def close(self) -> None:
        self.gateway.stop()
        for server in (self.checkpoints, self.effects):
            server.stop()


class NodeKill:
    """At ``after_s`` into a run, kill every process of the node running the most announced
    activations (ties: the last node) at once and mark the node lost; the activations running
    there become the run's targets."""

    def __init__(self, bench: TrainingBench, after_s: float) -> None:
        self.bench = bench
        self.node = ""
        self.targets: list[Target] = []
        self._thread = threading.Thread(target=self._kill, args=(after_s,), name="node-kill", daemon=True)
        self._thread.start()

    def _kill(self, after_s: float) -> None:
        time.sleep(after_s)
        platform = self.bench.gateway.service.platform
        running = self.bench.announcements.running()
        here: dict[str, dict[str, float]] = {}
        for node in platform.nodes():
            parent = Cgroup(node.cgroup_parent or "")
            here[node.name] = {aid: started for aid, (container, started) in running.items()
                               if Cgroup(f"{parent.relpath}/{container}").dir("pids").is_dir()}
        node = max(reversed(platform.nodes()), key=lambda n: len(here[n.name]))
        kill_subtree(Cgroup(node.cgroup_parent or ""))
        killed_at = time.time()
        platform.node(node.name).kill()
        self.node = node.name
        self.targets = [Target(aid, 0.0, 0.0, killed_at, started) for aid, started in here[node.name].items()]

    def join(self) -> None:
        self._thread.join()
        self.bench.gateway.service.platform.node(self.node).revive()


def record_run(report: Report, run: TrainingRun) -> None:
    """The run's figures, under its label."""
    report.figure(f"{run.label}: makespan", round(run.makespan_s, 2), "s")
    report.figure(f"{run.label}: mean activation duration", round(statistics.fmean(run.durations_s), 2)
                  if run.durations_s else 0.0, "s")
    report.figure(f"{run.label}: kills", run.kills)
    report.figure(f"{run.label}: failures in the records", run.failures_seen)
    report.figure(f"{run.label}: failures taken over by a warm replica", run.on_replica)
    report.figure(f"{run.label}: mean recovery time", round(run.mean_recovery_s, 3), "s")
    report.figure(f"{run.label}: executions in the effect log", run.effects.attempts)
    for name, value in run.extra.items():
        report.figure(f"{run.label}: {name}", value)
    for name, value in dataclasses.asdict(run.effects).items():
        if name not in ("activations", "attempts"):
            report.figure(f"{run.label}: {name.replace('_', ' ')}", value)
    print(f"{run.label:>13}: makespan {run.makespan_s:6.1f} s, kills {run.kills}, recovery "
          f"{run.mean_recovery_s:6.2f} s ({', '.join(f'{r:.2f}' for r in run.recovery_s)}; on a warm replica "
          f"{run.on_replica} of {run.failures_seen}), {run.effects}", flush=True)


def exactly_once_goals(report: Report, run: TrainingRun) -> None:
    report.goal(f"{run.label}: results and effects lost (log vs records)", run.effects.lost, 0)
    report.goal(f"{run.label}: results and effects doubled (log vs records)", run.effects.doubled, 0)


def plot(report: Report, runs: list[TrainingRun]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4))
    labels = [r.label for r in runs]
    left.bar(labels, [r.mean_recovery_s for r in runs])
    left.set_ylabel("mean recovery time (s)")
    right.bar(labels, [r.makespan_s / runs[0].makespan_s for r in runs])
    right.axhline(1.05, color="grey", linestyle="--", linewidth=1)
    right.set_ylabel("makespan / failure-free")
    for ax in (left, right):
        ax.tick_params(axis="x", rotation=20)
        ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(report.plot_path("training"), dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="owx bench canary", description=__doc__.splitlines()[0])
    parser.add_argument("--activations", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=20, help="cold checkpoint write/restore repeats")
    parser.add_argument("--checkpoint-mb", type=float, default=10.0)
    parser.add_argument("--control", choices=CONTROLS)
    parser.add_argument("--quick", action="store_true", help="3 short epochs: a smoke run, not evidence")
    args = parser.parse_args(argv)
    workload = TrainingWorkload(epochs=3, samples=1024) if args.quick else TrainingWorkload()
    kind_preload = {} if args.control == "no-kind-zygote" else KIND_PRELOAD
    rng = random.Random(args.seed)
    moments = [rng.uniform(0.15, 0.85) for _ in range(args.activations)]
    node_fraction = rng.uniform(0.3, 0.7)
    report = Report("canary", control=args.control, parameters={
        "workload": {**dataclasses.asdict(workload), "model_parameters": workload.parameters,
                     "model_mb": round(workload.model_mb, 2), "kind": KIND, "memory_mb": MEMORY_MB},
        "checkpoint_interval": "every epoch (explicit Checkpointer.save)",
        "checkpoint_store": "redis-server, a user per namespace + blobs",
        "activations_per_run": args.activations, "concurrency": args.concurrency, "nodes": args.nodes,
        "seed": args.seed, "kill_moments_fraction_of_failure_free_duration": [round(m, 3) for m in moments],
        "node_kill_fraction": round(node_fraction, 3), "checkpoint_mb": args.checkpoint_mb,
        "platform_zygote_kind_preload": kind_preload,
        "cold_repeats": args.repeats, "quick": args.quick})
    action = {"no-recovery": "train-no-recovery", "no-fencing": "train-no-fencing"}.get(args.control or "",
                                                                                       "train-canary")
    checkpoint = args.control != "no-checkpoint"
    workdir = Path(tempfile.mkdtemp(prefix="owx-bench-canary-ev-"))
    workdir.chmod(0o711)
    bench = TrainingBench(workdir, workload, args.nodes, args.concurrency, kind_preload)
    try:
        print("== warm-up (not measured) ==", flush=True)
        warm = TrainingWorkload(epochs=1, samples=256)
        for name in ("train-retry", action):
            ids = [bench.gateway.invoke(name, {**bench.params(0, checkpoint, "warm-up"), **warm.params(0)})
                   for _ in range(args.concurrency)]
            for aid in ids:
                bench.gateway.wait(aid)
        ready = bool(kind_preload) and bench.wait_for_kind_zygote()
        report.figure("containers forked with TensorFlow imported (kind zygote ready)", "yes" if ready else "no")
        print(f"== {args.activations} activations per run, {args.concurrency} at a time ==", flush=True)
        free = bench.run("failure-free", "train-retry", [None] * args.activations)
        bench.expected_s = statistics.median(free.durations_s)
        canary = bench.run("canary", action, moments, checkpoint=checkpoint)
        retry = bench.run("retry", "train-retry", moments)
        node = bench.run("node-failure", action, [None] * args.activations, checkpoint=checkpoint,
                         node_kill_s=node_fraction * bench.expected_s)
    finally:
        bench.close()
        shutil.rmtree(workdir, ignore_errors=True)
    runs = [free, canary, retry, node]
    for run in runs:
        record_run(report, run)
    report.figure("epoch length (failure-free)", round(bench.expected_s / workload.epochs, 3), "s")
    ratio = canary.mean_recovery_s / retry.mean_recovery_s if retry.mean_recovery_s else float("inf")
    report.goal("Canary mean recovery / retry's", round(ratio, 4), 0.10)
    report.goal("Canary makespan / failure-free", round(canary.makespan_s / free.makespan_s, 4), 1.05)
    exactly_once_goals(report, canary)
    exactly_once_goals(report, node)
    report.goal("node failure: activations hit", node.kills, 1, higher_is_better=True)
    print(f"== {args.checkpoint_mb:g} MB checkpoint, fresh processes, redis-server ==", flush=True)
    for name, latency in cold_restore.measure(int(args.checkpoint_mb * 2**20), args.repeats).items():
        report.figure(f"cold {name} p50", round(latency.p50, 2), "ms")
        report.figure(f"cold {name} p99", round(latency.p99, 2), "ms")
        report.goal(f"cold {args.checkpoint_mb:g} MB checkpoint {name} p50", round(latency.p50, 2), GOAL_MS, "ms")
    plot(report, runs)
    return report.finish()
