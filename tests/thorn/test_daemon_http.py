"""Who may change a THORN daemon's reconciler over HTTP: it can switch failover off for every tenant
on the node. The daemon's real HTTP handler, on real sockets; behind it a stand-in for the
reconciler and steering (the handler is under test, not FRR: test_testbed.py runs the whole daemon)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from types import SimpleNamespace

import pytest
import requests

from owx.thorn.daemon import _handler

TOKEN_ENV = "OWX_THORN_TOKEN"


class _Reconciler(SimpleNamespace):
    def kick(self) -> None:
        pass


def _serve(host: str) -> Iterator[tuple[str, SimpleNamespace]]:
    daemon = SimpleNamespace(
        reconciler=_Reconciler(drop_events=0.0, period_s=1.0, driver=SimpleNamespace(name="u32")),
        steering=SimpleNamespace(status=SimpleNamespace(enabled=True),
                                 set_enabled=lambda on: setattr(daemon.steering.status, "enabled", on)))
    server = ThreadingHTTPServer((host, 0), _handler(daemon))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/reconciler", daemon
    server.shutdown()
    server.server_close()


@pytest.fixture
def on_every_address():
    yield from _serve("0.0.0.0")


@pytest.fixture
def on_loopback():
    yield from _serve("127.0.0.1")


OFF = {"fast_failover": False, "drop_events": 1.0}


def test_on_an_address_others_reach_changes_need_the_token(on_every_address, monkeypatch):
    url, daemon = on_every_address
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    refused = requests.post(url, json=OFF, timeout=5)
    assert refused.status_code == 403 and TOKEN_ENV in refused.json()["error"]
    monkeypatch.setenv(TOKEN_ENV, "s3cret")
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        assert requests.post(url, json=OFF, headers=headers, timeout=5).status_code == 401
    assert daemon.steering.status.enabled and daemon.reconciler.drop_events == 0.0  # nothing changed
    done = requests.post(url, json=OFF, headers={"Authorization": "Bearer s3cret"}, timeout=5)
    assert done.status_code == 200 and not daemon.steering.status.enabled


def test_on_loopback_changes_go_without_one(on_loopback, monkeypatch):
    url, daemon = on_loopback
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    assert requests.post(url, json=OFF, timeout=5).status_code == 200 and daemon.reconciler.drop_events == 1.0


@pytest.mark.parametrize("length", ["-5", "ten", "99999999999"])
def test_a_length_that_is_not_one_is_refused_at_once(on_loopback, length):
    """A negative length read until the client closed, a word ended without an answer, a huge one
    raised MemoryError."""
    url, _ = on_loopback
    port = int(url.split(":")[2].split("/")[0])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(f"POST /reconciler HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n{{}}".encode())
        answer = sock.recv(4096)
    assert answer.split(b" ", 2)[1] in (b"400", b"413"), answer[:200]
