"""Node setup through pyroute2: loopback, uplinks, VTEP, bridge, application devices.

Every step is idempotent, so ``owx thorn run`` can be restarted on a configured node.
"""

from __future__ import annotations

import errno
import logging
from pathlib import Path

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from owx.thorn import netns
from owx.thorn.model import AppDeviceKind, AppDeviceSpec, NodeSpec

log = logging.getLogger(__name__)

HOST_SYSCTLS: dict[str, str | int] = {
    "net.ipv4.ip_forward": 1,
    "net.ipv4.conf.all.rp_filter": 0,
    "net.ipv4.conf.default.rp_filter": 0,
    "net.ipv4.fib_multipath_hash_policy": 1,
    # a next hop whose carrier is gone is skipped at once, before BGP/BFD react
    "net.ipv4.conf.all.ignore_routes_with_linkdown": 1,
    "net.ipv4.conf.default.ignore_routes_with_linkdown": 1,
}


class SetupError(RuntimeError):
    """The node cannot be configured as described."""


def index_of(ipr: IPRoute, ifname: str) -> int | None:
    found = ipr.link_lookup(ifname=ifname)
    return found[0] if found else None


def require(ipr: IPRoute, ifname: str, where: str | None) -> int:
    idx = index_of(ipr, ifname)
    if idx is None:
        raise SetupError(f"interface {ifname!r} does not exist in namespace {where or '(current)'}")
    return idx


def ignore_exists(fn, *args, **kwargs) -> None:
    try:
        fn(*args, **kwargs)
    except NetlinkError as exc:
        if exc.code != errno.EEXIST:
            raise


def setup_node(node: NodeSpec) -> None:
    """Configure the node's kernel state; raises SetupError naming what is missing."""
    with netns.ipr(node.netns) as ipr:
        uplinks = [require(ipr, u.name, node.netns) for u in node.uplinks]
        for spec in node.app_devices:
            if spec.kind is AppDeviceKind.sriov:
                require(ipr, spec.pf or "", node.netns)
        netns.sysctl(node.netns, HOST_SYSCTLS | {f"net.ipv4.conf.{u.name}.rp_filter": 0 for u in node.uplinks})
        lo = require(ipr, "lo", node.netns)
        ipr.link("set", index=lo, state="up")
        ignore_exists(ipr.addr, "add", index=lo, address=str(node.loopback), prefixlen=32)
        for idx, spec in zip(uplinks, node.uplinks):
            ipr.link("set", index=idx, state="up")
            ignore_exists(ipr.addr, "add", index=idx, address=str(spec.address.ip),
                           prefixlen=spec.address.network.prefixlen)
        bridge = _ensure_bridge(ipr, node)
        _ensure_vtep(ipr, node, bridge)
        for spec in node.app_devices:
            _ensure_app_device(ipr, node, spec, bridge)
    log.info("node %s configured", node.name)


def _ensure_bridge(ipr: IPRoute, node: NodeSpec) -> int:
    name = node.overlay.bridge
    if index_of(ipr, name) is None:
        ipr.link("add", ifname=name, kind="bridge", br_stp_state=0, br_forward_delay=0)
    idx = require(ipr, name, node.netns)
    ipr.link("set", index=idx, mtu=node.overlay.mtu, state="up")
    return idx


def _ensure_vtep(ipr: IPRoute, node: NodeSpec, bridge: int) -> None:
    ov = node.overlay
    if index_of(ipr, ov.vtep) is None:
        ipr.link("add", ifname=ov.vtep, kind="vxlan", vxlan_id=ov.vni, vxlan_local=str(node.loopback),
                 vxlan_port=ov.dstport, vxlan_learning=0)
    idx = require(ipr, ov.vtep, node.netns)
    ipr.link("set", index=idx, master=bridge, mtu=ov.mtu, state="up")
    # EVPN fills the FDB; learning from tunnelled frames would fight it
    ipr.brport("set", index=idx, learning=0, neigh_suppress=0)


def _ensure_app_device(ipr: IPRoute, node: NodeSpec, spec: AppDeviceSpec, bridge: int) -> None:
    netns.create(spec.netns)
    if spec.kind is AppDeviceKind.veth:
        if index_of(ipr, spec.port) is None:
            ipr.link("add", ifname=spec.port, kind="veth", peer={"ifname": spec.name, "net_ns_fd": spec.netns})
        port = require(ipr, spec.port, node.netns)
        ipr.link("set", index=port, master=bridge, mtu=node.overlay.mtu, state="up")
        _configure_app_end(spec, node.overlay.mtu)
        # the application's MAC is known before it sends: EVPN announces it at once
        # replace: the bridge may have learned the MAC already (the app sent a frame), as a dynamic entry
        ipr.fdb("replace", ifindex=port, lladdr=spec.mac, master=bridge, state=0x40)  # NUD_NOARP: static, not local
    elif spec.kind is AppDeviceKind.macvlan:
        with netns.ipr(spec.netns) as app:
            present = index_of(app, spec.name) is not None
        if not present:
            ipr.link("add", ifname=spec.name, kind="macvlan", link=bridge, macvlan_mode="bridge",
                     address=spec.mac, net_ns_fd=spec.netns)
        _configure_app_end(spec, node.overlay.mtu)
    else:
        _ensure_vf(ipr, node, spec, bridge)


def _configure_app_end(spec: AppDeviceSpec, mtu: int) -> None:
    with netns.ipr(spec.netns) as app:
        idx = require(app, spec.name, spec.netns)
        app.link("set", index=idx, address=spec.mac, mtu=mtu, state="up")
        ignore_exists(app.addr, "add", index=idx, address=str(spec.address.ip),
                       prefixlen=spec.address.network.prefixlen)


def sriov_capable(pf: str, ns: str | None = None) -> int:
    """Number of VFs the physical function supports (0: none / not a PCI NIC)."""
    path = Path("/sys/class/net") / pf / "device" / "sriov_totalvfs"
    if ns is not None:
        out = netns.run(ns, ["cat", str(path)], check=False)
        return int(out.stdout.strip() or 0) if out.returncode == 0 else 0
    return int(path.read_text().strip()) if path.exists() else 0


def _ensure_vf(ipr: IPRoute, node: NodeSpec, spec: AppDeviceSpec, bridge: int) -> None:
    """SR-IOV path: VF ``vf`` of ``pf`` becomes the app device, its representor ``port`` a bridge port.

    Needs a NIC in switchdev mode (e.g. ConnectX with ``devlink dev eswitch set ... mode switchdev``).
    """
    assert spec.pf is not None and spec.vf is not None
    total = sriov_capable(spec.pf, node.netns)
    if total <= spec.vf:
        raise SetupError(f"app device {spec.name}: {spec.pf} has {total} SR-IOV VFs, VF {spec.vf} unavailable "
                         "(this host has no SR-IOV NIC; use kind veth or macvlan)")
    pf = require(ipr, spec.pf, node.netns)
    ipr.link("set", index=pf, vf={"vf": spec.vf, "mac": spec.mac})
    vf_dir = Path("/sys/class/net") / spec.pf / "device" / f"virtfn{spec.vf}" / "net"
    vf_names = [p.name for p in vf_dir.iterdir()] if vf_dir.exists() else []
    if not vf_names:
        raise SetupError(f"VF {spec.vf} of {spec.pf} has no netdev (driver not bound?)")
    ipr.link("set", index=require(ipr, vf_names[0], node.netns), net_ns_fd=spec.netns, ifname=spec.name)
    rep = require(ipr, spec.port, node.netns)
    ipr.link("set", index=rep, master=bridge, state="up")
    _configure_app_end(spec, node.overlay.mtu)


def teardown_node(node: NodeSpec) -> None:
    """Remove what setup_node created (the devices; addresses on uplinks stay)."""
    with netns.ipr(node.netns) as ipr:
        names = [node.overlay.vtep, node.overlay.bridge]
        names += [a.port for a in node.app_devices if a.kind is AppDeviceKind.veth]
        for name in names:
            idx = index_of(ipr, name)
            if idx is not None:
                ipr.link("del", index=idx)
        lo = index_of(ipr, "lo")
        if lo is not None:
            try:
                ipr.addr("del", index=lo, address=str(node.loopback), prefixlen=32)
            except NetlinkError:
                pass
