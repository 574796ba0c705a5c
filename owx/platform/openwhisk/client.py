"""A client of an upstream OpenWhisk's public REST API: only what the ``openwhisk`` platform needs.

Calls go over a pool of keep-alive connections (:mod:`owx.common.keepalive`: ``requests`` re-read
every proxy variable of the environment on each call, and urllib3 under it cost 0.45 ms of CPU
per call against this pool's 0.10 ms). Certificates are checked against the system's CA store
(or ``SSL_CERT_FILE``) unless ``insecure``. Failures that are not the action's become
:class:`PlatformError` with the status owx answers its own caller (OpenWhisk's codes):

========================================  ======  =========================================
upstream                                  owx     message
========================================  ======  =========================================
unreachable (connect, TLS, API timeout)   503     :class:`UpstreamRefused`, but a bad certificate
429                                       429     :class:`UpstreamRefused`: the upstream's message
503                                       503     :class:`UpstreamRefused`: the upstream's message
connection broke after the request went   502     :class:`UpstreamLost`: the outcome is unknown
401 / 403                                 502     names the upstream and ``--upstream-auth``
any other 5xx without a record            502     the upstream's error
========================================  ======  =========================================

The platform sends a refused request again for ``upstream.retry_s``: nothing ran.
"""

from __future__ import annotations

import asyncio
import base64
import socket
import ssl
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode, urlsplit, urlunsplit

from owx.common import jsonvalues
from owx.common.async_http import AsyncKeepAlivePool, HeaderAnswerReader
from owx.common.keepalive import AnswerTimeout, ExchangeFailed, KeepAlivePool
from owx.platform.interface import PlatformError
from owx.platform.settings import UpstreamSettings
from owx.runtimes.http_wire import request_bytes

POOL_SIZE = 128  # idle keep-alive connections kept to the upstream (one per activation in flight)
API = "/api/v1/namespaces"
MAX_ANSWER_BYTES = 64 * 1024 * 1024  # far above OpenWhisk's own bounds (1 MB results, 10 MB logs)
ACTIVATION_HEADER = "x-openwhisk-activation-id"
IDEMPOTENT = frozenset({"GET", "PUT", "DELETE"})  # retried once when a reused connection turns out closed


class _ActivationReader(HeaderAnswerReader):
    """Keeps the activation id of an answer: alone it names an array result's activation."""

    KEPT = frozenset({ACTIVATION_HEADER.encode()})


class UpstreamRefused(PlatformError):
    """The upstream ran nothing: it throttled owx (429), could not take the request (503), or was not
    reached. Sending the same request again is safe."""


class UpstreamLost(PlatformError):
    """The request reached the upstream, then the connection broke or the answer never came."""

    def __init__(self, message: str) -> None:
        super().__init__(502, message)


@dataclass(frozen=True, slots=True)
class Answer:
    """One upstream answer: status and parsed body (None when it was not JSON)."""

    status: int
    body: Any
    activation_id: str | None


class UpstreamClient:
    """Typed calls to the upstream; thread-safe, but for :meth:`invoke_async` (one event loop's)."""

    def __init__(self, settings: UpstreamSettings) -> None:
        assert settings.url is not None and settings.auth is not None
        self.settings = settings
        url = urlsplit(str(settings.url).rstrip("/"))
        host = url.netloc.rpartition("@")[2]  # credentials in the URL are never sent, nor named in errors
        self.base = urlunsplit(url._replace(netloc=host))
        self.namespace = quote(settings.namespace, safe="")
        self._host = url.hostname or "localhost"
        self._port = url.port or (443 if url.scheme == "https" else 80)
        self._prefix = url.path
        self._tls = _tls_context(settings.insecure) if url.scheme == "https" else None
        self._uuid = settings.auth.partition(":")[0]  # names the key in errors; its secret half never
        credentials = base64.b64encode(settings.auth.encode()).decode()
        self._headers = f"Authorization: Basic {credentials}\r\n"
        if not settings.keep_alive:
            self._headers += "Connection: close\r\n"
        self._host_header = host
        self._pool = KeepAlivePool(self._connect, POOL_SIZE, reuse=settings.keep_alive)
        self._loop_pool: AsyncKeepAlivePool | None = None  # made on the event loop that first uses it
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- entities --------------------------------------------------------------------------
    def put_package(self, package: str) -> None:
        self._put(f"/packages/{quote(package)}", {"publish": False, "annotations": [{"key": "owx", "value": True}]},
                  "create package")

    def put_action(self, path: str, body: dict[str, Any]) -> None:
        self._put(f"/actions/{quote(path)}", body, "deploy action")

    def _put(self, path: str, body: dict[str, Any], what: str) -> None:
        """Create or overwrite one of owx's own entities. A 409 means a concurrent put of the same name
        won (a tenant's first deploys at once; an action's name carries its revision's hash): done."""
        answer = self.call("PUT", path, {"overwrite": "true"}, body)
        if answer.status != 409:
            self._expect(answer, what)

    def delete_action(self, path: str) -> None:
        answer = self.call("DELETE", f"/actions/{quote(path)}")
        if answer.status != 404:
            self._expect(answer, "delete action")

    def list_actions(self, package: str) -> list[str]:
        """Names of the actions in ``package`` (none if there is no such package)."""
        names: list[str] = []
        while True:
            answer = self.call("GET", f"/actions/{quote(package)}/", {"limit": "200", "skip": str(len(names))})
            if answer.status == 404:
                return names
            page = [entry["name"] for entry in self._expect(answer, "list actions").body or []]
            names += page
            if len(page) < 200:
                return names

    def info(self) -> dict[str, Any]:
        answer = self._send("GET", f"{self._prefix}/api/v1", None, None, self.settings.timeout_s)
        return self._expect(answer, "read the API's limits").body or {}

    # -- activations ---------------------------------------------------------------------------
    def invoke(self, path: str, body: dict[str, Any], blocking: bool, wait_s: float) -> Answer:
        """``POST .../actions/PATH``; with ``blocking`` the answer is the record (200/502), or 202
        when the upstream stopped waiting. Other statuses are returned as they are."""
        params = {"blocking": "true"} if blocking else None
        return self.call("POST", f"/actions/{quote(path)}", params, body, timeout=wait_s)

    async def invoke_async(self, path: str, body: dict[str, Any], wait_s: float) -> Answer:
        """:meth:`invoke` blocking, from the event loop that made the first such call, without a thread:
        the same answers and errors."""
        return await self._send_async("POST", f"/actions/{quote(path)}", {"blocking": "true"}, body, wait_s)

    def activation(self, activation_id: str) -> Answer:
        return self.call("GET", f"/activations/{quote(activation_id)}")

    async def activation_async(self, activation_id: str) -> Answer:
        """:meth:`activation` from the event loop, as :meth:`invoke_async`."""
        return await self._send_async("GET", f"/activations/{quote(activation_id)}", None, None,
                                      self.settings.timeout_s)

    # -- transport -------------------------------------------------------------------------------
    def call(self, method: str, route: str, params: dict[str, str] | None = None, body: Any = None,
             timeout: float | None = None) -> Answer:
        return self._send(method, self._path(route), params, body, timeout or self.settings.timeout_s)

    def _path(self, route: str) -> str:
        return f"{self._prefix}{API}/{self.namespace}{route}"

    def _send(self, method: str, path: str, params: dict[str, str] | None, body: Any, timeout: float) -> Answer:
        data = self._request(method, path, params, body)
        try:
            response = self._pool.request(data, timeout, MAX_ANSWER_BYTES, retry_on_new=method in IDEMPOTENT)
        except (AnswerTimeout, ExchangeFailed) as exc:
            raise self._lost(exc) from exc
        except OSError as exc:
            raise self._unreachable(exc) from exc
        return self._answer(response.status, response.body, response.headers.get(ACTIVATION_HEADER))

    async def _send_async(self, method: str, route: str, params: dict[str, str] | None, body: Any,
                          timeout: float) -> Answer:
        if self._loop_pool is None:
            self._loop = asyncio.get_running_loop()
            # no busy poll: an upstream answers in milliseconds, and polling for it only takes a core
            # from the loop's other work (and, on a shared machine, from the upstream)
            self._loop_pool = AsyncKeepAlivePool(self._connect_async, POOL_SIZE, answers_soon=False)
        data = self._request(method, self._path(route), params, body)
        try:
            response = await self._loop_pool.request(data, timeout, MAX_ANSWER_BYTES,
                                                     retry_on_new=method in IDEMPOTENT)
        except (AnswerTimeout, ExchangeFailed) as exc:
            raise self._lost(exc) from exc
        except OSError as exc:
            raise self._unreachable(exc) from exc
        return self._answer(response.status, response.body, response.headers.get(ACTIVATION_HEADER))

    def _request(self, method: str, path: str, params: dict[str, str] | None, body: Any) -> bytes:
        if params:
            path = f"{path}?{urlencode(params)}"
        payload = b"" if body is None else jsonvalues.dumps(body)
        return request_bytes(path, payload, self._headers, method, self._host_header)

    def _lost(self, exc: Exception) -> UpstreamLost:
        return UpstreamLost(f"The connection to the upstream OpenWhisk at {self.base} broke: {_reason(exc)}")

    def _unreachable(self, exc: Exception) -> PlatformError:
        """No connection (refused, unroutable, timed out, TLS refused): nothing was sent. A certificate
        that fails verification fails again: only the rest is an :class:`UpstreamRefused`."""
        message = f"The upstream OpenWhisk at {self.base} is unreachable: {_reason(exc)}"
        if isinstance(exc, ssl.SSLCertVerificationError):
            return PlatformError(503, message)
        return UpstreamRefused(503, message)

    def _answer(self, status: int, body: bytes, activation_id: str | None) -> Answer:
        try:
            parsed = jsonvalues.loads(body)
        except jsonvalues.InvalidJson:
            parsed = None
        answer = Answer(status, parsed, activation_id)
        if answer.status in (401, 403):
            raise PlatformError(502, f"The upstream OpenWhisk at {self.base} refused owx's key {self._uuid} "
                                     f"({answer.status}): check --upstream-auth (OWX_UPSTREAM__AUTH) and "
                                     "--upstream-account (OWX_UPSTREAM__ACCOUNTS).")
        if answer.status == 429:
            raise UpstreamRefused(429, _error_text(answer) or "Too many requests (upstream OpenWhisk).")
        if answer.status == 503:
            raise UpstreamRefused(503, f"The upstream OpenWhisk at {self.base} is unavailable: "
                                       f"{_error_text(answer) or 'no error message'}")
        return answer

    def _connect(self, timeout: float) -> socket.socket:
        sock = socket.create_connection((self._host, self._port), min(timeout, self.settings.timeout_s))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._tls is None:
            return sock
        try:
            return self._tls.wrap_socket(sock, server_hostname=self._host)
        except BaseException:
            sock.close()
            raise

    async def _connect_async(self) -> HeaderAnswerReader:
        loop = asyncio.get_running_loop()
        _, reader = await asyncio.wait_for(  # uvloop sets TCP_NODELAY itself
            loop.create_connection(_ActivationReader, self._host, self._port, ssl=self._tls,
                                   server_hostname=self._host if self._tls is not None else None),
            self.settings.timeout_s)
        return reader

    def _expect(self, answer: Answer, what: str) -> Answer:
        if 200 <= answer.status < 300:
            return answer
        raise PlatformError(502, f"The upstream OpenWhisk at {self.base} could not {what} "
                                 f"({answer.status}): {_error_text(answer) or 'no error message'}")

    def close(self) -> None:
        self._pool.close()
        if self._loop_pool is not None and self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._loop_pool.close)


def _tls_context(insecure: bool) -> ssl.SSLContext:
    """The system's CA store (``SSL_CERT_FILE`` too); ``insecure``: any certificate, any name."""
    context = ssl.create_default_context()
    if insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def _error_text(answer: Answer) -> str:
    return str(answer.body.get("error", "")) if isinstance(answer.body, dict) else ""


def _reason(exc: Exception) -> str:
    text = str(exc)
    return text if len(text) < 300 else text[:300] + "..."


def backoff(poll_s: float, started: float) -> float:
    """Seconds until the next poll of a running activation: from ``poll_s``, growing to 1 s."""
    return min(1.0, poll_s * (1 + (time.monotonic() - started) * 2))
