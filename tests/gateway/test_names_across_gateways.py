"""One name, one collection, across gateways sharing a CouchDB: two clients creating the same name as
an action through one gateway and as a trigger through another, at the same instant, get one 200 and
one 409, and the store keeps one of them (real gateway processes on a CouchDB-API server)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest
import requests

from owx.bench.gateway_process import GatewayProcess, start_gateway_process

ATTEMPTS = 20
CACHE_TTL_S = 1.0  # CouchEntityStore's default
CODE = "def main(args):\n    return {}\n"


@pytest.fixture(scope="module")
def gateways(tmp_path_factory: pytest.TempPathFactory, couchdb_url: str) -> Iterator[tuple[GatewayProcess, ...]]:
    shared = {"OWX_GATEWAY__STORE": "couchdb", "OWX_GATEWAY__COUCHDB_URL": couchdb_url,
              "OWX_GATEWAY__COUCHDB_PREFIX": f"owx_names_{uuid.uuid4().hex[:6]}_"}
    workdir = tmp_path_factory.mktemp("names")
    first = start_gateway_process(workdir / "first", args=["--no-extensions"], env=shared)
    second = start_gateway_process(workdir / "second", args=["--no-extensions"], env=shared, auth=first.auth)
    yield first, second
    second.stop()
    first.stop()


def _at_once(*calls) -> list[requests.Response]:
    """Run ``calls`` on threads released together; their answers in order."""
    start, answers = threading.Barrier(len(calls)), [None] * len(calls)

    def run(index: int) -> None:
        start.wait()
        answers[index] = calls[index]()

    threads = [threading.Thread(target=run, args=(index,)) for index in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers  # type: ignore[return-value]


def test_one_name_created_in_two_collections_through_two_gateways_at_once_is_created_once(
        gateways: tuple[GatewayProcess, GatewayProcess]):
    first, second = gateways
    as_action, as_trigger = first.session(), second.session()
    outcomes = []
    for attempt in range(ATTEMPTS):
        name = f"n{attempt}-{uuid.uuid4().hex[:6]}"
        action, trigger = _at_once(
            lambda: as_action.put(first.api(f"actions/{name}"), json={"exec": {"kind": "python:3", "code": CODE}}),
            lambda: as_trigger.put(second.api(f"triggers/{name}"), json={}))
        held = [collection for collection, gateway in (("actions", first), ("triggers", second))
                if gateway.session().get(gateway.api(f"{collection}/{name}")).status_code == 200]
        outcomes.append((action.status_code, trigger.status_code, held))
    assert all(sorted(codes[:2]) == [200, 409] and len(codes[2]) == 1 for codes in outcomes), outcomes


def test_a_deleted_name_may_be_created_in_another_collection_through_another_gateway(
        gateways: tuple[GatewayProcess, GatewayProcess]):
    first, second = gateways
    name = f"reused-{uuid.uuid4().hex[:6]}"
    action = first.api(f"actions/{name}")
    assert first.session().put(action, json={"exec": {"kind": "python:3", "code": CODE}}).status_code == 200
    assert second.session().put(second.api(f"triggers/{name}"), json={}).status_code == 409
    assert first.session().delete(action).status_code == 200
    # the second gateway sees the first's writes up to its cache's time-to-live late (cache_ttl_s)
    deadline = time.monotonic() + CACHE_TTL_S + 2
    while (created := second.session().put(second.api(f"triggers/{name}"), json={})).status_code == 409:
        assert time.monotonic() < deadline, "the trigger could not take the deleted action's name"
        time.sleep(0.1)
    assert created.status_code == 200
    assert first.session().put(action, json={"exec": {"kind": "python:3", "code": CODE}}).status_code == 409
