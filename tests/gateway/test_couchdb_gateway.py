"""The gateway on the CouchDB store (a CouchDB-API server): entities and activations survive restarts."""

from __future__ import annotations

import uuid

import pytest

from tests.gateway.conftest import start_gateway


def couch(url: str, prefix: str) -> dict[str, str]:
    return {"store": "couchdb", "couchdb_url": url, "couchdb_prefix": prefix}

CODE = "def main(args):\n    return {'twice': args['x'] * 2}\n"


@pytest.fixture()
def couch_gateway(tmp_path, couchdb_url):
    prefix = f"owx_gw_{uuid.uuid4().hex[:6]}_"
    server, running = start_gateway(tmp_path / "a", gateway=couch(couchdb_url, prefix))
    yield running, prefix
    server.stop()


def test_actions_and_activations_in_couchdb(couch_gateway, couchdb_url, tmp_path):
    gateway, prefix = couch_gateway
    http = gateway.session()
    assert http.put(gateway.api("actions/double"), json={"exec": {"kind": "python:3", "code": CODE}}).status_code == 200
    record = http.post(gateway.api("actions/double"), params={"blocking": "true"}, json={"x": 21}).json()
    assert record["response"]["result"] == {"twice": 42}
    assert http.get(gateway.api(f"activations/{record['activationId']}")).json()["activationId"] == record["activationId"]
    gateway.service.activations.flush()
    # a second gateway on the same databases sees the same namespace key, action and activation
    server, second = start_gateway(tmp_path / "b", gateway=couch(couchdb_url, prefix))
    try:
        assert second.auth == gateway.auth
        other = second.session()
        assert other.get(second.api("actions/double")).json()["exec"]["code"] == CODE
        assert other.get(second.api(f"activations/{record['activationId']}/result")).json()["result"] == {"twice": 42}
        assert other.get(second.api("activations"), params={"name": "double", "count": "true"}).json() == {"activations": 1}
    finally:
        server.stop()
