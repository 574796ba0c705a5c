"""Path notices between THORN nodes: "I cannot be reached through these ToRs right now".

A node that loses an uplink (carrier, BFD or its BGP session) tells every remote
VTEP at once, over each uplink it still has; the remote nodes stop sending to it
through that ToR without waiting for the ToR's BGP withdrawal (two BGP hops later).
A notice names ToRs by AS number, which every node sees as the ``peer_asn`` of its
own uplink to the same ToR. Notices are soft state: the sender repeats them while
the loss lasts and receivers forget one that is not repeated.
"""

from __future__ import annotations

import ipaddress
import logging
import socket

from pydantic import Field, ValidationError

from owx.thorn import netns
from owx.thorn.model import ASN, NodeSpec, Strict

log = logging.getLogger(__name__)
MAX_NOTICE = 2048


class Notice(Strict):
    """One node's current losses; ``(epoch, seq)`` orders the notices of one sender."""

    vtep: ipaddress.IPv4Address
    epoch: float
    seq: int
    lost: list[ASN] = Field(max_length=64)


class NoticeChannel:
    """A UDP socket on the node's loopback for notices in, and one per uplink for notices out."""

    def __init__(self, node: NodeSpec) -> None:
        self.node = node
        port = node.reconciler.notice_port
        with netns.entered(node.netns):
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self.sock.setblocking(False)
            self.sock.bind((str(node.loopback), port))
            self.out: dict[str, socket.socket] = {}
            for uplink in node.uplinks:
                out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                out.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, uplink.name.encode())
                out.bind((str(node.loopback), 0))
                self.out[uplink.name] = out
        self.port = port
        self.rejected = 0

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, notice: Notice, uplinks: list[str], vteps: list[str]) -> None:
        """Send ``notice`` to every VTEP over each of ``uplinks`` (a lost datagram is repeated later)."""
        data = notice.model_dump_json().encode()
        for name in uplinks:
            for vtep in vteps:
                try:
                    self.out[name].sendto(data, (vtep, self.port))
                except OSError as exc:
                    log.debug("notice to %s over %s: %s", vtep, name, exc)

    def receive(self) -> list[Notice]:
        """Valid notices that arrived, each from the VTEP it speaks for."""
        notices = []
        while True:
            try:
                data, (source, _port) = self.sock.recvfrom(MAX_NOTICE)
            except BlockingIOError:
                return notices
            try:
                notice = Notice.model_validate_json(data)
            except ValidationError:
                self.rejected += 1
                continue
            if str(notice.vtep) != source or notice.vtep == self.node.loopback:
                self.rejected += 1
                continue
            notices.append(notice)

    def close(self) -> None:
        for sock in [self.sock, *self.out.values()]:
            sock.close()
