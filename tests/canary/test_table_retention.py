"""Canary's tables keep a namespace's newest rows: what every stateful activation leaves counts against
the namespace's entity bound, so it cannot grow without end (a real SQLite entity store; a real gateway)."""

from __future__ import annotations

import time

from canary_support import start_canary_gateway
from tests.fixtures.polling import wait_for

from owx.canary.commits import COLLECTION as COMMITS
from owx.canary.table_retention import PRUNE_EVERY_S, TableRetention
from owx.canary.tables import collection
from owx.gateway.stores.sqlite import SQLiteEntityStore

FUNCTIONS = collection("function_info")


def fill(store: SQLiteEntityStore, namespace: str, rows: int) -> list[str]:
    names = [f"{namespace}-{index:03d}" for index in range(rows)]
    for name in names:  # oldest first
        store.put(namespace, FUNCTIONS, name, {"function_id": name}, None)
        store.put(namespace, COMMITS, name, {"activation_id": name}, None)
    return names


def test_a_namespace_keeps_its_newest_rows_and_rows_younger_than_the_minimum_age(tmp_path):
    store = SQLiteEntityStore(tmp_path / "owx.db")
    try:
        names = fill(store, "busy", 40)
        fill(store, "other", 40)
        young = TableRetention(store, keep_rows=10, min_age_s=3600)
        try:
            assert young.trim("busy") == 0  # all younger than an hour: a commit outlives its attempts
        finally:
            young.close()
        time.sleep(0.3)  # a store's update times run ahead of the clock under a burst of writes (they never repeat)
        retention = TableRetention(store, keep_rows=10, min_age_s=0)
        try:
            assert retention.trim("busy") == 2 * 30
        finally:
            retention.close()
        for table in (FUNCTIONS, COMMITS):
            assert sorted(e.name for e in store.list("busy", table)) == names[-10:]
            assert store.count("other", table) == 40  # another namespace's rows are its own business
    finally:
        store.close()


def test_stateful_activations_leave_at_most_the_kept_rows_in_their_namespace():
    gw = start_canary_gateway(canary={"table_rows": 3, "table_min_age_s": 0})
    try:
        http = gw.session()
        name = gw.put_action(http, canary={"checkpoint": "explicit"})
        for _ in range(8):
            record = http.post(gw.api(f"actions/{name}"), params={"blocking": "true"},
                               json={"steps": 1, "delay": 0}).json()
            assert record["response"]["success"], record
            time.sleep(0.2)
        newest = record["activationId"]
        functions = lambda: http.get(gw.api("canary/function_info"), params={"limit": 200}).json()  # noqa: E731
        wait_for(lambda: len(functions()) <= 3, 3 * PRUNE_EVERY_S, "the function rows were never trimmed")
        assert newest in {row["function_id"] for row in functions()}
    finally:
        gw.stop()
