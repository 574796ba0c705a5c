"""The HTTPS listener: TLS for clients that speak it, a plain-HTTP 400 for those that do not.

A client sent to the HTTPS port with an ``http://`` URL (a ``wsk`` property file's apihost, a curl
command) would otherwise see its connection closed without a word by the failed handshake. The
listener peeks at each connection's first byte: a TLS handshake record (``0x16``) is served over
TLS as before; anything else is read as HTTP and every request on it gets OpenWhisk's error body
with a 400 that names the HTTPS URL, as nginx in front of OpenWhisk answers such a request.

Until a connection is handed to its protocol (its first byte and TLS handshake, up to
``FIRST_BYTE_TIMEOUT_S``) it holds a descriptor that no connection limit counts: at most
``max_pending`` do, the oldest closed for a new one, so that clients that connect and send nothing
cannot take the descriptors every tenant's requests, runtimes and stores need.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections.abc import Callable

from owx.gateway.http.messages import Request, Response, error_response
from owx.gateway.http.protocol import Handler

log = logging.getLogger(__name__)
TLS_HANDSHAKE = 0x16  # the content type of a TLS record that opens a connection
FIRST_BYTE_TIMEOUT_S = 60.0  # as long as asyncio gives a TLS handshake
ACCEPT_PAUSE_S = 1.0  # after an accept failed for want of descriptors or memory
PLAIN_TO_HTTPS = "The plain HTTP request was sent to the HTTPS port: use {url}."
HOST_CHARACTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-:[]"  # a name or address, a port


class HttpsListener:
    """Serves the listening ``sock``: TLS connections with ``protocol_factory`` under ``context``,
    plain ones with ``plain_factory`` (an HTTP connection whose handler is :func:`plain_to_https`)."""

    def __init__(self, sock: socket.socket, context: ssl.SSLContext, protocol_factory: Callable[[], asyncio.Protocol],
                 plain_factory: Callable[[], asyncio.Protocol], backlog: int, max_pending: int) -> None:
        self._sock = sock
        self._context = context
        self._protocol_factory = protocol_factory
        self._plain_factory = plain_factory
        self._max_pending = max(1, max_pending)
        self._pending: dict[asyncio.Task[None], socket.socket | None] = {}  # oldest first; the socket until it runs
        sock.setblocking(False)
        sock.listen(backlog)
        self._accepting = asyncio.get_running_loop().create_task(self._accept())

    def close(self) -> None:
        """Stop accepting; connections not yet handed to their protocol are closed."""
        self._accepting.cancel()
        while self._pending:
            self._close_oldest()
        self._sock.close()

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                connection, _ = await loop.sock_accept(self._sock)
            except OSError as exc:  # out of descriptors or memory: the others finish first
                log.warning("the HTTPS listener could not accept a connection: %s", exc)
                await asyncio.sleep(ACCEPT_PAUSE_S)
                continue
            if len(self._pending) >= self._max_pending:
                self._close_oldest()
            task = loop.create_task(self._serve(connection))
            self._pending[task] = connection
            task.add_done_callback(lambda done: self._pending.pop(done, None))

    def _close_oldest(self) -> None:
        task, unstarted = next(iter(self._pending.items()))
        del self._pending[task]
        task.cancel()  # a started task closes its connection
        if unstarted is not None:  # one cancelled before its first step never runs: closed here
            unstarted.close()

    async def _serve(self, connection: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        if (task := asyncio.current_task()) in self._pending:
            self._pending[task] = None  # started: it closes the connection itself
        try:
            first = await asyncio.wait_for(_peek(loop, connection), FIRST_BYTE_TIMEOUT_S)
            if first is None:
                connection.close()
            elif first == TLS_HANDSHAKE:
                await loop.connect_accepted_socket(self._protocol_factory, connection, ssl=self._context,
                                                   ssl_handshake_timeout=FIRST_BYTE_TIMEOUT_S)
            else:
                await loop.connect_accepted_socket(self._plain_factory, connection)
        except (OSError, ssl.SSLError, asyncio.TimeoutError) as exc:  # a failed handshake, a peer gone
            log.debug("HTTPS connection dropped before it was served: %s", exc)
            connection.close()
        except asyncio.CancelledError:
            connection.close()
            raise


async def _peek(loop: asyncio.AbstractEventLoop, connection: socket.socket) -> int | None:
    """The connection's first byte, left in its buffer; None once it closed without one."""
    readable = loop.create_future()
    loop.add_reader(connection.fileno(), lambda: readable.done() or readable.set_result(None))
    try:
        await readable
    finally:
        loop.remove_reader(connection.fileno())
    first = connection.recv(1, socket.MSG_PEEK)
    return first[0] if first else None


def plain_to_https(fallback_url: str) -> Handler:
    """The handler of a plain-HTTP connection to the HTTPS port: a 400 naming the HTTPS URL of the
    host the client asked for (its ``Host``; ``fallback_url`` without a usable one)."""

    async def handle(request: Request) -> Response:
        host = request.headers.get("host", "")
        url = f"https://{host}" if host and not host.strip(HOST_CHARACTERS) else fallback_url
        return error_response(400, PLAIN_TO_HTTPS.format(url=url))

    return handle
