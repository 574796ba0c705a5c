"""HTTP client for a runtime's action proxy (``POST /init``, ``POST /run``): from threads, and
from the platform's event loop for warm activations."""

from __future__ import annotations

import asyncio
import errno
import json
import socket
import time
from dataclasses import dataclass
from typing import Any, Callable

from owx.common.async_http import AnswerReader, AsyncKeepAlivePool
from owx.common.keepalive import AnswerTimeout, ExchangeFailed, KeepAlivePool
from owx.common import jsonvalues
from owx.platform.types import UnreadAnswer
from owx.runtimes.http_wire import SECRET_HEADER, BodyTooLong, request_bytes

# Refused: nothing listens yet; unreachable: a fresh container's address is not resolved on the bridge yet.
RETRYABLE_CONNECT = frozenset({errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH})
# A bound on what a runtime (the tenant's process) can make the gateway read for one answer (past it
# the exchange fails); far above any result limit: of a longer answer a run keeps only the limit's
# worth (`UnreadAnswer`), from which the record builder makes OpenWhisk's truncated response.
MAX_ANSWER_BYTES = 256 * 1024 * 1024
# What a runtime may answer to /init: OpenWhisk's {"ok": true} or an error (a traceback); a longer
# answer fails the initialization unparsed (parsed, a JSON answer takes some 24 times its size)
INIT_ANSWER_BYTES = 64 * 1024


class ProxyUnreachable(ConnectionError):
    """The proxy closed or refused the connection: the container is probably dead."""


class ProxyAnswerTooLong(ProxyUnreachable):
    """The proxy's answer was longer than the request allows (the connection is closed)."""


class ProxyTimeout(TimeoutError):
    """The proxy did not answer within the time given."""


@dataclass(frozen=True, slots=True)
class ProxyResponse:
    status: int
    body: Any  # parsed JSON, or the raw text when the proxy did not answer JSON
    is_json: bool
    checked: bool = False  # the body is JSON owx stores as it is (`owx.gateway.jsonvalues`): no walk needed

    @property
    def ok(self) -> bool:
        return self.status == 200


class ProxyClient:
    """Keep-alive connections to one proxy (:mod:`owx.common.keepalive`); safe for concurrent
    activations (one connection each).

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
        self._pool = KeepAlivePool(self._connect)
        self._loop_pool: AsyncKeepAlivePool | None = None  # made on the event loop that first uses it
        self._loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def unix(cls, path: str) -> "ProxyClient":
        """A client of the proxy listening on the Unix socket at ``path``."""
        return cls("localhost", 0, unix_path=path)

    def init(self, value: dict[str, Any], timeout: float) -> ProxyResponse:
        """``POST /init``; an answer over ``INIT_ANSWER_BYTES`` is a `ProxyAnswerTooLong`."""
        return self.post("/init", {"value": value}, timeout, max_answer=INIT_ANSWER_BYTES)

    def run(self, payload: dict[str, Any], timeout: float, parsed_bytes: int | None = None) -> ProxyResponse:
        return self.post("/run", payload, timeout, parsed_bytes)

    def post(self, path: str, body: dict[str, Any], timeout: float, parsed_bytes: int | None = None,
             max_answer: int = MAX_ANSWER_BYTES) -> ProxyResponse:
        """``POST path``; a reused connection the proxy closed is retried once on a new one; an answer
        longer than ``parsed_bytes`` is an `UnreadAnswer`, one longer than ``max_answer`` a
        `ProxyAnswerTooLong`."""
        data = request_bytes(path, jsonvalues.dumps(body), self._headers)
        try:
            answer = self._pool.request(data, timeout, max_answer, retry_on_new=True)
        except AnswerTimeout as exc:
            raise ProxyTimeout(f"{path} did not answer within {timeout:.3f}s") from exc
        except ExchangeFailed as exc:
            if isinstance(exc.__cause__, BodyTooLong):
                raise ProxyAnswerTooLong(f"its {path} answer was over {max_answer} bytes") from exc
            raise ProxyUnreachable(f"{path}: {exc}") from exc
        return _parse(answer.status, answer.body, answer.size, parsed_bytes)

    async def run_async(self, body: bytes, timeout: float, parsed_bytes: int | None = None) -> ProxyResponse:
        """``POST /run`` of the encoded ``body`` from the event loop (the same errors as :meth:`post`); an
        answer longer than ``parsed_bytes`` is an `UnreadAnswer`."""
        if self._loop_pool is None:
            self._loop = asyncio.get_running_loop()
            self._loop_pool = AsyncKeepAlivePool(self._connect_async)
        data = request_bytes("/run", body, self._headers)
        try:
            answer = await self._loop_pool.request(data, timeout, MAX_ANSWER_BYTES, retry_on_new=True,
                                                   keep_body=parsed_bytes)
        except AnswerTimeout as exc:
            raise ProxyTimeout(f"/run did not answer within {timeout:.3f}s") from exc
        except ExchangeFailed as exc:
            raise ProxyUnreachable(f"/run: {exc}") from exc
        return _parse(answer.status, answer.body, answer.size, parsed_bytes)

    async def _connect_async(self) -> AnswerReader:
        loop = asyncio.get_running_loop()
        try:
            if self.unix_path is not None:
                _, reader = await loop.create_unix_connection(AnswerReader, self.unix_path)
            else:
                _, reader = await loop.create_connection(AnswerReader, self.host, self.port)
        except OSError as exc:
            raise ProxyUnreachable(f"connect {self.where}: {exc}") from exc
        return reader

    def close(self) -> None:
        self._pool.close()
        if self._loop_pool is not None and self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._loop_pool.close)

    def _connect(self, timeout: float) -> socket.socket:
        deadline = time.monotonic() + timeout
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
                return sock
            except OSError as exc:
                sock.close()
                if exc.errno not in RETRYABLE_CONNECT or isinstance(exc, (socket.timeout, TimeoutError)):
                    raise _connect_error(self.where, exc) from exc
                soon = time.monotonic() + 0.005
                if soon > self._retry_until or not self._alive():
                    raise ProxyUnreachable(f"connect {self.where}: {exc}") from exc
                if soon > deadline:  # a runtime that does not listen within the request's time
                    raise ProxyTimeout(f"connect {self.where}: nothing listened in time") from exc
                time.sleep(0.005)


def _connect_error(where: str, exc: OSError) -> Exception:
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return ProxyTimeout(f"connect {where} timed out")
    return ProxyUnreachable(f"connect {where}: {exc}")


def _parse(status: int, raw: bytes, size: int, parsed_bytes: int | None) -> ProxyResponse:
    """The answer's JSON: checked when owx stores it as it is, else as Python's ``json`` reads it (NaN,
    lone surrogates: the record builder then says why the result is invalid), else its text; an
    `UnreadAnswer` when it was longer (``size``) than ``parsed_bytes`` (``raw`` may hold only its start)."""
    if parsed_bytes is not None and size > parsed_bytes:
        return ProxyResponse(status, UnreadAnswer(size, raw[:parsed_bytes]), True, checked=True)
    try:
        return ProxyResponse(status, jsonvalues.loads(raw), True, checked=True)
    except jsonvalues.InvalidJson:
        pass
    try:
        return ProxyResponse(status, json.loads(raw), True)
    except (ValueError, RecursionError):
        return ProxyResponse(status, raw.decode("utf-8", errors="replace"), False)
