"""An unreachable checkpoint store: stateful actions run on without checkpoints, with a warning."""

from __future__ import annotations

import socket

import pytest
from canary_support import annotation, expected_total, start_canary_gateway


@pytest.fixture()
def gw(monkeypatch, tmp_path):
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("OWX_CANARY__STORE_URL", f"redis://127.0.0.1:{port}/0?blobs={tmp_path}&timeout=0.3")
    gateway = start_canary_gateway(nodes=1)
    yield gateway
    gateway.stop()


def test_unreachable_store_runs_without_checkpoints_and_warns(gw):
    http = gw.session()
    name = gw.put_action(http, canary={"checkpoint": "explicit"})
    record = http.post(gw.api(f"actions/{name}"), params={"blocking": "true"}, json={"steps": 6, "delay": 0}).json()
    assert record["response"]["success"], record
    assert record["response"]["result"]["total"] == expected_total(6)
    warnings = annotation(record, "canaryWarnings")
    assert warnings and any("checkpoints disabled" in w for w in warnings)
    assert any("unavailable" in w for w in warnings)  # the core could not read checkpoint metadata either
    assert annotation(record, "checkpointRestored") is None
