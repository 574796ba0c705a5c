"""One HTTP/1.1 connection of the gateway: httptools parses, a handler answers, in order.

Why owx has its own server instead of uvicorn: on the same warm invocation (one ``/run`` and one
record per request) uvicorn's per-request machinery (a scope, two channels and a task per
message) took 159 µs at p50 from one client here against 114 µs for this connection class, and a
gateway is judged against a direct ``/run`` of about 80 µs. ``owx bench invoke`` measures both
servers on the same JSON handler in every run (see :mod:`owx.bench.invoke.anchors`).

What a connection guarantees, whatever the client sends:

- a request is handed over only once it is whole; its head is at most ``max_head_bytes`` (431
  otherwise) and its body at most ``max_body_bytes`` (413, before the body is read when
  ``Content-Length`` says so); malformed bytes get a 400; a body over ``EARLY_REFUSAL_BYTES`` that
  the server's ``refuse_early`` refuses (an entity write its caller's budget cannot pay) is
  answered before it is read; each of these closes the connection;
- answers leave in the order requests came (pipelining), one request is handled at a time (a
  handler that answers early, :meth:`Request.answer`, lets the next one start while it goes on),
  and reading pauses while requests queue up behind it;
- a connection that has no complete request in ``idle_timeout_s`` is closed, however slowly its
  bytes trickle in, and so is one whose client stops reading its answers: slow clients hold
  nothing for long;
- the connections of a server together hold at most ``Limits.max_connections`` descriptors and
  ``Limits.max_held_body_bytes`` of request bodies not yet answered and of heads not yet whole,
  and no one peer (a client address; IPv6 ones by their /64, which one client holds whole) takes
  what others need: past the connection limit a new connection closes an idle one of the peer that
  has the most (the longest idle of those), or is closed itself when none is idle; a peer holds at
  most ``max_held_body_bytes // (other peers holding + 2)`` of them (a body or head past its share,
  or past the whole, gets a 503), so one that holds nothing always finds room. Behind one proxy,
  all clients are one peer;
- a read is parsed a slice at a time, and the rest waits while ``MAX_QUEUED`` requests do: a
  client that pipelines thousands of requests in one write makes the loop build eight, not all;
- trailer fields of a chunked body are dropped, never merged into the head (RFC 9110 6.5.1: an
  ``Authorization`` sent there would pass a proxy that checks the head);
- an HTTP/1.1 request without a ``Host`` header, or with two, is a 400 (RFC 9112 3.2);
- ``Expect: 100-continue`` is answered, ``HEAD`` gets no body, ``Connection: close`` and HTTP/1.0
  close after the answer (unless an HTTP/1.0 client asks to keep it: ``ab -k``), an ``Upgrade`` is
  served as plain HTTP/1.1 and then closed.

On a loop that busy-polls (:class:`~owx.common.eventloop.BusyPoll`), an answer on a kept
connection starts a poll for the client's next request.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import resource
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from email.utils import formatdate
from functools import lru_cache
from http import HTTPStatus

import httptools

from owx.common.eventloop import BusyPoll
from owx.gateway.errors import ENTITY_TOO_BIG, INTERNAL
from owx.gateway.http.forwarded import TrustedProxies
from owx.gateway.http.messages import Request, Response, error_response, header_lines

log = logging.getLogger(__name__)

Handler = Callable[[Request], Awaitable[Response | None]]  # None: it answered through Request.answer
# (method, request target, Authorization, body bytes) of a request whose head is read -> (status, message) to
# answer it with before its body is read, or None; on the event loop, so without I/O
EarlyRefusal = Callable[[bytes, bytes, "str | None", int], "tuple[int, str] | None"]
EARLY_REFUSAL_BYTES = 1024 * 1024  # smaller bodies are read whatever: cheaper than asking
MAX_QUEUED = 8  # pipelined requests read ahead of the one being handled
PARSE_SLICE = 4096  # bytes parsed at a time once a read is larger (MAX_QUEUED is looked at between slices)
BODY_COPIED_BYTES = 256 * 1024  # a larger body is written apart from its head, not copied behind it
HEAD_TOO_BIG = "The request's head is larger than allowed: more than {allowed} bytes."
BODIES_HELD = "The gateway holds as many requests as it may: try again shortly."
HOST_MISSING = "An HTTP/1.1 request names its host in exactly one Host header."
MALFORMED_HTTP = "The request is not valid HTTP/1.1: {detail}"
_REASONS = {status.value: status.phrase for status in HTTPStatus}
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
# answers that end with their head (RFC 9110 6.4.1): a body a handler gave them would read as the next answer
_BODILESS = frozenset({204, 304})
_FRAMING = frozenset({"content-length", "transfer-encoding", "connection"})  # the server's to say, not a handler's
# headers noted as read
_NOTED_LENGTHS = frozenset({len(b"content-length"), len(b"expect"), len(b"authorization"), len(b"host")})


@dataclass(frozen=True)
class Limits:
    """Bounds of what a client may make a connection hold."""

    max_head_bytes: int = 64 * 1024
    max_body_bytes: int = 48 * 1024 * 1024
    idle_timeout_s: float = 75.0  # nginx's keep-alive default, which OpenWhisk's edge uses
    max_connections: int = field(default_factory=lambda: resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 2)
    max_held_body_bytes: int = 256 * 1024 * 1024  # of all of a server's connections together


def peer_of(address: object) -> str:
    """Who a connection's peer is, for shares: its IP address (an IPv6 one's /64, an IPv4-mapped
    one's IPv4 address); every Unix socket client is the one peer ``""``."""
    if not isinstance(address, tuple):
        return ""
    try:
        ip = ipaddress.ip_address(str(address[0]).split("%", 1)[0])
    except ValueError:
        return str(address[0])
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


class Connections:
    """The open connections of one server, and the request bodies they hold, by peer."""

    def __init__(self, limits: Limits, proxies: TrustedProxies | None = None,
                 refuse_early: EarlyRefusal | None = None) -> None:
        self.open: set[HttpConnection] = set()
        self.proxies = proxies  # whose connections name their client (X-Forwarded-For)
        self.refuse_early = refuse_early  # asked about each request whose body is over EARLY_REFUSAL_BYTES
        self._limits = limits
        self.held_body_bytes = 0
        self._connections_of: Counter[str] = Counter()
        self._held_by: dict[str, int] = {}  # only peers that hold bytes

    def admit(self, connection: HttpConnection) -> bool:
        """Count ``connection`` in; at the limit, an idle one of the peer with the most connections
        is closed for it (False: none is idle)."""
        if len(self.open) >= self._limits.max_connections:
            idle = [c for c in self.open if c.idle_since is not None and not c.closing]
            if not idle:
                return False
            counts = self._connections_of
            min(idle, key=lambda c: (-counts[c.peer], c.idle_since)).abort()
        self.open.add(connection)
        self._connections_of[connection.peer] += 1
        return True

    def leave(self, connection: HttpConnection, held: int) -> None:
        """Count ``connection`` out, with the ``held`` bytes of bodies it still held."""
        if connection in self.open:
            self.open.discard(connection)
            self._connections_of[connection.peer] -= 1
            if self._connections_of[connection.peer] <= 0:
                del self._connections_of[connection.peer]
        self.release(connection.peer, held)

    def hold(self, peer: str, size: int) -> bool:
        """Count ``size`` more bytes of ``peer``'s bodies in; False (nothing counted) past its share or the whole."""
        held = self._held_by.get(peer, 0)
        others = len(self._held_by) - (1 if held else 0)
        total = self._limits.max_held_body_bytes
        if self.held_body_bytes + size > total or held + size > total // (others + 2):
            return False
        self.held_body_bytes += size
        self._held_by[peer] = held + size
        return True

    def release(self, peer: str, size: int) -> None:
        """``size`` bytes of ``peer``'s bodies are no longer held."""
        if size <= 0:
            return
        self.held_body_bytes -= size
        left = self._held_by.get(peer, 0) - size
        if left > 0:
            self._held_by[peer] = left
        else:
            self._held_by.pop(peer, None)


class _Clock:
    """The ``Date`` header line and the head's end, formatted once a second."""

    second = 0
    value = b""

    @classmethod
    def date(cls) -> bytes:
        now = int(time.time())
        if now != cls.second:
            cls.second, cls.value = now, b"Date: " + formatdate(now, usegmt=True).encode() + b"\r\n\r\n"
        return cls.value


def _head_length(response: Response) -> int:
    """A HEAD answer's Content-Length: its GET's, which a WSGI app names without giving the body."""
    if response.body:
        return len(response.body)
    named = next((value for name, value in response.headers if name.lower() == "content-length"), "")
    return int(named) if named.isdigit() else 0


@lru_cache(maxsize=1024)
def _status_line(status: int) -> bytes:
    return f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}\r\n".encode("latin-1")


class HttpConnection(asyncio.Protocol):
    """Serves requests on one connection with ``handler`` (see the module docstring)."""

    def __init__(self, handler: Handler, limits: Limits, scheme: str, connections: Connections) -> None:
        self._handler = handler
        self._limits = limits
        self._scheme = scheme
        self._connections = connections
        self._loop = asyncio.get_running_loop()
        self._poll = BusyPoll.of(self._loop)
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._client: tuple[str, int] | None = None
        self._proxy: TrustedProxies | None = None  # set for a trusted proxy's: each request names its client
        self.peer = ""  # see peer_of
        self._server: tuple[str, int] = ("", 0)
        self._queue: deque[tuple[Request, bool]] = deque()  # (request, keep the connection alive after it)
        self._busy = False
        self._closing = False  # answer what is in hand, then close
        self._write_paused = False  # the client does not read: handle nothing more until it does
        self._idle: asyncio.TimerHandle | None = None  # looks at idle_since when it fires
        self.idle_since: float | None = None  # loop time since which no request is handled (None: one is)
        self._held = 0  # bytes of bodies read and not yet answered, counted in the connections'
        self._head_read = 0  # bytes fed since the last head was whole (see _feed)
        self._head_held = 0  # of those, counted in the connections' as bodies are
        self._unparsed = b""  # read, not yet parsed: it waits while MAX_QUEUED requests do
        self._reset_message()

    @property
    def closing(self) -> bool:
        return self._closing

    # -- asyncio.Protocol --------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        peer, sock = transport.get_extra_info("peername"), transport.get_extra_info("sockname")
        self.peer = peer_of(peer)
        if not self._connections.admit(self):
            self._closing = True
            transport.abort()  # type: ignore[attr-defined]
            return
        self._client = (str(peer[0]), int(peer[1])) if isinstance(peer, tuple) else None
        proxies = self._connections.proxies
        if proxies is not None and self._client is not None and proxies.trusts(self._client[0]):
            self._proxy = proxies
        self._server = (str(sock[0]), int(sock[1])) if isinstance(sock, tuple) else ("localhost", 0)
        self._arm_idle()

    def connection_lost(self, exc: Exception | None) -> None:
        self._connections.leave(self, self._held + self._head_held)
        self._held = self._head_held = 0
        self._closing = True
        self._queue.clear()
        self._unparsed = b""
        if self._idle is not None:
            self._idle.cancel()

    def data_received(self, data: bytes) -> None:
        if self._poll is not None:
            self._poll.arrived()
        if self._closing:
            return
        if self._unparsed:
            self._unparsed += data  # a read under way when reading paused
            return
        self._parse(data)

    def _parse(self, data: bytes) -> None:
        """Feed ``data`` to the parser, a slice at a time once it is larger than one; what is left
        when MAX_QUEUED requests wait stays unparsed, and reading pauses until they are taken."""
        start, size = 0, len(data)
        while start < size:
            if len(self._queue) >= MAX_QUEUED:
                self._unparsed = data[start:]
                if self._transport is not None:
                    self._transport.pause_reading()
                return
            piece = data if size <= PARSE_SLICE else data[start:start + PARSE_SLICE]
            start += len(piece)
            if not self._feed(piece):
                return

    def _feed(self, piece: bytes) -> bool:
        """Parse ``piece``; False when the connection is done reading (refused, or another protocol)."""
        if self._in_head:  # the parser keeps an unfinished field whole, unseen by the callbacks' count
            self._head_read += len(piece)
            if self._head_read > self._limits.max_head_bytes + PARSE_SLICE:
                self._refuse(431, HEAD_TOO_BIG.format(allowed=self._limits.max_head_bytes))
                return False
        try:
            self._parser.feed_data(piece)
        except httptools.HttpParserUpgrade:
            self._closing_after_queue()  # what follows is another protocol: answer what was read, then close
        except httptools.HttpParserCallbackError as exc:
            if not self._closing:  # not a refusal a callback answered: a bug of ours
                log.error("reading a request failed", exc_info=exc.__context__ or exc)
                self._refuse(500, INTERNAL)
        except httptools.HttpParserError as exc:
            self._refuse(400, MALFORMED_HTTP.format(detail=exc))
        if self._in_head and self._head_read > self._head_held and not self._closing:
            self._hold_head()
        return not self._closing

    def _hold_head(self) -> None:
        """Count the bytes of a head not yet whole in the peer's share, as its bodies are (until the
        head is whole); past the share a 503."""
        if self._connections.hold(self.peer, self._head_read - self._head_held):
            self._head_held = self._head_read
        else:
            self._refuse(503, BODIES_HELD)

    def _parse_unparsed(self) -> None:
        """Parse what waited for the queue (reading resumes after it, unless the queue fills again)."""
        data, self._unparsed = self._unparsed, b""
        if data and not self._closing:
            self._parse(data)
        if not (self._unparsed or self._closing or self._write_paused) and self._transport is not None \
                and len(self._queue) < MAX_QUEUED:
            self._transport.resume_reading()

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._transport is not None and len(self._queue) < MAX_QUEUED:
            self._resume_reading()  # paused while the client did not read (see _next)
        if not self._busy:
            self._next()

    # -- httptools callbacks ---------------------------------------------------------------------
    def _reset_message(self) -> None:
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._head_bytes = 0  # of the fields parsed
        self._length: bytes | None = None  # Content-Length, as sent
        self._expects = False  # Expect: 100-continue
        self._authorization: bytes | None = None  # the first Authorization header
        self._hosts = 0  # Host headers
        self._in_head = True  # False once the head is complete: later fields are a chunked body's trailer
        self._body: list[bytes] = []
        self._body_bytes = 0

    def on_message_begin(self) -> None:
        self._reset_message()

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._head_bytes += len(url)
        if self._head_bytes > self._limits.max_head_bytes:
            self._head_too_big()

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self._in_head:
            return  # a trailer field: dropped (RFC 9110 6.5.1)
        self._headers.append((name, value))
        if len(name) in _NOTED_LENGTHS:
            lowered = name.lower()
            if lowered == b"content-length":
                self._length = value
            elif lowered == b"expect":
                self._expects = value.lower() == b"100-continue"
            elif lowered == b"authorization" and self._authorization is None:
                self._authorization = value
            elif lowered == b"host":
                self._hosts += 1
        self._head_bytes += len(name) + len(value) + 4
        if self._head_bytes > self._limits.max_head_bytes:
            self._head_too_big()

    def _head_too_big(self) -> None:
        self._refuse(431, HEAD_TOO_BIG.format(allowed=self._limits.max_head_bytes))
        raise httptools.HttpParserCallbackError("head too big")

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._connections.release(self.peer, self._head_held)
        self._head_read = self._head_held = 0
        if self._hosts > 1 or (self._hosts == 0 and self._parser.get_http_version() == "1.1"):
            self._refuse(400, HOST_MISSING)
            raise httptools.HttpParserCallbackError("no single host")
        length = int(self._length) if self._length is not None and self._length.strip().isdigit() else 0
        if length > self._limits.max_body_bytes:
            self._refuse(413, ENTITY_TOO_BIG.format(field="Request", size=length, allowed=self._limits.max_body_bytes))
            raise httptools.HttpParserCallbackError("body too big")
        if length > EARLY_REFUSAL_BYTES and self._connections.refuse_early is not None:
            authorization = None if self._authorization is None else self._authorization.decode("latin-1")
            refusal = self._connections.refuse_early(self._parser.get_method(), self._url, authorization, length)
            if refusal is not None:  # answered before the body is read, which then closes the connection
                self._refuse(*refusal)
                raise httptools.HttpParserCallbackError("refused before its body")
        if self._expects and not self._busy and not self._queue and self._transport is not None:
            self._transport.write(_CONTINUE)

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        if self._body_bytes > self._limits.max_body_bytes:
            self._refuse(413, ENTITY_TOO_BIG.format(field="Request", size="more",
                                                   allowed=self._limits.max_body_bytes))
            raise httptools.HttpParserCallbackError("body too big")
        if not self._connections.hold(self.peer, len(body)):
            self._refuse(503, BODIES_HELD)
            raise httptools.HttpParserCallbackError("bodies held")
        self._held += len(body)
        self._body.append(body)

    def on_message_complete(self) -> None:
        try:
            url = httptools.parse_url(self._url) if self._url else None
        except httptools.HttpParserInvalidURLError:
            self._refuse(400, MALFORMED_HTTP.format(detail=f"invalid request target {self._url[:100]!r}"))
            raise
        request = Request(
            method=self._parser.get_method().decode("ascii"),
            raw_path=(url.path or b"/") if url is not None else b"/",
            query=(url.query or b"") if url is not None else b"",
            raw_headers=self._headers,
            body=b"".join(self._body),
            client=self._client if self._proxy is None or self._client is None
            else self._proxy.client(self._client, self._headers),
            server=self._server,
            scheme=self._scheme,
            http_version=self._parser.get_http_version(),
            _authorization=None if self._authorization is None else self._authorization.decode("latin-1"),
        )
        self._queue.append((request, self._parser.should_keep_alive()))
        self._reset_message()
        if not self._busy:
            self._next()
        elif len(self._queue) >= MAX_QUEUED and self._transport is not None:
            self._transport.pause_reading()

    # -- answering ------------------------------------------------------------------------------
    def _next(self) -> None:
        """Handle the oldest queued request (the caller made sure none is being handled)."""
        if self._write_paused:
            # the client does not read: take nothing more from it, and cut it off like one that stops
            # sending (its next requests do not put that off)
            if self._transport is not None:
                self._transport.pause_reading()
            self._arm_idle()
            return
        if not self._queue:
            if self._closing:
                self._close()
            else:
                self._arm_idle()
            return
        self.idle_since = None
        request, keep_alive = self._queue.popleft()
        self._busy = True
        if self._transport is not None and len(self._queue) < MAX_QUEUED:
            self._resume_reading()
        self._loop.create_task(self._serve(request, keep_alive))

    def _resume_reading(self) -> None:
        """Read again, after what was read and left unparsed is parsed (on the next loop turn: this
        may be called while the parser is at work)."""
        if self._unparsed:
            self._loop.call_soon(self._parse_unparsed)
        elif self._transport is not None:
            self._transport.resume_reading()

    async def _serve(self, request: Request, keep_alive: bool) -> None:
        poll = self._poll
        if poll is not None:
            poll.serving += 1
        answered = False

        def answer(response: Response) -> None:
            nonlocal answered
            if answered:
                return
            answered = True
            if poll is not None:
                poll.serving -= 1
            self._answer(request, response, keep_alive)

        request._answer = answer
        try:
            response = await self._handler(request)
        except Exception:  # noqa: BLE001 - a handler's bug answers 500; the connection and the server live on
            log.exception("handling %s %s failed", request.method, request.raw_path[:200])
            response = error_response(500, INTERNAL)
        finally:
            request._answer = None  # no cycle (request, answer) left for the collector
        if response is None and not answered:  # a handler's bug: it neither answered nor returned an answer
            log.error("handling %s %s gave no answer", request.method, request.raw_path[:200])
            response = error_response(500, INTERNAL)
        if response is not None:
            answer(response)

    def _answer(self, request: Request, response: Response, keep_alive: bool) -> None:
        """Send the answer to the request in hand, then take the next one."""
        if not keep_alive:
            self._closing = True
        answered = min(len(request.body), self._held)  # its body is no longer held
        self._held -= answered
        self._connections.release(self.peer, answered)
        try:
            self._write(response, request.method == "HEAD", request.http_version == "1.0")
        except ValueError:
            log.exception("the answer to %s %s cannot be sent", request.method, request.raw_path[:200])
            self._write(error_response(500, INTERNAL))
        self._busy = False
        if self._poll is not None and not self._closing:
            self._poll.answer_due()  # a keep-alive client's next request usually follows at once
        self._next()

    def _write(self, response: Response, head_only: bool = False, http_1_0: bool = False) -> None:
        """Send ``response``; raises ValueError (nothing sent) for a header that would split it. An
        HTTP/1.0 client that asked to keep the connection is told it is kept (else it waits for the end)."""
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        parts = [_status_line(response.status), response.head]
        if response.headers:
            parts.append(header_lines((name, value) for name, value in response.headers
                                      if name.lower() not in _FRAMING))
        bodiless = response.status < 200 or response.status in _BODILESS
        if not bodiless:
            parts.append(b"Content-Length: %d\r\n" % (_head_length(response) if head_only else len(response.body)))
        if self._closing:
            parts.append(b"Connection: close\r\n")
        elif http_1_0:
            parts.append(b"Connection: keep-alive\r\n")
        parts.append(_Clock.date())
        if head_only or bodiless:
            transport.write(b"".join(parts))
        elif len(response.body) > BODY_COPIED_BYTES:  # written as it is, not copied behind its head
            transport.write(b"".join(parts))
            transport.write(response.body)
        else:
            parts.append(response.body)
            transport.write(b"".join(parts))

    def _refuse(self, status: int, message: str) -> None:
        """Answer an unreadable or oversized request and close (after the answers it waits behind)."""
        self._queue.clear()
        self._closing = True
        if not self._busy:
            self._write(error_response(status, message))
            self._close()

    def _closing_after_queue(self) -> None:
        self._closing = True
        if not self._busy and not self._queue:
            self._close()

    # -- lifetime ------------------------------------------------------------------------------
    def _arm_idle(self) -> None:
        """Idle from now, unless it was already: closed ``idle_timeout_s`` after (one timer for the
        connection's life, not one per request: it looks again when it fires)."""
        if self.idle_since is None:
            self.idle_since = self._loop.time()
        if self._idle is None:
            self._idle = self._loop.call_later(self._limits.idle_timeout_s, self._idle_check)

    def _idle_check(self) -> None:
        self._idle = None
        if self.idle_since is None:
            return  # handling a request: armed again once idle
        left = self.idle_since + self._limits.idle_timeout_s - self._loop.time()
        if left > 0:
            self._idle = self._loop.call_later(left, self._idle_check)
            return
        if self._write_paused:
            self.abort()  # its unread answers would keep a graceful close waiting for ever
        else:
            self._close()

    def _close(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()

    def shutdown(self) -> None:
        """Stop taking requests: close now if idle, else once the answer in hand has gone."""
        self._closing = True
        if not self._busy:
            self._close()

    def abort(self) -> None:
        """Close now, whatever is in hand (the end of a shutdown's grace)."""
        if self._transport is not None:
            self._transport.abort()
