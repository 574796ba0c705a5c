"""owx's wrk driver: what the benchmarks' floods send is what their figures say they send."""

from __future__ import annotations

import base64
import collections
import http.server
import threading
from collections.abc import Iterator

import pytest

from owx.bench.wrk import wrk


@pytest.fixture()
def server() -> Iterator[tuple[str, collections.Counter[str]]]:
    """A local HTTP server counting the Authorization headers it is sent; (its URL, the counts)."""
    seen: collections.Counter[str] = collections.Counter()

    class Counting(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            seen[self.headers.get("Authorization", "")] += 1
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_: object) -> None:
            pass

        def handle(self) -> None:
            try:
                super().handle()
            except ConnectionError:  # wrk cuts its connections off at the end
                pass

    served = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Counting)
    threading.Thread(target=served.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{served.server_address[1]}/", seen
    served.shutdown()
    served.server_close()


def test_rotating_keys_give_every_request_the_next_key_and_no_two_threads_the_same(server) -> None:
    url, seen = server
    keys = [f"made-up-{number}:secret" for number in range(50_000)]
    result = wrk(url, connections=4, seconds=1, threads=2, rotating_auths=keys)
    assert 0 < result.requests < len(keys) // 2  # each thread stays within its half of the keys
    assert sum(seen.values()) >= result.requests
    assert max(seen.values()) == 1  # no key sent twice
    sent = {base64.b64decode(header.removeprefix("Basic ")).decode() for header in seen}
    assert sent <= set(keys)


def test_one_key_is_sent_with_every_request(server) -> None:
    url, seen = server
    result = wrk(url, connections=2, seconds=1, auth="someone:secret")
    assert list(seen) == ["Basic " + base64.b64encode(b"someone:secret").decode()]
    assert seen["Basic " + base64.b64encode(b"someone:secret").decode()] >= result.requests
