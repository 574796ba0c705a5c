"""A request as the server read it and the answer a handler gives, plus OpenWhisk's error body."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from owx.common import jsonvalues
from owx.gateway.ids import new_id

JSON = "application/json"
_UNREAD: Any = object()  # a header not looked up yet


@dataclass(slots=True)
class Request:
    """One whole request: its body is read before any handler sees it (bounded by the server)."""

    method: str
    raw_path: bytes  # the request target's path, still percent-encoded
    query: bytes  # the raw query string, without ``?``
    raw_headers: list[tuple[bytes, bytes]]
    body: bytes
    client: tuple[str, int] | None
    server: tuple[str, int]
    scheme: str  # "http" or "https"
    http_version: str  # "1.1"
    _headers: dict[str, str] | None = None
    _answer: Callable[[Response], None] | None = None  # set by the connection that serves it
    _authorization: str | None = _UNREAD  # the server notes it as it reads the head

    def answer(self, response: Response) -> None:
        """Send ``response`` now, before the handler returns (the connection goes on to the next
        request; the handler may go on too, and what it returns is then not sent). Only the first
        answer of a request is sent."""
        if self._answer is not None:
            self._answer(response)

    @property
    def headers(self) -> dict[str, str]:
        """Lower-case names; a repeated header's values joined with "," (decoded when first asked)."""
        if self._headers is None:
            headers: dict[str, str] = {}
            for raw_name, raw_value in self.raw_headers:
                name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
                headers[name] = f"{headers[name]},{value}" if name in headers else value
            self._headers = headers
        return self._headers

    @property
    def authorization(self) -> str | None:
        """The ``Authorization`` header (the first), as :meth:`header` gives it."""
        if self._authorization is _UNREAD:
            self._authorization = self.header(b"authorization")
        return self._authorization

    def header(self, name: bytes) -> str | None:
        """The first value of header ``name`` (lower-case), without decoding the others."""
        size = len(name)
        for raw_name, raw_value in self.raw_headers:
            if len(raw_name) == size and raw_name.lower() == name:
                return raw_value.decode("latin-1")
        return None


@dataclass(slots=True)
class Response:
    """What goes on the wire: status, header pairs, body (``Content-Length`` is the server's), and
    header lines already encoded (``head``, see :func:`header_lines`), sent first."""

    status: int
    body: bytes = b""
    headers: list[tuple[str, str]] = field(default_factory=list)
    head: bytes = b""


def header_lines(pairs: Iterable[tuple[str, str]]) -> bytes:
    """``Name: value`` lines, each ending with CRLF, encoded once (for headers sent again and again);
    ValueError for a name or value holding a line break, which would split the answer."""
    pairs = list(pairs)
    text = "".join(f"{name}: {value}\r\n" for name, value in pairs)
    if text.count("\n") != len(pairs) or text.count("\r") != len(pairs):
        raise ValueError("a header holds a line break")
    return text.encode("latin-1")


JSON_HEAD = header_lines([("Content-Type", JSON)])


def json_response(value: Any, status: int = 200, headers: list[tuple[str, str]] | None = None,
                  head: bytes = b"") -> Response:
    """A compact JSON answer (an integer beyond 64 bits, which an action may return, too), with
    ``head``'s encoded lines after its content type."""
    return Response(status, jsonvalues.dumps(value), headers or [], JSON_HEAD + head)


def error_response(status: int, message: str, transaction_id: str | None = None,
                   headers: dict[str, str] | None = None) -> Response:
    """OpenWhisk's error answer: ``{"error": message, "code": transaction id}``, the id also in ``X-Request-ID``."""
    code = transaction_id or new_id()
    return json_response({"error": message, "code": code}, status,
                         [("X-Request-ID", code), *(headers or {}).items()])
