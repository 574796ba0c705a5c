"""Plain kernel bridge FDB as the datapath: a static bridge entry per remote MAC on the VTEP port.

The VTEP's own FDB (written by EVPN) holds MAC -> remote VTEP; this driver makes
the bridge send known remote MACs straight to the VTEP port instead of flooding.
Entries written by EVPN itself (extern_learn) count as present and are never touched.
"""

from __future__ import annotations

import errno
import socket

from pyroute2.netlink.exceptions import NetlinkError

from owx.thorn import netns
from owx.thorn.datapath.base import DatapathDriver, SyncResult
from owx.thorn.rules import Rule
from owx.thorn.setup import require
from owx.thorn.view import NTF_EXT_LEARNED, NTF_MASTER, NUD_NOARP, NUD_PERMANENT


class FdbDriver(DatapathDriver):
    name = "fdb"

    def _entries(self, ipr) -> tuple[int, dict[str, int]]:
        """(VTEP index, {mac: ndm flags|state<<16} of bridge entries on the VTEP port)."""
        vtep = require(ipr, self.node.overlay.vtep, self.node.netns)
        own = {}
        for msg in ipr.get_neighbours(family=socket.AF_BRIDGE, ifindex=vtep):
            if msg["flags"] & NTF_MASTER and msg["ifindex"] == vtep and not msg["state"] & NUD_PERMANENT:
                own[msg.get("NDA_LLADDR").lower()] = msg["flags"] | msg["state"] << 16
        return vtep, own

    def sync(self, rules: list[Rule]) -> SyncResult:
        added = removed = 0
        want = {r.mac for r in rules}
        with netns.ipr(self.node.netns) as ipr:
            vtep, have = self._entries(ipr)
            for mac, bits in have.items():
                ours = not bits & NTF_EXT_LEARNED and (bits >> 16) & NUD_NOARP
                if mac not in want and ours:
                    ipr.fdb("del", ifindex=vtep, lladdr=mac, flags=NTF_MASTER)
                    removed += 1
            for mac in sorted(want - have.keys()):
                try:
                    ipr.fdb("add", ifindex=vtep, lladdr=mac, flags=NTF_MASTER, state=NUD_NOARP)
                    added += 1
                except NetlinkError as exc:
                    if exc.code != errno.EEXIST:
                        raise
        return SyncResult(added, removed)

    def installed(self) -> set[str]:
        with netns.ipr(self.node.netns) as ipr:
            return set(self._entries(ipr)[1])

    def close(self) -> None:
        with netns.ipr(self.node.netns) as ipr:
            try:
                vtep, have = self._entries(ipr)
            except Exception:
                return
            for mac, bits in have.items():
                if not bits & NTF_EXT_LEARNED and (bits >> 16) & NUD_NOARP:
                    ipr.fdb("del", ifindex=vtep, lladdr=mac, flags=NTF_MASTER)
