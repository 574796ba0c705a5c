"""tc filters as the datapath: one filter per remote MAC at each application attach point.

pyroute2 (0.9) has no flower or tunnel_key and packs u32 keys only at
non-negative offsets (a MAC match needs -14), so filters go through the ``tc``
binary; links stay with pyroute2. Each filter's action carries a cookie that
encodes its rule, so the installed set is read back from the kernel, not remembered.
"""

from __future__ import annotations

import ipaddress
import json
import re
import subprocess
from abc import abstractmethod
from dataclasses import dataclass

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from owx.thorn import netns
from owx.thorn.datapath.base import AttachPoint, DatapathDriver, SyncResult, attach_points
from owx.thorn.model import NodeSpec, direct_vni
from owx.thorn.rules import Rule
from owx.thorn.setup import index_of

PREF = 100
RX_DEV = "thrx"
RX_COOKIE = "7468726e7278"  # "thrnrx"
RULE_TAG = "7e"
SPACE = re.compile(r"\s*")


class TcError(RuntimeError):
    """tc refused a command."""


def tc(ns: str | None, args: list[str], input: str | None = None) -> str:
    argv = ["tc"] + (["-n", ns] if ns else []) + args
    proc = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        raise TcError(f"{' '.join(argv)}: {proc.stderr.strip()}")
    return proc.stdout


def tc_batch(ns: str | None, lines: list[str]) -> None:
    if lines:
        tc(ns, ["-force", "-batch", "-"], input="\n".join(lines) + "\n")


def tc_json(ns: str | None, commands: list[str]) -> list[list[dict]]:
    """The JSON output of each ``show`` command, from one tc process (which stops at a failing one)."""
    out = tc(ns, ["-json", "-batch", "-"], input="\n".join(commands) + "\n")
    decoder, results = json.JSONDecoder(), []
    pos = SPACE.match(out).end()
    while pos < len(out):  # one JSON array per command, one after the other
        value, end = decoder.raw_decode(out, pos)
        results.append(value)
        pos = SPACE.match(out, end).end()
    if len(results) != len(commands):
        raise TcError(f"tc -batch answered {len(results)} of {len(commands)} commands")
    return results


def encode_cookie(rule: Rule) -> str:
    return RULE_TAG + rule.mac.replace(":", "") + ipaddress.IPv4Address(rule.vtep).packed.hex() + f"{rule.vni:06x}"


def decode_cookie(cookie: str) -> tuple[str, str, int] | None:
    if not cookie.startswith(RULE_TAG) or len(cookie) != 28:
        return None
    raw = cookie[2:]
    mac = ":".join(raw[i:i + 2] for i in range(0, 12, 2))
    return mac, str(ipaddress.IPv4Address(bytes.fromhex(raw[12:20]))), int(raw[20:], 16)


@dataclass(frozen=True)
class InstalledFilter:
    point: AttachPoint
    handle: str
    key: tuple[str, str, int]
    to_dev: str | None


def vxlan_up(ipr: IPRoute, name: str, **kwargs) -> int:
    """Create the VXLAN device if missing and bring it up; return its index."""
    if index_of(ipr, name) is None:
        ipr.link("add", ifname=name, kind="vxlan", vxlan_learning=0, **kwargs)
    idx = index_of(ipr, name)
    assert idx is not None
    ipr.link("set", index=idx, state="up")
    return idx


class TcDriver(DatapathDriver):
    """Shared machinery of the flower and u32 drivers: rx device, clsact, cookie-tagged filters."""

    kind: str  # the tc classifier

    def __init__(self, node: NodeSpec) -> None:
        super().__init__(node)
        self.ns = node.netns
        self.points = attach_points(node)

    # what differs between flower and u32
    @abstractmethod
    def _tx_dev(self, rule: Rule) -> str: ...

    @abstractmethod
    def _match_action(self, rule: Rule) -> str: ...

    @abstractmethod
    def _sync_tx_devices(self, ipr: IPRoute, rules: list[Rule]) -> None: ...

    @abstractmethod
    def _tx_devices(self, ipr: IPRoute) -> list[str]: ...

    def _rx_device(self, ipr: IPRoute) -> None:
        """Traffic for this node's direct VNI arrives on thrx and is handed to the VTEP's bridge port."""
        ov = self.node.overlay
        vxlan_up(ipr, RX_DEV, vxlan_id=direct_vni(self.node.loopback), vxlan_local=str(self.node.loopback),
                 vxlan_port=ov.dstport)

    def _present(self) -> list[AttachPoint]:
        with netns.ipr(self.ns) as ipr:
            return [p for p in self.points if index_of(ipr, p.dev) is not None]

    def _read(self, points: list[AttachPoint]) -> tuple[set[str], dict[AttachPoint, list[dict]]]:
        """(devices with a clsact qdisc, the filters at ``points`` and at thrx's ingress), in one tc call."""
        lookups = [AttachPoint(RX_DEV, "ingress"), *points]
        qdiscs, *filters = tc_json(self.ns, ["qdisc show"] + [f"filter show dev {p.dev} {p.hook}" for p in lookups])
        return {q.get("dev") for q in qdiscs if q.get("kind") == "clsact"}, dict(zip(lookups, filters))

    @staticmethod
    def _installed_filters(filters: dict[AttachPoint, list[dict]]) -> list[InstalledFilter]:
        found = []
        for point, listed in filters.items():
            for f in listed:
                handle = f.get("options", {}).get("fh") or f.get("handle")
                for action in f.get("options", {}).get("actions", []):
                    key = decode_cookie(action.get("cookie", ""))
                    if key and handle:
                        to_dev = next((a.get("to_dev") for a in f["options"]["actions"] if a.get("kind") == "mirred"),
                                      None)
                        found.append(InstalledFilter(point, str(handle), key, to_dev))
                        break
        return found

    def sync(self, rules: list[Rule]) -> SyncResult:
        with netns.ipr(self.ns) as ipr:
            points = [p for p in self.points if index_of(ipr, p.dev) is not None]
            self._rx_device(ipr)
            self._sync_tx_devices(ipr, rules)
        clsact, filters = self._read(points)
        batch = [f"qdisc add dev {d} clsact" for d in [RX_DEV] + [p.dev for p in points] if d not in clsact]
        rx_rule = any(a.get("cookie") == RX_COOKIE and a.get("to_dev") == self.node.overlay.vtep
                      for f in filters[AttachPoint(RX_DEV, "ingress")] for a in f.get("options", {}).get("actions", []))
        if not rx_rule:
            batch.append(f"filter add dev {RX_DEV} ingress pref {PREF} protocol all u32 match u32 0 0 "
                         f"action mirred ingress redirect dev {self.node.overlay.vtep} cookie {RX_COOKIE}")
        want = {r.key: r for r in rules}
        installed = [f for f in self._installed_filters(filters) if f.point in points]
        added = removed = 0
        for f in installed:
            rule = want.get(f.key)
            if rule is None or f.to_dev != self._tx_dev(rule):
                batch.append(f"filter del dev {f.point.dev} {f.point.hook} pref {PREF} handle {f.handle} "
                             f"protocol all {self.kind}")
                removed += 1
        keep = {(f.point, f.key) for f in installed if f.key in want and f.to_dev == self._tx_dev(want[f.key])}
        for point in points:
            for rule in rules:
                if (point, rule.key) not in keep:
                    batch.append(f"filter add dev {point.dev} {point.hook} pref {PREF} protocol all "
                                 f"{self._match_action(rule)} cookie {encode_cookie(rule)}")
                    added += 1
        tc_batch(self.ns, batch)
        with netns.ipr(self.ns) as ipr:
            self._remove_unused_tx(ipr, rules)
        return SyncResult(added, removed)

    def _remove_unused_tx(self, ipr: IPRoute, rules: list[Rule]) -> None:
        used = {self._tx_dev(r) for r in rules}
        for name in self._tx_devices(ipr):
            if name not in used:
                idx = index_of(ipr, name)
                if idx is not None:
                    ipr.link("del", index=idx)

    def _installed(self) -> list[InstalledFilter]:
        try:
            return [f for f in self._installed_filters(self._read(self._present())[1]) if f.point.dev != RX_DEV]
        except TcError:  # e.g. a device went away between the check and the read
            return []

    def installed(self) -> set[str]:
        return {f.key[0] for f in self._installed()}

    def close(self) -> None:
        for f in self._installed():
            try:
                tc(self.ns, ["filter", "del", "dev", f.point.dev, f.point.hook, "pref", str(PREF), "handle",
                             f.handle, "protocol", "all", self.kind])
            except TcError:
                pass
        with netns.ipr(self.ns) as ipr:
            for name in self._tx_devices(ipr) + [RX_DEV]:
                idx = index_of(ipr, name)
                if idx is not None:
                    try:
                        ipr.link("del", index=idx)
                    except NetlinkError:
                        pass


class U32Driver(TcDriver):
    """u32 match on the destination MAC + mirred redirect to a VXLAN device per remote VTEP.

    Per-remote devices cannot share the segment VNI (the kernel allows one device per
    VNI and port), so each carries the remote node's *direct VNI* (see model.direct_vni),
    which the remote receives on its ``thrx`` device.
    """

    name = "u32"
    kind = "u32"
    TX_PREFIX = "thx"

    def _tx_dev(self, rule: Rule) -> str:
        return self.TX_PREFIX + ipaddress.IPv4Address(rule.vtep).packed.hex()

    def _match_action(self, rule: Rule) -> str:
        return f"u32 match ether dst {rule.mac} action mirred egress redirect dev {self._tx_dev(rule)}"

    def _sync_tx_devices(self, ipr: IPRoute, rules: list[Rule]) -> None:
        ov = self.node.overlay
        for vtep in sorted({r.vtep for r in rules}):
            idx = vxlan_up(ipr, self._tx_dev(Rule("", vtep, 0)), vxlan_id=direct_vni(ipaddress.IPv4Address(vtep)),
                           vxlan_local=str(self.node.loopback), vxlan_group=vtep, vxlan_port=ov.dstport,
                           vxlan_tos=ov.outer_tos)
            ipr.link("set", index=idx, mtu=ov.mtu)

    def _tx_devices(self, ipr: IPRoute) -> list[str]:
        return [link.get("IFLA_IFNAME") for link in ipr.get_links()
                if link.get("IFLA_IFNAME", "").startswith(self.TX_PREFIX) and len(link.get("IFLA_IFNAME")) == 11]


class FlowerDriver(TcDriver):
    """flower match on the destination MAC + tunnel_key set + mirred to one metadata VXLAN device.

    This is the shape switchdev NICs offload (the paper's datapath). The metadata
    device listens on dstport+1 so it does not clash with the VTEP's socket.
    """

    name = "flower"
    kind = "flower"
    TX = "thxmeta"

    def _tx_dev(self, rule: Rule) -> str:
        return self.TX

    def _match_action(self, rule: Rule) -> str:
        ov = self.node.overlay
        return (f"flower dst_mac {rule.mac} action tunnel_key set src_ip {self.node.loopback} dst_ip {rule.vtep} "
                f"id {direct_vni(ipaddress.IPv4Address(rule.vtep))} dst_port {ov.dstport} "
                f"action mirred egress redirect dev {self.TX}")

    def _sync_tx_devices(self, ipr: IPRoute, rules: list[Rule]) -> None:
        vxlan_up(ipr, self.TX, vxlan_collect_metadata=1, vxlan_port=self.node.overlay.dstport + 1)

    def _tx_devices(self, ipr: IPRoute) -> list[str]:
        return [self.TX] if index_of(ipr, self.TX) is not None else []
