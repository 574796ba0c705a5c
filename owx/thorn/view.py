"""The reconciler's own copy of the kernel tables it depends on, filled from netlink dumps."""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass, field
from enum import Enum

from pyroute2 import IPRoute

RT_MAIN = 254
RTN_UNICAST = 1
RTNH_F_DEAD = 0x1
RTNH_F_LINKDOWN = 0x10
NTF_MASTER = 0x04
NTF_EXT_LEARNED = 0x10
NUD_NOARP = 0x40
NUD_PERMANENT = 0x80
ZERO_MAC = "00:00:00:00:00:00"


class Table(str, Enum):
    links = "links"
    routes = "routes"
    neighbours = "neighbours"
    fdb = "fdb"


@dataclass(frozen=True, order=True)
class Nexthop:
    gateway: str | None
    dev: str


@dataclass(frozen=True)
class Route:
    dst: ipaddress.IPv4Network
    nexthops: tuple[Nexthop, ...]
    proto: int


@dataclass(frozen=True)
class Link:
    index: int
    name: str
    up: bool
    carrier: bool
    kind: str | None
    mac: str | None


@dataclass(frozen=True)
class Neighbour:
    ip: str
    mac: str | None
    dev: str
    state: int


@dataclass(frozen=True)
class FdbEntry:
    mac: str
    dev: str
    dst: str | None
    vni: int | None
    flags: int
    state: int


@dataclass
class KernelView:
    """Links, IPv4 main-table routes, IPv4 neighbours and the bridge FDB of one namespace."""

    links: dict[int, Link] = field(default_factory=dict)
    routes: list[Route] = field(default_factory=list)
    neighbours: list[Neighbour] = field(default_factory=list)
    fdb: list[FdbEntry] = field(default_factory=list)
    dumps: dict[Table, int] = field(default_factory=lambda: {t: 0 for t in Table})

    def name(self, index: int | None) -> str:
        link = self.links.get(index or 0)
        return link.name if link else f"if{index}"

    def refresh(self, ipr: IPRoute, tables: set[Table]) -> None:
        """Re-dump ``tables`` (links first: the other tables name devices by index)."""
        if Table.links in tables or not self.links:
            self.links = {link.index: link for link in map(_link, ipr.get_links())}
            self.dumps[Table.links] += 1
        if Table.routes in tables:
            self.routes = [r for r in (self._route(m) for m in ipr.get_routes(family=socket.AF_INET, table=RT_MAIN))
                           if r is not None]
            self.dumps[Table.routes] += 1
        if Table.neighbours in tables:
            self.neighbours = [Neighbour(m.get("NDA_DST"), m.get("NDA_LLADDR"), self.name(m["ifindex"]), m["state"])
                               for m in ipr.get_neighbours(family=socket.AF_INET)]
            self.dumps[Table.neighbours] += 1
        if Table.fdb in tables:
            self.fdb = [self._fdb(m) for m in ipr.get_neighbours(family=socket.AF_BRIDGE)]
            self.dumps[Table.fdb] += 1

    def _route(self, msg) -> Route | None:
        if msg["type"] != RTN_UNICAST:
            return None
        dst = ipaddress.IPv4Network(f"{msg.get('RTA_DST') or '0.0.0.0'}/{msg['dst_len']}")
        hops: list[Nexthop] = []
        multipath = msg.get("RTA_MULTIPATH")
        if multipath:
            for nh in multipath:
                if not nh["flags"] & (RTNH_F_DEAD | RTNH_F_LINKDOWN):
                    hops.append(Nexthop(nh.get("RTA_GATEWAY"), self.name(nh["oif"])))
        elif msg.get("RTA_OIF") and not msg["flags"] & (RTNH_F_DEAD | RTNH_F_LINKDOWN):
            hops.append(Nexthop(msg.get("RTA_GATEWAY"), self.name(msg.get("RTA_OIF"))))
        return Route(dst, tuple(sorted(hops)), msg["proto"])

    def _fdb(self, msg) -> FdbEntry:
        return FdbEntry(mac=(msg.get("NDA_LLADDR") or ZERO_MAC).lower(), dev=self.name(msg["ifindex"]),
                        dst=msg.get("NDA_DST"), vni=msg.get("NDA_VNI"), flags=msg["flags"], state=msg["state"])

    def lookup(self, address: str) -> Route | None:
        """Longest-prefix match in the main table."""
        ip = ipaddress.IPv4Address(address)
        best: Route | None = None
        for route in self.routes:
            if ip in route.dst and (best is None or route.dst.prefixlen > best.dst.prefixlen):
                best = route
        return best


def _link(msg) -> Link:
    info = msg.get("IFLA_LINKINFO")
    kind = info.get("IFLA_INFO_KIND") if info else None
    return Link(index=msg["index"], name=msg.get("IFLA_IFNAME"), up=bool(msg["flags"] & 1),
                carrier=msg.get("IFLA_CARRIER") == 1, kind=kind, mac=msg.get("IFLA_ADDRESS"))
