"""The platform's client of a runtime's proxy, against a real Unix-socket server that may be hostile
(the runtime runs in the tenant's process): answers are read whole, bounded, and never trusted."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from owx.platform.embedded.proxy import MAX_ANSWER_BYTES, ProxyClient, ProxyTimeout, ProxyUnreachable
from owx.runtimes.http_wire import response_bytes

from platform_helpers import serve_answers

Answer = Callable[[socket.socket], None]


@contextmanager
def proxy(tmp_path: Path, answer: Answer) -> Iterator[tuple[ProxyClient, list[int]]]:
    """A server on a Unix socket that reads each request and lets ``answer`` write the reply;
    yields a client and the number of connections accepted so far."""
    path = str(tmp_path / "proxy.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen()
    accepted = serve_answers(listener, answer)
    client = ProxyClient.unix(path)
    try:
        yield client, accepted
    finally:
        client.close()
        listener.close()


def test_answers_are_parsed_and_the_connection_is_reused(tmp_path):
    with proxy(tmp_path, lambda conn: conn.sendall(response_bytes(200, b'{"n": 1}', True))) as (client, accepted):
        for _ in range(5):
            answer = client.run({"value": {}}, timeout=5)
            assert answer.ok and answer.is_json and answer.body == {"n": 1}
        assert accepted[0] == 1


def test_a_body_announced_over_the_bound_is_refused_at_once(tmp_path):
    def huge(conn: socket.socket) -> None:
        conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {MAX_ANSWER_BYTES + 1}\r\n\r\n".encode())

    with proxy(tmp_path, huge) as (client, _):
        started = time.monotonic()
        with pytest.raises(ProxyUnreachable, match="over"):
            client.run({"value": {}}, timeout=5)
        assert time.monotonic() - started < 1  # neither read nor waited for


def test_bytes_that_are_not_an_answer_are_unreachable_and_silence_is_a_timeout(tmp_path):
    with proxy(tmp_path, lambda conn: conn.sendall(b"\x00garbage\r\n\r\n")) as (client, _):
        with pytest.raises(ProxyUnreachable):
            client.run({"value": {}}, timeout=5)
    silent = tmp_path / "silent"
    silent.mkdir()
    with proxy(silent, lambda conn: None) as (client, _):
        with pytest.raises(ProxyTimeout):
            client.run({"value": {}}, timeout=0.3)
