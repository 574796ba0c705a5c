"""owx's HTTP/1.1 server, on real sockets: keep-alive, pipelining in order, bounds on what a client
can make it hold (head, body, idle time), and clear answers to bytes that are not HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections.abc import Iterator
from ipaddress import ip_network

import pytest

from owx.common.eventloop import EventLoopThread
from owx.gateway.http.forwarded import TrustedProxies
from owx.gateway.http.messages import Request, Response, json_response
from owx.gateway.http.protocol import Connections, HttpConnection, Limits

LIMITS = Limits(max_head_bytes=4096, max_body_bytes=1000, idle_timeout_s=1.0)


async def _handler(request: Request) -> Response:
    """Echo the request; ``/slow/<ms>`` answers after that long, ``/boom`` fails, ``/split`` tries to
    put a line break into a header, ``/big/<n>`` answers n bytes."""
    path = request.raw_path.decode()
    if path.startswith("/slow/"):
        await asyncio.sleep(int(path.rsplit("/", 1)[1]) / 1000)
    if path == "/boom":
        raise RuntimeError("a handler's bug")
    if path == "/split":
        return Response(200, b"{}", [("X-Evil", "a\r\nSet-Cookie: stolen=1")])
    if path.startswith("/status/"):  # a body that would read as another answer if it were sent
        return Response(int(path.rsplit("/", 1)[1]), b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nno", [])
    if path.startswith("/big/"):
        return Response(200, b"x" * int(path.rsplit("/", 1)[1]), [])
    if path == "/client":
        return json_response({"client": request.client[0] if request.client else None})
    return json_response({"method": request.method, "path": path, "query": request.query.decode(),
                          "body": request.body.decode(), "auth": request.header(b"authorization")})


def _serve(limits: Limits, proxies: TrustedProxies | None = None) -> Iterator[tuple[str, int]]:
    loop = EventLoopThread("test-http-loop")
    connections = Connections(limits, proxies)

    async def start() -> asyncio.base_events.Server:
        return await asyncio.get_running_loop().create_server(
            lambda: HttpConnection(_handler, limits, "http", connections), "127.0.0.1", 0)

    listener = loop.submit(start()).result(10)
    yield listener.sockets[0].getsockname()[:2]
    loop.call(listener.close)
    loop.close()


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, int]]:
    yield from _serve(LIMITS)


@pytest.fixture()
def tight_server() -> Iterator[tuple[str, int]]:
    """A server whose connections together may be 4 and hold 3,000 bytes of bodies."""
    yield from _serve(Limits(max_body_bytes=1000, idle_timeout_s=10.0, max_connections=4, max_held_body_bytes=3000))


@pytest.fixture(scope="module")
def proxied_server() -> Iterator[tuple[str, int]]:
    """A server behind proxies at 127.0.0.1 and 127.0.0.3."""
    yield from _serve(LIMITS, TrustedProxies([ip_network("127.0.0.1/32"), ip_network("127.0.0.3/32")]))


def _connect(server: tuple[str, int], peer: str = "127.0.0.1") -> socket.socket:
    """A connection from ``peer`` (any 127.0.0.0/8 address is this machine's: another client)."""
    sock = socket.create_connection(server, timeout=5, source_address=(peer, 0))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _read_answers(sock: socket.socket, count: int) -> list[tuple[int, dict[str, str], bytes]]:
    """``count`` answers read off ``sock`` (status, headers with lower-case names, body)."""
    buffer, answers = b"", []
    while len(answers) < count:
        while b"\r\n\r\n" not in buffer:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError(f"closed after {len(answers)} answers")
            buffer += chunk
        head, buffer = buffer.split(b"\r\n\r\n", 1)
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
        length = int(headers.get("content-length", "0"))
        while len(buffer) < length:
            buffer += sock.recv(65536)
        answers.append((int(status_line.split()[1]), headers, buffer[:length]))
        buffer = buffer[length:]
    return answers


def _closed(sock: socket.socket, within_s: float = 5.0) -> bool:
    sock.settimeout(within_s)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def _closed_now(sock: socket.socket) -> bool:
    """Whether ``sock`` was closed by the server (an open one has nothing to read in 0.3 s)."""
    try:
        return _closed(sock, 0.3)
    except TimeoutError:
        return False


def _post(path: str, body: bytes = b"{}", extra: str = "") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n{extra}\r\n").encode() + body


def test_keep_alive_serves_many_requests_on_one_connection(server) -> None:
    with _connect(server) as sock:
        for n in range(3):
            sock.sendall(_post(f"/n/{n}?blocking=true", b'{"n": %d}' % n, "Authorization: Basic abc\r\n"))
            [(status, headers, body)] = _read_answers(sock, 1)
            assert status == 200 and "date" in headers and "connection" not in headers
            assert json.loads(body) == {"method": "POST", "path": f"/n/{n}", "query": "blocking=true",
                                        "body": '{"n": %d}' % n, "auth": "Basic abc"}


def test_pipelined_requests_are_answered_in_the_order_they_came(server) -> None:
    with _connect(server) as sock:
        sock.sendall(_post("/slow/200") + _post("/slow/0") + _post("/slow/50"))
        answers = _read_answers(sock, 3)
    assert [json.loads(body)["path"] for _, _, body in answers] == ["/slow/200", "/slow/0", "/slow/50"]


def test_a_head_over_the_limit_is_431_and_closes(server) -> None:
    with _connect(server) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 5000 + b"\r\n\r\n")
        [(status, headers, body)] = _read_answers(sock, 1)
        assert status == 431 and headers["connection"] == "close"
        assert set(json.loads(body)) == {"error", "code"}
        assert _closed(sock)


def test_a_header_that_never_ends_is_431_once_it_is_over_the_limit(server) -> None:
    """The parser keeps an unfinished field whole: a value sent without end was read and held as long
    as it came (38 MB in one probe's connection before its idle time), the head's limit unchecked."""
    with _connect(server) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: ")
        with contextlib.suppress(ConnectionError):  # the server may close before all of it is sent
            sock.sendall(b"a" * 100_000)
        [(status, headers, _)] = _read_answers(sock, 1)
        assert status == 431 and headers["connection"] == "close"


def test_a_body_announced_over_the_limit_is_413_before_it_is_sent(server) -> None:
    with _connect(server) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n")  # and no body at all
        [(status, _, body)] = _read_answers(sock, 1)
        assert status == 413 and "5000 > 1000" in json.loads(body)["error"]
        assert _closed(sock)


def test_a_chunked_body_over_the_limit_is_413(server) -> None:
    with _connect(server) as sock:
        chunk = b"a" * 600
        sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                     + b"%x\r\n%s\r\n" % (len(chunk), chunk) * 2 + b"0\r\n\r\n")
        [(status, _, _)] = _read_answers(sock, 1)
        assert status == 413 and _closed(sock)


def test_a_chunked_body_within_the_limit_is_read_whole(server) -> None:
    with _connect(server) as sock:
        sock.sendall(b"POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                     b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
        [(status, _, body)] = _read_answers(sock, 1)
    assert status == 200 and json.loads(body)["body"] == "abcde"


def test_bytes_that_are_not_http_get_400_and_the_connection_closes(server) -> None:
    with _connect(server) as sock:
        sock.sendall(b"\x16\x03\x01 this is no request\r\n\r\n")
        [(status, _, body)] = _read_answers(sock, 1)
        assert status == 400 and json.loads(body)["error"].startswith("The request is not valid HTTP/1.1")
        assert _closed(sock)


def test_a_slow_client_is_cut_off_after_the_idle_time_however_it_trickles(server) -> None:
    with _connect(server) as sock:
        started = time.monotonic()
        for byte in b"POST / HTTP/1.1\r\nHost:":
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                break
            time.sleep(0.1)
        assert _closed(sock)
        assert time.monotonic() - started < LIMITS.idle_timeout_s + 1.5


def test_expect_100_continue_is_answered_before_the_body_comes(server) -> None:
    with _connect(server) as sock:
        sock.sendall(b"POST /e HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n")
        assert sock.recv(100).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        sock.sendall(b"{}")
        [(status, _, body)] = _read_answers(sock, 1)
    assert status == 200 and json.loads(body)["body"] == "{}"


def test_head_gets_no_body_and_http_1_0_is_closed_after_its_answer_unless_it_asks(server) -> None:
    with _connect(server) as sock:
        sock.sendall(b"HEAD /h HTTP/1.1\r\nHost: x\r\n\r\n")
        sock.settimeout(5)
        head = sock.recv(65536)
        assert head.startswith(b"HTTP/1.1 200 OK") and head.endswith(b"\r\n\r\n")  # nothing after the head
    with _connect(server) as sock:
        sock.sendall(b"GET /old HTTP/1.0\r\n\r\n")
        [(status, headers, _)] = _read_answers(sock, 1)
        assert status == 200 and headers["connection"] == "close" and _closed(sock)
    with _connect(server) as sock:  # an HTTP/1.0 client that keeps its connection (ab -k) is told it is kept
        for _ in range(2):
            sock.sendall(b"GET /kept HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n")
            [(status, headers, _)] = _read_answers(sock, 1)
            assert status == 200 and headers["connection"] == "keep-alive"


@pytest.mark.parametrize("status", [204, 304])
def test_an_answer_without_a_body_ends_with_its_head_whatever_the_handler_gave(server, status) -> None:
    """Else the body would be the answer to the client's next request on the connection."""
    with _connect(server) as sock:
        sock.sendall(_post(f"/status/{status}") + _post("/after"))
        sock.settimeout(5)
        received = b""
        while received.count(b"\r\n\r\n") < 2 or not received.endswith(b"}"):
            received += sock.recv(65536)
    first, second = received.split(b"HTTP/1.1 ")[1:]
    assert first.startswith(b"%d " % status) and first.endswith(b"\r\n\r\n")
    assert b"content-length" not in first.lower()
    assert second.startswith(b"200 OK") and json.loads(second.split(b"\r\n\r\n", 1)[1])["path"] == "/after"


def test_a_failing_handler_answers_500_and_the_connection_lives_on(server) -> None:
    with _connect(server) as sock:
        sock.sendall(_post("/boom") + _post("/split") + _post("/after"))
        answers = _read_answers(sock, 3)
    assert [status for status, _, _ in answers] == [500, 500, 200]
    assert all(b"stolen" not in body and "set-cookie" not in headers for _, headers, body in answers)
    assert set(json.loads(answers[0][2])) == {"error", "code"}


def test_a_client_that_never_reads_its_answers_is_cut_off_after_the_idle_time(server) -> None:
    """A client that sends and never reads is cut off: once its answers back up the server stops
    reading from it, and its next requests do not put the idle time off."""
    with _connect(server) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(LIMITS.idle_timeout_s + 10)  # a send blocked longer than this: nobody cut it off
        started = time.monotonic()
        with pytest.raises((ConnectionResetError, BrokenPipeError)):  # the server aborted the connection
            while time.monotonic() - started < LIMITS.idle_timeout_s + 30:
                sock.sendall(_post("/n", b'{"pad": "' + b"x" * 900 + b'"}'))  # answers it never reads
        assert time.monotonic() - started < LIMITS.idle_timeout_s + 5


def test_a_client_that_reads_a_large_answer_late_is_served_on(server) -> None:
    """A client that lets a large answer back up (reading it later, within the idle time) then sends its
    next request on the same connection gets that answer too: reading resumes with writing."""
    size = 16 * 1024 * 1024
    with _connect(server) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        sock.settimeout(5)
        sock.sendall(b"GET /big/%d HTTP/1.1\r\nHost: t\r\n\r\n" % size)
        time.sleep(LIMITS.idle_timeout_s / 2)  # the answer backs up: the server stops writing
        received = 0
        while received < size:  # head and body
            chunk = sock.recv(1 << 20)
            assert chunk
            received += len(chunk)
        sock.sendall(b"GET /again HTTP/1.1\r\nHost: t\r\n\r\n")
        answer = sock.recv(65536)
        while b'"/again"' not in answer:
            chunk = sock.recv(65536)
            assert chunk, "the connection closed instead of answering"
            answer += chunk


def test_a_trailer_field_never_reaches_the_request_head(server) -> None:
    """RFC 9110 6.5.1: a proxy checks the head; an Authorization sent in a chunked body's trailer
    would pass it, were the trailer merged."""
    with _connect(server) as sock:
        sock.sendall(b"POST /t HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                     b"2\r\n{}\r\n0\r\nAuthorization: Basic c21nOmds\r\n\r\n")
        [(status, _, body)] = _read_answers(sock, 1)
    assert status == 200 and json.loads(body)["auth"] is None


def test_thousands_of_pipelined_requests_in_one_write_are_all_answered_in_order(server) -> None:
    """A write of many small requests is parsed a slice at a time while requests queue (the rest waits
    unparsed): every one is still answered, in order."""
    count = 3000
    with _connect(server) as sock:
        sock.sendall(b"".join(b"GET /n/%d HTTP/1.1\r\nHost: x\r\n\r\n" % n for n in range(count)))
        answers = _read_answers(sock, count)
    assert [json.loads(body)["path"] for _, _, body in answers] == [f"/n/{n}" for n in range(count)]


def test_past_the_connection_limit_a_new_connection_closes_the_one_idle_longest(tight_server) -> None:
    """Idle connections (a slowloris's) cannot keep another client out: at the limit the longest idle
    one makes room; when none is idle, the new connection is the one closed."""
    idle = [_connect(tight_server) for _ in range(4)]
    time.sleep(0.2)
    with _connect(tight_server) as newcomer:
        newcomer.sendall(_post("/served"))
        [(status, _, _)] = _read_answers(newcomer, 1)
        assert status == 200
    assert sum(_closed_now(sock) for sock in idle) == 1  # they went idle in the same loop turn: any one of them
    busy = [_connect(tight_server) for _ in range(4)]
    for sock in busy:
        sock.sendall(_post("/slow/1500"))
    time.sleep(0.3)
    with _connect(tight_server) as refused:
        assert _closed(refused, 1.0)
    assert [_read_answers(sock, 1)[0][0] for sock in busy] == [200] * 4
    for sock in idle + busy:
        sock.close()


def test_at_the_connection_limit_the_peer_with_the_most_connections_loses_an_idle_one(tight_server) -> None:
    """A client that opens connection after connection closes its own idle ones, not the kept
    connection another client has been idle on longer."""
    with _connect(tight_server, "127.0.0.2") as kept:
        kept.sendall(_post("/first"))
        assert _read_answers(kept, 1)[0][0] == 200
        time.sleep(0.1)
        flood = [_connect(tight_server) for _ in range(3)]
        time.sleep(0.1)
        flood += [_connect(tight_server) for _ in range(2)]
        time.sleep(0.1)
        kept.sendall(_post("/again"))
        [(status, _, body)] = _read_answers(kept, 1)
        assert status == 200 and json.loads(body)["path"] == "/again"
        assert sum(_closed_now(sock) for sock in flood) == 2
        for sock in flood:
            sock.close()


def _hold_body(server: tuple[str, int], peer: str) -> socket.socket:
    """A connection from ``peer`` that sent all of a 1,000-byte body but its last byte."""
    sock = _connect(server, peer)
    sock.sendall(b"POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n" + b"a" * 999)
    return sock


def test_a_peer_holds_at_most_its_share_of_bodies_and_another_peer_finds_room(tight_server) -> None:
    """Bodies a client sends all but the last byte of are held until answered. One peer alone holds
    at most half of what the server may (a body past that gets 503); a peer holding nothing finds
    room beside it, and what a closed connection held is free again."""
    first = _hold_body(tight_server, "127.0.0.1")
    time.sleep(0.2)
    more = [_hold_body(tight_server, "127.0.0.1") for _ in range(2)]
    for sock in more:
        [(status, _, body)] = _read_answers(sock, 1)
        assert status == 503 and "as many requests as it may" in json.loads(body)["error"]
        sock.close()
    with _connect(tight_server, "127.0.0.2") as other:
        other.sendall(_post("/p", b"a" * 999))
        [(status, _, _)] = _read_answers(other, 1)
        assert status == 200
    second = _hold_body(tight_server, "127.0.0.2")
    time.sleep(0.2)
    with _connect(tight_server, "127.0.0.3") as third:  # two others hold: its share is 750
        third.sendall(_post("/p", b"a" * 999))
        [(status, _, _)] = _read_answers(third, 1)
        assert status == 503
    first.close()
    second.close()
    time.sleep(0.3)
    with _connect(tight_server) as later:
        later.sendall(_post("/p", b"a" * 999))
        [(status, _, _)] = _read_answers(later, 1)
        assert status == 200


def test_heads_not_yet_whole_count_in_a_peers_share(tight_server) -> None:
    """Unfinished heads are held as bodies are (a probe's 3,000 connections of 60 KB heads from one
    address took 226 MB): past its share a peer's next one is a 503, and another peer finds room."""
    held = _connect(tight_server, "127.0.0.1")
    held.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 1000)  # no end: 1,000 of its 1,500
    time.sleep(0.2)
    with _connect(tight_server, "127.0.0.1") as more:
        more.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 1000)
        [(status, _, _)] = _read_answers(more, 1)
        assert status == 503
    with _connect(tight_server, "127.0.0.2") as other:
        other.sendall(_post("/p", b"a" * 999))
        [(status, _, _)] = _read_answers(other, 1)
        assert status == 200
    held.close()


@pytest.mark.parametrize("hosts", ["", "Host: a\r\nHost: b\r\n"])
def test_an_http_1_1_request_without_one_host_header_is_400(server, hosts) -> None:
    with _connect(server) as sock:
        sock.sendall(f"GET /x HTTP/1.1\r\n{hosts}\r\n".encode())
        [(status, _, body)] = _read_answers(sock, 1)
        assert status == 400 and "Host header" in json.loads(body)["error"]
        assert _closed(sock)


@pytest.mark.parametrize(("peer", "forwarded", "client"), [
    ("127.0.0.1", ["198.51.100.7"], "198.51.100.7"),  # through the trusted proxy
    ("127.0.0.1", ["203.0.113.9, 198.51.100.7"], "198.51.100.7"),  # what the client wrote itself is left of it
    ("127.0.0.1", ["198.51.100.7, 127.0.0.3"], "198.51.100.7"),  # through two trusted proxies
    ("127.0.0.1", ["198.51.100.7", "[2001:db8::5]"], "2001:db8::5"),  # two header lines are one list
    ("127.0.0.1", ["not-an-address"], "127.0.0.1"),  # unreadable: the proxy itself
    ("127.0.0.1", [], "127.0.0.1"),  # no header: the proxy's own request
    ("127.0.0.2", ["198.51.100.7"], "127.0.0.2"),  # not a proxy: what it claims is not read
])
def test_a_trusted_proxys_requests_come_from_the_client_it_names(proxied_server, peer, forwarded, client) -> None:
    headers = "".join(f"X-Forwarded-For: {value}\r\n" for value in forwarded)
    with _connect(proxied_server, peer) as sock:
        for _ in range(2):  # each request of a kept connection names its own
            sock.sendall(f"GET /client HTTP/1.1\r\nHost: x\r\n{headers}\r\n".encode())
            [(status, _, body)] = _read_answers(sock, 1)
            assert status == 200 and json.loads(body) == {"client": client}
