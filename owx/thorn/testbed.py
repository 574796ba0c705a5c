"""``owx thorn testbed up|down``: hosts and ToRs as namespaces, wired and configured by thorn.

ToRs are configured here (addresses + FRR); each host is configured by its own
``owx thorn run`` daemon, started detached with its node description.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import requests

from owx.common.processes import running
from owx.thorn import netns
from owx.thorn.frr import FrrInstance
from owx.thorn.frr_config import BgpPeer, tor_config
from owx.thorn.model import BfdSpec, ClusterSpec, LinkSpec, NodeSpec, ReconcilerSpec, TorSpec, dump, load_cluster
from owx.thorn.setup import ignore_exists, require
from owx.thorn.topology import RUN_ROOT, build_cluster, ns_prefix

TOR_SYSCTLS: dict[str, str | int] = {
    "net.ipv4.ip_forward": 1,
    "net.ipv4.conf.all.rp_filter": 0,
    "net.ipv4.conf.default.rp_filter": 0,
    "net.ipv4.fib_multipath_hash_policy": 1,
}
PORT_INDEX_BASE = 1000


class TestbedError(RuntimeError):
    """The testbed could not be built or is not running."""


class Testbed:
    """A named testbed; its state lives in /run/owx-thorn/testbed-<name>/."""

    __test__ = False  # not a pytest class

    def __init__(self, name: str = "tb") -> None:
        self.name = name
        self.dir = RUN_ROOT / f"testbed-{name}"
        self.prefix = ns_prefix(name)

    @property
    def cluster_file(self) -> Path:
        return self.dir / "cluster.yaml"

    def cluster(self) -> ClusterSpec:
        if not self.cluster_file.exists():
            raise TestbedError(f"testbed {self.name!r} is not up (no {self.cluster_file})")
        return load_cluster(self.cluster_file)

    def node(self, name: str) -> NodeSpec:
        for node in self.cluster().nodes:
            if node.name == name:
                return node
        raise TestbedError(f"testbed {self.name!r} has no host {name!r}")

    def tor(self, name: str) -> TorSpec:
        for tor in self.cluster().tors:
            if tor.name == name:
                return tor
        raise TestbedError(f"testbed {self.name!r} has no ToR {name!r}")

    def link(self, node: str, uplink: str) -> LinkSpec:
        for link in self.cluster().links:
            if link.node == node and link.uplink == uplink:
                return link
        raise TestbedError(f"testbed {self.name!r} has no link {node}/{uplink}")

    # -- up -------------------------------------------------------------------------------
    def up(self, hosts: int = 3, bfd: BfdSpec | None = None, period_s: float = 2.0, driver: str = "auto",
           wait: float = 60, nexthop_groups: bool = False) -> ClusterSpec:
        """Build everything; return when every host has ECMP to every other host and the overlay answers."""
        if self.cluster_file.exists() or netns.listing(self.prefix):
            raise TestbedError(f"testbed {self.name!r} exists; run 'owx thorn testbed down --name {self.name}' first")
        cluster = build_cluster(self.name, hosts=hosts, bfd=bfd,
                                reconciler=ReconcilerSpec(period_s=period_s, driver=driver),
                                nexthop_groups=nexthop_groups)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.cluster_file.write_text(dump(cluster))
        try:
            self._wire(cluster)
            for tor in cluster.tors:
                self._start_tor(cluster, tor)
            for node in cluster.nodes:
                self._launch(node)
            self.wait_converged(wait)
        except BaseException:
            self.down()
            raise
        return cluster

    def _wire(self, cluster: ClusterSpec) -> None:
        for ns in [n.netns for n in cluster.nodes] + [t.netns for t in cluster.tors]:
            assert ns is not None
            netns.create(ns)
        nodes = {n.name: n for n in cluster.nodes}
        tors = {t.name: t for t in cluster.tors}
        for number, link in enumerate(cluster.links):
            node, tor = nodes[link.node], tors[link.tor]
            uplink = next(u for u in node.uplinks if u.name == link.uplink)
            with netns.ipr(tor.netns) as ipr:
                # The kernel defers (up to 1 s) the carrier change of a veth whose ifindex equals its peer's;
                # ToR ports get indexes no host device has, so a host sees carrier loss at once, as with a NIC.
                ipr.link("add", ifname=link.port, kind="veth", index=PORT_INDEX_BASE + number,
                         peer={"ifname": link.uplink, "net_ns_fd": node.netns})
                idx = require(ipr, link.port, tor.netns)
                ipr.link("set", index=idx, state="up")
                ipr.addr("add", index=idx, address=str(uplink.peer), prefixlen=uplink.address.network.prefixlen)

    def _start_tor(self, cluster: ClusterSpec, tor: TorSpec) -> None:
        netns.sysctl(tor.netns, TOR_SYSCTLS)
        with netns.ipr(tor.netns) as ipr:
            ignore_exists(ipr.addr, "add", index=require(ipr, "lo", tor.netns), address=str(tor.loopback),
                           prefixlen=32)
        run_dir = self.dir / tor.name
        first = cluster.nodes[0]
        config = tor_config(tor, tor_peers(cluster, tor.name), first.bfd, str(run_dir), first.frr_nexthop_groups)
        FrrInstance(tor.netns, run_dir, first.frr_rt_priority).start(config)

    def _launch(self, node: NodeSpec) -> None:
        node_file = self.dir / f"{node.name}.yaml"
        node_file.write_text(dump(node))
        log = open(self.dir / f"{node.name}.daemon.log", "ab")
        proc = subprocess.Popen([sys.executable, "-m", "owx.cli", "thorn", "run", "--node", str(node_file)],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        (self.dir / f"{node.name}.daemon.pid").write_text(str(proc.pid))

    # -- observation ----------------------------------------------------------------------
    def daemon_url(self, node: str) -> str:
        path = self.dir / node / "http.addr"
        if not path.exists():
            raise TestbedError(f"daemon of {node} has not published its address ({path})")
        return f"http://{path.read_text().strip()}"

    def state(self, node: str) -> dict:
        return requests.get(self.daemon_url(node) + "/state", timeout=5).json()

    def converged(self) -> tuple[bool, str]:
        """Every host has a path over every uplink to every other host and datapath rules for each remote,
        and fast failover is quiet (no uplink down, no remote loss, no override)."""
        cluster = self.cluster()
        for node in cluster.nodes:
            try:
                state = self.state(node.name)
            except (TestbedError, requests.RequestException) as exc:
                return False, f"{node.name}: daemon not answering ({exc})"
            others = {str(n.loopback) for n in cluster.nodes if n.name != node.name}
            for remote in others:
                hops = state["paths"].get(remote, [])
                if len(hops) < len(node.uplinks):
                    return False, f"{node.name}: {len(hops)} path(s) to {remote}"
            fo = state["failover"]
            if fo["down"] or fo["remote_lost"] or fo["overrides"]:
                return False, f"{node.name}: fast failover still active ({fo['down']}, {fo['remote_lost']})"
            macs = {a.mac for n in cluster.nodes if n.name != node.name for a in n.app_devices}
            have = {r["mac"] for r in state["rules"]}
            if not macs <= have:
                return False, f"{node.name}: no datapath rule yet for {sorted(macs - have)}"
        return True, "converged"

    def wait_converged(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            ok, why = self.converged()
            if ok:
                return
            self._check_daemons()
            if time.monotonic() > deadline:
                raise TestbedError(f"testbed {self.name!r} did not converge in {timeout:.0f}s: {why}")
            time.sleep(0.5)

    def _check_daemons(self) -> None:
        for node in self.cluster().nodes:
            pid = self._daemon_pid(node.name)
            if pid is None or not running(pid):
                log = self.dir / f"{node.name}.daemon.log"
                tail = log.read_text()[-1500:] if log.exists() else ""
                raise TestbedError(f"daemon of {node.name} is not running; log tail:\n{tail}")

    def _daemon_pid(self, node: str) -> int | None:
        try:
            return int((self.dir / f"{node}.daemon.pid").read_text())
        except (OSError, ValueError):
            return None

    def status(self) -> dict:
        cluster = self.cluster()
        out = {}
        for node in cluster.nodes:
            try:
                state = self.state(node.name)
                out[node.name] = {"paths": state["paths"], "rules": len(state["rules"]),
                                  "bfd": state["bfd"], "errors": state["errors"]}
            except (TestbedError, requests.RequestException) as exc:
                out[node.name] = {"error": str(exc)}
        return out

    # -- down -----------------------------------------------------------------------------
    def down(self) -> list[str]:
        """Stop daemons and FRR, delete every namespace of this testbed and its state dir."""
        removed = []
        if self.dir.exists():
            for pidfile in self.dir.glob("*.daemon.pid"):
                try:
                    pid = int(pidfile.read_text())
                    os.killpg(pid, signal.SIGTERM)
                except (ValueError, ProcessLookupError, PermissionError):
                    continue
                _wait_gone(pid, 5)
            for run_dir in [p for p in self.dir.iterdir() if p.is_dir()]:
                FrrInstance(None, run_dir).stop()
        for ns in netns.listing(self.prefix):
            netns.remove(ns)
            removed.append(ns)
        shutil.rmtree(self.dir, ignore_errors=True)
        return removed


def tor_peers(cluster: ClusterSpec, tor: str) -> list[BgpPeer]:
    """The BGP sessions of a ToR: one per host uplink plugged into it."""
    nodes = {n.name: n for n in cluster.nodes}
    return [BgpPeer(str(u.address.ip), nodes[ln.node].asn)
            for ln in cluster.links if ln.tor == tor for u in nodes[ln.node].uplinks if u.name == ln.uplink]


def _wait_gone(pid: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if running(pid):
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
