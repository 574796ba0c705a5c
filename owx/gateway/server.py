"""Serve the gateway: HTTP and HTTPS listeners (uvicorn on one uvloop event loop) and the admin socket.

The Flask app runs on a bounded thread pool behind an ASGI bridge (:mod:`owx.gateway.asgi`), so
waits for activations never hold a thread; an invoke that needs no I/O runs its view on the event
loop itself (:mod:`owx.gateway.inline`). Why uvicorn: measured here on one 2-core VM in one
run (wrk, 4 connections), a trivial ASGI handler on uvicorn (uvloop + httptools) answered 3,832
requests/s against 958/s for a Flask hello on waitress, it runs inside this process's own event
loop (one process owns the platform) on sockets bound beforehand (port 0 works), and it is
widely deployed. Granian was as fast but its embedded server is marked experimental and binds
its own sockets. The 3,832/s is the server alone: with the Flask app behind the bridge, ``owx bench
invoke``'s anchor measured 1,297 requests/s (waitress 1,367/s, granian 2,082/s, same run), so the
bridge and Flask's request cycle, not uvicorn, set the ceiling.

Stopping (``stop()``, SIGTERM or SIGINT): the listeners close (requests in flight get up to
``LISTENER_GRACE_S``), then the gateway closes: running activations get the configured grace,
then what is unfinished is recorded as failed, the platform and stores close. About 10 s at most.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import threading
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import uvicorn
import uvloop

from owx.gateway.admin.socket import SOCKET_NAME, admin_app, bind_admin_socket
from owx.gateway.admin.users import Users
from owx.gateway.api import actions
from owx.gateway.app import MAX_ENTITY_BYTES, create_app
from owx.gateway.asgi import FlaskOnAsgi
from owx.gateway.service import Gateway
from owx.gateway.tls import TlsFiles

log = logging.getLogger(__name__)
LISTENER_GRACE_S = 2.0
START_TIMEOUT_S = 30.0
# Idle keep-alive connections stay open this long (nginx's default, which OpenWhisk's edge uses).
# uvicorn's own 5 s closes a client's pooled connection just as a client polling every 5 s reuses
# it, and the client sees a reset.
KEEP_ALIVE_S = 75


class _Listener(uvicorn.Server):
    """A uvicorn server that leaves signals to :class:`GatewayServer` (which stops every listener)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class GatewayServer:
    """The gateway's listeners; ``serve_forever`` (or ``start_background``) until ``stop``."""

    def __init__(self, gateway: Gateway, host: str, port: int, tls: TlsFiles | None = None,
                 tls_port: int = 0) -> None:
        self.gateway = gateway
        settings = gateway.settings.gateway
        self.app = FlaskOnAsgi(create_app(gateway).wsgi_app, settings.http_threads, MAX_ENTITY_BYTES,
                               inline=actions.runs_inline if settings.inline_invokes else None)
        self.admin = FlaskOnAsgi(admin_app(Users(gateway.entities), gateway.auth).wsgi_app, 2, MAX_ENTITY_BYTES)
        self.host = host
        self._http = _bind(host, port)
        self._https = _bind(host, tls_port) if tls is not None else None
        self._listeners = [(_listener(self.app, None), self._http),
                           (_listener(self.admin, None), bind_admin_socket(gateway.settings.data_dir))]
        if tls is not None and self._https is not None:
            self._listeners.append((_listener(self.app, tls), self._https))
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._closed = False
        if gateway.invoker.api_host is None:
            gateway.invoker.api_host = self.url
        api = urlsplit(gateway.invoker.api_host)  # the actions' __OW_API_HOST: this server or a proxy before it
        for port in {self.port, self.tls_port, api.port or (443 if api.scheme == "https" else 80)} - {None}:
            gateway.platform.open_host_port(port)

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

    def serve_forever(self) -> None:
        """Serve until ``stop`` or, on the main thread, SIGTERM/SIGINT; then close the gateway."""
        try:
            uvloop.run(self._serve())
        finally:
            self._close_gateway()

    def start_background(self) -> threading.Thread:
        """Serve on a thread; returns once every listener accepts connections."""
        self._thread = threading.Thread(target=lambda: uvloop.run(self._serve()), name="owx-listeners", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not all(listener.started for listener, _ in self._listeners):
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the gateway's listeners did not start")
            time.sleep(0.005)
        return self._thread

    def stop(self) -> None:
        """Stop the listeners, then close the gateway (bounded, see the module docstring)."""
        if self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop ended already
                self._loop.call_soon_threadsafe(self._request_stop)
        if self._thread is not None:
            self._thread.join(LISTENER_GRACE_S + 5.0)
        self._close_gateway()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGINT):
                self._loop.add_signal_handler(signum, self._on_signal, signum)
        await asyncio.gather(*(listener.serve(sockets=[sock]) for listener, sock in self._listeners))

    def _on_signal(self, signum: int) -> None:
        log.info("signal %s: stopping", signal.Signals(signum).name)
        self._request_stop()

    def _request_stop(self) -> None:
        for listener, _ in self._listeners:
            listener.should_exit = True

    def _close_gateway(self) -> None:
        if self._closed:
            return
        self._closed = True
        for app in (self.app, self.admin):
            app.close()
        for _, sock in self._listeners:
            sock.close()
        (self.gateway.settings.data_dir / SOCKET_NAME).unlink(missing_ok=True)
        self.gateway.close()


def _listener(app: FlaskOnAsgi, tls: TlsFiles | None) -> _Listener:
    config = uvicorn.Config(
        app, http="httptools", lifespan="off", access_log=False, log_level="warning", proxy_headers=False,
        server_header=False, timeout_graceful_shutdown=int(LISTENER_GRACE_S), timeout_keep_alive=KEEP_ALIVE_S,
        backlog=2048,
        ssl_certfile=str(tls.cert) if tls else None, ssl_keyfile=str(tls.key) if tls else None,
    )
    return _Listener(config)


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock


def _url_host(host: str) -> str:
    if host in ("0.0.0.0", "::"):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host
