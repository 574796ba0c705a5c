"""Typed description of a THORN node and of a cluster (YAML/JSON in, pydantic out).

A node has a loopback /32 (its identity and VTEP address), two or more uplinks
(a /31 each, to a ToR with its own AS), one overlay segment (a VNI, a bridge,
the VTEP) and the application-facing devices that live in that segment.
"""

from __future__ import annotations

import ipaddress
import re
from enum import Enum
from pathlib import Path
from typing import Annotated

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

IFNAME = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]{1,15}$", description="Linux interface name")]
NETNS = Annotated[str, Field(pattern=r"^thn[A-Za-z0-9_.-]{0,60}$", description="network namespace, prefix thn")]
MAC_RE = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")
ASN = Annotated[int, Field(ge=1, le=4_294_967_294)]
VNI = Annotated[int, Field(ge=1, le=0x7FFFFF, description="overlay VNI (the upper half is reserved for direct VNIs)")]


class ThornConfigError(ValueError):
    """A node or cluster description that cannot be used; the message says why and where."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class UplinkSpec(Strict):
    """One uplink: a local interface with a /31 towards one ToR."""

    name: IFNAME
    address: ipaddress.IPv4Interface = Field(description="local address with prefix, e.g. 172.16.1.1/31")
    peer: ipaddress.IPv4Address = Field(description="the ToR's address on this link")
    peer_asn: ASN

    @model_validator(mode="after")
    def _peer_on_link(self) -> UplinkSpec:
        if self.peer not in self.address.network or self.peer == self.address.ip:
            raise ValueError(f"uplink {self.name}: peer {self.peer} is not another address of {self.address.network}")
        return self


class AppDeviceKind(str, Enum):
    veth = "veth"
    macvlan = "macvlan"
    sriov = "sriov"


class AppDeviceSpec(Strict):
    """The device an application binds to; its other side is a port of the overlay bridge.

    ``veth``: a pair, ``name`` moves into ``netns`` and ``port`` stays in the bridge.
    ``macvlan``: a macvlan on the bridge moved into ``netns``.
    ``sriov``: VF ``vf`` of physical function ``pf`` (its representor is ``port``); needs the NIC.
    """

    name: IFNAME = "app0"
    kind: AppDeviceKind = AppDeviceKind.veth
    port: IFNAME = Field(description="host-side bridge port (veth peer / VF representor)")
    netns: NETNS = Field(description="namespace the application runs in")
    address: ipaddress.IPv4Interface
    mac: str
    pf: IFNAME | None = None
    vf: int | None = Field(default=None, ge=0)

    @field_validator("mac")
    @classmethod
    def _mac(cls, value: str) -> str:
        value = value.lower()
        if not MAC_RE.match(value):
            raise ValueError(f"{value!r} is not a MAC address like 02:00:00:00:00:01")
        if int(value[:2], 16) & 1:
            raise ValueError(f"{value} is a multicast MAC")
        return value

    @model_validator(mode="after")
    def _sriov_fields(self) -> AppDeviceSpec:
        if self.kind is AppDeviceKind.sriov and (self.pf is None or self.vf is None):
            raise ValueError(f"app device {self.name}: kind sriov needs pf and vf")
        return self


class OverlaySpec(Strict):
    """The VXLAN segment: VNI, VTEP device bound to the loopback, bridge."""

    vni: VNI = 100
    vtep: IFNAME = "vtep0"
    bridge: IFNAME = "br0"
    dstport: int = Field(default=4789, ge=1, le=65535)
    mtu: int = Field(default=1450, ge=576, le=9000)
    outer_tos: int = Field(default=4, ge=0, le=252, description="TOS of the u32 datapath's tunnel headers; non-zero "
                           "makes the kernel route each packet instead of caching one path per remote VTEP, so ECMP "
                           "spreads flows (by their outer UDP source port) over all uplinks")
    route_target: str | None = Field(default=None, pattern=r"^\d{1,5}:\d{1,10}$",
                                     description="EVPN RT shared by the cluster; default 64512:<vni>")

    @property
    def rt(self) -> str:
        return self.route_target or f"64512:{self.vni}"


class BfdSpec(Strict):
    """BFD profile applied to every BGP session."""

    profile: str = Field(default="thorn", pattern=r"^[A-Za-z0-9_-]{1,32}$")
    detect_multiplier: int = Field(default=3, ge=2, le=255)
    receive_ms: int = Field(default=20, ge=10, le=60000)
    transmit_ms: int = Field(default=20, ge=10, le=60000)

    @property
    def detect_ms(self) -> int:
        return self.detect_multiplier * max(self.receive_ms, self.transmit_ms)


class DriverName(str, Enum):
    auto = "auto"
    flower = "flower"
    u32 = "u32"
    fdb = "fdb"


class ReconcilerSpec(Strict):
    """How the reconciler keeps the datapath in step with the kernel."""

    period_s: float = Field(default=2.0, gt=0.05, le=3600, description="full re-dump period")
    driver: DriverName = DriverName.auto
    drop_events: float = Field(default=0.0, ge=0.0, le=1.0, description="fraction of netlink events ignored on purpose")
    fast_failover: bool = Field(default=True, description="steer around a lost uplink (own or a remote node's) at "
                                "once, before BGP converges (see owx.thorn.failover)")
    notice_port: int = Field(default=4799, ge=1, le=65535, description="UDP port of path notices between nodes")


class NodeSpec(Strict):
    """One dual-homed host."""

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,32}$")
    netns: NETNS | None = Field(default=None, description="namespace the node's stack lives in; None = this one")
    loopback: ipaddress.IPv4Address
    asn: ASN
    uplinks: list[UplinkSpec] = Field(min_length=1)
    overlay: OverlaySpec = OverlaySpec()
    app_devices: list[AppDeviceSpec] = Field(default_factory=list)
    bfd: BfdSpec = BfdSpec()
    reconciler: ReconcilerSpec = ReconcilerSpec()
    frr_dir: Path | None = Field(default=None, description="FRR run dir; default /run/owx-thorn/<name>")
    frr_rt_priority: int = Field(default=50, ge=0, le=99, description="SCHED_FIFO priority of bfdd; THORN's "
                                 "steering process runs one below (bfdd never waits for it); 0 = off")
    daemon_nice: int = Field(default=-10, ge=-20, le=19, description="nice value of the node daemon: its reconciler "
                             "(and the tc calls it makes) runs ahead of tenants' work on a loaded machine")
    frr_nexthop_groups: bool = Field(default=False, description="let zebra install kernel nexthop groups (FRR 8.4 "
                                     "then leaves routes on one path after a link flap: off)")
    http: str = Field(default="127.0.0.1:0", pattern=r"^[0-9.]+:\d{1,5}$", description="state/metrics listen address")

    @model_validator(mode="after")
    def _consistent(self) -> NodeSpec:
        _unique("uplink", [u.name for u in self.uplinks])
        _unique("app device port", [a.port for a in self.app_devices])
        if self.loopback.is_loopback or self.loopback.is_multicast or self.loopback.is_unspecified:
            raise ValueError(f"loopback {self.loopback} cannot be a VTEP address")
        if {u.peer_asn for u in self.uplinks} & {self.asn}:
            raise ValueError(f"node AS {self.asn} equals a ToR AS; eBGP needs different ASes")
        taken = {self.overlay.vtep, self.overlay.bridge} | {u.name for u in self.uplinks}
        for app in self.app_devices:
            if app.port in taken:
                raise ValueError(f"app device port {app.port} collides with another device name")
        return self

    @property
    def run_dir(self) -> Path:
        return self.frr_dir or Path("/run/owx-thorn") / self.name


class TorSpec(Strict):
    """A top-of-rack switch emulated by a namespace running FRR."""

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,32}$")
    netns: NETNS
    loopback: ipaddress.IPv4Address
    asn: ASN


class LinkSpec(Strict):
    """A cable: a host uplink and the ToR port it plugs into."""

    node: str
    uplink: IFNAME
    tor: str
    port: IFNAME


class ClusterSpec(Strict):
    """Hosts, ToRs and the links between them."""

    nodes: list[NodeSpec] = Field(min_length=1)
    tors: list[TorSpec] = Field(default_factory=list)
    links: list[LinkSpec] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> ClusterSpec:
        _unique("node", [n.name for n in self.nodes])
        _unique("tor", [t.name for t in self.tors])
        _unique("loopback", [str(n.loopback) for n in self.nodes] + [str(t.loopback) for t in self.tors])
        _unique("direct VNI", [direct_vni(n.loopback) for n in self.nodes])
        nodes = {n.name: n for n in self.nodes}
        tors = {t.name: t for t in self.tors}
        for link in self.links:
            if link.node not in nodes:
                raise ValueError(f"link names unknown node {link.node!r}")
            if link.tor not in tors:
                raise ValueError(f"link names unknown tor {link.tor!r}")
            uplink = next((u for u in nodes[link.node].uplinks if u.name == link.uplink), None)
            if uplink is None:
                raise ValueError(f"link: node {link.node} has no uplink {link.uplink!r}")
            if uplink.peer_asn != tors[link.tor].asn:
                raise ValueError(f"link {link.node}/{link.uplink}: peer_asn {uplink.peer_asn} != {link.tor} AS")
        return self


def direct_vni(loopback: ipaddress.IPv4Address) -> int:
    """The VNI a node receives per-remote-device (u32 datapath) traffic on.

    Derived from the loopback so every node computes every peer's value without
    configuration: upper half of the 24-bit VNI space + the low 23 bits of the address.
    """
    return 0x800000 | (int(loopback) & 0x7FFFFF)


def _unique(what: str, values: list[str]) -> None:
    seen: set[str] = set()
    for value in values:
        if value in seen:
            raise ValueError(f"duplicate {what} {value!r}")
        seen.add(value)


def _load(path: Path, model: type[BaseModel]) -> BaseModel:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ThornConfigError(f"{path}: cannot read: {exc.strerror}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ThornConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ThornConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ThornConfigError(f"{path}: invalid {model.__name__}:\n{format_errors(exc)}") from exc


def format_errors(exc: ValidationError) -> str:
    """One line per problem: dotted location and message."""
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(top)"
        lines.append(f"  {loc}: {err['msg']}")
    return "\n".join(lines)


def load_node(path: Path) -> NodeSpec:
    return _load(path, NodeSpec)  # type: ignore[return-value]


def load_cluster(path: Path) -> ClusterSpec:
    return _load(path, ClusterSpec)  # type: ignore[return-value]


def dump(model: BaseModel) -> str:
    return yaml.safe_dump(model.model_dump(mode="json", exclude_none=True), sort_keys=False)
