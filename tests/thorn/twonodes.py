"""Two nodes wired back to back, no FRR: static routes and hand-written EVPN-style FDB entries."""

from __future__ import annotations

import subprocess
from contextlib import contextmanager
from dataclasses import dataclass

from owx.thorn import netns
from owx.thorn.datapath.detect import make_driver
from owx.thorn.model import AppDeviceSpec, NodeSpec, ReconcilerSpec, UplinkSpec
from owx.thorn.reconciler import Reconciler
from owx.thorn.setup import setup_node


@dataclass
class Pair:
    a: NodeSpec
    b: NodeSpec
    rec_a: Reconciler
    rec_b: Reconciler

    def ping(self, count: int = 3) -> subprocess.CompletedProcess:
        """Overlay ping from a's application namespace to b's application address."""
        return netns.run(self.a.app_devices[0].netns, ["ping", "-c", str(count), "-i", "0.2", "-W", "1",
                                                       str(self.b.app_devices[0].address.ip)], check=False)


def node_spec(prefix: str, i: int, driver: str, period_s: float, drop: float) -> NodeSpec:
    peer = 2 if i == 1 else 1
    return NodeSpec(
        name=f"n{i}", netns=f"{prefix}h{i}", loopback=f"10.255.0.{i}", asn=65000 + i,
        uplinks=[UplinkSpec(name="up1", address=f"172.16.9.{i - 1}/31", peer=f"172.16.9.{peer - 1}", peer_asn=65100)],
        app_devices=[AppDeviceSpec(port="vapp0", netns=f"{prefix}a{i}", address=f"192.168.100.{i}/24",
                                   mac=f"02:00:00:00:01:0{i}")],
        reconciler=ReconcilerSpec(driver=driver, period_s=period_s, drop_events=drop))


def bridge(ns: str, *args: str) -> None:
    netns.run(ns, ["bridge", "fdb", *args])


def evpn_entry(node: NodeSpec, mac: str, vtep: str, add: bool = True) -> None:
    """What zebra writes for a remote MAC learned over EVPN."""
    assert node.netns
    if add:
        bridge(node.netns, "replace", mac, "dev", "vtep0", "dst", vtep, "self", "extern_learn")
    else:
        bridge(node.netns, "del", mac, "dev", "vtep0", "dst", vtep, "self")


@contextmanager
def two_nodes(prefix: str, driver: str, period_s: float = 30.0, drop: float = 0.0):
    a, b = (node_spec(prefix, i, driver, period_s, drop) for i in (1, 2))
    for n in (a, b):
        assert n.netns
        netns.create(n.netns)
    assert a.netns and b.netns
    netns.run(a.netns, ["ip", "link", "add", "up1", "type", "veth", "peer", "name", "up1", "netns", b.netns])
    for n, other in ((a, b), (b, a)):
        assert n.netns
        setup_node(n)
        netns.run(n.netns, ["ip", "route", "replace", f"{other.loopback}/32", "via", str(n.uplinks[0].peer)])
        bridge(n.netns, "append", "00:00:00:00:00:00", "dev", "vtep0", "dst", str(other.loopback), "self", "permanent")
        evpn_entry(n, other.app_devices[0].mac, str(other.loopback))
    recs = []
    try:
        for n in (a, b):
            rec = Reconciler(n, make_driver(n))
            rec.start()
            recs.append(rec)
        yield Pair(a, b, recs[0], recs[1])
    finally:
        for rec in recs:
            rec.stop()
            rec.driver.close()
