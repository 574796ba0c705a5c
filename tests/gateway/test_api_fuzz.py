"""Arbitrary bodies, names and query strings never produce a 500 and never damage stored records."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

KEEP = "def main(args):\n    return {'kept': True}\n"

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
fuzz = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


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
    if after["version"] == before["version"]:  # not a successful update: the record is untouched
        assert after == before
