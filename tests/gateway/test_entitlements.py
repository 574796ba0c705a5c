"""Two tenants on one gateway: what one may read, invoke and bind of the other's, as OpenWhisk decides.

Tenant A owns a published package ``shared``, a private package ``vault`` and a private action
``secret`` in its default package, all holding secrets in their parameters. Tenant B tries every
way the issue found (and OpenWhisk refuses) to reach them, and uses what A shares.
"""

from __future__ import annotations

import uuid

import pytest
import requests

from tests.gateway.conftest import RunningGateway

ECHO = "def main(args):\n    return args\n"
KEYS = "import os\n\ndef main(args):\n    return {'key': os.environ.get('__OW_API_KEY')}\n"
TOKEN = ("import secrets\nTOKEN = secrets.token_hex(8)\n\n"
         "def main(args):\n    return {'token': TOKEN}\n")


def denied(answer, resource: str) -> None:
    assert answer.status_code == 403, answer.text
    assert answer.json()["error"] == f"The supplied authentication is not authorized to access '{resource}'."
    assert set(answer.json()) == {"error", "code"}


def kv(**values) -> list[dict]:
    return [{"key": k, "value": v} for k, v in values.items()]


@pytest.fixture(scope="module")
def tenants(gateway: RunningGateway):
    """(a, b, http_a, http_b): A's entities created, B empty."""
    suffix = uuid.uuid4().hex[:6]
    a, b = gateway.tenant(f"alice-{suffix}"), gateway.tenant(f"bob-{suffix}")
    http_a, http_b = a.session(), b.session()
    steps = [
        ("packages/shared", {"publish": True, "parameters": kv(p="pkg", q="pkg", r="pkg", s="pkg")}),
        ("actions/shared/echo", {"exec": {"kind": "python:3", "code": ECHO}, "parameters": kv(r="act", s="act")}),
        ("actions/shared/token", {"exec": {"kind": "python:3", "code": TOKEN}}),
        ("actions/shared/keys", {"exec": {"kind": "python:3", "code": KEYS},
                                 "annotations": [{"key": "provide-api-key", "value": True}]}),
        ("packages/vault", {"parameters": kv(secret="vault-secret")}),
        ("actions/vault/leak", {"exec": {"kind": "python:3", "code": ECHO}}),
        ("actions/secret", {"exec": {"kind": "python:3", "code": ECHO}, "parameters": kv(secret="default-secret")}),
    ]
    for path, body in steps:
        answer = http_a.put(a.api(path), json=body)
        assert answer.status_code == 200, (path, answer.text)
    return a, b, http_a, http_b


def invoke(http, url, **params):
    return http.post(url, params={"blocking": "true", "result": "true"}, json=params)


def test_private_entities_of_another_namespace_are_refused(tenants):
    a, b, _, http_b = tenants
    ns = a.namespace
    denied(invoke(http_b, b.api("actions/secret", ns)), f"{ns}/secret")
    denied(http_b.get(b.api("actions/secret", ns)), f"{ns}/secret")
    denied(invoke(http_b, b.api("actions/vault/leak", ns)), f"{ns}/vault")
    denied(http_b.get(b.api("actions/vault/leak", ns)), f"{ns}/vault")
    denied(http_b.get(b.api("packages/vault", ns)), f"{ns}/vault")
    denied(http_b.get(b.api("actions/vault/", ns)), f"{ns}/vault")
    denied(http_b.get(b.api("packages/no-such-package", ns)), f"{ns}/no-such-package")  # no existence leak
    denied(http_b.get(b.api("actions", ns)), ns)
    denied(http_b.get(b.api("activations", ns)), ns)


def test_a_sequence_may_not_use_another_namespaces_private_actions(tenants):
    a, b, _, http_b = tenants
    ns = a.namespace
    for component, resource in ((f"/{ns}/secret", f"{ns}/secret"), (f"/{ns}/vault/leak", f"{ns}/vault")):
        answer = http_b.put(b.api("actions/steal"), json={"exec": {"kind": "sequence", "components": [component]}})
        denied(answer, resource)
    assert http_b.get(b.api("actions/steal")).status_code == 404


def test_a_binding_may_not_refer_to_another_namespaces_private_package(tenants):
    a, b, _, http_b = tenants
    ns = a.namespace
    for target in ("vault", "no-such-package"):
        answer = http_b.put(b.api("packages/bound-vault"), json={"binding": {"namespace": ns, "name": target}})
        denied(answer, f"{ns}/{target}")
    missing = http_b.put(b.api("packages/bound-missing"), json={"binding": {"namespace": "_", "name": "nothing"}})
    assert missing.status_code == 400 and missing.json()["error"] == "Binding references a package that does not exist."
    assert http_b.get(b.api("packages")).json() == []


def test_another_namespace_lists_only_published_packages(tenants):
    a, b, http_a, http_b = tenants
    assert [p["name"] for p in http_b.get(b.api("packages", a.namespace)).json()] == ["shared"]
    assert http_b.get(b.api("packages", a.namespace), params={"count": "true"}).json() == {"packages": 1}
    assert {p["name"] for p in http_a.get(a.api("packages")).json()} == {"shared", "vault"}
    shared = http_b.get(b.api("packages/shared", a.namespace))
    assert shared.status_code == 200 and {x["name"] for x in shared.json()["actions"]} == {"echo", "token", "keys"}


def test_writes_to_another_namespace_are_refused(tenants):
    a, b, _, http_b = tenants
    ns = a.namespace
    code = {"exec": {"kind": "python:3", "code": ECHO}}
    denied(http_b.put(b.api("actions/planted", ns), json=code), f"{ns}/planted")
    denied(http_b.put(b.api("actions/shared/planted", ns), json=code), f"{ns}/shared/planted")
    denied(http_b.delete(b.api("actions/shared/echo", ns)), f"{ns}/shared/echo")
    denied(http_b.put(b.api("packages/shared", ns), params={"overwrite": "true"}, json={"publish": False}),
           f"{ns}/shared")
    denied(http_b.delete(b.api("packages/shared", ns)), f"{ns}/shared")


def test_published_actions_are_invocable_with_package_parameters(tenants):
    a, b, _, http_b = tenants
    result = invoke(http_b, b.api("actions/shared/echo", a.namespace), s="inv")
    assert result.status_code == 200, result.text
    assert result.json() == {"p": "pkg", "q": "pkg", "r": "act", "s": "inv"}
    fetched = http_b.get(b.api("actions/shared/echo", a.namespace)).json()
    assert {p["key"]: p["value"] for p in fetched["parameters"]} == {"p": "pkg", "q": "pkg", "r": "act", "s": "act"}


def test_binding_invoke_merges_package_binding_action_and_request_parameters(tenants):
    a, b, http_a, http_b = tenants
    body = {"binding": {"namespace": a.namespace, "name": "shared"}, "parameters": kv(q="bind", r="bind", s="bind")}
    created = http_b.put(b.api("packages/mine"), json=body)
    assert created.status_code == 200, created.text
    assert created.json()["binding"] == {"namespace": a.namespace, "name": "shared"}
    assert {"key": "binding", "value": {"namespace": a.namespace, "name": "shared"}} in created.json()["annotations"]

    answer = http_b.post(b.api("actions/mine/echo"), params={"blocking": "true"}, json={"s": "inv"})
    assert answer.status_code == 200, answer.text
    record = answer.json()
    assert record["response"]["result"] == {"p": "pkg", "q": "bind", "r": "act", "s": "inv"}
    notes = {n["key"]: n["value"] for n in record["annotations"]}
    assert notes["path"] == f"{a.namespace}/shared/echo" and notes["binding"] == f"{b.namespace}/mine"
    assert record["namespace"] == b.namespace
    assert http_b.get(b.api(f"activations/{record['activationId']}")).status_code == 200
    assert http_a.get(a.api(f"activations/{record['activationId']}")).status_code == 404  # B's record, not A's
    for name, filed in (("mine/echo", True), ("shared/echo", False), ("echo", False)):  # filed as binding/action
        listed = http_b.get(b.api("activations"), params={"name": name, "limit": 200}).json()
        assert (record["activationId"] in {x["activationId"] for x in listed}) == filed, name
    assert http_b.get(b.api("activations"), params={"name": "mine/echo", "count": "true"}).json() == {"activations": 1}

    binding = http_b.get(b.api("packages/mine")).json()
    assert binding["name"] == "mine" and binding["binding"] == {"namespace": a.namespace, "name": "shared"}
    assert {p["key"]: p["value"] for p in binding["parameters"]} == {"p": "pkg", "q": "bind", "r": "bind", "s": "bind"}
    assert {x["name"] for x in binding["actions"]} == {"echo", "token", "keys"}
    listed = http_b.get(b.api("actions/mine/")).json()
    assert {x["name"] for x in listed} == {"echo", "token", "keys"}
    assert {x["namespace"] for x in listed} == {f"{a.namespace}/shared"}
    via = http_b.get(b.api("actions/mine/echo")).json()
    assert {p["key"]: p["value"] for p in via["parameters"]} == {"p": "pkg", "q": "bind", "r": "act", "s": "act"}

    nope = http_b.put(b.api("actions/mine/extra"), json={"exec": {"kind": "python:3", "code": ECHO}})
    assert nope.status_code == 400 and nope.json()["error"] == "Operation not permitted on package binding."
    twice = http_b.put(b.api("packages/mine-of-mine"), json={"binding": {"namespace": "_", "name": "mine"}})
    assert twice.status_code == 400 and twice.json()["error"] == "Cannot bind to another package binding."
    assert http_b.put(b.api("actions/lone"), json={"exec": {"kind": "python:3", "code": ECHO}}).ok
    to_action = http_b.put(b.api("packages/of-an-action"), json={"binding": {"namespace": "_", "name": "lone"}})
    assert to_action.status_code == 409 and to_action.json()["error"] == "Cannot bind to a resource that is not a package."
    convert = http_a.put(a.api("packages/shared"), params={"overwrite": "true"},
                         json={"binding": {"namespace": b.namespace, "name": "mine"}})
    assert convert.status_code == 403  # A may not read B's binding
    denied(http_a.get(a.api("packages/mine", b.namespace)), f"{b.namespace}/mine")  # bindings are never shared


def test_tenants_never_share_a_container(tenants):
    """A published action invoked by two namespaces runs in separate containers (OpenWhisk keys warm
    containers by invocation namespace): B never sees state A's activations left behind."""
    a, b, http_a, http_b = tenants
    url = b.api("actions/shared/token", a.namespace)
    token_a = [invoke(http_a, url).json()["token"] for _ in range(2)]
    token_b = [invoke(http_b, url).json()["token"] for _ in range(2)]
    assert token_a[0] == token_a[1] and token_b[0] == token_b[1]  # each reuses its own warm container
    assert token_a[0] != token_b[0]


def test_unpublishing_revokes_bindings_and_sequences(gateway: RunningGateway):
    suffix = uuid.uuid4().hex[:6]
    a, b = gateway.tenant(f"carol-{suffix}"), gateway.tenant(f"dave-{suffix}")
    http_a, http_b = a.session(), b.session()
    assert http_a.put(a.api("packages/lib"), json={"publish": True}).status_code == 200
    assert http_a.put(a.api("actions/lib/echo"), json={"exec": {"kind": "python:3", "code": ECHO}}).status_code == 200
    assert http_b.put(b.api("packages/libx"), json={"binding": {"namespace": a.namespace, "name": "lib"}}
                      ).status_code == 200
    seq = {"exec": {"kind": "sequence", "components": [f"/{a.namespace}/lib/echo"]}}
    assert http_b.put(b.api("actions/pipe"), json=seq).status_code == 200
    assert invoke(http_b, b.api("actions/pipe"), x=1).json() == {"x": 1}
    assert invoke(http_b, b.api("actions/libx/echo"), x=2).json() == {"x": 2}

    assert http_a.put(a.api("packages/lib"), params={"overwrite": "true"}, json={"publish": False}).status_code == 200
    denied(invoke(http_b, b.api("actions/pipe")), f"{a.namespace}/lib")
    denied(invoke(http_b, b.api("actions/libx/echo")), f"{b.namespace}/libx")
    denied(http_b.get(b.api("packages/libx")), f"{b.namespace}/libx")


def test_a_shared_action_never_receives_another_tenants_key(tenants):
    """``provide-api-key`` gives the caller's key to the caller's own actions only."""
    a, b, http_a, http_b = tenants
    url = b.api("actions/shared/keys", a.namespace)
    assert invoke(http_a, url).json() == {"key": a.auth}
    assert invoke(http_b, url).json() == {"key": None}
    # without the annotation (deleted on update), OpenWhisk gives the key: still the owner's only
    keys = http_a.put(a.api("actions/shared/keys"), params={"overwrite": "true"},
                      json={"delAnnotations": ["provide-api-key"]}).json()
    assert "provide-api-key" not in {annotation["key"] for annotation in keys["annotations"]}
    assert invoke(http_a, url).json() == {"key": a.auth}
    assert invoke(http_b, url).json() == {"key": None}


def test_another_namespace_never_reads_a_web_actions_secret(gateway: RunningGateway):
    """``require-whisk-auth`` with a secret keeps a web action's callers to those told it; anyone who
    may read a published package read it too, and then called the action. Other namespaces read it
    hidden (the action itself, its package, the package's action list); its owner reads it as set."""
    suffix = uuid.uuid4().hex[:6]
    a, b = gateway.tenant(f"webowner-{suffix}"), gateway.tenant(f"webreader-{suffix}")
    http_a, http_b = a.session(), b.session()
    assert http_a.put(a.api("packages/site"), json={"publish": True}).status_code == 200
    secured = {"exec": {"kind": "python:3", "code": ECHO},
               "annotations": [{"key": "web-export", "value": True}, {"key": "require-whisk-auth", "value": "s3cr3t"}]}
    assert http_a.put(a.api("actions/site/page"), json=secured).status_code == 200
    seen_by_b = [http_b.get(b.api("actions/site/page", a.namespace)).json(),
                 *http_b.get(b.api("packages/site", a.namespace)).json()["actions"],
                 *http_b.get(b.api("actions/site/", a.namespace)).json()]
    for doc in seen_by_b:
        assert {"key": "require-whisk-auth", "value": "[hidden]"} in doc["annotations"], doc
        assert "s3cr3t" not in str(doc)
    owned = http_a.get(a.api("actions/site/page")).json()
    assert {"key": "require-whisk-auth", "value": "s3cr3t"} in owned["annotations"]
    url = f"{gateway.url}/api/v1/web/{a.namespace}/site/page.json"
    assert requests.get(url, headers={"X-Require-Whisk-Auth": "[hidden]"}).status_code == 401
    assert requests.get(url, headers={"X-Require-Whisk-Auth": "s3cr3t"}).status_code == 200
