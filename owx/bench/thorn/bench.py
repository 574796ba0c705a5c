"""owx bench thorn: a dual-homed overlay on the namespace testbed, through faults and under load.

Three hosts dual-homed to two ToRs (FRR, BGP-EVPN, BFD, VXLAN, THORN's daemon). Phases:

- outages: link down, silent drop (local and remote) and whole-ToR faults, ``--runs`` of
  each, while a round-trip probe over many flows, a long-running TCP pair over THORN and
  the same pair bound to the NICs (the restart baseline) run through them
  (:mod:`owx.bench.thorn.outages`);
- throughput: THORN's datapath against the kernel's plain bridge + VXLAN FDB datapath on
  the same unshaped veths (:mod:`owx.bench.thorn.throughput`);
- flaps: 50 link flaps in a row, then every path must come back;
- reconcile: datapath changes while every netlink event is dropped.

Goals: round-trip outage (max over the runs) <= 100 ms for link down and ToR loss, <= 150 ms
for silent drops; 0 reconnects of the pair over THORN; THORN >= 0.90 x plain throughput;
no path missing after the flaps; the reconciler converges within its period + 0.5 s.
``--control NAME`` switches one mechanism off (see :mod:`owx.bench.thorn.controls`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from owx.bench.results import Report, results_dir
from owx.bench.thorn import plots
from owx.bench.thorn.churn import run_flaps, run_reconcile
from owx.bench.thorn.controls import CONTROLS, Control
from owx.bench.thorn.outages import FAULTS, OutageParams, OutageResult, run_outages, summary
from owx.bench.thorn.throughput import PLAIN, run_throughput
from owx.thorn.faults import FaultKind
from owx.thorn.measure import RT_PRIORITY
from owx.thorn.model import BfdSpec
from owx.thorn.testbed import Testbed

PHASES = ("outages", "throughput", "flaps", "reconcile")
RECONCILE_SLACK_S = 0.5  # one pass (dumps + tc) on this shared machine


def log(text: str) -> None:
    print(text, flush=True)


def cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.control: Control | None = CONTROLS.get(args.control) if args.control else None
        self.tb = Testbed(args.name)
        self.report = Report("thorn", control=args.control, parameters={
            "hosts": 3, "tors": 2, "bfd": f"{args.bfd_ms} ms x 3", "reconciler_period_s": args.period,
            "runs_per_fault": args.runs, "fault_window_s": args.window, "probe_flows": args.flows,
            "probe_interval_ms_per_flow": args.interval_ms, "probe_rt_priority": RT_PRIORITY,
            "pair_interval_ms": args.pair_interval_ms, "pair_bytes": args.pair_size,
            "pair_heartbeat_timeout_s": args.detect_s, "throughput_rounds": args.rounds,
            "iperf3_seconds": args.seconds, "flaps": args.flaps, "reconcile_trials": args.reconcile_trials,
            "phases": list(args.phases), "control_changes": self.control.what if self.control else None})

    def run(self) -> int:
        a, r = self.args, self.report
        load = os.getloadavg()
        r.figure("load average (1, 5, 15 min) at start", " ".join(f"{x:.2f}" for x in load))
        log(f"testbed {a.name}: 3 hosts dual-homed to 2 ToRs, BFD {a.bfd_ms} ms x 3, load {load[0]:.2f}"
            + (f"; CONTROL {a.control}: {self.control.what}" if self.control else ""))
        started = time.monotonic()
        options = self.control.testbed if self.control else {}
        self.tb.up(hosts=3, bfd=BfdSpec(receive_ms=a.bfd_ms, transmit_ms=a.bfd_ms), period_s=a.period, **options)
        if self.control:
            self.control.after_up(self.tb)
            self.tb.wait_converged(60)
        driver = self.tb.state("h1")["reconciler"]["driver"]
        log(f"  up and converged in {time.monotonic() - started:.1f}s; THORN datapath driver: {driver}")
        r.figure("datapath driver in use", driver)
        for phase in a.phases:
            getattr(self, phase)(driver)
        r.figure("load average (1, 5, 15 min) at end", " ".join(f"{x:.2f}" for x in os.getloadavg()))
        return r.finish()

    def outages(self, driver: str) -> None:
        a, r = self.args, self.report
        log(f"\n== outages: {len(FAULTS)} faults x {a.runs} runs, window {a.window}s, {a.flows} flows ==")
        params = OutageParams(a.runs, a.window, a.flows, a.interval_ms, a.pair_interval_ms, a.pair_size, a.detect_s)
        busy0, total0 = cpu_times()
        downs = self._bfd_downs()
        with tempfile.TemporaryDirectory(prefix="thn-bench-") as tmp:
            result = run_outages(self.tb, params, Path(tmp), log)
        busy1, total1 = cpu_times()
        hosts = len(self.tb.cluster().nodes)  # a ToR takes one session of each host down, a link one
        caused = sum(hosts if FAULTS[run.name][0] is FaultKind.tor else 1 for run in result.runs)
        r.figure("BFD session downs not caused by a fault (outage phase)", self._bfd_downs() - downs - caused)
        busy = round(100 * (busy1 - busy0) / (total1 - total0), 1)
        r.figure("CPU busy during the outage phase (whole machine)", busy, "%")
        r.figure("round-trip gap without a fault, max (noise floor)", round(result.quiet_gap_ms(), 1), "ms")
        r.figure("fault runs not converged within 60 s after clearing", sum(not x.settled_ok for x in result.runs))
        worst = 0.0
        for name, (_kind, _target, goal) in FAULTS.items():
            v = result.per_fault[name]
            rt_max, rt_p50 = summary(v["round_trip_ms"])
            worst = max(worst, rt_max)
            log(f"  {name:18s} round trip max {rt_max:7.1f} p50 {rt_p50:6.1f} ms | request dir max "
                f"{max(v['request_ms']):6.1f} | after clearing max {max(v['restore_ms']):6.1f} | flows hit "
                f"{statistics.median(v['flows_hit']):.0f}/{a.flows} | pair stall max {max(v['pair_stall_ms']):6.1f} | "
                f"restart baseline p50 {statistics.median(v['baseline_resume_ms']):7.1f} ms")
            r.figure(f"{name}: round-trip outage, max", round(rt_max, 1), "ms")
            r.figure(f"{name}: round-trip outage, p50", round(rt_p50, 1), "ms")
            r.figure(f"{name}: request direction outage, max", round(max(v["request_ms"]), 1), "ms")
            r.figure(f"{name}: outage after clearing the fault, max", round(max(v["restore_ms"]), 1), "ms")
            r.figure(f"{name}: flows disrupted per run, median", statistics.median(v["flows_hit"]), f"of {a.flows}")
            r.figure(f"{name}: TCP pair over THORN, stall max", round(max(v["pair_stall_ms"]), 1), "ms")
            b_max, b_p50 = summary(v["baseline_resume_ms"])
            r.figure(f"{name}: restart baseline, time to resume, max", round(b_max, 1), "ms")
            r.figure(f"{name}: restart baseline, time to resume, p50", round(b_p50, 1), "ms")
            r.goal(f"{name}: round-trip outage, max over {a.runs} runs <= {goal:.0f} ms", round(rt_max, 1), goal,
                   "ms")
        fastest_restart = min(min(v["baseline_resume_ms"]) for v in result.per_fault.values())
        r.figure("fastest measured restart / THORN's worst round-trip outage", round(fastest_restart / worst, 1), "x")
        r.figure("restart baseline: reconnects", len(result.baseline["failures"]))
        reconnects = len(result.pair["failures"])
        log(f"  pair over THORN: {result.pair['exchanges']} exchanges, {reconnects} reconnects; restart baseline: "
            f"{len(result.baseline['failures'])} reconnects; fastest restart {fastest_restart:.0f} ms = "
            f"{fastest_restart / worst:.1f}x THORN's worst outage")
        r.goal("TCP pair over THORN: reconnects (heartbeat timeout "
               f"{a.detect_s:g} s) = 0", reconnects, 0)
        plots.plot_outages(result, r.plot_path("outages"))
        self._write_runs(result)


    def _write_runs(self, result: OutageResult) -> None:
        """Every run's figures and the pairs' failures, beside the report (times: CLOCK_MONOTONIC s)."""
        seen: dict[str, int] = {}
        runs = []
        for run in result.runs:
            n = seen[run.name] = seen.get(run.name, -1) + 1
            runs.append({"fault": run.name, "target": run.target, "started": run.started,
                         "settled_s": round(run.settled - run.ended, 2), "converged": run.settled_ok,
                         **{k: round(v[n], 1) for k, v in result.per_fault[run.name].items()}})
        path = results_dir() / f"{self.report.stem}.runs.json"
        path.write_text(json.dumps({"runs": runs, "pair_failures": result.pair["failures"],
                                    "baseline_failures": result.baseline["failures"],
                                    "pair_gaps_over_200ms": [g for g in result.pair["gaps"] if g[1] > 200]}, indent=1))

    def throughput(self, driver: str) -> None:
        a, r = self.args, self.report
        log(f"\n== throughput: THORN ({driver}) vs plain bridge/FDB ({PLAIN}), {a.rounds} x {a.seconds}s ==")
        downs = self._bfd_downs()
        result = run_throughput(self.tb, driver, a.rounds, a.seconds, log,
                                after_switch=self.control.after_datapath if self.control else lambda tb: None)
        r.figure("BFD session downs during the throughput phase (no fault; CPU saturated)", self._bfd_downs() - downs)
        thorn, plain, under = (statistics.median(x) for x in (result.thorn_gbps, result.plain_gbps,
                                                               result.underlay_gbps))
        log(f"  medians: THORN {thorn:.2f}, plain {plain:.2f}, underlay {under:.2f} Gbit/s; "
            f"THORN/plain {result.ratio:.3f}, THORN/underlay {thorn / under:.3f}")
        r.figure(f"THORN datapath ({driver}) throughput, median", round(thorn, 2), "Gbit/s")
        r.figure("plain bridge + VXLAN FDB datapath throughput, median", round(plain, 2), "Gbit/s")
        r.figure("underlay (no overlay) throughput, median", round(under, 2), "Gbit/s")
        r.figure("THORN overlay / underlay (software VXLAN cost)", round(thorn / under, 3))
        r.goal("THORN / plain bridge-FDB throughput, unshaped veths >= 0.90", round(result.ratio, 3), 0.90,
               higher_is_better=True)
        plots.plot_throughput(result, r.plot_path("throughput"))

    def flaps(self, driver: str) -> None:
        a, r = self.args, self.report
        log(f"\n== {a.flaps} flaps of h1/up1 ==")
        res = run_flaps(self.tb, a.flaps, wait_s=60)
        log(f"  {res.flaps} flaps in {res.flapping_s:.1f}s; paths missing {res.missing_paths}; all back after "
            f"{res.recovered_s:.1f}s; overlay ping ok: {res.overlay_ok}; zebra install failures "
            f"{res.zebra_install_failures}")
        r.figure("after flaps: all paths back after", round(res.recovered_s, 1), "s")
        r.figure("after flaps: overlay ping between all hosts", "ok" if res.overlay_ok else "FAILED")
        r.figure("zebra 'Route install failed' messages", res.zebra_install_failures)
        r.goal(f"next hops missing 60 s after {res.flaps} flaps = 0", res.missing_paths, 0)

    def reconcile(self, driver: str) -> None:
        a, r = self.args, self.report
        log(f"\n== reconciler with every netlink event dropped ({a.reconcile_trials} changes) ==")
        if self.control:
            self.control.before_reconcile(self.tb)
        times, dropped = run_reconcile(self.tb, driver, a.reconcile_trials, a.period)
        log(f"  {dropped} events dropped; convergence s: {', '.join(f'{t:.2f}' for t in times)}")
        r.figure("reconciler: netlink events dropped on purpose", dropped)
        r.goal(f"reconciler converges with every event dropped, max <= period {a.period:g} s + "
               f"{RECONCILE_SLACK_S} s", round(max(times), 2), a.period + RECONCILE_SLACK_S, "s")

    def keep_logs(self) -> None:
        """FRR's and the daemons' logs of this run, beside the report (the testbed is removed after)."""
        folder = results_dir() / f"{self.report.stem}.logs"
        shutil.rmtree(folder, ignore_errors=True)
        for log_file in list(self.tb.dir.glob("*.log")) + list(self.tb.dir.glob("*/*.log")):
            target = folder / log_file.relative_to(self.tb.dir)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(log_file, target)

    def _bfd_downs(self) -> int:
        return sum(self.tb.state(n.name)["failover"]["bfd_downs"] for n in self.tb.cluster().nodes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="owx bench thorn", description=__doc__.splitlines()[0])
    parser.add_argument("--name", default="bench", help="testbed name (namespaces thn-<name>-*)")
    parser.add_argument("--runs", type=int, default=5, help="runs per fault")
    parser.add_argument("--window", type=float, default=3.0, help="seconds each fault lasts (the measurement window)")
    parser.add_argument("--flows", type=int, default=32, help="round-trip probe flows")
    parser.add_argument("--interval-ms", type=float, default=5.0, help="probe requests per flow, every")
    parser.add_argument("--pair-interval-ms", type=float, default=10.0)
    parser.add_argument("--pair-size", type=int, default=16384, help="bytes per exchange of the long-running pair")
    parser.add_argument("--detect-s", type=float, default=1.0, help="the pair's heartbeat timeout")
    parser.add_argument("--bfd-ms", type=int, default=20)
    parser.add_argument("--period", type=float, default=1.0, help="reconciler period (s)")
    parser.add_argument("--rounds", type=int, default=5, help="throughput rounds")
    parser.add_argument("--seconds", type=int, default=4, help="seconds per iperf3 run")
    parser.add_argument("--flaps", type=int, default=50)
    parser.add_argument("--reconcile-trials", type=int, default=6)
    parser.add_argument("--phases", nargs="+", choices=PHASES, default=list(PHASES))
    parser.add_argument("--control", choices=sorted(CONTROLS), help="switch one mechanism off; its gate must fail: "
                        + "; ".join(f"{k}: {c.what} ({c.gate})" for k, c in CONTROLS.items()))
    args = parser.parse_args(argv)
    os.setpriority(os.PRIO_PROCESS, 0, -10)  # the orchestration and polls, like the daemons, ahead of tenants
    bench = Bench(args)
    if bench.tb.cluster_file.exists():
        bench.tb.down()
    try:
        return bench.run()
    finally:
        bench.keep_logs()
        bench.tb.down()


if __name__ == "__main__":
    sys.exit(main())
