"""Serve the gateway with waitress (a production WSGI server, threaded, one process)."""

from __future__ import annotations

import logging
import signal
import threading

from waitress.server import create_server

from owx.gateway.admin.socket import AdminServer
from owx.gateway.admin.users import Users
from owx.gateway.app import create_app
from owx.gateway.service import Gateway

log = logging.getLogger(__name__)
WSGI_THREADS = 64


class GatewayServer:
    """The gateway's HTTP server; ``serve_forever`` until ``stop``."""

    def __init__(self, gateway: Gateway, host: str, port: int) -> None:
        self.gateway = gateway
        self._server = create_server(create_app(gateway), host=host, port=port, threads=WSGI_THREADS,
                                     connection_limit=1000, channel_timeout=300, ident="owx")
        self._closing = False
        self._admin = AdminServer(gateway.settings.data_dir, Users(gateway.entities), gateway.auth)
        threading.Thread(target=self._admin.serve_forever, name="owx-admin", daemon=True).start()
        if gateway.invoker.api_host is None:
            gateway.invoker.api_host = f"http://{host}:{self.port}"

    @property
    def port(self) -> int:
        return self._server.effective_port  # type: ignore[attr-defined]

    def serve_forever(self) -> None:
        try:
            self._server.run()
        except OSError:
            if not self._closing:  # stop() closed the listening socket under the loop
                raise

    def start_background(self) -> threading.Thread:
        thread = threading.Thread(target=self.serve_forever, name="owx-http", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        self._closing = True
        self._server.close()
        self._admin.close()
        self.gateway.close()


def stop_on_signals() -> None:
    """SIGTERM and SIGINT end ``serve_forever`` (waitress stops on SystemExit) so the caller can close."""
    def _stop(signum, _frame):
        log.info("signal %s: stopping", signum)
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
