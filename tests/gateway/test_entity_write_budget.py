"""A namespace's budget of entity bytes per minute: one tenant deploying large actions in a loop is
held to it (429 with OpenWhisk's error body, nothing stored, the body not read when its key is
known); another tenant writes as before."""

from __future__ import annotations

import base64
import http.client
import json
from collections.abc import Iterator

import pytest

from tests.gateway.conftest import RunningGateway, start_gateway

MB = 1024 * 1024


@pytest.fixture(scope="module")
def gateway(tmp_path_factory) -> Iterator[RunningGateway]:
    server, running = start_gateway(tmp_path_factory.mktemp("budget"), gateway={"entity_write_mb_per_minute": 4})
    yield running
    server.stop()


def action(code_mb: float) -> bytes:
    code = "#" + "x" * int(code_mb * MB) + "\ndef main(a):\n    return a\n"
    return json.dumps({"exec": {"kind": "python:3", "code": code}}).encode()


def test_a_namespace_past_its_budget_gets_429_and_another_writes_as_before(gateway: RunningGateway) -> None:
    flood, other = gateway.tenant("budget-flood"), gateway.tenant("budget-other")
    session = flood.session()
    assert session.put(flood.api("actions/first?overwrite=true"), data=action(1.5)).status_code == 200
    assert session.put(flood.api("actions/second?overwrite=true"), data=action(1.5)).status_code == 200
    refused = session.put(flood.api("actions/third?overwrite=true"), data=action(1.5))
    assert refused.status_code == 429, refused.text
    assert refused.json()["error"].startswith("Too many bytes of entities written in the last minute")
    assert refused.headers["X-Request-ID"] == refused.json()["code"]
    assert session.get(flood.api("actions/third")).status_code == 404
    assert session.put(flood.api("actions/small?overwrite=true"), json={"exec": {"kind": "python:3", "code": "x=1"}}).ok
    assert other.session().put(other.api("actions/big?overwrite=true"), data=action(1.5)).status_code == 200


def test_a_known_callers_refused_body_is_answered_before_it_is_sent(gateway: RunningGateway) -> None:
    """The refusal comes with the head: a client that waits for it (Expect: 100-continue) never sends
    the body, and the gateway reads none of it."""
    flood = gateway.tenant("budget-early")
    assert flood.session().put(flood.api("actions/warm?overwrite=true"), data=action(3.5)).status_code == 200
    host, port = gateway.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    auth = flood.session().auth
    header = "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
    connection.putrequest("PUT", f"/api/v1/namespaces/{flood.namespace}/actions/refused?overwrite=true")
    connection.putheader("Authorization", header)
    connection.putheader("Content-Type", "application/json")
    connection.putheader("Content-Length", str(2 * MB))
    connection.putheader("Expect", "100-continue")
    connection.endheaders()
    answer = connection.getresponse()  # no body sent
    assert answer.status == 429
    assert json.loads(answer.read())["error"].startswith("Too many bytes of entities written")
    connection.close()
