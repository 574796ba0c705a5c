"""Desired forwarding rules computed from the kernel view.

EVPN (zebra) writes one VTEP-FDB entry per remote application MAC: MAC -> remote
VTEP address. Each becomes a rule "frames to MAC go to VTEP", valid while the
routing table has a path to that VTEP (its next hops are what failover changes).
"""

from __future__ import annotations

from dataclasses import dataclass

from owx.thorn.view import ZERO_MAC, KernelView, Nexthop


@dataclass(frozen=True, order=True)
class Rule:
    mac: str
    vtep: str
    vni: int
    nexthops: tuple[Nexthop, ...] = ()

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.mac, self.vtep, self.vni)


def desired_rules(view: KernelView, vtep_dev: str, vni: int) -> list[Rule]:
    """One rule per remote unicast MAC on the VTEP that has a route to its VTEP."""
    rules: dict[str, Rule] = {}
    for entry in view.fdb:
        if entry.dev != vtep_dev or entry.dst is None or entry.mac == ZERO_MAC or int(entry.mac[:2], 16) & 1:
            continue
        route = view.lookup(entry.dst)
        if route is None or not route.nexthops:
            continue
        rules[entry.mac] = Rule(entry.mac, entry.dst, entry.vni or vni, route.nexthops)
    return sorted(rules.values())


def paths(view: KernelView, vteps: set[str]) -> dict[str, list[Nexthop]]:
    """Current next hops towards each VTEP address."""
    out: dict[str, list[Nexthop]] = {}
    for vtep in sorted(vteps):
        route = view.lookup(vtep)
        out[vtep] = list(route.nexthops) if route else []
    return out
