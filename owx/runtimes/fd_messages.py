"""JSON messages with attached file descriptors on a Unix SOCK_SEQPACKET socket (one message per packet).

The local backend talks this way to its zygote and to each container's first process.
"""

from __future__ import annotations

import array
import json
import socket
from typing import Any

MAX_MESSAGE = 1 << 20
MAX_FDS = 8


def send(sock: socket.socket, message: dict[str, Any], fds: list[int] = ()) -> None:  # type: ignore[assignment]
    """Send ``message`` with ``fds`` attached (the receiver gets its own copies)."""
    ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
    sock.sendmsg([json.dumps(message).encode()], ancillary)


def receive(sock: socket.socket) -> tuple[dict[str, Any], list[int]] | None:
    """One message and the descriptors that came with it; None when the other end closed."""
    fds = array.array("i")
    data, ancdata, _, _ = sock.recvmsg(MAX_MESSAGE, socket.CMSG_LEN(MAX_FDS * fds.itemsize))
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    if not data:
        for fd in fds:
            socket.close(fd)
        return None
    return json.loads(data), list(fds)
