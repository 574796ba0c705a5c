"""``owx bench disdel``: DiSDeL's estimator accuracy, and training time/memory against baselines.

Everything runs here, in this run: the runtime's calibration, TensorFlow in child
processes in fresh cgroups, a private gateway (``owx up``, kind python:tensorflow), generated data.

1. estimator accuracy (:mod:`owx.bench.disdel.estimates`): estimate / measured peak on the
   zoo's table (dev and held-out halves), warm, and on a fresh page cache under a limit
   equal to the estimate;  ``--control fixed`` scores the old fixed-constant estimator,
   ``static`` the profile-only estimate (no measured training), ``no-safety`` the estimator
   without its margin, ``no-prime`` the fresh pass without priming;
2. (normal runs) the same training job in four environments: TF bare process, one action
   with hand-set limits, the paper's retry strategy (256 MB / 60 s, +256 MB per OOM,
   +240 s per time-out) and DiSDeL; time, memory, held-out loss, and a memory-over-time plot.
   ``--control one-shot-average`` runs only this part, with DiSDeL averaging the models once
   after all epochs (the paper's way) instead of after every epoch.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from owx.bench.disdel.estimates import score
from owx.bench.disdel.gateway import start_gateway
from owx.bench.disdel.plot import memory_over_time
from owx.bench.disdel.runs import (EnvRun, bare_process, builtin_model, concurrent_peak, inputs, retry_strategy,
                                   single_action)
from owx.bench.disdel.zoo import TABLE
from owx.bench.results import Report
from owx.disdel import sdk
from owx.disdel.calibration import local_probe, local_runtime_key, measure
from owx.disdel.gateway import Gateway
from owx.disdel.job import JobRequest, parse_job
from owx.disdel.settings import DisdelSettings

MB = 1024 * 1024
PREFIX = "owx-disdel-bench"
JOB = {
    "name": "bench",
    "model": "small_cnn",
    "dataset": {"kind": "synthetic", "samples": 6600, "shape": [32, 32, 3], "classes": 10, "noise": 3.0, "seed": 1},
    "batch_size": 32,
    "epochs": 4,
    "eval_samples": 600,
}
# The loss goal compares means over these model initialisations (the job's ``seed``): from one
# seed to another, the bare process's held-out loss alone ranges from 0.06 to 0.14 on this job,
# far more than the goal's 10 %, so one pair of runs says more about the seed than about DiSDeL.
LOSS_SEEDS = (0, 1, 2, 3, 4)
ESTIMATOR_CONTROLS = ("fixed", "static", "no-safety", "no-prime")
ENVIRONMENT_CONTROLS = {"one-shot-average": {"sync_every": 0}}  # DiSDeL settings part 2 runs with


def line(text: str = "") -> None:
    print(text, flush=True)


def disdel_run(gateway: Gateway, settings: DisdelSettings, seed: int = 0) -> tuple[EnvRun, object]:
    started = time.monotonic()
    state = sdk.submit({**JOB, "seed": seed}, gateway=gateway, settings=settings).wait()
    if state.status != "succeeded":
        raise RuntimeError(f"DiSDeL job failed: {state.message}")
    elapsed = time.monotonic() - started
    import json

    series: dict[str, list[tuple[float, int]]] = {}
    samples, phases = [], []
    for doc in map(json.loads, (settings.root() / "jobs" / state.job_id / "activations.jsonl").read_text().splitlines()):
        container = doc["key"] if doc["role"] == doc["action"] else f"{doc['key']} (in a {doc['action']} container)"
        for sample in doc["result"].get("memory", []):
            series.setdefault(container, []).append((sample["t"], sample["bytes"]))
            samples.append((sample["t"], sample["bytes"], container))
        if doc["role"] == "train":
            phases.append((doc["round"], doc["result"]["phases"]))
    first = [p for r, p in phases if r == 0]
    marks = [(state.created, "submitted"), (max(p["data_loaded"] for p in first), "TF + data loaded"),
             (max(p["fit_done"] for _, p in phases), "fit done (last round)")]
    peaks = [a.peak_bytes for a in state.activations if a.peak_bytes]
    run = EnvRun("DiSDeL", elapsed, max(peaks), concurrent_peak(series), state.result.eval_loss,
                 attempts=len(state.activations), failed=state.result.failed_activations, memory=samples, marks=marks)
    return run, state


def loss_over_seeds(report: Report, gateway: Gateway, settings: DisdelSettings, paths: tuple[Path, Path, Path],
                    job: JobRequest, first: tuple[float, float]) -> None:
    """The loss goal: DiSDeL's held-out loss against the bare process's, each the mean over
    ``LOSS_SEEDS``; ``first`` is (bare, DiSDeL) for the job's own seed, already run."""
    runs_dir, shard, eval_set = paths
    losses = {job.seed: first}
    for seed in (s for s in LOSS_SEEDS if s != job.seed):
        seeded = job.model_copy(update={"seed": seed})
        bare = bare_process(runs_dir, builtin_model(seeded), shard, eval_set, job.epochs, job.batch_size, PREFIX,
                            key=f"bare-seed{seed}")
        disdel, _ = disdel_run(gateway, settings, seed)
        losses[seed] = (bare.eval_loss, disdel.eval_loss)
    line("\nheld-out loss by model seed (bare process, DiSDeL, ratio)")
    for seed, (bare_loss, disdel_loss) in losses.items():
        line(f"  seed {seed}: {bare_loss:.4f} {disdel_loss:.4f} {disdel_loss / bare_loss:.3f}")
        report.figure(f"seed {seed}: DiSDeL eval loss / bare process's", round(disdel_loss / bare_loss, 3))
    bare_mean = sum(b for b, _ in losses.values()) / len(losses)
    disdel_mean = sum(d for _, d in losses.values()) / len(losses)
    report.goal(f"DiSDeL eval loss / bare process's, means over model seeds {', '.join(map(str, LOSS_SEEDS))}",
                disdel_mean / bare_mean, 1.10)


def estimator_gates(report: Report, work: Path, control: str | None) -> None:
    t = time.monotonic()
    calibration = measure(local_probe(PREFIX), work / "calibration", local_runtime_key())
    line(f"calibration in fresh cgroups ({time.monotonic() - t:.0f} s): baseline {calibration.baseline_bytes / MB:.1f} MiB, "
         f"{calibration.per_layer_bytes / MB:.2f} MiB per layer, state x{calibration.state_factor:.2f}, embedding "
         f"x{calibration.embedding_factor:.2f}, activations {calibration.activation_factor}, data "
         f"x{calibration.data_factor:.2f} (warm x{calibration.warm_data_factor:.2f}), safety {calibration.safety}")
    report.parameters["calibration"] = calibration.model_dump()
    line("\n1. estimator accuracy: estimate / cgroup peak, one epoch per row")
    rows = score(calibration, work, PREFIX, control, line)
    for scored in rows:
        report.figure(f"{scored.row.half} {scored.row.label} ({scored.row.family}): estimate / peak",
                      round(scored.ratio, 3))
    for half in ("dev", "held_out"):
        ratios = [r.ratio for r in rows if r.row.half == half]
        report.figure(f"{half} rows: estimate / peak min", round(min(ratios), 3))
        report.figure(f"{half} rows: estimate / peak max", round(max(ratios), 3))
    held = [r for r in rows if r.row.half == "held_out"]
    report.goal("every row: estimate / warm peak >= 1 (never under)", min(r.ratio for r in rows), 1.0,
                higher_is_better=True)
    report.goal("held-out rows: estimate / warm peak <= 1.2", max(r.ratio for r in held), 1.2)
    report.goal("held-out rows on a fresh page cache, limit = estimate: runs OOM-killed",
                sum(1 for r in held if not r.fresh_ok), 0)
    slowest = max(r.fresh_seconds / r.seconds for r in held)
    report.figure("fresh page cache under the estimate: slowest duration / warm unlimited duration", round(slowest, 2))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="owx bench disdel", description=__doc__.splitlines()[0])
    parser.add_argument("--control", choices=(*ESTIMATOR_CONTROLS, *ENVIRONMENT_CONTROLS),
                        help="score the old fixed-constant estimator, the profile-only one (no measured training), "
                        "no safety margin, or the fresh pass without priming; or run part 2 only, with DiSDeL "
                        "averaging once after all epochs")
    parser.add_argument("--estimates-only", action="store_true", help="skip part 2 (the four environments)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="owx-disdel-bench-"))
    work.chmod(0o755)
    report = Report("disdel", parameters={"table": [r.label for r in TABLE], "epochs per row": 1,
                                          "job": JOB, "loss goal: model seeds": LOSS_SEEDS,
                                          "estimates only": args.estimates_only or args.control in ESTIMATOR_CONTROLS},
                    control=args.control)
    try:
        line(f"load average at start: {os.getloadavg()}")
        report.parameters["load average at start"] = os.getloadavg()
        if args.control not in ENVIRONMENT_CONTROLS:
            estimator_gates(report, work, args.control)
        if not (args.estimates_only or args.control in ESTIMATOR_CONTROLS):
            environments(report, work, ENVIRONMENT_CONTROLS.get(args.control, {}))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            line(f"work directory kept: {work}")
    return report.finish()


def environments(report: Report, work: Path, disdel_settings: dict) -> None:
    memory_max_mb = 4096
    shared = work / "shared"  # what the actions' sandboxes see of the work directory
    gw = start_gateway(work / "gateway", shared, memory_max_mb=memory_max_mb, timeout_max_ms=900_000, pool_mb=8192)
    try:
        gateway = Gateway.connect(gw.url, gw.auth)
        settings = DisdelSettings(shared_dir=shared, pool_memory_mb=8192, cgroup_prefix=PREFIX, **disdel_settings)
        rows: list[dict] = []
        job = parse_job(JOB)
        runs_dir, shard, eval_set, held = inputs(shared, job)
        model = builtin_model(job)
        line(f"\n2. job: {job.model_label} on {job.dataset.samples - held} samples {job.dataset.shape}, batch {job.batch_size}, "
             f"{job.epochs} epochs (held-out {held})")
        runs: list[EnvRun] = []
        runs.append(bare_process(runs_dir, model, shard, eval_set, job.epochs, job.batch_size, PREFIX))
        line(f"  bare process done in {runs[-1].time_s:.1f} s")
        runs.append(single_action(gateway, runs_dir, model, shard, eval_set, job.epochs, job.batch_size, 1024, 900_000))
        line(f"  single action done in {runs[-1].time_s:.1f} s")
        runs.append(retry_strategy(gateway, runs_dir, model, shard, eval_set, job.epochs, job.batch_size))
        line(f"  retry strategy done in {runs[-1].time_s:.1f} s: {runs[-1].detail['attempts']}")
        disdel, state = disdel_run(gateway, settings)
        runs.append(disdel)
        plan = state.plan
        line(f"  DiSDeL done in {disdel.time_s:.1f} s: {plan.actions} actions x {plan.train_memory_mb} MB, "
             f"{len(plan.rounds)} rounds, tree {plan.tree}, timeout {plan.train_timeout_ms} ms ({plan.timeout_source})")

        # an action's container serves every round; its peak so far is reported by each run
        for key, action in sorted({(a.key, a.action) for a in state.activations}):
            runs_of = [a for a in state.activations if (a.key, a.action) == (key, action) and a.peak_bytes]
            estimate = plan.train_estimate_bytes if action == "train" else plan.aggregate_estimate_bytes
            rows.append({"combo": f"DiSDeL {key} on the {action} action, container over {len(runs_of)} run(s)",
                         "estimate": estimate, "peak": max(a.peak_bytes for a in runs_of)})

        line("\nestimator accuracy")
        line(f"  {'combination':52} {'estimate MiB':>12} {'peak MiB':>9} {'est/peak':>8}")
        for row in rows:
            line(f"  {row['combo']:52} {row['estimate'] / MB:12.1f} {row['peak'] / MB:9.1f} "
                 f"{row['estimate'] / row['peak']:8.3f}")
        ratios = [r["estimate"] / r["peak"] for r in rows]
        line(f"  ratio min {min(ratios):.3f}  p50 {sorted(ratios)[len(ratios) // 2]:.3f}  max {max(ratios):.3f}")
        report.figure("DiSDeL job's containers: estimate / peak max", round(max(ratios), 3))
        report.goal("DiSDeL job's containers (through the gateway): estimate / peak >= 1", min(ratios), 1.0,
                    higher_is_better=True)

        line("\nenvironments (2 cores)")
        line(f"  {'environment':48} {'time s':>7} {'peak MiB':>9} {'all MiB':>8} {'eval loss':>9} "
             f"{'attempts':>8} {'failed':>6} {'wasted s':>8}")
        for run in runs:
            loss = "-" if run.eval_loss is None else f"{run.eval_loss:.4f}"
            line(f"  {run.name:48} {run.time_s:7.1f} {run.peak_bytes / MB:9.1f} {run.total_peak_bytes / MB:8.1f} "
                 f"{loss:>9} {run.attempts:8d} {run.failed:6d} {run.wasted_s:8.1f}")
        bare, single, retry = runs[0], runs[1], runs[2]
        execution = state.result.job_time_s - state.result.prepare_s
        line(f"  DiSDeL: {state.result.prepare_s:.1f} s preparing (data generation and split, profile, plan), "
             f"{execution:.1f} s executing (deploy, cold starts, import, compile, rounds, final model); "
             f"single: {single.time_s:.1f} s (deploy, cold start, import, compile, training); "
             f"with preparing /single {state.result.job_time_s / single.time_s:.2f}")
        line(f"  time ratios (DiSDeL executing): /single {execution / single.time_s:.2f}, /bare {execution / bare.time_s:.2f}, "
             f"/retry {execution / retry.time_s:.2f}")
        line(f"  loss ratio DiSDeL/bare {disdel.eval_loss / bare.eval_loss:.3f} (training loss per round "
             f"{[round(v, 4) for v in state.result.round_train_losses]})")

        line("\nper-action timings of the DiSDeL job (ms)")
        for number in range(len(plan.rounds)):
            parts = [f"{a.key}={a.duration_ms}" for a in state.activations if a.round == number]
            line(f"  round {number}: " + " ".join(parts))
        train_rounds = [max(a.duration_ms for a in state.activations if a.round == n and a.role == "train" and a.success)
                        for n in range(len(plan.rounds))]
        agg_rounds = [max((a.duration_ms for a in state.activations if a.round == n and a.role == "aggregate"), default=0)
                      for n in range(len(plan.rounds))]
        overhead = execution - (sum(train_rounds) + sum(agg_rounds)) / 1000
        line(f"  critical path: training {sum(train_rounds) / 1000:.1f} s + aggregation {sum(agg_rounds) / 1000:.1f} s "
             f"+ planning/invocation {overhead:.1f} s")
        import json

        fits, startups = [], []  # start-up: the activation's wall time outside fit(), so without the first trace
        for doc in map(json.loads, (settings.root() / "jobs" / state.job_id / "activations.jsonl").read_text().splitlines()):
            if doc["role"] == "train" and doc["success"]:
                phases = doc["result"]["phases"]
                fit = phases["fit_done"] - phases["model_ready"]
                fits.append(fit / max(1, len(doc["result"]["losses"]) - doc["result"]["resumed_from_epoch"]))
                if doc["round"] == 0:
                    startups.append(doc["duration_ms"] / 1000 - fit)
        single_fit = single.detail["fit_s"] / job.epochs
        per_round = sum(train_rounds[1:]) / max(1, len(train_rounds) - 1) / 1000
        line(f"  fit time per epoch: single action (all {job.dataset.samples - held} samples, 2 threads) {single_fit:.2f} s; "
             f"DiSDeL action (1/{plan.actions} of them, 1 thread) median {sorted(fits)[len(fits) // 2]:.2f} s")
        line(f"  start-up outside fit: single (deploy, container, import, data, build, from the client) "
             f"{single.detail['startup_s']:.1f} s, DiSDeL round 0 slowest action (import, data, build: its "
             f"duration; making its container is its waitTime) {max(startups):.1f} s")
        for cores in (4, 8):
            actions = cores  # one core per action, c_d = cores, same per-sample speed as measured with 1 thread
            t = (train_rounds[0] / 1000 - per_round) + job.epochs * (per_round * plan.actions / actions) \
                + sum(agg_rounds) / 1000 + overhead
            line(f"  projection for {cores} cores (c_d = {actions}, 1 thread each, per-sample speed as measured): "
                 f"~{t:.1f} s (the single action on more cores is not measured here)")

        panels = {"TF bare process": bare, "default serverless (1 action)": single, "DiSDeL": disdel}
        path = memory_over_time({title: run.memory for title, run in panels.items()},
                                {title: run.marks for title, run in panels.items()}, report.plot_path("memory"))
        line(f"\nplot: {path}")

        report.goal("failed actions in the DiSDeL run", disdel.failed, 0)
        loss_over_seeds(report, gateway, settings, (runs_dir, shard, eval_set), job, (bare.eval_loss, disdel.eval_loss))
        report.goal("DiSDeL job time (executing: deploy to final model) / single action's (deploy to trained model) "
                    "on 2 cores", execution / single.time_s, 1.0)
    finally:
        gw.stop()


if __name__ == "__main__":
    sys.exit(main())
