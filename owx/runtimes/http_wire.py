"""A minimal HTTP/1.1 server for the action proxy, and its client's half (stdlib only, small and fast).

The proxy answers two JSON routes for one client (the invoker or the embedded
platform), so a general web server is not needed: this reads a request line,
headers and a ``Content-Length`` or chunked body, hands ``(method, path, body)``
to a handler and writes its JSON answer, keeping the connection alive. The platform's
client (:mod:`owx.platform.embedded.proxy`) writes requests and reads answers with
:func:`request_bytes` and :func:`read_response`, the same parsing with its bounds. Each
connection gets a thread, so concurrent activations run in parallel. Importing
this costs a few milliseconds, unlike ``http.server`` (~20 ms), which matters
for cold starts.
"""

from __future__ import annotations

import json
import socket
import threading

TYPE_CHECKING = False  # typing costs ~4 ms of start-up; only type checkers need it
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import BinaryIO

    # (method, path, body) -> (status, JSON body)
    Handler = Callable[[str, str, bytes], tuple[int, bytes]]

SECRET_HEADER = "X-OWX-Runtime-Secret"
MAX_LINE = 64 * 1024
MAX_HEADERS = 100

REASONS = {
    100: "Continue",
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    500: "Internal Server Error",
    502: "Bad Gateway",
}


class MalformedRequest(Exception):
    """The bytes on the connection are not an HTTP/1.x request we can answer."""


class BodyTooLong(MalformedRequest):
    """The body is longer than the reader allows."""


class Request:
    """One parsed request (a plain class: ``dataclasses`` costs ~5 ms to import)."""

    __slots__ = ("body", "keep_alive", "method", "path", "secret")

    def __init__(self, method: str, path: str, body: bytes, keep_alive: bool, secret: str | None = None) -> None:
        self.method = method
        self.path = path
        self.body = body
        self.keep_alive = keep_alive
        self.secret = secret


def serve_forever(listener: socket.socket, handle: Handler, secret: str | None = None,
                  answered: Callable[[], None] | None = None) -> None:
    """Accept connections on a listening socket and serve each in its own thread."""
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=serve_connection, args=(conn, handle, secret, answered), daemon=True).start()


def serve_connection(conn: socket.socket, handle: Handler, secret: str | None = None,
                     answered: Callable[[], None] | None = None) -> None:
    """Serve requests on one connection until the client closes it or asks to.

    With a ``secret``, a request without it in header ``SECRET_HEADER`` is answered 401 and the
    connection closed: only the platform that started the runtime may use it. ``answered()`` is
    called once each handled request's answer is sent (or could not be), on this thread."""
    if conn.family != socket.AF_UNIX:  # an inherited --fd may also be a Unix socket
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    reader = conn.makefile("rb")
    try:
        while True:
            try:
                request = read_request(reader, conn)
            except MalformedRequest as error:
                conn.sendall(response_bytes(400, json.dumps({"error": str(error)}).encode(), keep_alive=False))
                return
            if request is None:
                return
            if secret is not None and not _same(request.secret, secret):
                conn.sendall(response_bytes(401, b'{"error":"this runtime serves its platform only"}', False))
                return
            try:
                status, body = handle(request.method, request.path, request.body)
            except Exception as error:  # noqa: BLE001 - a bug in a handler must not drop the connection silently
                status, body = 500, json.dumps({"error": f"runtime internal error: {error!r}"}).encode()
            try:
                conn.sendall(response_bytes(status, body, request.keep_alive))
            finally:
                if answered is not None:
                    answered()
            if not request.keep_alive:
                return
    except (ConnectionError, TimeoutError):
        return
    finally:
        reader.close()
        conn.close()


def read_request(reader: BinaryIO, conn: socket.socket) -> Request | None:
    """Read one request; ``None`` when the client closed the connection between requests."""
    line = reader.readline(MAX_LINE + 1)
    while line in (b"\r\n", b"\n"):  # tolerate stray blank lines between requests (RFC 9112 2.2)
        line = reader.readline(MAX_LINE + 1)
    if not line:
        return None
    parts = line.split()
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
        raise MalformedRequest("malformed request line")
    method, target, version = (part.decode("latin-1") for part in parts)
    headers = _read_headers(reader)
    if headers.get("expect", "").lower() == "100-continue":
        conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
    body = _read_body(reader, headers)
    connection = headers.get("connection", "").lower()
    keep_alive = connection != "close" if version == "HTTP/1.1" else connection == "keep-alive"
    return Request(method, target.split("?", 1)[0], body, keep_alive, headers.get(SECRET_HEADER.lower()))


def _same(given: str | None, secret: str) -> bool:
    import hmac  # only runtimes that have a secret pay for the import

    return hmac.compare_digest((given or "").encode(), secret.encode())


def response_bytes(status: int, body: bytes, keep_alive: bool) -> bytes:
    """A complete JSON response with its head."""
    connection = "" if keep_alive else "Connection: close\r\n"
    head = (
        f"HTTP/1.1 {status} {REASONS.get(status, 'Unknown')}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n{connection}\r\n"
    )
    return head.encode("latin-1") + body


def request_bytes(path: str, body: bytes, headers: str, method: str = "POST", host: str = "localhost") -> bytes:
    """A complete request with a JSON ``body`` (empty: none); ``headers``: extra ``Name: value\\r\\n`` lines."""
    head = (f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n{headers}\r\n")
    return head.encode("latin-1") + body


def read_response(reader: BinaryIO, max_body: int | None = None) -> tuple[int, dict[str, str], bytes, bool]:
    """Read one answer: (status, headers with lower-case names, body, whether the connection stays
    open). Raises ``ConnectionError`` when the server closed the connection, ``MalformedRequest``
    (the bytes are not HTTP, or the body is over ``max_body``) otherwise."""
    line = reader.readline(MAX_LINE + 1)
    if not line:
        raise ConnectionError("the connection closed before an answer")
    parts = line.split(None, 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise MalformedRequest("malformed status line")
    headers = _read_headers(reader)
    keep_alive = parts[0] == b"HTTP/1.1" and headers.get("connection", "").lower() != "close"
    if not keep_alive and "content-length" not in headers and "transfer-encoding" not in headers:
        return int(parts[1]), headers, _read_to_end(reader, max_body), False  # HTTP/1.0 style: the body ends the connection
    return int(parts[1]), headers, _read_body(reader, headers, max_body), keep_alive


def _read_to_end(reader: BinaryIO, max_bytes: int | None) -> bytes:
    body = reader.read(max_bytes + 1 if max_bytes is not None else -1)
    if max_bytes is not None and len(body) > max_bytes:
        raise BodyTooLong(f"a body over the {max_bytes} bytes allowed")
    return body


def _read_headers(reader: BinaryIO) -> dict[str, str]:
    """Header lines up to the blank line, names lower-cased (bounded in length and number)."""
    headers: dict[str, str] = {}
    for _ in range(MAX_HEADERS):
        line = reader.readline(MAX_LINE + 1)
        if line in (b"\r\n", b"\n", b""):
            return headers
        if len(line) > MAX_LINE:
            raise MalformedRequest("header line too long")
        name, sep, value = line.decode("latin-1").partition(":")
        if not sep:
            raise MalformedRequest("malformed header line")
        headers[name.strip().lower()] = value.strip()
    raise MalformedRequest("too many headers")


def _read_body(reader: BinaryIO, headers: dict[str, str], max_bytes: int | None = None) -> bytes:
    """The body ``headers`` announce: ``Content-Length`` bytes, or chunks; at most ``max_bytes``."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return _read_chunked(reader, max_bytes)
    try:
        length = int(headers.get("content-length", "0"))
    except ValueError:
        raise MalformedRequest("invalid Content-Length") from None
    if length < 0:
        raise MalformedRequest("invalid Content-Length")
    if max_bytes is not None and length > max_bytes:
        raise BodyTooLong(f"a body of {length} bytes is over the {max_bytes} allowed")
    body = reader.read(length)
    if len(body) != length:
        raise ConnectionError("connection closed in the middle of the body")
    return body


def _read_chunked(reader: BinaryIO, max_bytes: int | None) -> bytes:
    chunks: list[bytes] = []
    total = 0
    while True:
        size_line = reader.readline(MAX_LINE + 1)
        try:
            size = int(size_line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise MalformedRequest("invalid chunk size") from None
        if size == 0:
            _read_headers(reader)  # trailers
            return b"".join(chunks)
        total += size
        if max_bytes is not None and total > max_bytes:
            raise BodyTooLong(f"a chunked body over the {max_bytes} bytes allowed")
        chunk = reader.read(size)
        if len(chunk) != size:
            raise ConnectionError("connection closed in the middle of a chunk")
        chunks.append(chunk)
        reader.readline(MAX_LINE + 1)  # CRLF after the chunk
