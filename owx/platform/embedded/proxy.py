"""HTTP client for a runtime's action proxy (``POST /init``, ``POST /run``)."""

from __future__ import annotations

import errno
import http.client
import json
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from owx.runtimes.http_wire import SECRET_HEADER

# Refused: nothing listens yet; unreachable: a fresh container's address is not resolved on the bridge yet.
RETRYABLE_CONNECT = frozenset({errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH})


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


class _UnixConnection(http.client.HTTPConnection):
    """HTTP over a Unix stream socket (the local backend's runtimes listen on one)."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


class ProxyClient:
    """Keep-alive connections to one proxy; safe for concurrent activations (one connection each).

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
        self._headers = {"Content-Type": "application/json", **({SECRET_HEADER: secret} if secret else {})}
        self._retry_until = time.monotonic() + connect_retry_s
        self._alive = alive
        self._idle: list[http.client.HTTPConnection] = []
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
        data = json.dumps(body).encode()
        deadline = time.monotonic() + timeout
        conn = self._reuse()
        if conn is not None:
            try:
                return self._exchange(conn, path, data, deadline, timeout)
            except ProxyUnreachable:
                pass  # the proxy may have closed an idle keep-alive connection: once more on a new one
        return self._exchange(self._connect(deadline), path, data, deadline, timeout)

    def _exchange(
        self, conn: http.client.HTTPConnection, path: str, data: bytes, deadline: float, timeout: float
    ) -> ProxyResponse:
        try:
            conn.timeout = max(0.001, deadline - time.monotonic())
            if conn.sock is not None:
                conn.sock.settimeout(conn.timeout)
            conn.request("POST", path, body=data, headers=self._headers)
            response = conn.getresponse()
            raw = response.read()
        except (socket.timeout, TimeoutError) as exc:
            conn.close()
            raise ProxyTimeout(f"{path} did not answer within {timeout:.3f}s") from exc
        except (ConnectionError, http.client.HTTPException, OSError) as exc:
            conn.close()
            raise ProxyUnreachable(f"{path}: {exc}") from exc
        if response.will_close:
            conn.close()
        else:
            with self._lock:
                self._idle.append(conn)
        return _parse(response.status, raw)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def _reuse(self) -> http.client.HTTPConnection | None:
        with self._lock:
            return self._idle.pop() if self._idle else None

    def _connect(self, deadline: float) -> http.client.HTTPConnection:
        while True:
            timeout = max(0.001, deadline - time.monotonic())
            conn: http.client.HTTPConnection = (
                _UnixConnection(self.unix_path, timeout) if self.unix_path is not None
                else http.client.HTTPConnection(self.host, self.port, timeout=timeout))
            try:
                conn.connect()
                if self.unix_path is None:
                    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                return conn
            except OSError as exc:
                conn.close()
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
