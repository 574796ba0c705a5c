"""The keep-alive connections the platform calls runtimes and an upstream OpenWhisk over, against a
real TCP server: closed idle connections are never used, answers are read however they end."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from owx.common.keepalive import ExchangeFailed, KeepAlivePool
from owx.runtimes.http_wire import request_bytes, response_bytes

from platform_helpers import serve_answers

Answer = Callable[[socket.socket], bool]  # writes one answer; False closes the connection


@contextmanager
def server(answer: Answer) -> Iterator[tuple[KeepAlivePool, list[int]]]:
    """A TCP server answering each request with ``answer``; yields a pool and the connections accepted."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    accepted = serve_answers(listener, answer)
    pool = KeepAlivePool(lambda timeout: socket.create_connection(("127.0.0.1", port), timeout))
    try:
        yield pool, accepted
    finally:
        pool.close()
        listener.close()


POST = request_bytes("/api/v1/namespaces/_/actions/a", b'{"n": 1}', "", "POST", "127.0.0.1")


def test_a_connection_the_server_closed_while_idle_is_not_reused_for_a_post():
    """An upstream (nginx's keepalive_timeout, a restart) closes idle connections: the next
    invocation must go over a new one, not fail as a broken exchange (no retry for a POST)."""
    closed = threading.Semaphore(0)

    def answer_then_close(conn: socket.socket) -> bool:
        conn.sendall(response_bytes(200, b'{"ok": true}', keep_alive=True))
        conn.shutdown(socket.SHUT_WR)  # the server drops the connection once idle
        closed.release()
        return False

    with server(answer_then_close) as (pool, accepted):
        for _ in range(3):
            answer = pool.request(POST, timeout=5, retry_on_new=False)
            assert (answer.status, answer.body) == (200, b'{"ok": true}')
            assert closed.acquire(timeout=5)  # the close reaches the client while the connection is idle
        assert accepted[0] == 3


def test_connections_are_reused_and_headers_are_read():
    def answer(conn: socket.socket) -> bool:
        conn.sendall(b"HTTP/1.1 202 Accepted\r\nX-OpenWhisk-Activation-Id: abc\r\nContent-Length: 2\r\n\r\n{}")
        return True

    with server(answer) as (pool, accepted):
        for _ in range(5):
            result = pool.request(POST, timeout=5)
            assert (result.status, result.headers["x-openwhisk-activation-id"], result.body) == (202, "abc", b"{}")
        assert accepted[0] == 1


def test_an_answer_that_ends_with_its_connection_is_read_whole_and_bounded():
    body = b'{"result": "' + b"x" * 5000 + b'"}'

    def until_close(conn: socket.socket) -> bool:
        conn.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + body)
        return False

    with server(until_close) as (pool, accepted):
        assert pool.request(POST, timeout=5).body == body
        with pytest.raises(ExchangeFailed, match="over"):
            pool.request(POST, timeout=5, max_body=1000)
        assert accepted[0] == 2
