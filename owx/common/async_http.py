"""Pooled keep-alive HTTP/1.1 connections to one server, on an event loop.

The loop-side twin of :mod:`owx.common.keepalive`, for a warm runtime's ``/run`` from the gateway's
event loop: requests are written whole, answers parsed by httptools (``Content-Length`` or
chunked; bounded; their status and body are kept, and the headers a :class:`HeaderAnswerReader`
names), timeouts are timers rather than tasks.
The same errors tell whether the request may have reached the server: the ``connect`` coroutine's own ``OSError`` (nothing was sent),
:class:`~owx.common.keepalive.ExchangeFailed` (it may have been) or
:class:`~owx.common.keepalive.AnswerTimeout`. Use a pool from its loop's thread only.
"""

from __future__ import annotations

import asyncio
import select
from collections.abc import Awaitable, Callable

import httptools

from owx.common.eventloop import BusyPoll
from owx.common.keepalive import AnswerTimeout, ExchangeFailed, HttpAnswer


class AnswerReader(asyncio.Protocol):
    """One client connection: writes a request, reads its answer."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future[HttpAnswer] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._body: list[bytes] = []
        self._size = 0
        self._max_body: int | None = None
        self._keep_body: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._fd = -1

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self._loop = asyncio.get_running_loop()  # asked once: each asking costs a getpid() system call
        sock = transport.get_extra_info("socket")
        self._fd = sock.fileno() if sock is not None else -1

    def usable(self) -> bool:
        """Open, with nothing to read: an idle connection the server closed (or wrote to) is readable
        at once, before the loop has heard of it, and a request sent on it would be lost."""
        if self.closed:
            return False
        return self._fd < 0 or not select.select([self._fd], [], [], 0)[0]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(ExchangeFailed(f"the connection closed before an answer{f': {exc}' if exc else ''}"))

    def data_received(self, data: bytes) -> None:
        if self._waiter is None:  # bytes nobody asked for: the connection cannot be trusted
            self.abort()
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(ExchangeFailed(f"not an HTTP answer: {exc}"))
            self.abort()

    def exchange(self, data: bytes, timeout: float, max_body: int | None,
                 keep_body: int | None = None) -> asyncio.Future[HttpAnswer]:
        """Send ``data``; the future gets the answer, or AnswerTimeout after ``timeout`` seconds. A body
        over ``max_body`` fails the exchange; past ``keep_body`` it is only counted (the answer holds
        its first ``keep_body`` bytes and its whole ``size``)."""
        assert self.transport is not None and self._loop is not None and self._waiter is None
        loop = self._loop
        self._waiter = loop.create_future()
        self._timer = loop.call_later(timeout, self._time_out)
        self._body, self._size, self._max_body, self._keep_body = [], 0, max_body, keep_body
        self.transport.write(data)
        return self._waiter

    # httptools callbacks (no ``on_header`` here: most answers are read for their status and body)
    def on_body(self, body: bytes) -> None:
        kept = self._size
        self._size += len(body)
        if self._max_body is not None and self._size > self._max_body:
            self._fail(ExchangeFailed(f"an answer over the {self._max_body} bytes allowed"))
            self.abort()
            return
        if self._keep_body is None or kept < self._keep_body:
            self._body.append(body)

    def on_message_complete(self) -> None:
        waiter, self._waiter = self._waiter, None
        self._cancel_timer()
        if not self._parser.should_keep_alive():
            self.abort()
        if waiter is not None and not waiter.done():
            body = b"".join(self._body)[:self._keep_body]  # the whole of it when nothing is cut
            waiter.set_result(HttpAnswer(self._parser.get_status_code(), self._headers(), body, self._size))

    def _headers(self) -> dict[str, str]:
        return {}

    def _time_out(self) -> None:
        self._fail(AnswerTimeout("no answer in time"))
        self.abort()

    def _fail(self, exc: Exception) -> None:
        waiter, self._waiter = self._waiter, None
        self._cancel_timer()
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()


class HeaderAnswerReader(AnswerReader):
    """An :class:`AnswerReader` that also keeps the answer's headers named in ``KEPT`` (lower-case)."""

    KEPT: frozenset[bytes] = frozenset()

    def __init__(self) -> None:
        super().__init__()
        self._kept: dict[str, str] = {}

    def exchange(self, data: bytes, timeout: float, max_body: int | None,
                 keep_body: int | None = None) -> asyncio.Future[HttpAnswer]:
        self._kept = {}
        return super().exchange(data, timeout, max_body, keep_body)

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name in self.KEPT:
            self._kept[name.decode("latin-1")] = value.decode("latin-1")

    def _headers(self) -> dict[str, str]:
        return self._kept


Connect = Callable[[], Awaitable[AnswerReader]]  # a new connection; raises OSError when none can be made


class AsyncKeepAlivePool:
    """Idle connections to one server; each request takes one or opens one. Made on its loop; with
    ``answers_soon`` the loop polls while an answer is awaited if it busy-polls
    (:class:`~owx.common.eventloop.BusyPoll`): for a server that answers within the poll's budget."""

    def __init__(self, connect: Connect, max_idle: int = 128, answers_soon: bool = True) -> None:
        self._connect = connect
        self._max_idle = max_idle
        self._idle: list[AnswerReader] = []
        self._poll = BusyPoll.of(asyncio.get_running_loop()) if answers_soon else None

    async def request(self, data: bytes, timeout: float, max_body: int | None = None,
                      retry_on_new: bool = False, keep_body: int | None = None) -> HttpAnswer:
        """The answer to ``data`` within ``timeout`` seconds (``max_body``, ``keep_body``: see
        :meth:`AnswerReader.exchange`). With ``retry_on_new``, a failure on a reused connection is
        retried once on a new one (the server may have closed it while idle)."""
        while self._idle:
            reader = self._idle.pop()
            if not reader.usable():
                reader.abort()
                continue
            try:
                return self._kept(reader, await self._exchange(reader, data, timeout, max_body, keep_body))
            except ExchangeFailed:
                if not retry_on_new:
                    raise
            break
        reader = await self._connect()
        return self._kept(reader, await self._exchange(reader, data, timeout, max_body, keep_body))

    async def _exchange(self, reader: AnswerReader, data: bytes, timeout: float, max_body: int | None,
                        keep_body: int | None) -> HttpAnswer:
        answer = reader.exchange(data, timeout, max_body, keep_body)
        poll = self._poll
        if poll is not None:
            poll.awaited += 1
            poll.answer_due()
        try:
            answered = await answer
            if poll is not None:
                poll.arrived()
            return answered
        except asyncio.CancelledError:
            reader.abort()  # its answer may still come: the connection cannot be reused
            raise
        finally:
            if poll is not None:
                poll.awaited -= 1

    def _kept(self, reader: AnswerReader, answer: HttpAnswer) -> HttpAnswer:
        if not reader.closed and len(self._idle) < self._max_idle:
            self._idle.append(reader)
        return answer

    def close(self) -> None:
        """Close the idle connections (from the loop's thread)."""
        idle, self._idle = self._idle, []
        for reader in idle:
            if reader.transport is not None:
                reader.transport.close()
