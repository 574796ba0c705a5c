"""BFD session state pushed by bfdd through its control socket, the moment bfdd decides it.

bfdd (started with ``--bfdctl PATH``) accepts clients on a unix socket. A client that
sends a NOTIFY request with the peer-state flag gets the state of every session,
then one message per state change. Each message is a header (payload length in
network order, request id, type, version) and a JSON payload such as
``{"op": "status", "peer-address": "172.16.1.0", "local-interface": "up1", "state": "down", ...}``.
"""

from __future__ import annotations

import json
import logging
import socket
import struct
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)
HEADER = struct.Struct("!IHBB")  # payload length, id, type, version
BMT_NOTIFY = 4
VERSION = 1
NOTIFY_PEER_STATE = struct.Struct("=Q").pack(1)  # a host-order flag word
REQUEST_ID = 1


@dataclass(frozen=True)
class BfdEvent:
    """A session's new state: ``up``, ``down``, ``init`` or ``adm-down``."""

    peer: str
    interface: str | None
    state: str


class BfdWatch:
    """A subscription to one bfdd's session states; ``read`` returns what arrived since the last call."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock: socket.socket | None = None
        self._pending = b""

    def connect(self) -> bool:
        """Subscribe (again); False while bfdd is not listening."""
        self.close()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(str(self.path))
            sock.sendall(HEADER.pack(len(NOTIFY_PEER_STATE), REQUEST_ID, BMT_NOTIFY, VERSION) + NOTIFY_PEER_STATE)
        except OSError:
            sock.close()
            return False
        sock.setblocking(False)
        self.sock = sock
        return True

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
        self.sock, self._pending = None, b""

    def read(self) -> list[BfdEvent]:
        """Session states received so far (the connection is closed if bfdd went away)."""
        if self.sock is None:
            return []
        while True:
            try:
                data = self.sock.recv(65536)
            except BlockingIOError:
                break
            except OSError:
                data = b""
            if not data:
                self.close()
                return []
            self._pending += data
        events = []
        while len(self._pending) >= HEADER.size:
            length, _id, kind, _version = HEADER.unpack_from(self._pending)
            if len(self._pending) < HEADER.size + length:
                break
            end = HEADER.size + length
            payload, self._pending = self._pending[HEADER.size:end], self._pending[end:]
            if kind == BMT_NOTIFY:
                event = _event(payload)
                if event is not None:
                    events.append(event)
        return events


def _event(payload: bytes) -> BfdEvent | None:
    try:
        msg = json.loads(payload)
    except ValueError:
        log.warning("bfdd sent a notification that is not JSON: %r", payload[:200])
        return None
    if not isinstance(msg, dict) or msg.get("op") != "status" or "state" not in msg:
        return None
    return BfdEvent(str(msg.get("peer-address")), msg.get("local-interface"), str(msg["state"]))
