"""Which datapath the kernel supports: probed once in a scratch namespace."""

from __future__ import annotations

import functools
import os

from owx.thorn import netns
from owx.thorn.datapath.base import DatapathDriver
from owx.thorn.datapath.fdb import FdbDriver
from owx.thorn.datapath.tc import FlowerDriver, TcError, U32Driver, tc
from owx.thorn.model import DriverName, NodeSpec

PROBES = {
    DriverName.flower: "flower dst_mac 02:00:00:00:00:01 action tunnel_key set src_ip 10.0.0.1 dst_ip 10.0.0.2 "
                       "id 1 dst_port 4789 action mirred egress redirect dev thnb",
    DriverName.u32: "u32 match ether dst 02:00:00:00:00:01 action mirred egress redirect dev thnb",
}
DRIVERS: dict[DriverName, type[DatapathDriver]] = {
    DriverName.flower: FlowerDriver, DriverName.u32: U32Driver, DriverName.fdb: FdbDriver,
}


@functools.cache
def capabilities() -> frozenset[DriverName]:
    """Drivers this kernel can run (fdb always)."""
    ns = f"thn-cap-{os.getpid()}"
    netns.create(ns)
    try:
        with netns.ipr(ns) as ipr:
            ipr.link("add", ifname="thna", kind="veth", peer={"ifname": "thnb"})
        tc(ns, ["qdisc", "add", "dev", "thna", "clsact"])
        found = {DriverName.fdb}
        for name, spec in PROBES.items():
            try:
                tc(ns, ["filter", "add", "dev", "thna", "ingress", "protocol", "all", *spec.split()])
                found.add(name)
            except TcError:
                pass
        return frozenset(found)
    finally:
        netns.remove(ns)


class DriverUnavailable(RuntimeError):
    """The requested datapath is not supported by this kernel."""


def make_driver(node: NodeSpec, choice: DriverName | None = None) -> DatapathDriver:
    """``choice`` (default: the configured driver), with ``auto`` the best the kernel has (flower > u32 > fdb)."""
    caps = capabilities()
    choice = choice or node.reconciler.driver
    if choice is DriverName.auto:
        choice = next(d for d in (DriverName.flower, DriverName.u32, DriverName.fdb) if d in caps)
    elif choice not in caps:
        raise DriverUnavailable(f"datapath {choice.value} is not supported by this kernel "
                                f"(available: {', '.join(sorted(c.value for c in caps))})")
    return DRIVERS[choice](node)
