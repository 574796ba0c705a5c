"""FRR configuration text for a host (eBGP + BFD + EVPN) and for an emulated ToR.

One file per daemon (zebra, bfdd, bgpd), as the daemons are started with ``-f``.
"""

from __future__ import annotations

from dataclasses import dataclass

from owx.thorn.model import BfdSpec, NodeSpec, TorSpec

DAEMONS = ("zebra", "bfdd", "bgpd")
OUT_MAP = "THORN-OUT"


@dataclass(frozen=True)
class BgpPeer:
    address: str
    asn: int


@dataclass(frozen=True)
class FrrConfig:
    """Text of each daemon's configuration."""

    zebra: str
    bfdd: str
    bgpd: str

    def files(self) -> dict[str, str]:
        return {"zebra": self.zebra, "bfdd": self.bfdd, "bgpd": self.bgpd}

    def integrated(self) -> str:
        """All three as one file (what ``vtysh -f`` applies to running daemons)."""
        return "\n".join([self.zebra, self.bfdd, self.bgpd])


def _header(hostname: str, daemon: str, log_dir: str) -> list[str]:
    return ["frr defaults datacenter", f"hostname {hostname}", f"log file {log_dir}/{daemon}.log informational", "!"]


def zebra_conf(hostname: str, log_dir: str, nexthop_groups: bool = False) -> str:
    # FRR's kernel nexthop groups leave a route on one path after a flap ("Nexthop id does not exist")
    groups = [] if nexthop_groups else ["no zebra nexthop kernel enable", "!"]
    return "\n".join(_header(hostname, "zebra", log_dir) + groups + [""])


def bfdd_conf(hostname: str, bfd: BfdSpec, log_dir: str) -> str:
    return "\n".join(_header(hostname, "bfdd", log_dir) + bfd_profile_lines(bfd) + [""])


def bfd_profile_lines(bfd: BfdSpec) -> list[str]:
    return [
        "bfd",
        f" profile {bfd.profile}",
        f"  detect-multiplier {bfd.detect_multiplier}",
        f"  receive-interval {bfd.receive_ms}",
        f"  transmit-interval {bfd.transmit_ms}",
        " exit",
        "exit",
        "!",
    ]


def _neighbor_lines(peer: BgpPeer, bfd: BfdSpec) -> list[str]:
    a = peer.address
    return [
        f" neighbor {a} remote-as {peer.asn}",
        f" neighbor {a} timers 3 9",
        f" neighbor {a} timers connect 1",
        f" neighbor {a} advertisement-interval 0",
        f" neighbor {a} bfd",
        f" neighbor {a} bfd profile {bfd.profile}",
    ]


def host_config(node: NodeSpec) -> FrrConfig:
    """eBGP to every ToR with BFD; announce only the loopback; EVPN for the overlay VNI."""
    log_dir = str(node.run_dir)
    peers = [BgpPeer(str(u.peer), u.peer_asn) for u in node.uplinks]
    lo = f"{node.loopback}/32"
    bgp = _header(node.name, "bgpd", log_dir) + [
        f"router bgp {node.asn}",
        f" bgp router-id {node.loopback}",
        " no bgp ebgp-requires-policy",
        " bgp bestpath as-path multipath-relax",
    ]
    for peer in peers:
        bgp += _neighbor_lines(peer, node.bfd)
    bgp += [" !", " address-family ipv4 unicast", f"  network {lo}", "  maximum-paths 8"]
    bgp += [f"  neighbor {p.address} route-map {OUT_MAP} out" for p in peers]
    bgp += [" exit-address-family", " !", " address-family l2vpn evpn"]
    bgp += [f"  neighbor {p.address} activate" for p in peers]
    bgp += [
        "  advertise-all-vni",
        f"  vni {node.overlay.vni}",
        f"   route-target import {node.overlay.rt}",
        f"   route-target export {node.overlay.rt}",
        "  exit-vni",
        " exit-address-family",
        "exit",
        "!",
        f"ip prefix-list THORN-LO seq 5 permit {lo}",
        f"route-map {OUT_MAP} permit 10",
        " match ip address prefix-list THORN-LO",
        "exit",
        "!",
        "",
    ]
    return FrrConfig(zebra_conf(node.name, log_dir, node.frr_nexthop_groups), bfdd_conf(node.name, node.bfd, log_dir),
                     "\n".join(bgp))


def tor_config(tor: TorSpec, peers: list[BgpPeer], bfd: BfdSpec, log_dir: str,
               nexthop_groups: bool = False) -> FrrConfig:
    """A ToR: eBGP to each host port, ECMP, and EVPN passed on with the VTEP next hop unchanged."""
    bgp = _header(tor.name, "bgpd", log_dir) + [
        f"router bgp {tor.asn}",
        f" bgp router-id {tor.loopback}",
        " no bgp ebgp-requires-policy",
        " bgp bestpath as-path multipath-relax",
    ]
    for peer in peers:
        bgp += _neighbor_lines(peer, bfd)
    bgp += [" !", " address-family ipv4 unicast", "  maximum-paths 8", " exit-address-family",
            " !", " address-family l2vpn evpn"]
    for peer in peers:
        bgp += [f"  neighbor {peer.address} activate", f"  neighbor {peer.address} attribute-unchanged next-hop"]
    bgp += [" exit-address-family", "exit", "!", ""]
    return FrrConfig(zebra_conf(tor.name, log_dir, nexthop_groups), bfdd_conf(tor.name, bfd, log_dir),
                     "\n".join(bgp))
