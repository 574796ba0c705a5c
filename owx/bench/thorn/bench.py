"""owx bench thorn: failover of a dual-homed overlay on the namespace testbed.

Application traffic over the overlay between a1 and a2: a 1 ms timestamped UDP
probe (outage = longest arrival gap during a fault), a long-running TCP pair that
must never reconnect, and a TCP bulk stream (iperf3) against the direct underlay, on
links of a fixed capacity (the goal) and on unshaped veths (CPU-bound, reported).
Faults on h1's uplink that carries the probe: link down, silent drop (nftables,
link up), whole ToR lost; 50 flaps; a BFD timer sweep; the reconciler with every
netlink event dropped. The baseline is the application-level restart of the
paper's table 3.1 (27-85 s) and the underlay throughput measured in this run.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import requests

from owx.thorn import faults, netns
from owx.thorn.datapath.tc import decode_cookie, tc
from owx.thorn.frr import FrrInstance
from owx.thorn.measure import ProbeProcess, busiest_uplink
from owx.thorn.model import BfdSpec
from owx.thorn.probe import outage_ms
from owx.thorn.testbed import Testbed

OUT = Path(__file__).resolve().parents[2] / "bench-out"
# paper table 3.1: init latency + epoch time lost per failure (GPT-2 DP/PP/PP+TP, ResNet101 DP), seconds
APP_RESTART_S = {"GPT-2 PP+TP": 20.912 + 9.9, "GPT-2 PP": 21.283 + 8.1, "GPT-2 DP": 22.611 + 4.4,
                 "ResNet101 DP": 5.693 + 80.0}
PORT = 9200


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.tb = Testbed(args.name)
        self.results: dict[str, object] = {}
        self.goals: list[tuple[str, bool, str]] = []

    # -- helpers ----------------------------------------------------------------------------
    def goal(self, name: str, ok: bool, detail: str) -> None:
        self.goals.append((name, ok, detail))
        print(f"  {'PASS' if ok else 'FAIL'}  {name}: {detail}", flush=True)

    def ns(self, role: str) -> str:
        return f"{self.tb.prefix}{role}"

    def for_each_frr(self, *lines: str) -> None:
        for run_dir in sorted(p for p in self.tb.dir.iterdir() if (p / "bfdd.pid").exists()):
            FrrInstance(None, run_dir).configure(*lines)

    def fault_once(self, kind: str, hold_s: float) -> tuple[float, float, float]:
        """Inject on the busiest uplink, hold, clear, wait for full convergence. Returns timestamps."""
        uplink = busiest_uplink(self.tb, "h1")
        tor = self.tb.link("h1", uplink).tor
        inject, clear = {
            "link-down": (lambda: faults.link(self.tb, "h1", uplink, False),
                          lambda: faults.link(self.tb, "h1", uplink, True)),
            "silent": (lambda: faults.silent(self.tb, "h1", uplink, True),
                       lambda: faults.silent(self.tb, "h1", uplink, False)),
            "tor-lost": (lambda: faults.tor(self.tb, tor, False), lambda: faults.tor(self.tb, tor, True)),
        }[kind]
        start = time.monotonic()
        inject()
        time.sleep(hold_s)
        cleared = time.monotonic()
        clear()
        self.tb.wait_converged(60)
        time.sleep(0.5)  # let the restored path carry traffic before the next fault
        return start, cleared, time.monotonic()

    # -- phases -----------------------------------------------------------------------------
    def faults_phase(self) -> None:
        print(f"\n== outage per fault ({self.args.runs} runs each, hold {self.args.hold}s) ==", flush=True)
        rx = ProbeProcess(self.ns("a2"), "udp-recv", f"192.168.100.2:{PORT}")
        time.sleep(0.3)
        tx = ProbeProcess(self.ns("a1"), "udp-send", f"192.168.100.2:{PORT}")
        time.sleep(1.5)
        windows: list[tuple[str, float, float, float]] = []
        quiet_start = time.monotonic()
        time.sleep(3)
        quiet_end = time.monotonic()
        for _ in range(self.args.runs):
            for kind in ("link-down", "silent", "tor-lost"):
                windows.append((kind, *self.fault_once(kind, self.args.hold)))
        time.sleep(0.3)
        sent = tx.finish()
        report = rx.finish()
        gaps = report["gaps"]
        baseline = outage_ms(gaps, quiet_start, quiet_end)
        outages: dict[str, list[float]] = {}
        restores: dict[str, list[float]] = {}
        for kind, start, cleared, settled in windows:
            outages.setdefault(kind, []).append(outage_ms(gaps, start, cleared))
            restores.setdefault(kind, []).append(outage_ms(gaps, cleared + 0.01, settled))
        print(f"  probe: {sent['sent']} sent, {report['received']} received; largest gap without faults "
              f"{baseline:.1f} ms (scheduling noise of this machine)")
        for kind in outages:
            print(f"  {kind:9s} outage ms: {_fmt(outages[kind])}   on restore: {_fmt(restores[kind])}")
        self.results.update(outages=outages, restores=restores, quiet_gap_ms=baseline)

    def flap_phase(self) -> None:
        print(f"\n== {self.args.flaps} flaps ==", flush=True)
        uplink = busiest_uplink(self.tb, "h1")
        started = time.monotonic()
        faults.flap(self.tb, "h1", uplink, self.args.flaps, down_s=0.05, up_s=0.05)
        flapped = time.monotonic() - started
        try:
            self.tb.wait_converged(60)
            recovered = time.monotonic() - started - flapped
            ok = all(self._overlay_ping(1, d) for d in (2, 3))
        except Exception as exc:  # stuck: report it as the result
            print(f"  not converged: {exc}")
            recovered, ok = float("inf"), False
        zebra_log = (self.tb.dir / "h1" / "zebra.log")
        failures = zebra_log.read_text().count("Route install failed") if zebra_log.exists() else 0
        print(f"  {self.args.flaps} flaps in {flapped:.1f}s; all paths back {recovered:.1f}s later; "
              f"overlay ping ok: {ok}; zebra route install failures: {failures}")
        self.results.update(flaps=self.args.flaps, flap_recovery_s=recovered, flap_ok=ok, zebra_failures=failures)

    def bfd_sweep(self) -> None:
        print("\n== BFD timer sweep (silent drop, 2 runs each) ==", flush=True)
        sweep: dict[int, list[float]] = {}
        rx = ProbeProcess(self.ns("a2"), "udp-recv", f"192.168.100.2:{PORT + 1}")
        time.sleep(0.3)
        tx = ProbeProcess(self.ns("a1"), "udp-send", f"192.168.100.2:{PORT + 1}")
        time.sleep(1)
        windows = []
        for ms in self.args.bfd_sweep:
            self.set_bfd(ms)
            for _ in range(2):
                windows.append((ms, *self.fault_once("silent", max(self.args.hold, 3 * ms / 1000 + 0.5))))
        self.set_bfd(self.args.bfd_ms)
        tx.finish()
        gaps = rx.finish()["gaps"]
        for ms, start, cleared, _settled in windows:
            sweep.setdefault(ms, []).append(outage_ms(gaps, start, cleared))
        for ms, values in sweep.items():
            print(f"  BFD {ms:4d} ms x3 (detect {3 * ms} ms): outage {_fmt(values)}")
        self.results["bfd_sweep"] = sweep

    def set_bfd(self, ms: int) -> None:
        self.for_each_frr("bfd", "profile thorn", f"receive-interval {ms}", f"transmit-interval {ms}")
        time.sleep(1.5)

    def reconciler_phase(self) -> None:
        print("\n== reconciler with every netlink event dropped ==", flush=True)
        url = self.tb.daemon_url("h1") + "/reconciler"
        period = self.args.period
        requests.post(url, json={"drop_events": 1.0}, timeout=5).raise_for_status()
        ns = self.ns("h1")
        times = []
        try:
            for i in range(self.args.reconcile_trials):
                if i % 2 == 0:  # a rule disappears from the datapath
                    filters = json.loads(tc(ns, ["-json", "filter", "show", "dev", "vapp0", "ingress"]))
                    handles = [f["options"]["fh"] for f in filters if f.get("options", {}).get("actions")]
                    handle = random.choice(handles)
                    started = time.monotonic()
                    tc(ns, ["filter", "del", "dev", "vapp0", "ingress", "pref", "100", "handle", handle,
                            "protocol", "all", "u32"])
                    want = len(handles)
                    done = lambda: _count_rules(ns) == want  # noqa: E731
                else:  # EVPN learns a new remote MAC
                    mac = f"02:00:00:00:0b:{i:02x}"
                    started = time.monotonic()
                    netns.run(ns, ["bridge", "fdb", "add", mac, "dev", "vtep0", "dst", "10.255.0.2", "self",
                                   "extern_learn"])
                    done = lambda mac=mac: mac in _rule_macs(ns)  # noqa: E731
                while not done():
                    if time.monotonic() - started > period * 5:
                        break
                    time.sleep(0.02)
                times.append(time.monotonic() - started)
                time.sleep(random.uniform(0.1, period / 2))
            dropped = self.tb.state("h1")["reconciler"]["events_dropped"]
        finally:
            requests.post(url, json={"drop_events": 0.0}, timeout=5)
            for i in range(1, self.args.reconcile_trials, 2):
                netns.run(ns, ["bridge", "fdb", "del", f"02:00:00:00:0b:{i:02x}", "dev", "vtep0", "dst",
                               "10.255.0.2", "self"], check=False)
        print(f"  {len(times)} changes, {dropped} events dropped; convergence s: {_fmt(times, 2)} (period {period}s)")
        self.results.update(reconcile_s=times, events_dropped=dropped)

    def throughput_phase(self) -> None:
        """Overlay vs underlay TCP bulk, first on links of a fixed capacity (the goal), then unshaped.

        Shaped links stand for the fabric's physical links; unshaped veths measure how much
        more CPU per byte the software VXLAN path costs on this machine (reported, no goal:
        the paper's NICs encapsulate in hardware).
        """
        print(f"\n== TCP bulk throughput, overlay vs direct underlay ({self.args.rounds}x{self.args.seconds}s) ==",
              flush=True)
        if shutil.which("iperf3") is None:
            raise SystemExit("iperf3 is missing: apt-get install iperf3")
        servers = [subprocess.Popen(netns.wrap(self.ns(n), ["iperf3", "-s", "-p", "5201"]),
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for n in ("a2", "h2")]
        time.sleep(0.5)
        try:
            self.tb.set_link_rate(self.args.link_gbit)
            try:
                self.results["throughput_links"] = self._overlay_vs_underlay(f"{self.args.link_gbit} Gbit/s links")
            finally:
                self.tb.set_link_rate(None)
            self.results["throughput_unshaped"] = self._overlay_vs_underlay("unshaped veths (CPU-bound)")
        finally:
            for s in servers:
                s.terminate()
                s.wait()

    def _overlay_vs_underlay(self, label: str) -> dict[str, object]:
        overlay, underlay = [], []
        for _ in range(self.args.rounds):
            overlay.append(self._iperf(self.ns("a1"), "192.168.100.2", None))
            underlay.append(self._iperf(self.ns("h1"), "10.255.0.2", "10.255.0.1"))
        o, u = statistics.median(overlay), statistics.median(underlay)
        print(f"  {label}:\n    overlay  Gbit/s: {_fmt(overlay, 2)}\n    underlay Gbit/s: {_fmt(underlay, 2)}\n"
              f"    ratio (median) {o / u:.3f}", flush=True)
        return {"overlay_gbps": overlay, "underlay_gbps": underlay, "ratio": o / u}

    def _iperf(self, ns: str, dst: str, bind: str | None) -> float:
        argv = ["iperf3", "-c", dst, "-p", "5201", "-t", str(self.args.seconds), "-J"] + (["-B", bind] if bind else [])
        out = netns.run(ns, argv, timeout=self.args.seconds + 30)
        return json.loads(out.stdout)["end"]["sum_received"]["bits_per_second"] / 1e9

    def _overlay_ping(self, src: int, dst: int) -> bool:
        return netns.run(self.ns(f"a{src}"), ["ping", "-c", "2", "-i", "0.2", "-W", "1", f"192.168.100.{dst}"],
                         check=False).returncode == 0

    # -- run --------------------------------------------------------------------------------
    def run(self) -> int:
        a = self.args
        print(f"testbed {a.name}: 3 hosts dual-homed to 2 ToRs, BFD {a.bfd_ms} ms x3, reconciler period {a.period}s")
        started = time.monotonic()
        self.tb.up(hosts=3, bfd=BfdSpec(receive_ms=a.bfd_ms, transmit_ms=a.bfd_ms), period_s=a.period)
        print(f"  up and converged in {time.monotonic() - started:.1f}s")
        server = ProbeProcess(self.ns("a2"), "pair-server", f"192.168.100.2:{PORT + 2}")
        time.sleep(0.3)
        client = ProbeProcess(self.ns("a1"), "pair-client", f"192.168.100.2:{PORT + 2}", interval_ms=50)
        try:
            self.faults_phase()
            self.flap_phase()
            if a.bfd_sweep:
                self.bfd_sweep()
            self.reconciler_phase()
            self.throughput_phase()
            pair = client.finish()
            conns = server.finish()
        finally:
            for p in (client, server):
                if p.alive():
                    p.finish()
        print(f"\n== long-running pair ==\n  {pair['exchanges']} exchanges, {pair['reconnects']} reconnects "
              f"(server saw {conns['connections']} connection(s)), longest exchange {pair['max_stall_ms']} ms")
        self.results.update(pair=pair, pair_connections=conns["connections"])
        self.judge()
        self.plot()
        (OUT / "thorn_results.json").write_text(json.dumps(self.results, indent=1, default=str))
        return 0 if all(ok for _, ok, _ in self.goals) else 1

    def judge(self) -> None:
        r = self.results
        out: dict[str, list[float]] = r["outages"]  # type: ignore[assignment]
        restart_ms = min(APP_RESTART_S.values()) * 1000
        print(f"\n== goals (baseline: application-level restart {min(APP_RESTART_S.values()):.1f}-"
              f"{max(APP_RESTART_S.values()):.1f} s) ==")
        for kind, limit in (("link-down", 100), ("tor-lost", 100), ("silent", 150)):
            worst = max(out[kind])
            self.goal(f"{kind} outage <= {limit} ms", worst <= limit,
                      f"max {worst:.1f} ms over {len(out[kind])} runs, {restart_ms / max(worst, 1):.0f}x shorter "
                      "than the fastest application restart")
        pair = r["pair"]
        self.goal("0 reconnects of the long-running pair", pair["reconnects"] == 0 and r["pair_connections"] == 1,
                  f"{pair['reconnects']} reconnects, {pair['exchanges']} exchanges")
        links, unshaped = r["throughput_links"], r["throughput_unshaped"]
        self.goal(f"overlay throughput >= 90% of underlay ({self.args.link_gbit} Gbit/s links)",
                  links["ratio"] >= 0.9,  # type: ignore[index]
                  f"{links['ratio'] * 100:.1f}%; unshaped veths (software VXLAN, CPU-bound): "  # type: ignore[index]
                  f"{unshaped['ratio'] * 100:.1f}%")  # type: ignore[index]
        self.goal(f"no stuck path after {r['flaps']} flaps", bool(r["flap_ok"]),
                  f"recovered {float(r['flap_recovery_s']):.1f}s after the last flap")  # type: ignore[arg-type]
        worst = max(r["reconcile_s"])  # type: ignore[type-var]
        slack = 0.5  # one pass (dump + tc) on this shared machine
        self.goal("reconciler converges within its period with events dropped", worst <= self.args.period + slack,
                  f"max {worst:.2f}s for period {self.args.period}s (+{slack}s for the pass itself)")

    def plot(self) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        out: dict[str, list[float]] = self.results["outages"]  # type: ignore[assignment]
        labels = [f"THORN {k}" for k in out] + [f"restart {k}" for k in APP_RESTART_S]
        values = [max(v) / 1000 for v in out.values()] + list(APP_RESTART_S.values())
        colors = ["tab:green"] * len(out) + ["tab:red"] * len(APP_RESTART_S)
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), gridspec_kw={"width_ratios": [3, 2]})
        ax = axes[0]
        ax.barh(labels, values, color=colors)
        ax.set_xscale("log")
        ax.set_xlabel("disruption per failure (s, log)")
        ax.set_title("worst outage per fault vs application-level restart (paper table 3.1)")
        for y, v in enumerate(values):
            ax.text(v, y, f" {v * 1000:.0f} ms" if v < 1 else f" {v:.1f} s", va="center", fontsize=8)
        sweep = self.results.get("bfd_sweep") or {}
        ax = axes[1]
        if sweep:
            xs = sorted(sweep)
            ax.plot(xs, [max(sweep[x]) for x in xs], "o-", label="silent-drop outage (max)")
            ax.plot(xs, [3 * x for x in xs], "--", label="BFD detect time (3x interval)")
            ax.set_xlabel("BFD interval (ms)")
            ax.set_ylabel("ms")
            ax.legend()
            ax.set_title("BFD timer sweep")
        fig.tight_layout()
        OUT.mkdir(exist_ok=True)
        fig.savefig(OUT / "thorn_outage.png", dpi=120)
        print(f"\nplot: {OUT / 'thorn_outage.png'}")


def _count_rules(ns: str) -> int:
    return len(_rule_macs(ns))


def _rule_macs(ns: str) -> list[str]:
    """MACs of the u32 rules on h1's application port, read from the kernel."""
    filters = json.loads(tc(ns, ["-json", "filter", "show", "dev", "vapp0", "ingress"]))
    keys = (decode_cookie(a.get("cookie", "")) for f in filters for a in f.get("options", {}).get("actions", []))
    return [k[0] for k in keys if k]


def _fmt(values: list[float], digits: int = 1) -> str:
    if not values:
        return "-"
    return (f"p50 {statistics.median(values):.{digits}f}  max {max(values):.{digits}f}  "
            f"[{', '.join(f'{v:.{digits}f}' for v in values)}]")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="owx bench thorn", description=__doc__.splitlines()[0])
    parser.add_argument("--name", default="bench", help="testbed name (namespaces thn-<name>-*)")
    parser.add_argument("--runs", type=int, default=3, help="runs per fault type")
    parser.add_argument("--hold", type=float, default=1.0, help="seconds each fault lasts")
    parser.add_argument("--flaps", type=int, default=50)
    parser.add_argument("--bfd-ms", type=int, default=20)
    parser.add_argument("--bfd-sweep", type=int, nargs="*", default=[20, 50, 100], help="intervals (ms); none to skip")
    parser.add_argument("--period", type=float, default=1.0, help="reconciler period (s)")
    parser.add_argument("--reconcile-trials", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2, help="throughput rounds")
    parser.add_argument("--seconds", type=int, default=4, help="seconds per iperf3 run")
    parser.add_argument("--link-gbit", type=float, default=10.0, help="capacity of each host-ToR link for the goal")
    args = parser.parse_args(argv)
    OUT.mkdir(exist_ok=True)
    bench = Bench(args)
    if bench.tb.cluster_file.exists():
        bench.tb.down()
    try:
        return bench.run()
    finally:
        bench.tb.down()


if __name__ == "__main__":
    sys.exit(main())
