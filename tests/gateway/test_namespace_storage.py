"""What one namespace may keep in a real ``owx up``'s stores: its entities within their bound (past
it a write is a 403), its newest activation records within theirs (its oldest go)."""

from __future__ import annotations

import re

import requests

from owx.bench.gateway_process import start_gateway_process
from tests.fixtures.polling import wait_for

PRINTER = "def main(args):\n    print('x' * 200_000)\n    return {'n': args['n']}\n"


def test_a_namespace_keeps_within_its_storage_bounds(tmp_path) -> None:
    gateway = start_gateway_process(tmp_path / "bounded", env={"OWX_GATEWAY__ENTITY_MB_PER_NAMESPACE": "1",
                                                               "OWX_GATEWAY__ACTIVATION_MB_PER_NAMESPACE": "1"})
    try:
        http = gateway.session()
        big = {"exec": {"kind": "python:3", "code": "def main(args):\n    return {}\n#" + "x" * 300_000}}
        assert [http.put(gateway.api(f"actions/big{n}"), json=big).status_code for n in range(3)] == [200] * 3
        refused = http.put(gateway.api("actions/big3"), json=big)
        assert refused.status_code == 403, refused.text
        assert "limit of 1048576 bytes" in refused.json()["error"] and re.fullmatch(r"[0-9a-f]{32}",
                                                                                     refused.json()["code"])
        assert http.get(gateway.api("actions/big3")).status_code == 404
        assert http.delete(gateway.api("actions/big0")).status_code == 200
        assert http.put(gateway.api("actions/big3"), json=big).status_code == 200

        assert http.put(gateway.api("actions/printer"), json={"exec": {"kind": "python:3", "code": PRINTER}}).ok
        ids = [http.post(gateway.api("actions/printer"), params={"blocking": "true"}, json={"n": n}).json()["activationId"]
               for n in range(12)]
        wait_for(lambda: http.get(gateway.api(f"activations/{ids[0]}")).status_code == 404, 10,
                 "the oldest record was never trimmed (records are written behind)")
        assert http.get(gateway.api(f"activations/{ids[-1]}")).status_code == 200
        listed = http.get(gateway.api("activations"), params={"limit": 200}).json()
        assert 3 <= len(listed) <= 5, len(listed)  # of 12 records of 200 KB, within 1 MB
    finally:
        gateway.stop()


def test_a_web_actions_outside_callers_cannot_push_out_its_owners_records(tmp_path) -> None:
    """Anyone may call a web action and its records are its owner's: calls without the owner's key
    are trimmed first, so a flood of them leaves the owner's own records (its invokes, its own web
    calls) in place, and only the flood's oldest go."""
    gateway = start_gateway_process(tmp_path / "web", env={"OWX_GATEWAY__ACTIVATION_MB_PER_NAMESPACE": "1"})
    try:
        http = gateway.session()
        action = {"exec": {"kind": "python:3", "code": PRINTER},
                  "annotations": [{"key": "web-export", "value": True}]}
        assert http.put(gateway.api("actions/page"), json=action).ok
        own = [http.post(gateway.api("actions/page"), params={"blocking": "true"}, json={"n": 0}).json()["activationId"]]
        web = f"{gateway.url}/api/v1/web/guest/default/page.json"
        own.append(http.get(web, params={"n": 1}).headers["x-openwhisk-activation-id"])  # with the owner's key
        outside = [requests.get(web, params={"n": n}, timeout=30).headers["x-openwhisk-activation-id"]
                   for n in range(2, 14)]
        wait_for(lambda: http.get(gateway.api(f"activations/{outside[0]}")).status_code == 404, 10,
                 "the oldest outside call's record was never trimmed (records are written behind)")
        assert [http.get(gateway.api(f"activations/{aid}")).status_code for aid in own] == [200, 200]
        assert http.get(gateway.api(f"activations/{outside[-1]}")).status_code == 200
    finally:
        gateway.stop()


def test_a_rule_refused_at_its_triggers_link_is_left_as_it_was(tmp_path) -> None:
    """A namespace at its entity bound may have room for a rule but not for its trigger's link to it:
    the 403 then leaves the rule as it was: absent when it was new (before, it stayed, inactive, and
    its name answered 409), on its old trigger when it was moved to another."""
    gateway = start_gateway_process(tmp_path / "rules", env={"OWX_GATEWAY__ENTITY_MB_PER_NAMESPACE": "1"})
    try:
        http = gateway.session()
        bound = 1024 * 1024
        assert http.put(gateway.api("actions/act"), json={"exec": {"kind": "python:3", "code": PRINTER}}).ok
        assert http.put(gateway.api("triggers/trg"), json={}).ok
        assert http.put(gateway.api("triggers/trg2"), json={}).ok

        def filler(code_chars: int) -> requests.Response:
            code = "def main(args):\n    return {}\n#" + "x" * code_chars
            return http.put(gateway.api("actions/filler"), params={"overwrite": "true"},
                            json={"exec": {"kind": "python:3", "code": code}})

        def needed(refused: requests.Response) -> int:
            assert refused.status_code == 403, refused.text
            return int(re.search(r"would take (\d+) bytes", refused.json()["error"])[1]) - bound

        def linked(trigger: str) -> list[str]:
            return [key.split("/")[-1] for key in http.get(gateway.api(f"triggers/{trigger}")).json().get("rules", {})]

        chars = 1_100_000
        while not (answer := filler(chars)).ok:  # again if its name's claim came out a byte longer
            chars -= needed(answer)
        # the namespace now holds its bound, within the bytes a claim's time may vary by
        for rule, before in (({"trigger": "/_/trg", "action": "/_/act"}, None),
                             ({"trigger": "/_/trg2", "action": "/_/act"}, "trg")):
            refusals = 0
            def put_rule() -> requests.Response:
                return http.put(gateway.api("rules/rl"), params={"overwrite": "true"}, json=rule)

            while (answer := put_rule()).status_code != 200:
                refusals += 1
                assert refusals < 10, answer.text
                stored = http.get(gateway.api("rules/rl"))
                if before is None:
                    assert stored.status_code == 404, "a refused rule was left stored"
                else:
                    assert stored.json()["trigger"]["name"] == before and stored.json()["status"] == "active"
                assert linked("trg") == ([] if before is None else ["rl"]) and linked("trg2") == []
                chars -= needed(answer)  # room for what was refused, exactly: the next write in line is refused next
                assert filler(chars).ok
            assert refusals >= 1 and answer.json()["status"] == "active"  # at least the link was refused once
            assert linked(rule["trigger"].split("/")[-1]) == ["rl"]
        assert linked("trg") == []
    finally:
        gateway.stop()
