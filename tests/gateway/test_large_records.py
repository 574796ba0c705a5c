"""Records of tens of MB (an action's logs) are served as stored, and what serving them took is
given back: a tenant reading its large records in a loop grew ``owx up`` from 190 to 577 MB, kept
after the reads ended (glibc raising its mmap threshold), and held the interpreter lock long enough
to slow every tenant's requests (each record parsed and encoded again)."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from owx.bench.gateway_process import start_gateway_process
from owx.gateway.pipeline import records
from owx.gateway.pipeline.records import MB, ActionFacts
from owx.gateway.stores.validation import encode_doc
from owx.platform.types import SUCCESS, RunOutcome

PRINTER = "def main(args):\n    line = 'x' * 8192\n    for _ in range(1200):\n        print(line)\n    return {'n': 1}\n"


def test_large_records_are_served_as_stored_and_their_memory_given_back(tmp_path) -> None:
    gateway = start_gateway_process(tmp_path / "gw")
    try:
        http = gateway.session()
        action = {"exec": {"kind": "python:3", "code": PRINTER}, "limits": {"logs": 10}}
        assert http.put(gateway.api("actions/printer"), json=action).ok
        ids = [http.post(gateway.api("actions/printer"), params={"blocking": "true"}).json()["activationId"]
               for _ in range(2)]
        first = http.get(gateway.api(f"activations/{ids[0]}"))
        assert first.headers["content-type"] == "application/json"
        record = first.json()
        assert len(record["logs"]) == 1200 and record["response"]["result"] == {"n": 1}
        assert http.get(gateway.api(f"activations/{ids[0]}/logs")).json() == {"logs": record["logs"]}
        assert http.get(gateway.api(f"activations/{ids[0]}/result")).json() == record["response"]
        listed = http.get(gateway.api("activations"), params={"docs": "true", "limit": 2}).json()
        assert {r["activationId"] for r in listed} == set(ids) and record in listed
        before = gateway.rss_mb()

        def read(n: int) -> int:
            session = gateway.session()
            return sum(len(session.get(gateway.api(f"activations/{ids[i % 2]}")).content) for i in range(n, n + 12))

        with ThreadPoolExecutor(8) as pool:
            assert sum(pool.map(read, range(8))) > 96 * 9_000_000
        assert gateway.rss_mb() - before < 80
    finally:
        gateway.stop()


def _built(logs: list[str], result: dict) -> dict:
    facts = ActionFacts(namespace="alice", name="a", version="0.0.1", kind="python:3",
                        limits={"timeout": 60000, "memory": 256, "logs": 10}, path="alice/a")
    outcome = RunOutcome(SUCCESS, result, logs, 1, 2)
    return records.build("a" * 32, "alice", facts, outcome, MB, 1, cause="b" * 32)


TRICKY_LINES = ['"logs":["x"]', '\\"logs\\":[', 'a "]} b', '"annotations":[{"k":1}]', "\\", '"', "]}"]


@pytest.mark.parametrize("logs", [TRICKY_LINES, [], ['ends in "]'], TRICKY_LINES[::-1]])
def test_a_stored_record_is_split_from_its_logs_without_parsing_it(logs) -> None:
    """Whatever the lines and the result hold, the parts found are the record without its logs and
    its logs; an older version's record (logs before annotations) is parsed instead."""
    result = {"logs": ["not these"], "annotations": [{"logs": ["nor these"]}], "text": '"logs":["no"]'}
    record = _built(logs, result)
    parts = records.split_stored(encode_doc(record).encode())
    assert parts is not None
    assert json.loads(parts[0]) == {key: value for key, value in record.items() if key != "logs"}
    assert json.loads(bytes(parts[1])) == record["logs"]
    older = {key: record[key] for key in ("activationId", "namespace", "response", "logs", "annotations", "cause")}
    assert records.split_stored(encode_doc(older).encode()) is None
    trigger = records.trigger("c" * 32, "alice", "t", "0.0.1", 1, result, [{"rule": "r"}], MB)
    head, lines = records.split_stored(encode_doc(trigger).encode())
    assert json.loads(bytes(lines)) == trigger["logs"] and json.loads(head)["response"] == trigger["response"]
