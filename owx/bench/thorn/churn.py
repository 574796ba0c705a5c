"""Churn phases: many link flaps in a row, and datapath changes while every netlink event is dropped."""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass

import requests

from owx.thorn import faults, netns
from owx.thorn.datapath.tc import tc
from owx.thorn.faults import FaultKind
from owx.thorn.testbed import Testbed, TestbedError

CLSACT_INGRESS = 0xFFFFFFF2


@dataclass
class FlapResult:
    flaps: int
    flapping_s: float
    missing_paths: int  # (host, remote VTEP) next hops missing when the wait ended
    recovered_s: float  # after the last flap, until every path was back (inf: never)
    overlay_ok: bool
    zebra_install_failures: int


def run_flaps(tb: Testbed, count: int, wait_s: float) -> FlapResult:
    """``count`` down/up flaps of h1/up1 (50 ms each), then up to ``wait_s`` for every path to come back."""
    fault = faults.resolve(tb, FaultKind.link_down, "h1/up1")
    started = time.monotonic()
    for _ in range(count):
        fault.inject()
        time.sleep(0.05)
        fault.clear()
        time.sleep(0.05)
    flapped = time.monotonic()
    try:
        tb.wait_converged(wait_s)
        recovered = time.monotonic() - flapped
    except TestbedError:
        recovered = float("inf")
    missing = 0
    for node in tb.cluster().nodes:
        for hops in tb.state(node.name)["paths"].values():
            missing += max(0, len(node.uplinks) - len(hops))
    pairs = [(1, 2), (1, 3), (2, 1), (3, 2)]
    ok = all(netns.run(f"{tb.prefix}a{s}", ["ping", "-c", "2", "-i", "0.2", "-W", "1", f"192.168.100.{d}"],
                       check=False).returncode == 0 for s, d in pairs)
    failures = sum((tb.dir / n.name / "zebra.log").read_text().count("Route install failed")
                   for n in tb.cluster().nodes if (tb.dir / n.name / "zebra.log").exists())
    return FlapResult(count, flapped - started, missing, recovered, ok, failures)


def run_reconcile(tb: Testbed, driver: str, trials: int, period_s: float, seed: int = 7) -> tuple[list[float], int]:
    """With every netlink event dropped on h1: a tc rule (of the ``driver`` classifier) deleted behind the
    reconciler's back (even trials) or a new remote MAC learned (odd ones); seconds until the datapath
    is right again (inf: not within five periods)."""
    url = tb.daemon_url("h1") + "/reconciler"
    requests.post(url, json={"drop_events": 1.0}, timeout=5).raise_for_status()
    ns = f"{tb.prefix}h1"
    rng = random.Random(seed)
    times = []
    try:
        for i in range(trials):
            before = rule_count(ns)
            if i % 2 == 0:
                filters = json.loads(tc(ns, ["-json", "filter", "show", "dev", "vapp0", "ingress"]))
                handles = [f["options"]["fh"] for f in filters if f.get("options", {}).get("actions")]
                started = time.monotonic()
                tc(ns, ["filter", "del", "dev", "vapp0", "ingress", "pref", "100", "handle", rng.choice(handles),
                        "protocol", "all", driver])
                want = before
            else:
                started = time.monotonic()
                netns.run(ns, ["bridge", "fdb", "add", f"02:00:00:00:0b:{i:02x}", "dev", "vtep0", "dst",
                               "10.255.0.2", "self", "extern_learn"])
                want = before + 1
            done = lambda want=want: rule_count(ns) == want  # noqa: E731
            while not done() and time.monotonic() - started < period_s * 5:
                time.sleep(0.02)
            times.append(time.monotonic() - started if done() else float("inf"))
            time.sleep(rng.uniform(0.1, period_s / 2))
        dropped = tb.state("h1")["reconciler"]["events_dropped"]
    finally:
        requests.post(url, json={"drop_events": 0.0}, timeout=5)
        for i in range(1, trials, 2):
            netns.run(ns, ["bridge", "fdb", "del", f"02:00:00:00:0b:{i:02x}", "dev", "vtep0", "dst", "10.255.0.2",
                           "self"], check=False)
    return times, dropped


def rule_count(ns: str) -> int:
    """tc rules (filters with actions) at h1's application port, read from the kernel over netlink."""
    with netns.ipr(ns) as ipr:
        filters = ipr.get_filters(index=ipr.link_lookup(ifname="vapp0")[0], parent=CLSACT_INGRESS)
        return sum(1 for f in filters if (opts := f.get_attr("TCA_OPTIONS")) and opts.get_attr("TCA_U32_ACT"))
