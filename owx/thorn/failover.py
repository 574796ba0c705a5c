"""Fast failover: steer around a lost path before BGP has converged.

BGP moves traffic off a failed path, but late: FRR's bgpd holds every route change
for 50 ms before processing it, so a node whose own uplink fails reroutes after
BFD + ~60 ms, and a remote node, which learns it from the ToR's withdrawal (two
bgpd hops), after BFD + ~120 ms. This module reacts to what the node sees first:

- an uplink is *down* while its carrier is off, its BFD session is not up (bfdd
  pushes that, see :mod:`owx.thorn.bfdctl`), or its BGP session is not established
  again after a loss (so a path is used again only once the ToR can route it);
- a node tells every remote VTEP which ToRs it cannot be reached through
  (:mod:`owx.thorn.notices`);
- routes to remote VTEPs are overridden, in a table of their own consulted before
  the main one, by the main table's next hops minus those over a down uplink or
  through a ToR the remote cannot be reached through.

An override only exists while the main table still lists a path it excludes, so it
disappears by itself once BGP agrees; zebra's routes are never touched. The thread
that runs this is :mod:`owx.thorn.steering`.
"""

from __future__ import annotations

import errno
import socket
import time
from dataclasses import dataclass

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from owx.thorn.bfdctl import BfdEvent
from owx.thorn.model import NodeSpec
from owx.thorn.notices import Notice
from owx.thorn.view import KernelView, Nexthop

OVERRIDE_TABLE = 116
OVERRIDE_PROTO = 116
RULE_PRIORITY = 32000  # after the local table (0), before main (32766)
REFRESH_S = 0.2  # a node repeats its notice this often while it has losses ...
LINGER_S = 1.0  # ... and for this long after they are gone
EXPIRY_S = 1.0  # a remote loss not repeated for this long is forgotten


@dataclass
class RemoteLoss:
    lost: frozenset[int]
    order: tuple[float, int]
    expires: float


class FailoverState:
    """What fast failover knows and decides for one node; used by the steering thread only."""

    def __init__(self, node: NodeSpec) -> None:
        self.node = node
        self.enabled = node.reconciler.fast_failover
        self.by_peer = {str(u.peer): u.name for u in node.uplinks}
        self.asn = {u.name: u.peer_asn for u in node.uplinks}
        self.bfd: dict[str, str] = {}  # uplink -> last BFD state
        self.bgp: dict[str, bool] = {}  # uplink -> established (absent: not known yet)
        self.bgp_since: dict[str, float] = {}  # uplink -> when a loss made its BGP state stale
        self.lost: frozenset[str] = frozenset()  # carrier or BFD gone
        self.down: frozenset[str] = frozenset()  # lost, or BGP not established since
        self.remote: dict[str, RemoteLoss] = {}
        self.overrides: dict[str, tuple[Nexthop, ...]] = {}
        self.epoch, self.seq = time.time(), 0
        self.announce_until = 0.0
        self.next_refresh = float("inf")
        self.notices_sent = self.notices_received = self.bfd_downs = 0

    # -- inputs -------------------------------------------------------------------------
    def on_bfd(self, events: list[BfdEvent]) -> None:
        for event in events:
            uplink = event.interface if event.interface in self.asn else self.by_peer.get(event.peer)
            if uplink is None:
                continue
            if self.bfd.get(uplink) == "up" and event.state != "up":
                self.bfd_downs += 1
            self.bfd[uplink] = event.state

    def on_bgp(self, established: dict[str, bool], polled_at: float) -> None:
        """BGP session states by peer address, read by a poll that started at ``polled_at`` (monotonic)."""
        for peer, up in established.items():
            uplink = self.by_peer.get(peer)
            if uplink is not None and polled_at >= self.bgp_since.get(uplink, 0.0):
                self.bgp[uplink] = up

    def on_notices(self, notices: list[Notice], now: float) -> None:
        for notice in notices:
            vtep, order = str(notice.vtep), (notice.epoch, notice.seq)
            known = self.remote.get(vtep)
            if known is None or order > known.order or now > known.expires:
                self.remote[vtep] = RemoteLoss(frozenset(notice.lost), order, now + EXPIRY_S)
            self.notices_received += 1

    # -- decisions ----------------------------------------------------------------------
    def local_down(self, view: KernelView, now: float) -> frozenset[str]:
        """Uplinks that cannot carry traffic now; a loss makes the BGP state stale until polled again."""
        links = {link.name: link for link in view.links.values()}
        lost = frozenset(name for name in self.asn
                         if (link := links.get(name)) is None or not (link.up and link.carrier)
                         or self.bfd.get(name, "up") != "up")
        for name in lost - self.lost:
            self.bgp[name] = False
            self.bgp_since[name] = now
        self.lost = lost
        return lost | {name for name in self.asn if not self.bgp.get(name, True)}

    def desired(self, view: KernelView, vteps: set[str], now: float) -> dict[str, tuple[Nexthop, ...]]:
        """Override routes: remote VTEP -> the main table's next hops that are still usable."""
        self.remote = {v: loss for v, loss in self.remote.items() if loss.expires > now}
        if not self.enabled:
            return {}
        out = {}
        for vtep in sorted(vteps):
            route = view.lookup(vtep)
            if route is None:
                continue
            lost = self.remote[vtep].lost if vtep in self.remote else frozenset()
            keep = tuple(h for h in route.nexthops if h.dev not in self.down and self.asn.get(h.dev) not in lost)
            if keep and len(keep) < len(route.nexthops):
                out[vtep] = keep
        return out

    def notice(self, now: float) -> Notice | None:
        """The notice to send now, if any: on a change of losses, then every REFRESH_S while they last."""
        if not self.enabled or now < self.next_refresh:
            return None
        if not self.down and now > self.announce_until:
            self.next_refresh = float("inf")  # nothing to repeat until the next change
            return None
        self.seq += 1
        self.next_refresh = now + REFRESH_S
        self.notices_sent += 1
        lost = sorted(self.asn[u] for u in self.down)
        return Notice(vtep=self.node.loopback, epoch=self.epoch, seq=self.seq, lost=lost)

    def update_down(self, down: frozenset[str], now: float) -> None:
        if down != self.down:
            self.down = down
            self.next_refresh = now  # tell the others at once
            self.announce_until = now + LINGER_S

    def next_deadline(self) -> float:
        """When the steering thread must wake for a refresh or an expiry (monotonic)."""
        times = [loss.expires for loss in self.remote.values()]
        if self.enabled:
            times.append(self.next_refresh)
        return min(times, default=float("inf"))


def ensure_rule(ipr: IPRoute) -> None:
    """The policy rule that consults the override table before main."""
    try:
        ipr.rule("add", table=OVERRIDE_TABLE, priority=RULE_PRIORITY)
    except NetlinkError as exc:
        if exc.code != errno.EEXIST:
            raise


def remove_overrides(ipr: IPRoute) -> None:
    sync_overrides(ipr, {}, {})
    try:
        ipr.rule("del", table=OVERRIDE_TABLE, priority=RULE_PRIORITY)
    except NetlinkError:
        pass


def sync_overrides(ipr: IPRoute, want: dict[str, tuple[Nexthop, ...]], index: dict[str, int]) -> None:
    """Make the override table hold exactly ``want`` (read back from the kernel, not remembered)."""
    have: dict[str, tuple[Nexthop, ...]] = {}
    for msg in ipr.get_routes(family=socket.AF_INET, table=OVERRIDE_TABLE):
        if msg.get("RTA_TABLE") == OVERRIDE_TABLE and msg["proto"] == OVERRIDE_PROTO:
            have[msg.get("RTA_DST")] = _hops(msg, {i: n for n, i in index.items()})
    for dst in have.keys() - want.keys():
        ipr.route("del", dst=dst, dst_len=32, table=OVERRIDE_TABLE, proto=OVERRIDE_PROTO)
    for dst, hops in want.items():
        if have.get(dst) != hops:
            paths = [{"gateway": h.gateway, "oif": index[h.dev]} for h in hops]
            ipr.route("replace", dst=dst, dst_len=32, table=OVERRIDE_TABLE, proto=OVERRIDE_PROTO, multipath=paths)


def _hops(msg, names: dict[int, str]) -> tuple[Nexthop, ...]:
    multipath = msg.get("RTA_MULTIPATH")
    if multipath:
        return tuple(sorted(Nexthop(nh.get("RTA_GATEWAY"), names.get(nh["oif"], "?")) for nh in multipath))
    return (Nexthop(msg.get("RTA_GATEWAY"), names.get(msg.get("RTA_OIF"), "?")),)
