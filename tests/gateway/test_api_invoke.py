"""Invocations, activation records, sequences and web actions over plain HTTP."""

from __future__ import annotations

import base64
import json
import time
import uuid
from functools import partial

import pytest
import requests

from owx.gateway.sdk import Client
from tests.gateway.conftest import start_gateway

CODE = '''
import sys, time

def main(args):
    print("out line", args.get("n", 0))
    print("err line", file=sys.stderr)
    if args.get("fail") == "app":
        return {"error": "asked to fail"}
    if args.get("fail") == "raise":
        raise ValueError("boom")
    if args.get("sleep"):
        time.sleep(args["sleep"])
    return {"n": args.get("n", 0), "echo": args.get("echo")}
'''


def deploy(http, gateway, code=CODE, **extra):
    name = f"act-{uuid.uuid4().hex[:8]}"
    body = {"exec": {"kind": "python:3", "code": code}, **extra}
    answer = http.put(gateway.api(f"actions/{name}"), json=body)
    assert answer.status_code == 200, answer.text
    return name


def annotations(record):
    return {a["key"]: a["value"] for a in record["annotations"]}


def test_blocking_invoke_returns_the_activation(gateway, http):
    name = deploy(http, gateway)
    answer = http.post(gateway.api(f"actions/{name}"), params={"blocking": "TRUE"}, json={"n": 7})
    assert answer.status_code == 200, answer.text
    record = answer.json()
    assert len(record["activationId"]) == 32 and answer.headers["x-openwhisk-activation-id"] == record["activationId"]
    assert record["response"] == {"status": "success", "statusCode": 0, "success": True,
                                  "result": {"n": 7, "echo": None}, "size": record["response"]["size"]}
    assert record["name"] == name and record["namespace"] == gateway.namespace
    assert record["end"] >= record["start"] and record["duration"] == record["end"] - record["start"]
    notes = annotations(record)
    assert notes["path"] == f"{gateway.namespace}/{name}" and notes["kind"] == "python:3"
    assert notes["timeout"] is False and notes["limits"]["memory"] == 256
    assert "initTime" in notes  # first activation is a cold start
    assert any(line.endswith("stdout: out line 7") for line in record["logs"])
    assert any("stderr: err line" in line for line in record["logs"])
    warm = http.post(gateway.api(f"actions/{name}"), params={"blocking": "true"}, json={"n": 8}).json()
    assert "initTime" not in annotations(warm)


def test_result_only_and_non_blocking(gateway, http):
    name = deploy(http, gateway)
    assert http.post(gateway.api(f"actions/{name}"), params={"blocking": "true", "result": "True"},
                     json={"echo": "x"}).json() == {"n": 0, "echo": "x"}
    accepted = http.post(gateway.api(f"actions/{name}"), json={"n": 3})
    assert accepted.status_code == 202
    activation_id = accepted.json()["activationId"]
    assert accepted.headers["x-openwhisk-activation-id"] == activation_id
    record = gateway.wait_record(http, activation_id)
    assert record["response"]["result"]["n"] == 3
    assert http.get(gateway.api(f"activations/{activation_id}/result")).json()["result"] == {"n": 3, "echo": None}
    logs = http.get(gateway.api(f"activations/{activation_id}/logs")).json()["logs"]
    assert any("out line 3" in line for line in logs)
    assert logs[0][:4].isdigit() and "Z" in logs[0].split(" ")[0]  # ISO timestamp first


def test_errors_map_to_openwhisk_statuses(gateway, http):
    name = deploy(http, gateway, limits={"timeout": 1000})
    app = http.post(gateway.api(f"actions/{name}"), params={"blocking": "true"}, json={"fail": "app"})
    assert app.status_code == 502 and app.json()["response"]["status"] == "application error"
    assert app.json()["response"]["result"] == {"error": "asked to fail"}
    only = http.post(gateway.api(f"actions/{name}"), params={"blocking": "true", "result": "true"},
                     json={"fail": "app"})
    assert only.status_code == 502 and only.json() == {"error": "asked to fail"}
    raised = http.post(gateway.api(f"actions/{name}"), params={"blocking": "true"}, json={"fail": "raise"})
    assert raised.status_code == 502 and raised.json()["response"]["status"] == "action developer error"
    slow = http.post(gateway.api(f"actions/{name}"), params={"blocking": "true"}, json={"sleep": 5})
    assert slow.status_code == 502
    record = slow.json()
    assert record["response"]["result"]["error"] == "The action exceeded its time limits of 1000 milliseconds."
    assert annotations(record)["timeout"] is True
    # the container was killed; the action keeps working on a new one
    assert http.post(gateway.api(f"actions/{name}"), params={"blocking": "true"}).status_code == 200


def test_invoke_bad_input(gateway, http):
    name = deploy(http, gateway)
    assert http.post(gateway.api("actions/does-not-exist"), params={"blocking": "true"}).status_code == 404
    assert http.post(gateway.api(f"actions/{name}"), params={"blocking": "maybe"}).status_code == 400
    not_object = http.post(gateway.api(f"actions/{name}"), data="[1,2]", headers={"Content-Type": "application/json"})
    assert not_object.status_code == 400
    broken = http.post(gateway.api(f"actions/{name}"), data="{", headers={"Content-Type": "application/json"})
    assert broken.status_code == 400
    huge = http.post(gateway.api(f"actions/{name}"), json={"blob": "x" * (1024 * 1024 + 10)})
    assert huge.status_code == 413 and "larger than allowed" in huge.json()["error"]


def test_an_action_sees_its_version(gateway, http):
    """``__OW_ACTION_VERSION`` is the action's version, as OpenWhisk's invoker gives it; an update bumps it."""
    name = deploy(http, gateway, code="import os\ndef main(args):\n    return {'version': os.environ.get('__OW_ACTION_VERSION'), 'name': os.environ.get('__OW_ACTION_NAME')}\n")
    invoke = gateway.api(f"actions/{name}")
    first = http.post(invoke, params={"blocking": "true", "result": "true"}, json={}).json()
    assert first == {"version": "0.0.1", "name": f"/{gateway.namespace}/{name}"}
    assert http.put(invoke, params={"overwrite": "true"}, json={"limits": {"memory": 128}}).ok
    assert http.post(invoke, params={"blocking": "true", "result": "true"}, json={}).json()["version"] == "0.0.2"


def test_an_action_runs_in_the_transaction_its_caller_is_answered_with(gateway, http):
    """``__OW_TRANSACTION_ID`` is the id the invoke's answer names in ``X-Request-ID`` (OpenWhisk's one
    transaction id), for a plain invoke, a sequence's every component and a web action."""
    tid = "import os\ndef main(args):\n    return {'tids': args.get('tids', []) + [os.environ['__OW_TRANSACTION_ID']]}\n"
    name = deploy(http, gateway, code=tid, annotations=[{"key": "web-export", "value": True}])
    answer = http.post(gateway.api(f"actions/{name}"), params={"blocking": "true", "result": "true"})
    assert answer.json() == {"tids": [answer.headers["X-Request-ID"]]}
    again = http.post(gateway.api(f"actions/{name}"), params={"blocking": "true", "result": "true"})
    assert again.json()["tids"] != answer.json()["tids"]  # each request is its own transaction
    seq = f"seq-{uuid.uuid4().hex[:8]}"
    assert http.put(gateway.api(f"actions/{seq}"), json={"exec": {"kind": "sequence", "components": [name, name]}}).ok
    piped = http.post(gateway.api(f"actions/{seq}"), params={"blocking": "true", "result": "true"})
    assert piped.json() == {"tids": [piped.headers["X-Request-ID"]] * 2}
    web = requests.get(f"{gateway.url}/api/v1/web/{gateway.namespace}/default/{name}.json")
    assert web.json() == {"tids": [web.headers["X-Request-ID"]]}
    traced = http.post(gateway.api(f"actions/{name}"), params={"blocking": "true", "result": "true"},
                       headers={"X-Request-ID": "trace-7f3a.1"})  # a caller's own id, as OpenWhisk takes it
    assert traced.json() == {"tids": ["trace-7f3a.1"]} and traced.headers["X-Request-ID"] == "trace-7f3a.1"
    web = requests.get(f"{gateway.url}/api/v1/web/{gateway.namespace}/default/{name}.json",
                       headers={"X-Request-ID": "trace-web"})
    assert web.json() == {"tids": ["trace-web"]}
    for unusable in ("sid_system", "has space", "x" * 200, "é"):  # the system's prefix, or not a short token
        answer = http.get(gateway.api("actions"), headers={"X-Request-ID": unusable.encode("utf-8")})
        assert answer.ok and len(answer.headers["X-Request-ID"]) == 32 and answer.headers["X-Request-ID"] != unusable


def test_module_code_sees_the_activation_environment_at_init(gateway, http):
    """The ``__OW_*`` variables of the activation a container starts for are set before the action's
    module code runs (OpenWhisk's invoker passes them to /init); later runs see their own."""
    code = ("import os\nAT_INIT = (os.environ['__OW_NAMESPACE'], os.environ['__OW_ACTIVATION_ID'])\n"
            "def main(args):\n    return {'at_init': list(AT_INIT), 'now': os.environ['__OW_ACTIVATION_ID']}\n")
    name = deploy(http, gateway, code=code)
    first = http.post(gateway.api(f"actions/{name}"), params={"blocking": "true"}, json={})
    assert first.status_code == 200, first.text
    result = first.json()["response"]["result"]
    assert result["at_init"] == [gateway.namespace, first.json()["activationId"]] == [gateway.namespace, result["now"]]
    warm = http.post(gateway.api(f"actions/{name}"), params={"blocking": "true"}, json={}).json()
    assert warm["response"]["result"]["now"] == warm["activationId"] != result["now"]


def test_blocking_caller_waits_at_most_its_timeout(gateway, http):
    """``timeout`` (ms) bounds a blocking caller's wait, as OpenWhisk's: past it the answer is a 202 and
    the activation goes on to its record; it must be 1 up to the configured wait (60,000 ms here)."""
    name = deploy(http, gateway)
    started = time.monotonic()
    early = http.post(gateway.api(f"actions/{name}"), params={"blocking": "true", "timeout": "300"}, json={"sleep": 2})
    waited = time.monotonic() - started
    assert early.status_code == 202 and 0.3 <= waited < 1.5, (early.status_code, waited)
    activation_id = early.json()["activationId"]
    assert early.headers["x-openwhisk-activation-id"] == activation_id
    assert gateway.wait_record(http, activation_id)["response"]["result"]["n"] == 0  # it still ran to the end
    in_time = http.post(gateway.api(f"actions/{name}"), params={"blocking": "true", "timeout": "60000"}, json={"n": 5})
    assert in_time.status_code == 200 and in_time.json()["response"]["result"]["n"] == 5
    for bad in ("0", "-5", "60001", "1.5", "abc", "", "9" * 40):
        for blocking in ("true", "false"):  # read whether or not the caller waits, as OpenWhisk reads it
            answer = http.post(gateway.api(f"actions/{name}"), params={"blocking": blocking, "timeout": bad}, json={})
            assert answer.status_code == 400, (bad, answer.text)
            assert answer.json()["error"] == ("The query parameter 'timeout' was malformed:\n"
                                              "Timeout must be number of milliseconds up to 60000.")


def test_an_integer_beyond_64_bits_is_answered_as_json_carries_it(gateway, http):
    """JSON has no integer limit and Python's runtime returns any; the answer, the record and the
    listing carry it exactly (the answer was a 500 while the record was stored)."""
    huge = 2**70 + 1
    name = deploy(http, gateway, code=f"def main(args):\n    return {{'n': {huge}, 'got': args.get('x')}}\n")
    answer = http.post(gateway.api(f"actions/{name}"), params={"blocking": "true"},
                       data=f'{{"x": -{huge}}}', headers={"Content-Type": "application/json"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["response"]["result"] == {"n": huge, "got": -huge}
    only = http.post(gateway.api(f"actions/{name}"), params={"blocking": "true", "result": "true"})
    assert only.status_code == 200 and only.json() == {"n": huge, "got": None}
    stored = http.get(gateway.api(f"activations/{answer.json()['activationId']}"))
    assert stored.json()["response"]["result"]["n"] == huge
    listed = http.get(gateway.api("activations"), params={"name": name, "docs": "true"})
    assert {record["response"]["result"]["n"] for record in listed.json()} == {huge}


def test_an_array_result_is_answered_alone(gateway, http):
    """A blocking invoke of an action whose result is an array answers the array, with or without
    ``result=true`` (OpenWhisk's); the record keeps it, and the SDK reads the record behind it."""
    name = deploy(http, gateway, code="def main(args):\n    return [1, 'two', args]\n")
    for params in ({"blocking": "true"}, {"blocking": "true", "result": "true"}):
        answer = http.post(gateway.api(f"actions/{name}"), params=params, json={"n": 3})
        assert answer.status_code == 200 and answer.json() == [1, "two", {"n": 3}], answer.text
        record = http.get(gateway.api(f"activations/{answer.headers['x-openwhisk-activation-id']}")).json()
        assert record["response"]["result"] == [1, "two", {"n": 3}] and record["response"]["success"]
    client = Client(gateway.url, gateway.auth)
    assert client.invoke_record(name, {"n": 4})["response"]["result"] == [1, "two", {"n": 4}]
    assert client.invoke(name, {"n": 5}) == [1, "two", {"n": 5}]


def test_a_sequence_passes_an_array_result_on(gateway, http):
    """The next component's input is the previous one's array as it is, without its parameters
    (OpenWhisk's); the sequence is recorded with the last result."""
    array = deploy(http, gateway, code="def main(args):\n    return [args.get('n'), 'x']\n")
    echo = deploy(http, gateway, code="def main(args):\n    return args\n", parameters=[{"key": "p", "value": 1}])
    seq = f"seq-{uuid.uuid4().hex[:8]}"
    assert http.put(gateway.api(f"actions/{seq}"), json={"exec": {"kind": "sequence", "components": [array, echo]}}).ok
    answer = http.post(gateway.api(f"actions/{seq}"), params={"blocking": "true"}, json={"n": 7})
    assert answer.status_code == 200 and answer.json() == [7, "x"], answer.text
    record = gateway.wait_record(http, answer.headers["x-openwhisk-activation-id"])
    assert record["response"]["result"] == [7, "x"] and len(record["logs"]) == 2


def test_a_sequences_parameters_are_its_components_as_in_openwhisk(gateway, http):
    """OpenWhisk stores a sequence's parameters as ``_actions`` (its components) and hands the first
    component the request's input alone, which that component merges with its own parameters."""
    echo = deploy(http, gateway, code="def main(args):\n    return args\n", parameters=[{"key": "own", "value": 1}])
    seq = f"seq-{uuid.uuid4().hex[:8]}"
    created = http.put(gateway.api(f"actions/{seq}"), json={"exec": {"kind": "sequence", "components": [echo]},
                                                           "parameters": [{"key": "p", "value": "seq"}]})
    assert created.status_code == 200, created.text
    components = [f"/{gateway.namespace}/{echo}"]
    assert created.json()["parameters"] == [{"key": "_actions", "value": components}]
    answer = http.post(gateway.api(f"actions/{seq}"), params={"blocking": "true", "result": "true"}, json={"x": 2})
    assert answer.status_code == 200 and answer.json() == {"own": 1, "x": 2}, answer.text
    updated = http.put(gateway.api(f"actions/{seq}"), params={"overwrite": "true"},
                       json={"parameters": [{"key": "p", "value": "again"}]})
    assert updated.status_code == 200 and updated.json()["parameters"] == [{"key": "_actions", "value": components}]


def test_a_failure_inside_owx_is_recorded_not_lost(gateway, http, monkeypatch):
    """Whatever fails inside owx while an activation runs (here: reading a sequence's second component
    from the store), the caller gets a 500 and the activation a record saying so, which still lists
    the component that ran (OpenWhisk's sequence keeps its components' ids)."""
    first, component = deploy(http, gateway), deploy(http, gateway)
    seq = f"seq-{uuid.uuid4().hex[:8]}"
    assert http.put(gateway.api(f"actions/{seq}"),
                    json={"exec": {"kind": "sequence", "components": [first, component]}}).ok
    catalog = gateway.service.catalog
    resolve = catalog.resolve

    def failing(path, caller):
        if path.name == component:
            raise RuntimeError("the store broke")
        return resolve(path, caller)

    monkeypatch.setattr(catalog, "resolve", failing)
    answer = http.post(gateway.api(f"actions/{seq}"), params={"blocking": "true"}, json={})
    assert answer.status_code == 500, answer.text
    record = gateway.wait_record(http, answer.headers["x-openwhisk-activation-id"])
    assert record["response"]["status"] == "whisk internal error"
    assert record["response"]["result"] == {"error": "whisk internal error: the store broke"}
    assert len(record["logs"]) == 1 and gateway.wait_record(http, record["logs"][0])["name"] == first


def test_activation_listing_and_filters(gateway, http):
    name = deploy(http, gateway)
    before = int(time.time() * 1000)
    ids = [http.post(gateway.api(f"actions/{name}"), params={"blocking": "true"}, json={"n": i}).json()["activationId"]
           for i in range(3)]
    listed = http.get(gateway.api("activations"), params={"name": name}).json()
    assert [a["activationId"] for a in listed] == ids[::-1]  # newest first
    assert "response" not in listed[0] and listed[0]["statusCode"] == 0
    full = http.get(gateway.api("activations"), params={"name": name, "docs": "true", "limit": 1}).json()
    assert len(full) == 1 and full[0]["response"]["result"]["n"] == 2
    assert http.get(gateway.api("activations"), params={"name": name, "skip": 2}).json()[0]["activationId"] == ids[0]
    assert http.get(gateway.api("activations"), params={"name": name, "count": "true"}).json() == {"activations": 3}
    assert http.get(gateway.api("activations"), params={"name": name, "since": before}).json()
    assert http.get(gateway.api("activations"), params={"name": name, "upto": before - 1}).json() == []
    assert http.get(gateway.api("activations"), params={"name": name, "upto": -1}).json() == []  # before 1970
    assert len(http.get(gateway.api("activations"), params={"name": name, "since": -1}).json()) == 3
    for yes in ("YES", "on", "1"):  # OpenWhisk's booleans
        assert http.get(gateway.api("activations"), params={"name": name, "count": yes}).json() == {"activations": 3}
    assert http.get(gateway.api("activations"), params={"name": name, "count": "off"}).json()[0]["activationId"] == ids[2]
    assert http.get(gateway.api("activations"), params={"count": "true", "docs": "true"}).status_code == 400
    assert http.get(gateway.api("activations/not-an-id")).status_code == 400
    assert http.get(gateway.api(f"activations/{uuid.uuid4().hex}")).status_code == 404


def test_a_page_of_full_records_is_read_one_at_a_time_within_its_bound(gateway, http, monkeypatch):
    """``docs=true`` answers whole records, up to 11 MB each with their logs: 200 of them took gigabytes
    of the gateway's memory at once. A page past the bound (here shrunk to about two records) is a 400
    that says how to ask, and the listing without docs never reads logs or results."""
    from owx.gateway.api import activations

    name = deploy(http, gateway)
    ids = [http.post(gateway.api(f"actions/{name}"), params={"blocking": "true"}, json={"n": i}).json()["activationId"]
           for i in range(3)]
    one = len(json.dumps(http.get(gateway.api(f"activations/{ids[0]}")).json()))
    monkeypatch.setattr(activations, "LISTED_DOCS_MAX_BYTES", 2 * one + 100)
    two = http.get(gateway.api("activations"), params={"name": name, "docs": "true", "limit": 2})
    assert [r["activationId"] for r in two.json()] == ids[:0:-1] and two.json()[0]["response"]["result"]["n"] == 2
    three = http.get(gateway.api("activations"), params={"name": name, "docs": "true", "limit": 3})
    assert three.status_code == 400 and "ask for fewer with 'limit'" in three.json()["error"]


def test_sequences_pipe_results(gateway, http):
    add = deploy(http, gateway, code="def main(a):\n    return {'n': a.get('n', 0) + 1}\n")
    double = deploy(http, gateway, code="def main(a):\n    return {'n': a['n'] * 2}\n")
    seq = f"seq-{uuid.uuid4().hex[:8]}"
    created = http.put(gateway.api(f"actions/{seq}"),
                       json={"exec": {"kind": "sequence", "components": [f"/_/{add}", double]}})
    assert created.status_code == 200, created.text
    record = http.post(gateway.api(f"actions/{seq}"), params={"blocking": "true"}, json={"n": 4}).json()
    assert record["response"]["result"] == {"n": 10}
    assert len(record["logs"]) == 2 and annotations(record)["kind"] == "sequence"
    child = http.get(gateway.api(f"activations/{record['logs'][0]}")).json()
    assert child["cause"] == record["activationId"]
    missing = http.put(gateway.api(f"actions/{seq}-x"), json={"exec": {"kind": "sequence", "components": ["nope"]}})
    assert missing.status_code == 400
    cyclic = http.put(gateway.api(f"actions/{seq}"), params={"overwrite": "true"},
                      json={"exec": {"kind": "sequence", "components": [seq]}})
    assert cyclic.status_code == 400


def test_a_sequences_record_is_annotated_as_openwhisks(gateway, http):
    """A sequence's record has OpenWhisk's annotations: its own timeout and log limits with the largest
    memory limit among its components, the time it waited, whether it is topmost, no ``timeout`` flag;
    an inner sequence's is caused by a sequence."""
    small = deploy(http, gateway, code="def main(a):\n    return a\n", limits={"memory": 128})
    large = deploy(http, gateway, code="def main(a):\n    return a\n", limits={"memory": 320})
    inner, outer = (f"seq-{uuid.uuid4().hex[:8]}" for _ in range(2))
    assert http.put(gateway.api(f"actions/{inner}"), json={"exec": {"kind": "sequence", "components": [large]},
                                                           "limits": {"timeout": 7000, "logs": 3}}).ok
    assert http.put(gateway.api(f"actions/{outer}"), json={"exec": {"kind": "sequence", "components": [small, inner]},
                                                           "limits": {"timeout": 9000, "logs": 2}}).ok
    record = http.post(gateway.api(f"actions/{outer}"), params={"blocking": "true"}, json={"x": 1}).json()
    notes = annotations(record)
    assert notes["limits"] == {"timeout": 9000, "memory": 320, "logs": 2, "concurrency": 1}
    assert notes["topmost"] is True and notes["kind"] == "sequence" and "timeout" not in notes
    assert isinstance(notes["waitTime"], int) and 0 <= notes["waitTime"] < 5000 and "causedBy" not in notes
    nested = annotations(gateway.wait_record(http, record["logs"][1]))
    assert nested["limits"] == {"timeout": 7000, "memory": 320, "logs": 3, "concurrency": 1}
    assert nested["topmost"] is False and nested["causedBy"] == "sequence"


def test_final_protects_the_parameters_with_values_as_openwhisk(gateway, http):
    """``final: true`` (the JSON boolean) keeps an invoke from overriding the action's and its package's
    parameters that have a value; a null-valued one may be set, and ``final: "true"`` protects nothing."""
    package = f"pkg-{uuid.uuid4().hex[:8]}"
    assert http.put(gateway.api(f"packages/{package}"), json={"parameters": [{"key": "p", "value": 1}]}).ok
    echo = "def main(a):\n    return a\n"
    params = [{"key": "a", "value": 1}, {"key": "n", "value": None}]
    final = deploy(http, gateway, code=echo, parameters=params, annotations=[{"key": "final", "value": True}])
    assert http.put(gateway.api(f"actions/{package}/{final}"), json={
        "exec": {"kind": "python:3", "code": echo}, "annotations": [{"key": "final", "value": True}]}).ok
    loose = deploy(http, gateway, code=echo, parameters=params, annotations=[{"key": "final", "value": "true"}])

    def invoke(name, **given):
        return http.post(gateway.api(f"actions/{name}"), params={"blocking": "true", "result": "true"}, json=given)

    for name, given in ((final, {"a": 2}), (f"{package}/{final}", {"p": 2})):
        refused = invoke(name, **given)
        assert refused.status_code == 400
        assert refused.json()["error"] == "Request defines parameters that are not allowed (e.g., reserved properties)."
    assert invoke(final, n=5, other=1).json() == {"a": 1, "n": 5, "other": 1}
    assert invoke(loose, a=2).json() == {"a": 2, "n": None}


def test_init_parameters_are_the_containers_environment_not_arguments(gateway, http):
    """OpenWhisk's ``init: true`` parameters reach the runtime at /init as environment variables; they
    are not arguments, and a caller's argument of that name is dropped, not passed on."""
    code = "import os\ndef main(args):\n    return {'args': args, 'env': [os.environ.get('TOKEN'), os.environ.get('LIMITS')]}\n"
    params = [{"key": "TOKEN", "value": "t0", "init": True}, {"key": "LIMITS", "value": {"n": 3}, "init": True},
              {"key": "plain", "value": 1}]
    name = deploy(http, gateway, code, parameters=params)
    shown = http.get(gateway.api(f"actions/{name}")).json()["parameters"]
    assert shown == [{"key": "TOKEN", "value": "t0", "init": True}, {"key": "LIMITS", "value": {"n": 3}, "init": True},
                     {"key": "plain", "value": 1}]
    answer = http.post(gateway.api(f"actions/{name}"), params={"blocking": "true", "result": "true"},
                       json={"TOKEN": "forged", "x": 2})
    assert answer.json() == {"args": {"plain": 1, "x": 2}, "env": ["t0", '{"n": 3}']}
    bad = http.put(gateway.api(f"actions/{name}"), params={"overwrite": "true"},
                   json={"parameters": [{"key": "TOKEN", "value": "t", "init": "yes"}]})
    assert bad.status_code == 400, bad.text


def test_web_actions(gateway, http):
    code = '''
def main(args):
    return {"statusCode": 201, "headers": {"content-type": "application/json", "x-owx": "yes"},
            "body": {"method": args["__ow_method"], "path": args["__ow_path"], "q": args.get("q"),
                     "agent": args["__ow_headers"].get("x-test")}}
'''
    name = deploy(http, gateway, code=code, annotations=[{"key": "web-export", "value": True}])
    url = f"{gateway.url}/api/v1/web/{gateway.namespace}/default/{name}"
    answer = requests.post(url + "/extra/path?q=1", headers={"x-test": "t"})
    assert answer.status_code == 201 and answer.headers["x-owx"] == "yes"
    assert answer.json() == {"method": "post", "path": "/extra/path", "q": "1", "agent": "t"}
    assert requests.get(url + ".json").json()["statusCode"] == 201
    text = deploy(http, gateway, code="def main(a):\n    return {'body': '<b>hi</b>'}\n",
                  annotations=[{"key": "web-export", "value": True}])
    html = requests.get(f"{gateway.url}/api/v1/web/{gateway.namespace}/default/{text}.html")
    assert html.text == "<b>hi</b>" and html.headers["content-type"].startswith("text/html")
    svg = requests.get(f"{gateway.url}/api/v1/web/{gateway.namespace}/default/{text}.svg")
    assert svg.text == "<b>hi</b>" and svg.headers["content-type"].startswith("image/svg+xml")
    not_text = deploy(http, gateway, code="def main(a):\n    return {'body': {'a': 1}}\n",
                      annotations=[{"key": "web-export", "value": True}])
    for extension, media in ((".html", "text/html"), (".text", "text/plain"), (".svg", "image/svg+xml")):
        refused = requests.get(f"{gateway.url}/api/v1/web/{gateway.namespace}/default/{not_text}{extension}")
        assert refused.status_code == 400 and refused.json()["error"] == f"Response is not valid '{media}'."
    raw = deploy(http, gateway, code="def main(a):\n    return {'body': a['__ow_query'] + '|' + a['__ow_body']}\n",
                 annotations=[{"key": "web-export", "value": True}, {"key": "raw-http", "value": True}])
    plain = requests.post(f"{gateway.url}/api/v1/web/{gateway.namespace}/default/{raw}.text?a=b", data="payload")
    assert plain.text == "a=b|payload"
    hidden = deploy(http, gateway)
    assert requests.get(f"{gateway.url}/api/v1/web/{gateway.namespace}/default/{hidden}.json").status_code == 404


WHO = "def main(args):\n    return {'user': args.get('__ow_user'), 'method': args['__ow_method'], 'q': args.get('q')}\n"


def web(http, gateway, *annotations):
    name = deploy(http, gateway, code=WHO, annotations=[{"key": "web-export", "value": True}, *annotations])
    return f"{gateway.url}/api/v1/web/{gateway.namespace}/default/{name}.json"


def test_web_action_secured_by_require_whisk_auth(gateway, http):
    """``require-whisk-auth``: a secret (string or number, as ``wsk --web-secure`` sets it) in the
    X-Require-Whisk-Auth header, or, with true, any valid OpenWhisk key; otherwise 401, and the action
    does not run."""
    for secret in ("s3cr3t", 7355608):
        url = web(http, gateway, {"key": "require-whisk-auth", "value": secret})
        for headers in ({}, {"X-Require-Whisk-Auth": "wrong"}, {"X-Require-Whisk-Auth": f"{secret}x"}):
            refused = requests.get(url, headers=headers)
            assert refused.status_code == 401 and refused.json()["error"], refused.text
            assert refused.headers["Access-Control-Allow-Origin"] == "*"
        assert requests.get(url, headers={"X-Require-Whisk-Auth": str(secret)}).json()["user"] is None
        name = url.rsplit("/", 1)[1].removesuffix(".json")
        ran = http.get(gateway.api("activations"), params={"name": name, "count": "true"}).json()
        assert ran == {"activations": 1}  # the refused calls ran nothing
    keyed = web(http, gateway, {"key": "require-whisk-auth", "value": True})
    assert requests.get(keyed).status_code == 401
    assert requests.get(keyed, auth=("not", "a-key")).status_code == 401
    assert requests.get(keyed, auth=tuple(gateway.auth.split(":", 1))).json()["user"] == gateway.namespace
    assert requests.get(web(http, gateway, {"key": "require-whisk-auth", "value": {"odd": 1}})).status_code == 401
    assert requests.get(web(http, gateway, {"key": "require-whisk-auth", "value": False})).json()["method"] == "get"


def test_web_action_request_context_cannot_be_forged(gateway, http):
    """``__ow_*`` properties are owx's: a query or body naming one is a 400; ``__ow_user`` is the
    namespace of a valid key only."""
    url = web(http, gateway)
    assert requests.get(url, params={"q": "1"}).json() == {"user": None, "method": "get", "q": "1"}
    for forged in ({"params": {"__ow_user": "admin"}}, {"json": {"__ow_method": "delete"}},
                   {"data": {"__ow_headers": "x"}}):
        answer = requests.post(url, **forged)
        assert answer.status_code == 400 and "not allowed" in answer.json()["error"], answer.text
    assert requests.get(url, auth=tuple(gateway.auth.split(":", 1))).json()["user"] == gateway.namespace
    seen = deploy(http, gateway, code="def main(args):\n    return {'headers': args['__ow_headers']}\n",
                  annotations=[{"key": "web-export", "value": True}])
    seen_url = f"{gateway.url}/api/v1/web/{gateway.namespace}/default/{seen}.json"
    keyed = requests.get(seen_url, auth=tuple(gateway.auth.split(":", 1))).json()["headers"]
    assert "authorization" not in keyed and keyed["user-agent"]  # a valid key is the caller's, not the action's
    encoded = base64.b64encode(gateway.auth.encode()).decode()
    for mangled in (f"Basic  {encoded}", f"Basic {encoded} ", f"basic {encoded.rstrip('=')}",
                    f"Basic {encoded[:20]} {encoded[20:]}"):  # refused by the API, yet the key is in it
        assert "authorization" not in requests.get(seen_url, headers={"Authorization": mangled}).json()["headers"]
    app_basic = "Basic " + base64.b64encode(b"alice:app-password").decode()
    assert requests.get(seen_url, headers={"Authorization": app_basic}).json()["headers"]["authorization"] == app_basic
    other = requests.get(seen_url, headers={"Authorization": "Bearer app-token"}).json()["headers"]
    assert other["authorization"] == "Bearer app-token"  # an application's own scheme reaches it


def test_web_action_cors(gateway, http):
    """OPTIONS is answered by owx with CORS headers (the action does not run) and every answer carries
    them, unless the action takes CORS over with ``web-custom-options``."""
    url = web(http, gateway)
    preflight = requests.options(url, headers={"Access-Control-Request-Headers": "X-Custom, Content-Type"})
    assert preflight.status_code == 200 and preflight.headers["Access-Control-Allow-Origin"] == "*"
    assert preflight.headers["Access-Control-Allow-Headers"] == "X-Custom, Content-Type"
    assert "PATCH" in preflight.headers["Access-Control-Allow-Methods"]
    assert "x-openwhisk-activation-id" not in preflight.headers  # nothing ran
    answer = requests.get(url)
    assert answer.json()["method"] == "get" and answer.headers["Access-Control-Allow-Origin"] == "*"
    assert "Authorization" in answer.headers["Access-Control-Allow-Headers"]
    custom = web(http, gateway, {"key": "web-custom-options", "value": True},
                 {"key": "require-whisk-auth", "value": "s"})
    own = requests.options(custom)
    assert own.status_code == 200 and own.json()["method"] == "options"  # the action answered it
    assert "Access-Control-Allow-Origin" not in own.headers
    assert requests.get(custom).status_code == 401
    its_own = deploy(http, gateway, code=(
        "def main(args):\n"
        "    return {'headers': {'Access-Control-Allow-Origin': 'https://app.example',\n"
        "                        'Access-Control-Allow-Methods': 'GET'}, 'body': 'ok'}\n"),
        annotations=[{"key": "web-export", "value": True}, {"key": "web-custom-options", "value": True}])
    for method in (requests.get, requests.options):
        answer = method(f"{gateway.url}/api/v1/web/{gateway.namespace}/default/{its_own}.http")
        assert answer.status_code == 200 and answer.text == "ok"
        assert answer.headers["Access-Control-Allow-Origin"] == "https://app.example"  # its own, as it sent them
        assert answer.headers["Access-Control-Allow-Methods"] == "GET"


def test_rest_api_answers_allow_any_origin(gateway, http):
    """As OpenWhisk's controller: every REST API answer (invokes on the event loop, Flask's views,
    errors) carries CORS headers, and a preflight OPTIONS is answered without a key."""
    name = deploy(http, gateway)
    answers = [http.get(gateway.api("actions")), requests.get(f"{gateway.url}/api/v1"),
               http.post(gateway.api(f"actions/{name}"), params={"blocking": "true"}, json={}),
               http.post(gateway.api(f"actions/{name}"), json={}),
               http.post(gateway.api("actions/missing"), json={}), http.get(gateway.api("actions/missing")),
               requests.post(gateway.api(f"actions/{name}"), json={}),
               requests.options(gateway.api(f"actions/{name}"), headers={"Access-Control-Request-Method": "POST"})]
    assert [a.status_code for a in answers] == [200, 200, 200, 202, 404, 404, 401, 200]
    for answer in answers:
        assert answer.headers["Access-Control-Allow-Origin"] == "*", answer.request.url
        assert "POST" in answer.headers["Access-Control-Allow-Methods"]
        assert "Authorization" in answer.headers["Access-Control-Allow-Headers"]


@pytest.fixture(scope="module")
def strict_gateway(tmp_path_factory):
    server, running = start_gateway(tmp_path_factory.mktemp("strict"),
                                    gateway={"invocations_per_minute": 4, "blocking_wait_s": 0.5})
    yield running
    server.stop()


def test_throttle_and_blocking_limit(strict_gateway):
    gateway, http = strict_gateway, strict_gateway.session()
    name = deploy(http, gateway)
    slow = http.post(gateway.api(f"actions/{name}"), params={"blocking": "true"}, json={"sleep": 2})
    assert slow.status_code == 202 and len(slow.json()["activationId"]) == 32  # waited 0.5 s, then 202
    statuses = [http.post(gateway.api(f"actions/{name}"), json={}).status_code for _ in range(4)]
    assert statuses[:3] == [202, 202, 202] and statuses[3] == 429
    assert "Too many requests" in http.post(gateway.api(f"actions/{name}"), json={}).json()["error"]
    record = gateway.wait_record(http, slow.json()["activationId"])
    assert record["response"]["success"]  # the slow activation still completed and was recorded


def test_wait_time_runs_from_the_gateways_receipt(tmp_path_factory):
    """As OpenWhisk's ``waitTime`` runs from the controller's receipt: an activation that waited for a
    run slot of its namespace (2 workers: 1 slot each) counts that wait."""
    server, gateway = start_gateway(tmp_path_factory.mktemp("slots"), gateway={"workers": 2})
    try:
        http = gateway.session()
        name = deploy(http, gateway)
        assert http.post(gateway.api(f"actions/{name}"), params={"blocking": "true"}, json={}).ok  # warm
        first, second = (http.post(gateway.api(f"actions/{name}"), json={"sleep": 1}).json()["activationId"]
                         for _ in range(2))
        waits = [annotations(gateway.wait_record(http, aid))["waitTime"] for aid in (first, second)]
        assert waits[0] < 500 and waits[1] >= 800
    finally:
        server.stop()


@pytest.mark.parametrize("route", ["invoke", "web action"])
def test_refused_bodies_count_against_the_rate_and_none_is_parsed_over_it(tmp_path_factory, route):
    """A caller cannot make the gateway parse JSON without limit (a megabyte of it takes tens of ms)
    by sending bodies it refuses: each counts against the rate (a web action's, which anyone may
    call, against its owner's), as every attempt counts in OpenWhisk's entitlement check, and over
    the rate no body is read (429)."""
    server, gateway = start_gateway(tmp_path_factory.mktemp("bodies"), gateway={"invocations_per_minute": 5})
    try:
        http = gateway.session()
        send = (partial(http.post, gateway.api(f"actions/{deploy(http, gateway)}")) if route == "invoke"
                else partial(requests.post, web(http, gateway)))
        post = partial(send, headers={"Content-Type": "application/json"})
        broken = b'{"a": [' + b"[]," * 1000 + b"}"
        assert [post(data=broken).status_code for _ in range(5)] == [400] * 5
        assert post(data=broken).status_code == 429
        assert post(json={}).status_code == 429
    finally:
        server.stop()


def test_invokes_of_missing_actions_count_against_the_rate(tmp_path_factory):
    """As OpenWhisk's entitlement check counts every attempt: a tenant cannot look names up in the store
    without limit by invoking ones that do not exist; another namespace is not affected."""
    server, gateway = start_gateway(tmp_path_factory.mktemp("rate"), gateway={"invocations_per_minute": 5})
    try:
        http = gateway.session()
        name = deploy(http, gateway)
        assert [http.post(gateway.api(f"actions/nope-{i}"), json={}).status_code for i in range(5)] == [404] * 5
        over = http.post(gateway.api(f"actions/{name}"), json={})
        assert over.status_code == 429 and "Too many requests" in over.json()["error"]
        assert http.post(gateway.api("actions/nope-5"), json={}).status_code == 429  # no lookup any more
        other = gateway.tenant(f"other-{uuid.uuid4().hex[:6]}")
        assert other.session().post(other.api("actions/nope"), json={}).status_code == 404
    finally:
        server.stop()
