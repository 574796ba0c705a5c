"""Arbitrary bodies, names and query strings never produce a 500 and never damage stored records."""

from __future__ import annotations

import base64
import json
import re
from urllib.parse import quote

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from owx.gateway.names import NAME_PATTERN

KEEP = "def main(args):\n    return {'kept': True}\n"
NAME = re.compile(NAME_PATTERN)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12,
)
action_like = st.fixed_dictionaries({}, optional={
    "exec": st.dictionaries(st.sampled_from(["kind", "code", "binary", "main", "image", "components"]), json_values)
    | json_values,
    "limits": st.dictionaries(st.sampled_from(["timeout", "memory", "logs", "concurrency", "other"]), json_values)
    | json_values,
    "parameters": st.lists(st.dictionaries(st.sampled_from(["key", "value"]), json_values), max_size=3) | json_values,
    "annotations": json_values,
    "publish": json_values,
})
names = st.text(alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="/?#%"), min_size=1,
                max_size=40)
fuzz = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@fuzz
@given(body=action_like, name=names)
def test_put_action_never_500(gateway, http, body, name):
    answer = http.put(gateway.api(f"actions/{name}"), json=body, params={"overwrite": "true"})
    assert answer.status_code < 500, answer.text
    assert set(answer.json()) >= ({"error", "code"} if answer.status_code >= 400 else {"name"})


@fuzz
@given(raw=st.binary(max_size=200) | json_values.map(lambda v: json.dumps(v).encode()),
       query=st.dictionaries(st.sampled_from(["blocking", "result", "overwrite", "limit", "skip", "count", "docs",
                                              "since", "upto", "name", "code"]), st.text(max_size=8), max_size=4))
def test_any_body_and_query_never_500(gateway, http, raw, query):
    keep = http.put(gateway.api("actions/fuzz-keep"), json={"exec": {"kind": "python:3", "code": KEEP}},
                    params={"overwrite": "true"})
    assert keep.status_code == 200
    before = http.get(gateway.api("actions/fuzz-keep")).json()
    headers = {"Content-Type": "application/json"}
    for method, path in (("PUT", "actions/fuzz-keep"), ("POST", "actions/fuzz-keep"), ("GET", "actions"),
                         ("GET", "activations"), ("PUT", "packages/fuzz-pkg"), ("GET", "packages")):
        answer = http.request(method, gateway.api(path), data=raw, params=query, headers=headers)
        assert answer.status_code < 500, (method, path, answer.status_code, answer.text)
    after = http.get(gateway.api("actions/fuzz-keep")).json()
    if after["updated"] == before["updated"]:  # not a successful update: the record is untouched
        assert after == before


# -- hostile JSON, names, query strings and credentials (each once made a 500) -------------------
_hostile_leaves = st.sampled_from([
    "NaN", "Infinity", "-Infinity", "1e400", "-1e999", '"\\ud800"', '"x\\udfff"', '"\\u0000"', "9" * 4400, "0",
    "true", "null", '"ok"', "1.5", "-0"])
hostile_json = st.recursive(
    _hostile_leaves,
    lambda children: st.lists(children, max_size=3).map(lambda xs: "[" + ",".join(xs) + "]")
    | st.lists(st.tuples(_hostile_leaves.filter(lambda s: s.startswith('"')), children), max_size=3).map(
        lambda kvs: "{" + ",".join(f"{k}:{v}" for k, v in kvs) + "}"),
    max_leaves=6,
) | st.integers(90, 1500).map(lambda depth: "[" * depth + "]" * depth)
hostile = settings(max_examples=80, deadline=None,
                   suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _is_openwhisk_error(answer) -> bool:
    return answer.status_code < 500 and (answer.status_code < 400 or set(answer.json()) == {"error", "code"})


@hostile
@given(value=hostile_json)
def test_hostile_json_is_refused_or_kept(gateway, http, value):
    """Anything the strict parser lets through must also be storable: a 200 means it round-trips."""
    headers = {"Content-Type": "application/json"}
    keep = http.put(gateway.api("actions/fuzz-keep"), json={"exec": {"kind": "python:3", "code": KEEP}},
                    params={"overwrite": "true"})
    assert keep.status_code == 200
    invoke = http.post(gateway.api("actions/fuzz-keep"), data='{"v": %s}' % value, headers=headers)
    assert _is_openwhisk_error(invoke), invoke.text[:200]
    body = '{"exec": {"kind": "python:3", "code": "x"}, "parameters": [{"key": "v", "value": %s}]}' % value
    put = http.put(gateway.api("actions/fuzz-params"), data=body, headers=headers, params={"overwrite": "true"})
    assert _is_openwhisk_error(put), put.text[:200]
    if put.status_code == 200:
        assert http.get(gateway.api("actions/fuzz-params")).status_code == 200


@hostile
@given(name=st.text(min_size=1, max_size=300).filter(lambda n: n not in (".", "..") and "/" not in n))
def test_only_openwhisk_names_are_accepted(gateway, http, name):
    """Any text as an action name ('/' is the package separator, decoded by the HTTP server)."""
    answer = http.put(gateway.api(f"actions/{quote(name, safe='')}"), params={"overwrite": "true"},
                      json={"exec": {"kind": "python:3", "code": KEEP}})
    assert _is_openwhisk_error(answer), answer.text[:200]
    assert (answer.status_code == 200) == bool(NAME.fullmatch(name)), (name, answer.text[:200])


@hostile
@given(query=st.dictionaries(st.sampled_from(["skip", "limit", "since", "upto", "name", "count", "docs"]),
                             st.text(max_size=30) | st.integers(-(2**70), 2**70).map(str), max_size=4))
def test_any_listing_query_is_a_4xx_or_a_listing(gateway, http, query):
    for path in ("actions", "packages", "activations"):
        answer = http.get(gateway.api(path), params=query)
        assert _is_openwhisk_error(answer), (path, query, answer.text[:200])


@hostile
@given(credentials=st.binary(max_size=2000) | st.text(max_size=300).map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_any_credentials_are_a_401(gateway, credentials):
    header = "Basic " + base64.b64encode(credentials).decode()
    answer = requests.get(gateway.api("actions"), headers={"Authorization": header})
    assert answer.status_code == 401 and set(answer.json()) == {"error", "code"}


http_like = st.fixed_dictionaries({}, optional={
    "statusCode": json_values | st.integers(-(2**70), 2**70) | st.text(max_size=6),
    "headers": st.dictionaries(st.text(max_size=12), json_values | st.lists(json_values, max_size=2), max_size=3)
    | json_values,
    "body": json_values,
})


@pytest.fixture(scope="module")
def web_echo(gateway) -> str:
    """A web action answering whatever its ``answer`` parameter holds."""
    body = {"exec": {"kind": "python:3", "code": "def main(args):\n    return args.get('answer')\n"},
            "annotations": [{"key": "web-export", "value": True}]}
    assert gateway.session().put(gateway.api("actions/fuzz-web"), json=body, params={"overwrite": "true"}
                                 ).status_code == 200
    return f"{gateway.url}/api/v1/web/{gateway.namespace}/default/fuzz-web"


@hostile
@given(answer=http_like | json_values, extension=st.sampled_from([".http", ".json", ".text", ".html", ""]))
def test_any_web_action_result_is_answered(web_echo, answer, extension):
    """Whatever a web action returns, the gateway answers it or says why: never a 500 it did not ask for."""
    reply = requests.post(web_echo + extension, json={"answer": answer})
    if not _asks_for_500(answer):
        assert reply.status_code != 500, (answer, reply.text[:200])  # 502 is the action's failure, as in OpenWhisk


def _asks_for_500(answer: object) -> bool:
    """Whether a web action's result names the status 500 itself (``500``, ``500.0``, ``"500"``)."""
    code = answer.get("statusCode") if isinstance(answer, dict) else None
    try:
        return not isinstance(code, bool) and float(str(code).strip()) == 500
    except ValueError:
        return False


conductor_like = st.fixed_dictionaries({}, optional={
    "action": st.sampled_from(["fuzz-inc", "/_/fuzz-inc", "fuzz-conductor", "missing", "/other/secret", "a b"])
    | json_values,
    "params": json_values,
    "state": json_values,
})
INC = "def main(args):\n    return {'n': (args.get('n') if isinstance(args.get('n'), int) else 0) + 1}\n"
# its first step answers what the test gives it, and so does every step its state keeps the answer for
CONDUCTING = "def main(args):\n    return args['answer'] if 'answer' in args else {'end': sorted(args)}\n"


@pytest.fixture(scope="module")
def conductor(gateway) -> str:
    """A conductor action whose first step returns whatever its ``answer`` parameter holds."""
    http = gateway.session()
    for name, code, marks in (("fuzz-inc", INC, []),
                              ("fuzz-conductor", CONDUCTING, [{"key": "conductor", "value": True}])):
        body = {"exec": {"kind": "python:3", "code": code}, "annotations": marks}
        assert http.put(gateway.api(f"actions/{name}"), json=body, params={"overwrite": "true"}).status_code == 200
    return gateway.api("actions/fuzz-conductor")


@hostile
@given(answer=conductor_like | json_values)
def test_any_conductor_step_ends_in_a_stored_record(gateway, conductor, answer):
    """Whatever a conductor's step returns (names that do not parse or exist, another tenant's, itself;
    params and state of any shape), its composition ends with a record: never a 500, never lost."""
    reply = requests.post(conductor, params={"blocking": "true"}, json={"answer": answer},
                          auth=tuple(gateway.auth.split(":", 1)), timeout=120)
    assert reply.status_code in (200, 502), (answer, reply.text[:300])
    stored = requests.get(gateway.api(f"activations/{reply.headers['x-openwhisk-activation-id']}"),
                          auth=tuple(gateway.auth.split(":", 1)))
    assert stored.status_code == 200 and {"key": "conductor", "value": True} in stored.json()["annotations"]
    result = stored.json()["response"]["result"]
    assert reply.json() == (result if isinstance(result, list) else stored.json())  # an array is answered alone
