"""Escra inside the gateway: an action that outgrows its memory limit is rescued, and the pool accounts it."""

from __future__ import annotations

from tests.gateway.conftest import start_gateway

GROW = '''
def main(args):
    blob = b"x" * (args["mb"] * 1024 * 1024)
    return {"bytes": len(blob)}
'''


def _deploy_and_grow(gateway, mb):
    http = gateway.session()
    body = {"exec": {"kind": "python:3", "code": GROW}, "limits": {"memory": 128}}
    assert http.put(gateway.api("actions/grow"), json=body, params={"overwrite": "true"}).status_code == 200
    return http.post(gateway.api("actions/grow"), params={"blocking": "true"}, json={"mb": mb}).json()


def test_without_escra_the_action_is_oom_killed(tmp_path):
    server, gateway = start_gateway(tmp_path, platform={"stem_cells": 0})
    try:
        record = _deploy_and_grow(gateway, 200)
        assert record["response"]["result"]["error"] == "The action exhausted its memory and was aborted."
    finally:
        server.stop()


def test_with_escra_the_action_is_rescued_and_the_pool_follows(tmp_path):
    server, gateway = start_gateway(tmp_path, platform={"stem_cells": 0}, escra={"enabled": True})
    try:
        record = _deploy_and_grow(gateway, 200)
        assert record["response"]["success"], record["response"]
        assert record["response"]["result"] == {"bytes": 200 * 1024 * 1024}
        pool = gateway.service.platform.node("node0").pool
        grown = [c for c in pool.containers() if c.action_key and "grow" in c.action_key]
        assert grown and grown[0].memory_bytes > 128 * 1024 * 1024  # the pool accounts Escra's raise
        assert gateway.service.platform.ledger.free("node0") <= pool.budget_bytes - grown[0].memory_bytes
    finally:
        server.stop()
