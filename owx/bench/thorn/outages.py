"""The outage phase: faults injected while applications talk across the overlay, and the same
application bound to the NICs (no THORN) as the restart baseline, all in one run.

Running through every fault:

- the round-trip probe a1 <-> a2 (``owx.thorn.probe``): many UDP flows, each with its own
  5-tuple, so ECMP spreads them over every uplink in both directions; a fault's outage is
  the longest gap between answers of any flow inside the window, and a flow that has not
  answered again when the window ends counts up to its end;
- the long-running pair over THORN (a1 -> a2, ``owx.thorn.pair``), which reconnects if an
  exchange stalls for its heartbeat timeout; it should never have to;
- the restart baseline: the same pair between h1 and h2 bound to one NIC pair (the world
  without THORN: an RDMA application is tied to its port). Every fault hits the NIC path it
  is on, so it detects the failure (heartbeat timeout), reconnects over the other NICs and
  resumes; its time to resume is measured on its own clock.

Faults, each on uplink/ToR j (the one the baseline uses): link down and silent drop on h1's
uplink (local to the probe's sender) and on h2's (remote), and ToR j losing all its ports.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from owx.thorn import faults, measure, netns
from owx.thorn.faults import FaultKind
from owx.thorn.probe import outage_ms
from owx.thorn.testbed import Testbed, TestbedError

PROBE_PORT, PAIR_PORT, BASELINE_PORT = 9310, 9311, 9312
STABLE_S = 2.0
# name -> (kind, target with {j} for the uplink/ToR number), and the goal in ms
FAULTS = {
    "local link down": (FaultKind.link_down, "h1/up{j}", 100.0),
    "remote link down": (FaultKind.link_down, "h2/up{j}", 100.0),
    "ToR down": (FaultKind.tor, "t{j}", 100.0),
    "local silent drop": (FaultKind.silent, "h1/up{j}", 150.0),
    "remote silent drop": (FaultKind.silent, "h2/up{j}", 150.0),
}


@dataclass(frozen=True)
class OutageParams:
    runs: int
    window_s: float
    flows: int
    interval_ms: float
    pair_interval_ms: float
    pair_size: int
    detect_s: float
    settle_s: float = 60.0


@dataclass
class FaultRun:
    name: str
    target: str
    started: float
    ended: float  # end of the window (the fault is cleared right after)
    settled: float  # every path back (or the settle timeout)
    settled_ok: bool


@dataclass
class OutageResult:
    runs: list[FaultRun]
    probe: dict
    echo: dict
    pair: dict
    baseline: dict
    quiet: tuple[float, float]
    per_fault: dict[str, dict[str, list[float]]] = field(default_factory=dict)

    def compute(self) -> None:
        """Per fault and run: round trip, request direction, restore, flows hit, pair stall, baseline resume."""
        requests = {int(key.rsplit(":", 1)[1]): v["gaps"] for key, v in self.echo["flows"].items()}
        for run in self.runs:
            out = self.per_fault.setdefault(run.name, {k: [] for k in (
                "round_trip_ms", "request_ms", "restore_ms", "flows_hit", "pair_stall_ms", "baseline_resume_ms")})
            trips = [outage_ms(f["gaps"], run.started, run.ended) for f in self.probe["flows"]]
            out["round_trip_ms"].append(max(trips))
            out["flows_hit"].append(sum(t >= 3 * self.probe["interval_ms"] for t in trips))
            out["request_ms"].append(max(outage_ms(requests.get(f["port"], []), run.started, run.ended)
                                         for f in self.probe["flows"]))
            out["restore_ms"].append(max(outage_ms(f["gaps"], run.ended, run.settled) for f in self.probe["flows"]))
            out["pair_stall_ms"].append(outage_ms(self.pair["gaps"], run.started, run.ended))
            out["baseline_resume_ms"].append(outage_ms(self.baseline["gaps"], run.started, run.ended))

    def quiet_gap_ms(self) -> float:
        return max(outage_ms(f["gaps"], *self.quiet) for f in self.probe["flows"])


def nic_routes(tb: Testbed, add: bool) -> list[tuple[str, str]]:
    """Routes between h1's and h2's uplink addresses through the ToR both plug into; the NIC paths.

    Returns the baseline's paths: (h2's address on uplink j, h1's address on uplink j).
    """
    h1, h2 = tb.node("h1"), tb.node("h2")
    assert h1.netns and h2.netns
    paths = []
    for u1, u2 in zip(h1.uplinks, h2.uplinks):
        for ns, me, other in ((h1.netns, u1, u2), (h2.netns, u2, u1)):
            netns.run(ns, ["ip", "route", "replace" if add else "del", f"{other.address.ip}/32", "via", str(me.peer),
                           "dev", me.name], check=add)
        paths.append((str(u2.address.ip), str(u1.address.ip)))
    return paths


def run_outages(tb: Testbed, p: OutageParams, status_dir: Path, log) -> OutageResult:
    """Inject every fault ``p.runs`` times with the probe and both pairs running; return the raw reports."""
    pre = tb.prefix
    paths = nic_routes(tb, add=True)
    status = status_dir / "baseline-path"
    pair_args = ["--interval-ms", str(p.pair_interval_ms), "--size", str(p.pair_size), "--detect-s", str(p.detect_s)]
    interval = ["--interval-ms", str(p.interval_ms)]
    servers = [measure.probe(f"{pre}a2", "echo", f"192.168.100.2:{PROBE_PORT}", *interval),
               measure.pair(f"{pre}a2", "server", f"192.168.100.2:{PAIR_PORT}"),
               measure.pair(f"{pre}h2", "server", f"0.0.0.0:{BASELINE_PORT}")]
    time.sleep(0.5)
    # the pairs stop first: the probe's report takes a while to write, at real-time priority
    clients = [measure.pair(f"{pre}a1", "client", f"192.168.100.2:{PAIR_PORT}", *pair_args),
               measure.pair(f"{pre}h1", "client", *(f"{dst}:{BASELINE_PORT},{src}" for dst, src in paths),
                            *pair_args, "--status", str(status)),
               measure.probe(f"{pre}a1", "rt-client", f"192.168.100.2:{PROBE_PORT}", "--flows", str(p.flows),
                             *interval)]
    runs: list[FaultRun] = []
    reports: list[dict] = []
    try:
        time.sleep(2.0)
        quiet = (time.monotonic(), time.monotonic() + 3.0)
        time.sleep(3.0)
        for number in range(p.runs):
            for name, (kind, target, _goal) in FAULTS.items():
                j = int(status.read_text()) + 1 if status.exists() else 1 + number % 2
                fault = faults.resolve(tb, kind, target.format(j=j))
                started = time.monotonic()
                fault.inject()
                time.sleep(max(0.0, started + p.window_s - time.monotonic()))
                ended = time.monotonic()
                fault.clear()
                ok = settle(tb, p.settle_s)
                runs.append(FaultRun(name, fault.target, started, ended, time.monotonic(), ok))
                log(f"  run {number + 1} {name:18s} {fault.target:6s} settled {runs[-1].settled - ended:4.1f}s"
                    + ("" if ok else " (NOT CONVERGED)"))
                time.sleep(0.5)
    finally:
        reports = [c.finish() for c in clients] + [s.finish() for s in servers]
        nic_routes(tb, add=False)
    pair, baseline, probe, echo, _pair_server, _baseline_server = reports
    result = OutageResult(runs, probe, echo, pair, baseline, quiet)
    result.compute()
    return result


def settle(tb: Testbed, timeout: float) -> bool:
    """Wait until every host has all its paths and rules again and keeps them for STABLE_S (a session
    that flaps once more right after coming back would overlap the next fault); False after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            tb.wait_converged(max(0.1, deadline - time.monotonic()))
        except TestbedError:
            return False
        time.sleep(STABLE_S)
        if tb.converged()[0]:
            return True
    return False


def summary(values: list[float]) -> tuple[float, float]:
    """(max, median)"""
    return max(values), statistics.median(values)
