"""HTTP client for a runtime's action proxy (``POST /init``, ``POST /run``)."""

from __future__ import annotations

import errno
import json
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from owx.runtimes.http_wire import SECRET_HEADER, MalformedRequest, read_response, request_bytes

# Refused: nothing listens yet; unreachable: a fresh container's address is not resolved on the bridge yet.
RETRYABLE_CONNECT = frozenset({errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH})
# A bound on what a runtime (the tenant's process) can make the gateway hold for one answer; far
# above any result limit, which the record builder enforces with OpenWhisk's message.
MAX_ANSWER_BYTES = 256 * 1024 * 1024


class ProxyUnreachable(ConnectionError):
    """The proxy closed or refused the connection: the container is probably dead."""


class ProxyTimeout(TimeoutError):
    """The proxy did not answer within the time given."""


@dataclass(frozen=True, slots=True)
class ProxyResponse:
    status: int
    body: Any  # parsed JSON, or the raw text when the proxy did not answer JSON
    is_json: bool

    @property
    def ok(self) -> bool:
        return self.status == 200


class _Connection:
    """One keep-alive connection to a proxy: the socket and a buffered reader of its answers."""

    __slots__ = ("reader", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.reader = sock.makefile("rb")

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


class ProxyClient:
    """Keep-alive connections to one proxy; safe for concurrent activations (one connection each).

    It speaks the proxy's own wire format (:mod:`owx.runtimes.http_wire`): one ``sendall`` of the
    request, then the answer's status line, headers and body. ``http.client`` cost about 0.5 ms
    of CPU per activation here, mostly parsing headers with the ``email`` package.

    ``connect_retry_s`` > 0 retries refused or unroutable connections for that long
    while ``alive()`` holds: a Docker container's proxy only listens some time after start.  The local backend hands
    the runtime an already-listening socket, so it never needs to retry. ``secret`` goes with every
    request (header ``SECRET_HEADER``): a Docker container's runtime answers nothing without it.
    """

    def __init__(
        self, host: str, port: int, connect_retry_s: float = 0.0, alive: Callable[[], bool] = lambda: True,
        secret: str | None = None, unix_path: str | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.unix_path = unix_path
        self.where = unix_path or f"{host}:{port}"
        self._headers = f"{SECRET_HEADER}: {secret}\r\n" if secret else ""
        self._retry_until = time.monotonic() + connect_retry_s
        self._alive = alive
        self._idle: list[_Connection] = []
        self._lock = threading.Lock()

    @classmethod
    def unix(cls, path: str) -> "ProxyClient":
        """A client of the proxy listening on the Unix socket at ``path``."""
        return cls("localhost", 0, unix_path=path)

    def init(self, value: dict[str, Any], timeout: float) -> ProxyResponse:
        return self.post("/init", {"value": value}, timeout)

    def run(self, payload: dict[str, Any], timeout: float) -> ProxyResponse:
        return self.post("/run", payload, timeout)

    def post(self, path: str, body: dict[str, Any], timeout: float) -> ProxyResponse:
        data = request_bytes(path, json.dumps(body).encode(), self._headers)
        deadline = time.monotonic() + timeout
        conn = self._reuse()
        if conn is not None:
            try:
                return self._exchange(conn, path, data, deadline, timeout)
            except ProxyUnreachable:
                pass  # the proxy may have closed an idle keep-alive connection: once more on a new one
        return self._exchange(self._connect(deadline), path, data, deadline, timeout)

    def _exchange(self, conn: _Connection, path: str, data: bytes, deadline: float, timeout: float) -> ProxyResponse:
        try:
            conn.sock.settimeout(max(0.001, deadline - time.monotonic()))
            conn.sock.sendall(data)
            status, raw, keep_alive = read_response(conn.reader, MAX_ANSWER_BYTES)
        except (socket.timeout, TimeoutError) as exc:
            conn.close()
            raise ProxyTimeout(f"{path} did not answer within {timeout:.3f}s") from exc
        except (OSError, MalformedRequest) as exc:  # closed, reset, or bytes that are not an answer
            conn.close()
            raise ProxyUnreachable(f"{path}: {exc}") from exc
        if keep_alive:
            with self._lock:
                self._idle.append(conn)
        else:
            conn.close()
        return _parse(status, raw)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def _reuse(self) -> _Connection | None:
        with self._lock:
            return self._idle.pop() if self._idle else None

    def _connect(self, deadline: float) -> _Connection:
        while True:
            sock = (socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) if self.unix_path is not None
                    else socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            try:
                if self.unix_path is not None:
                    sock.connect(self.unix_path)
                else:
                    sock.connect((self.host, self.port))
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                return _Connection(sock)
            except OSError as exc:
                sock.close()
                if exc.errno not in RETRYABLE_CONNECT or isinstance(exc, (socket.timeout, TimeoutError)):
                    raise _connect_error(self.where, exc) from exc
                if time.monotonic() + 0.005 > min(deadline, self._retry_until) or not self._alive():
                    raise ProxyUnreachable(f"connect {self.where}: {exc}") from exc
                time.sleep(0.005)


def _connect_error(where: str, exc: OSError) -> Exception:
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return ProxyTimeout(f"connect {where} timed out")
    return ProxyUnreachable(f"connect {where}: {exc}")


def _parse(status: int, raw: bytes) -> ProxyResponse:
    try:
        return ProxyResponse(status, json.loads(raw), True)
    except ValueError:
        return ProxyResponse(status, raw.decode("utf-8", errors="replace"), False)
