"""Control runs (``--control NAME``): one mechanism switched off or broken on purpose; its gate must fail."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import requests

from owx.thorn import netns
from owx.thorn.frr import FrrInstance
from owx.thorn.testbed import Testbed, tor_peers


def _nothing(tb: Testbed) -> None:
    pass


@dataclass(frozen=True)
class Control:
    """What a control changes: testbed options, and hooks at the moments the bench offers."""

    gate: str  # the goal it must fail
    what: str
    testbed: dict = field(default_factory=dict)
    after_up: Callable[[Testbed], None] = _nothing
    before_reconcile: Callable[[Testbed], None] = _nothing
    after_datapath: Callable[[Testbed], None] = _nothing  # each time THORN's datapath is installed


def _post_all(tb: Testbed, body: dict) -> None:
    for node in tb.cluster().nodes:
        requests.post(tb.daemon_url(node.name) + "/reconciler", json=body, timeout=5).raise_for_status()


def _bfd_off(tb: Testbed) -> None:
    """Every BGP session of every host and ToR stops using BFD."""
    cluster = tb.cluster()
    sessions = {n.name: (n.asn, [str(u.peer) for u in n.uplinks]) for n in cluster.nodes}
    sessions |= {t.name: (t.asn, [p.address for p in tor_peers(cluster, t.name)]) for t in cluster.tors}
    for name, (asn, peers) in sessions.items():
        FrrInstance(None, tb.dir / name).configure(f"router bgp {asn}", *(f"no neighbor {p} bfd" for p in peers))


def _no_gso(tb: Testbed) -> None:
    """THORN's per-remote VXLAN devices lose segmentation offload: every segment is encapsulated alone."""
    for node in tb.cluster().nodes:
        assert node.netns
        with netns.ipr(node.netns) as ipr:
            devs = [link.get("IFLA_IFNAME") for link in ipr.get_links()
                    if link.get("IFLA_IFNAME", "").startswith("thx")]
        for dev in devs:
            netns.run(node.netns, ["ethtool", "-K", dev, "tso", "off", "gso", "off", "tx-udp_tnl-segmentation",
                                   "off"], check=False)


CONTROLS = {
    "no-fast-failover": Control(
        "link-down and silent-drop outages", "THORN's fast failover off: remote nodes wait for BGP withdrawals",
        after_up=lambda tb: _post_all(tb, {"fast_failover": False})),
    "bfd-off": Control(
        "silent-drop outages, 0 reconnects of the pair over THORN", "BFD off on every BGP session",
        after_up=_bfd_off),
    "nexthop-groups": Control(
        "no path missing after flaps", "FRR's kernel nexthop groups on (zebra.conf without the fix)",
        testbed={"nexthop_groups": True}),
    "no-periodic-pass": Control(
        "reconciler convergence with every event dropped", "the reconciler's periodic full pass off (1 h period)",
        before_reconcile=lambda tb: _post_all(tb, {"period_s": 3600})),
    "datapath-no-gso": Control(
        "THORN throughput >= 0.90 x plain", "THORN's tx devices without segmentation offload",
        after_datapath=_no_gso),
}
