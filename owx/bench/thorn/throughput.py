"""The throughput phase: one TCP stream (iperf3) a1 -> a2 over the overlay on unshaped veths, with
THORN's datapath and with the kernel's plain bridge + VXLAN FDB datapath (the ``fdb`` driver),
alternating round by round in the same testbed; and h1 -> h2 straight over the underlay.

Unshaped veths have no capacity of their own: throughput is what the CPU can push, so the
ratio THORN / plain (the median of the rounds' ratios) is what THORN's datapath costs per byte
against the kernel's own. The machine is shared: iperf3 runs at nice -10.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

import requests

from owx.thorn import netns
from owx.thorn.testbed import Testbed

PORT = 5231
NICE = ("nice", "-n", "-10")  # more CPU share than other tenants' work (real-time would starve softirqs)
PLAIN = "fdb"


@dataclass
class ThroughputResult:
    driver: str  # THORN's datapath driver
    thorn_gbps: list[float]
    plain_gbps: list[float]
    underlay_gbps: list[float]

    @property
    def ratios(self) -> list[float]:
        """THORN / plain of each round (the two ran back to back, so slow changes of load cancel)."""
        return [t / p for t, p in zip(self.thorn_gbps, self.plain_gbps)]

    @property
    def ratio(self) -> float:
        return statistics.median(self.ratios)


def set_driver(tb: Testbed, driver: str, timeout: float = 30) -> None:
    """Switch every host's datapath and wait until each runs it with a rule for every remote MAC."""
    hosts = [n.name for n in tb.cluster().nodes]
    passes = {h: tb.state(h)["reconciler"]["reconciles"] for h in hosts}
    for host in hosts:
        requests.post(tb.daemon_url(host) + "/reconciler", json={"driver": driver}, timeout=5).raise_for_status()
    deadline = time.monotonic() + timeout
    # two passes later the one that switched (the first one to start after the request) has finished
    while not all((r := tb.state(h)["reconciler"])["driver"] == driver and r["reconciles"] >= passes[h] + 2
                  for h in hosts):
        if time.monotonic() > deadline:
            raise RuntimeError(f"hosts did not switch to the {driver} datapath within {timeout:.0f}s")
        time.sleep(0.2)
    tb.wait_converged(timeout)


def iperf(ns: str, dst: str, seconds: int, bind: str | None = None) -> float:
    argv = [*NICE, "iperf3", "-c", dst, "-p", str(PORT), "-t", str(seconds), "-J"] + (["-B", bind] if bind else [])
    out = netns.run(ns, argv, timeout=seconds + 30)
    return json.loads(out.stdout)["end"]["sum_received"]["bits_per_second"] / 1e9


def run_throughput(tb: Testbed, driver: str, rounds: int, seconds: int, log,
                   after_switch: Callable[[Testbed], None] = lambda tb: None) -> ThroughputResult:
    """``rounds`` x (THORN, plain, underlay); ``after_switch`` runs each time THORN's datapath is back."""
    pre = tb.prefix
    servers = [subprocess.Popen(netns.wrap(f"{pre}{n}", [*NICE, "iperf3", "-s", "-p", str(PORT)]),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for n in ("a2", "h2")]
    result = ThroughputResult(driver, [], [], [])
    try:
        time.sleep(0.5)
        for number in range(rounds):
            for name, gbps in ((driver, result.thorn_gbps), (PLAIN, result.plain_gbps)):
                set_driver(tb, name)
                if name == driver:
                    after_switch(tb)
                gbps.append(iperf(f"{pre}a1", "192.168.100.2", seconds))
            result.underlay_gbps.append(iperf(f"{pre}h1", "10.255.0.2", seconds, bind="10.255.0.1"))
            log(f"  round {number + 1}: {driver} {result.thorn_gbps[-1]:.2f}  {PLAIN} {result.plain_gbps[-1]:.2f}  "
                f"underlay {result.underlay_gbps[-1]:.2f} Gbit/s")
        set_driver(tb, driver)
    finally:
        for server in servers:
            server.terminate()
            server.wait()
    return result
