"""The testbed's cluster description: N hosts, each dual-homed to ToRs t1 and t2.

Addressing (host i, ToR j): host netns ``thn-<tb>-h<i>``, ToR ``thn-<tb>-t<j>``,
application netns ``thn-<tb>-a<i>``; link host uplink ``up<j>`` to ToR port
``h<i>`` on 172.16.<j>.<2i-2>/31 (ToR even, host odd); loopbacks 10.255.0.i and
10.255.1.j; AS 65000+i and 65100+j; overlay 192.168.100.i/24.
"""

from __future__ import annotations

from pathlib import Path

from owx.thorn.model import (AppDeviceSpec, BfdSpec, ClusterSpec, LinkSpec, NodeSpec, ReconcilerSpec, TorSpec,
                             UplinkSpec)

RUN_ROOT = Path("/run/owx-thorn")


def ns_prefix(testbed: str) -> str:
    return f"thn-{testbed}-"


def build_cluster(testbed: str, hosts: int = 3, tors: int = 2, bfd: BfdSpec | None = None,
                  reconciler: ReconcilerSpec | None = None, nexthop_groups: bool = False) -> ClusterSpec:
    if not 2 <= hosts <= 100 or not 1 <= tors <= 8:
        raise ValueError("testbed needs 2..100 hosts and 1..8 ToRs")
    root = RUN_ROOT / f"testbed-{testbed}"
    pre = ns_prefix(testbed)
    tor_specs = [TorSpec(name=f"t{j}", netns=f"{pre}t{j}", loopback=f"10.255.1.{j}", asn=65100 + j)
                 for j in range(1, tors + 1)]
    nodes: list[NodeSpec] = []
    links: list[LinkSpec] = []
    for i in range(1, hosts + 1):
        uplinks = [UplinkSpec(name=f"up{t.name[1:]}", address=f"172.16.{j}.{2 * i - 1}/31",
                              peer=f"172.16.{j}.{2 * i - 2}", peer_asn=t.asn)
                   for j, t in enumerate(tor_specs, start=1)]
        app = AppDeviceSpec(name="app0", port="vapp0", netns=f"{pre}a{i}", address=f"192.168.100.{i}/24",
                            mac=f"02:00:00:00:01:{i:02x}")
        nodes.append(NodeSpec(name=f"h{i}", netns=f"{pre}h{i}", loopback=f"10.255.0.{i}", asn=65000 + i,
                              uplinks=uplinks, app_devices=[app], bfd=bfd or BfdSpec(),
                              reconciler=reconciler or ReconcilerSpec(), frr_dir=root / f"h{i}",
                              frr_nexthop_groups=nexthop_groups))
        links += [LinkSpec(node=f"h{i}", uplink=u.name, tor=t.name, port=f"h{i}") for u, t in zip(uplinks, tor_specs)]
    return ClusterSpec(nodes=nodes, tors=tor_specs, links=links)
