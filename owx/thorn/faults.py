"""Faults on testbed links and ToRs.

- link down/up: the ToR end of a cable goes down, the host sees carrier loss;
- silent drop: nftables drops everything entering both ends, the link stays up
  (only BFD notices);
- ToR lost: every port of the ToR goes down at once (a switch losing power);
- flaps: link down/up repeated.
"""

from __future__ import annotations

import time
from enum import Enum

from owx.thorn import netns
from owx.thorn.setup import require
from owx.thorn.testbed import Testbed

NFT_TABLE = "thorn_fault"


class FaultKind(str, Enum):
    link_down = "link-down"
    silent = "silent"
    tor = "tor"
    flap = "flap"


def _set_link(ns: str, dev: str, up: bool) -> None:
    with netns.ipr(ns) as ipr:
        ipr.link("set", index=require(ipr, dev, ns), state="up" if up else "down")


def link(tb: Testbed, node: str, uplink: str, up: bool) -> None:
    """Take the ToR end of node/uplink down (or back up)."""
    ln = tb.link(node, uplink)
    _set_link(tb.tor(ln.tor).netns, ln.port, up)


def _nft_chain(dev: str) -> str:
    return "in_" + dev.replace("-", "_")


def silent(tb: Testbed, node: str, uplink: str, drop: bool) -> None:
    """Drop (or stop dropping) every frame entering either end of node/uplink; carrier stays up."""
    ln = tb.link(node, uplink)
    ends = [(tb.node(node).netns, uplink), (tb.tor(ln.tor).netns, ln.port)]
    for ns, dev in ends:
        assert ns is not None
        chain = _nft_chain(dev)
        if drop:
            netns.run(ns, ["nft", "-f", "-"], input=(
                f"table netdev {NFT_TABLE} {{\n chain {chain} {{\n"
                f"  type filter hook ingress device \"{dev}\" priority -500; policy drop;\n }}\n}}\n"))
        else:
            netns.run(ns, ["nft", "delete", "chain", "netdev", NFT_TABLE, chain], check=False)


def tor(tb: Testbed, name: str, up: bool) -> None:
    """All ports of a ToR down (or up) at once."""
    t = tb.tor(name)
    for ln in tb.cluster().links:
        if ln.tor == name:
            _set_link(t.netns, ln.port, up)


def flap(tb: Testbed, node: str, uplink: str, count: int, down_s: float = 0.05, up_s: float = 0.05) -> None:
    """Link down/up ``count`` times."""
    for _ in range(count):
        link(tb, node, uplink, up=False)
        time.sleep(down_s)
        link(tb, node, uplink, up=True)
        time.sleep(up_s)
