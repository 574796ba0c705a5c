"""Serve the gateway: HTTP and HTTPS listeners and the admin socket, on the gateway's event loop
(plain HTTP sent to the HTTPS port gets a 400: :mod:`owx.gateway.http.https_listener`).

Connections are owx's own HTTP/1.1 server (:mod:`owx.gateway.http`). An invoke is answered on the
event loop itself (:mod:`owx.gateway.api.invoke`); every other request is a Flask view on one of
``http_threads`` threads (:mod:`owx.gateway.http.wsgi`), whose waits never hold them, taken by the
callers' namespaces in turn, one namespace's API and web requests holding at most
``tenant_thread_share`` of them (a caller whose key this gateway has not seen yet waits in its
address's turn, the share of all such callers together; see :mod:`owx.gateway.turns`).

Stopping (``stop()``, SIGTERM or SIGINT): the listeners close and idle connections with them,
requests in flight get up to ``LISTENER_GRACE_S``; then the gateway closes: running activations get
the configured grace, then what is unfinished is recorded as failed, the platform and stores close.
About 10 s at most.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import threading
from urllib.parse import urlsplit

from owx.gateway.admin.socket import SOCKET_NAME, admin_app, bind_admin_socket
from owx.gateway.admin.users import Users
from owx.gateway.api.invoke import InvokeEndpoint
from owx.gateway.app import MAX_ENTITY_BYTES, create_app
from owx.gateway.http.forwarded import TrustedProxies
from owx.gateway.http.https_listener import HttpsListener, plain_to_https
from owx.gateway.http.messages import Request, Response
from owx.gateway.http.protocol import Connections, Handler, HttpConnection, Limits
from owx.gateway.http.wsgi import WsgiBridge
from owx.gateway.service import Gateway
from owx.gateway.tls import TlsFiles
from owx.gateway.turns import request_turn, share_of
from owx.gateway.write_budget import refuse_unpaid

log = logging.getLogger(__name__)
LISTENER_GRACE_S = 2.0
START_TIMEOUT_S = 30.0
BACKLOG = 2048
LIMITS = Limits(max_body_bytes=MAX_ENTITY_BYTES)  # what every connection of the gateway may hold


class GatewayServer:
    """The gateway's listeners; ``serve_forever`` (or ``start_background``) until ``stop``."""

    def __init__(self, gateway: Gateway, host: str, port: int, tls: TlsFiles | None = None,
                 tls_port: int = 0) -> None:
        self.gateway = gateway
        http = gateway.settings.gateway
        by_address = http.unknown_turn_by_address
        self.flask = WsgiBridge(create_app(gateway).wsgi_app, http.http_threads,
                                tenant_of=lambda request: request_turn(gateway.auth, request, by_address),
                                tenant_threads=max(1, round(http.http_threads * http.tenant_thread_share)),
                                share_of=share_of)
        admin = admin_app(Users(gateway.entities, gateway.auth.signer), gateway.auth, gateway.accounts)
        self.admin = WsgiBridge(admin.wsgi_app, 2, "owx-admin")
        self.invoke = InvokeEndpoint(gateway, self.flask.pool)
        self.host = host
        self._tls = tls
        self._http = _bind(host, port)
        self._https = _bind(host, tls_port) if tls is not None else None
        self._admin_socket = bind_admin_socket(gateway.settings.data_dir)
        self._servers: list[asyncio.base_events.Server | HttpsListener] = []
        self._connections = Connections(LIMITS, TrustedProxies(http.trusted_proxies) if http.trusted_proxies else None,
                                        refuse_unpaid(gateway.auth, gateway.entity_writes))
        self._stopped = threading.Event()
        self._closed = False
        if gateway.invoker.api_host is None:
            gateway.invoker.api_host = self.url
        api = urlsplit(gateway.invoker.api_host)  # the actions' __OW_API_HOST: this server or a proxy before it
        for open_port in {self.port, self.tls_port, api.port or (443 if api.scheme == "https" else 80)} - {None}:
            gateway.platform.open_host_port(open_port)

    @property
    def port(self) -> int:
        return self._http.getsockname()[1]

    @property
    def tls_port(self) -> int | None:
        return self._https.getsockname()[1] if self._https is not None else None

    @property
    def url(self) -> str:
        return f"http://{_url_host(self.host)}:{self.port}"

    @property
    def tls_url(self) -> str | None:
        return None if self.tls_port is None else f"https://{_url_host(self.host)}:{self.tls_port}"

    def start_background(self) -> None:
        """Start the listeners; returns once every one accepts connections."""
        self.gateway.loop.submit(self._listen()).result(START_TIMEOUT_S)

    def serve_forever(self) -> None:
        """Serve until ``stop`` or SIGTERM/SIGINT (this must be the main thread); then close the gateway."""
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._on_signal)
        try:
            self.start_background()
            while not self._stopped.wait(1.0):
                pass
        finally:
            self.stop()

    def stop(self) -> None:
        """Stop the listeners, then close the gateway (bounded, see the module docstring)."""
        self._stopped.set()
        if self._closed:
            return
        self._closed = True
        try:
            self.gateway.loop.submit(self._drain()).result(LISTENER_GRACE_S + 5.0)
        except Exception:  # noqa: BLE001 - a stuck drain must not keep the gateway from closing
            log.exception("stopping the listeners failed")
        for bridge in (self.flask, self.admin):
            bridge.close()
        (self.gateway.settings.data_dir / SOCKET_NAME).unlink(missing_ok=True)
        self.gateway.close()

    def _on_signal(self, signum: int, _frame: object) -> None:
        log.info("signal %s: stopping", signal.Signals(signum).name)
        self._stopped.set()

    async def _listen(self) -> None:
        loop = asyncio.get_running_loop()
        limits = LIMITS
        api, admin = self._handler(), self.admin
        self._servers.append(await loop.create_server(
            lambda: HttpConnection(api, limits, "http", self._connections), sock=self._http, backlog=BACKLOG))
        if self._https is not None and self._tls is not None:
            plain = plain_to_https(self.tls_url or "")
            self._servers.append(HttpsListener(
                self._https, self._tls.server_context(),
                lambda: HttpConnection(api, limits, "https", self._connections),
                lambda: HttpConnection(plain, limits, "http", self._connections), BACKLOG,
                max_pending=limits.max_connections // 4))
        self._servers.append(await loop.create_unix_server(
            lambda: HttpConnection(admin, limits, "http", self._connections), sock=self._admin_socket))

    def _handler(self) -> Handler:
        invoke, flask = self.invoke, self.flask

        async def handle(request: Request) -> Response | None:
            return await (invoke.match(request) or flask)(request)

        return handle

    async def _drain(self) -> None:
        for server in self._servers:
            server.close()
        for connection in list(self._connections.open):
            connection.shutdown()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + LISTENER_GRACE_S
        while self._connections.open and loop.time() < deadline:
            await asyncio.sleep(0.02)
        for connection in list(self._connections.open):
            connection.abort()


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    return sock


def _url_host(host: str) -> str:
    if host in ("0.0.0.0", "::"):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host
