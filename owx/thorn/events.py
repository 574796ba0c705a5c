"""A raw rtnetlink socket subscribed to link, route and neighbour events, opened inside a namespace.

A plain socket (not pyroute2's) so the reconciler can ``select`` on it with a
timeout and see ENOBUFS, the kernel's way of saying events were lost.
"""

from __future__ import annotations

import errno
import socket
import struct

from owx.thorn import netns
from owx.thorn.view import Table

NETLINK_ROUTE = 0
RTMGRP_LINK = 0x1
RTMGRP_NEIGH = 0x4
RTMGRP_IPV4_ROUTE = 0x40
MSG_TABLES = {16: Table.links, 17: Table.links, 24: Table.routes, 25: Table.routes}
RTM_NEWNEIGH, RTM_DELNEIGH = 28, 29
NLMSG_HDR = struct.Struct("=IHHII")


def open_event_socket(ns: str | None, rcvbuf: int = 1 << 20) -> socket.socket:
    """Subscribe to link/route/neighbour notifications of ``ns``."""
    with netns.entered(ns):
        return _bound(RTMGRP_LINK | RTMGRP_NEIGH | RTMGRP_IPV4_ROUTE, rcvbuf)


def _bound(groups: int, rcvbuf: int) -> socket.socket:
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_NONBLOCK, NETLINK_ROUTE)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.bind((0, groups))
    return sock


class Overflow(Exception):
    """The kernel dropped notifications (ENOBUFS): only a full re-dump is safe."""


def drain(sock: socket.socket) -> list[Table]:
    """Read every pending notification; return the table each one touches (in order)."""
    tables: list[Table] = []
    while True:
        try:
            data = sock.recv(1 << 16)
        except BlockingIOError:
            return tables
        except OSError as exc:
            if exc.errno == errno.ENOBUFS:
                raise Overflow() from exc
            raise
        offset = 0
        while offset + NLMSG_HDR.size <= len(data):
            length, msg_type, _flags, _seq, _pid = NLMSG_HDR.unpack_from(data, offset)
            if length < NLMSG_HDR.size:
                break
            if msg_type in MSG_TABLES:
                tables.append(MSG_TABLES[msg_type])
            elif msg_type in (RTM_NEWNEIGH, RTM_DELNEIGH):
                family = data[offset + NLMSG_HDR.size]
                tables.append(Table.fdb if family == socket.AF_BRIDGE else Table.neighbours)
            offset += (length + 3) & ~3
