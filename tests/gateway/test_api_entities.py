"""Actions and packages over plain HTTP: OpenWhisk's status codes, bodies and merge rules."""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import requests

HELLO = "def main(args):\n    return {'greeting': 'hello ' + args.get('name', 'world')}\n"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def put(http, gateway, name, body, overwrite=None):
    params = {} if overwrite is None else {"overwrite": str(overwrite).lower()}
    return http.put(gateway.api(f"actions/{name}"), json=body, params=params)


def test_info_routes_answer_openwhisks_fields_in_its_units(gateway, http):
    """``/`` carries the system limits (bytes) and the runtimes (wskdeploy reads them there), ``/api/v1``
    the API version, with or without a trailing slash; a namespace's limits are in MB and ms."""
    root = requests.get(gateway.url + "/").json()
    assert root["api_paths"] == ["/api/v1"] and root["limits"]["max_action_memory"] == 512 * 1024 * 1024
    python = root["runtimes"]["python"]
    assert [r["kind"] for r in python if r["default"]] == ["python:3"] and "python:default" not in str(python)
    assert {"kind", "deprecated", "default", "attached", "requireMain"} == set(python[0])
    for path in ("/api/v1", "/api/v1/"):
        info = requests.get(gateway.url + path).json()
        assert info["api_version"] == "1.0.0" and info["api_version_path"] == "v1", path
    fires = gateway.service.settings.gateway.trigger_fires_per_minute
    assert root["limits"]["triggers_per_minute"] == fires
    assert http.get(gateway.url + "/api/v1/namespaces").json() == [gateway.namespace]
    limits = http.get(gateway.api("limits")).json()
    assert limits["invocationsPerMinute"] > 0 and limits["firesPerMinute"] == fires
    assert (limits["minActionMemory"], limits["maxActionMemory"], limits["maxActionLogs"]) == (128, 512, 10)
    assert limits["maxActionTimeout"] == 300_000 and limits["maxParameterSize"] == "1 MB"
    assert limits["maxActionInstances"] == limits["concurrentInvocations"] and limits["minActionConcurrency"] == 1


def test_fields_openwhisk_clients_send_that_owx_does_not_use_are_ignored_as_openwhisk_ignores_them(gateway, http):
    """``limits.instances`` (OpenWhisk's newer scheduler), a parameter's ``description`` or null
    ``encryption``: accepted, not stored."""
    name = unique("extra")
    body = {"exec": {"kind": "python:3", "code": HELLO}, "limits": {"memory": 256, "instances": 2},
            "parameters": [{"key": "name", "value": "you", "description": "who", "encryption": None}]}
    created = put(http, gateway, name, body)
    assert created.status_code == 200, created.text
    assert created.json()["limits"]["memory"] == 256 and "instances" not in created.json()["limits"]
    assert created.json()["parameters"] == [{"key": "name", "value": "you"}]
    invoked = http.post(gateway.api(f"actions/{name}"), params={"blocking": "true", "result": "true"}, json={})
    assert invoked.json() == {"greeting": "hello you"}


def test_a_key_given_twice_keeps_its_last_value_where_it_first_stood(gateway, http):
    """As OpenWhisk, whose parameters and annotations are maps."""
    name = unique("twice")
    body = {"exec": {"kind": "python:3", "code": HELLO},
            "parameters": [{"key": "name", "value": "first"}, {"key": "x", "value": 1}, {"key": "name", "value": "last"}],
            "annotations": [{"key": "a", "value": 1}, {"key": "a", "value": 2}]}
    created = put(http, gateway, name, body).json()
    assert created["parameters"] == [{"key": "name", "value": "last"}, {"key": "x", "value": 1}]
    assert [a for a in created["annotations"] if a["key"] == "a"] == [{"key": "a", "value": 2}]
    invoked = http.post(gateway.api(f"actions/{name}"), params={"blocking": "true", "result": "true"}, json={})
    assert invoked.json() == {"greeting": "hello last"}


def test_the_basic_scheme_is_read_whatever_its_case(gateway, http):
    """RFC 9110: an authentication scheme's name is case-insensitive."""
    token = http.headers.get("Authorization") or requests.Request("GET", gateway.url, auth=http.auth).prepare(
        ).headers["Authorization"]
    credentials = token.split(" ", 1)[1]
    for scheme in ("basic", "BASIC", "Basic"):
        answer = requests.get(gateway.api("actions"), headers={"Authorization": f"{scheme} {credentials}"})
        assert answer.status_code == 200, scheme
    assert requests.get(gateway.api("actions"), headers={"Authorization": f"Bearer {credentials}"}).status_code == 401


def test_authentication_and_namespace(gateway, http):
    denied = requests.get(gateway.api("actions"), auth=("nobody", "wrong"))
    assert denied.status_code == 401 and set(denied.json()) == {"error", "code"}
    assert requests.get(gateway.api("actions")).status_code == 401
    other = http.get(f"{gateway.url}/api/v1/namespaces/someone-else/actions")
    assert other.status_code == 403
    assert http.get(f"{gateway.url}/api/v1/namespaces/{gateway.namespace}/actions").status_code == 200


def test_create_get_and_server_annotations(gateway, http):
    name = unique("hello")
    created = put(http, gateway, name, {"exec": {"kind": "python:3", "code": HELLO}})
    assert created.status_code == 200, created.text
    doc = created.json()
    assert doc["name"] == name and doc["namespace"] == gateway.namespace and doc["version"] == "0.0.1"
    assert {"key": "exec", "value": "python:3"} in doc["annotations"]
    assert {"key": "provide-api-key", "value": False} in doc["annotations"]
    assert doc["limits"] == {"timeout": 60000, "memory": 256, "logs": 10, "concurrency": 1}
    fetched = http.get(gateway.api(f"actions/{name}")).json()
    assert fetched["exec"]["code"] == HELLO
    assert "code" not in http.get(gateway.api(f"actions/{name}"), params={"code": "false"}).json()["exec"]


def test_overwrite_rules(gateway, http):
    name = unique("merge")
    body = {"exec": {"kind": "python:3", "code": HELLO}, "limits": {"memory": 300, "timeout": 5000},
            "parameters": [{"key": "name", "value": "owx"}]}
    assert put(http, gateway, name, body).status_code == 200
    again = put(http, gateway, name, body, overwrite=False)
    assert again.status_code == 409 and "exists" in again.json()["error"]
    updated = put(http, gateway, name, {"limits": {"timeout": 9000}}, overwrite=True)
    assert updated.status_code == 200, updated.text
    doc = updated.json()
    assert doc["limits"]["timeout"] == 9000 and doc["limits"]["memory"] == 300  # merged per field
    assert doc["parameters"] == [{"key": "name", "value": "owx"}]  # absent field kept
    assert doc["exec"]["code"] == HELLO and doc["version"] == "0.0.2"


def test_a_put_may_name_the_version_as_openwhisk_reads_one(gateway, http):
    """Every entity takes the body's version (``1.2`` is ``1.2.0``) or bumps its patch; a version that
    is not one is a 400 and stores nothing."""
    entities = {"actions": {"exec": {"kind": "python:3", "code": HELLO}}, "packages": {}, "triggers": {}}
    for collection, body in entities.items():
        url = gateway.api(f"{collection}/{unique('versioned')}")
        for bad in ("x", "1.a", "0.0.0", "-1.0.0", "", "99999999999"):
            refused = http.put(url, json={**body, "version": bad})
            assert refused.status_code == 400 and "semantic version malformed" in refused.json()["error"], bad
            assert http.get(url).status_code == 404
        assert http.put(url, json={**body, "version": "1.2"}).json()["version"] == "1.2.0"
        assert http.put(url, json={}, params={"overwrite": "true"}).json()["version"] == "1.2.1"
        assert http.put(url, json={"version": "3.0.0.7"}, params={"overwrite": "true"}).json()["version"] == "3.0.0"


def test_an_update_merges_annotations_as_openwhisk(gateway, http):
    """``wsk action update f -a k v`` keeps the other annotations (a web action stays one);
    ``delAnnotations`` drops keys; ``provide-api-key`` is added on create only."""
    name = unique("annotated")
    web = [{"key": "web-export", "value": True}, {"key": "description", "value": "a"}]
    created = put(http, gateway, name, {"exec": {"kind": "python:3", "code": HELLO}, "annotations": web}).json()
    assert {"key": "provide-api-key", "value": False} in created["annotations"]
    updated = put(http, gateway, name, {"annotations": [{"key": "description", "value": "b"}]}, overwrite=True).json()
    assert {a["key"]: a["value"] for a in updated["annotations"]} == {
        "web-export": True, "description": "b", "provide-api-key": False, "exec": "python:3"}
    dropped = put(http, gateway, name, {"delAnnotations": ["web-export", "provide-api-key"],
                                        "annotations": [{"key": "x", "value": 1}, {"key": "x", "value": 2}]},
                  overwrite=True).json()
    assert {a["key"]: a["value"] for a in dropped["annotations"]} == {"description": "b", "x": 2, "exec": "python:3"}
    assert len(dropped["annotations"]) == 3


def test_exec_is_read_as_openwhisk_reads_it(gateway, http):
    """The kind is trimmed and lower-cased; whether code is an archive is decided from the code (base64),
    whatever ``binary`` says, so ``wsk action create f f.zip --docker img`` (no ``binary``) gets a
    binary action; an unknown kind gets OpenWhisk's message."""
    zipped = "UEsDBBQAAAAIAA=="  # base64, as wsk sends a zip
    docker = put(http, gateway, unique("zip"), {"exec": {"kind": "blackbox", "image": "img", "code": zipped}})
    assert docker.json()["exec"]["binary"] is True
    text = put(http, gateway, unique("text"), {"exec": {"kind": " Python:3 ", "code": HELLO, "binary": True}}).json()
    assert text["exec"]["kind"] == "python:3" and text["exec"]["binary"] is False
    bare = put(http, gateway, unique("bare"), {"exec": {"kind": "blackbox", "image": "img", "code": "  "}}).json()
    assert "code" not in bare["exec"] and bare["exec"]["binary"] is False
    unknown = put(http, gateway, unique("cobol"), {"exec": {"kind": "cobol:1", "code": "x"}}).json()["error"]
    assert unknown.endswith("The specified runtime 'cobol:1' is not supported by this platform. Valid values are: "
                            "'python:3', 'python:3.11', 'python:default', 'python:tensorflow', 'blackbox', 'sequence'.")
    memory = put(http, gateway, unique("big"),
                 {"exec": {"kind": "python:3", "code": HELLO}, "limits": {"memory": 4096}})
    assert memory.json()["error"].startswith("memory size 4096 MB exceeds allowed threshold of ")


def test_bad_input_is_400_and_stores_nothing(gateway, http):
    name = unique("bad")
    cases = [
        ({"exec": {"kind": "cobol:1", "code": "x"}}, "not supported"),
        ({"exec": {"kind": "python:3", "code": HELLO}, "limits": {"memory": 4096}}, "exceeds allowed threshold"),
        ({"exec": {"kind": "python:3", "code": HELLO}, "limits": {"timeout": 10}}, "below allowed threshold"),
        ({"exec": {"kind": "python:3", "code": HELLO}, "limits": {"logs": 11}}, "exceeds"),
        ({"exec": {"kind": "python:3"}}, "code"),
        ({"exec": {"kind": "blackbox"}}, "image"),
        ({"exec": {"kind": "python:3", "code": HELLO}, "parameters": [{"value": 1}]}, "key"),
        ({"exec": {"kind": "python:3", "code": 42}}, "string"),
    ]
    for body, message in cases:
        answer = put(http, gateway, name, body)
        assert answer.status_code == 400, (body, answer.text)
        assert message in answer.json()["error"], (body, answer.json())
    malformed = http.put(gateway.api(f"actions/{name}"), data="{not json", headers={"Content-Type": "application/json"})
    assert malformed.status_code == 400 and "malformed" in malformed.json()["error"]
    assert http.put(gateway.api("actions/bad%20name%20"), json={"exec": {"kind": "python:3", "code": HELLO}}
                    ).status_code == 400
    assert http.put(gateway.api("actions/a/b/c"), json={"exec": {"kind": "python:3", "code": HELLO}}
                    ).status_code == 400
    assert http.get(gateway.api(f"actions/{name}")).status_code == 404


def test_list_paging_count_and_delete(gateway, http):
    names = [unique("list") for _ in range(3)]
    for name in names:
        assert put(http, gateway, name, {"exec": {"kind": "python:3", "code": HELLO}}).status_code == 200
    listed = http.get(gateway.api("actions"), params={"limit": 200}).json()
    assert set(names) <= {a["name"] for a in listed}
    assert all("code" not in a["exec"] for a in listed)
    total = http.get(gateway.api("actions"), params={"count": "true"}).json()["actions"]
    assert total >= 3
    page = http.get(gateway.api("actions"), params={"limit": 2, "skip": 1}).json()
    assert len(page) == 2
    assert http.get(gateway.api("actions"), params={"limit": 201}).status_code == 400
    assert http.get(gateway.api("actions"), params={"skip": -1}).status_code == 400
    assert http.get(gateway.api("actions"), params={"limit": "ten"}).status_code == 400
    past = http.get(gateway.api("actions"), params={"count": "true", "skip": 2}).json()["actions"]
    assert past == total - 2  # OpenWhisk counts the entities past skip, and checks paging with count too
    assert http.get(gateway.api("actions"), params={"count": "true", "limit": 201}).status_code == 400
    deleted = http.delete(gateway.api(f"actions/{names[0]}"))
    assert deleted.status_code == 200 and deleted.json()["name"] == names[0]
    assert http.delete(gateway.api(f"actions/{names[0]}")).status_code == 404
    assert http.get(gateway.api("actions"), params={"count": "true"}).json()["actions"] == total - 1


def test_packages_inherit_parameters(gateway, http):
    package = unique("pkg")
    created = http.put(gateway.api(f"packages/{package}"), json={"parameters": [{"key": "name", "value": "pkg"}]})
    assert created.status_code == 200, created.text
    assert put(http, gateway, f"{package}/greet", {"exec": {"kind": "python:3", "code": HELLO}}).status_code == 200
    fetched = http.get(gateway.api(f"packages/{package}")).json()
    assert [a["name"] for a in fetched["actions"]] == ["greet"]
    assert fetched["actions"][0]["namespace"] == f"{gateway.namespace}/{package}"
    result = http.post(gateway.api(f"actions/{package}/greet"), params={"blocking": "true", "result": "true"})
    assert result.json() == {"greeting": "hello pkg"}
    activation_id = result.headers["X-OpenWhisk-Activation-Id"]
    listed = http.get(gateway.api("activations"), params={"name": f"{package}/greet"}).json()
    assert [x["activationId"] for x in listed] == [activation_id]  # `wsk activation list pkg/greet`
    assert activation_id not in {x["activationId"] for x in http.get(gateway.api("activations"),
                                                                       params={"name": "greet"}).json()}
    assert put(http, gateway, f"missing-{package}/greet", {"exec": {"kind": "python:3", "code": HELLO}}
               ).status_code == 404
    not_empty = http.delete(gateway.api(f"packages/{package}"))
    assert not_empty.status_code == 409 and "not empty" in not_empty.json()["error"]
    assert http.delete(gateway.api(f"actions/{package}/greet")).status_code == 200
    assert http.delete(gateway.api(f"packages/{package}")).status_code == 200
    assert package not in {p["name"] for p in http.get(gateway.api("packages")).json()}


def test_openapi_document_lists_routes(gateway):
    doc = requests.get(gateway.url + "/api/v1/api-docs").json()
    assert doc["openapi"].startswith("3.")
    assert "put" in doc["paths"]["/api/v1/namespaces/{ns}/actions/{name}"]
    assert "requestBody" in doc["paths"]["/api/v1/namespaces/{ns}/actions/{name}"]["put"]
    assert "/api/v1/namespaces/{ns}/activations/{activation_id}/logs" in doc["paths"]


def test_unknown_route_and_method(gateway, http):
    missing = http.get(gateway.url + "/api/v1/nothing-here")
    assert missing.status_code == 404 and missing.json()["error"] == "The requested resource does not exist."
    assert http.patch(gateway.api("actions/x")).status_code == 405


def test_one_name_created_at_once_in_every_collection_is_taken_by_one(gateway):
    """Creates racing for one name from four clients (an action, a package, a trigger and a rule): one
    wins, the others get a 409, and one collection holds the name."""
    action, trigger = unique("target"), unique("target")
    assert put(gateway.session(), gateway, action, {"exec": {"kind": "python:3", "code": HELLO}}).status_code == 200
    assert gateway.session().put(gateway.api(f"triggers/{trigger}"), json={}).status_code == 200
    bodies = {"actions": {"exec": {"kind": "python:3", "code": HELLO}}, "packages": {}, "triggers": {},
              "rules": {"trigger": f"/_/{trigger}", "action": f"/_/{action}"}}
    sessions = [gateway.session() for _ in bodies]
    with ThreadPoolExecutor(len(bodies)) as pool:
        for _ in range(50):
            name = unique("race")
            start = threading.Barrier(len(bodies))

            def create(session, collection: str, body: dict) -> int:
                start.wait()
                return session.put(gateway.api(f"{collection}/{name}"), json=body).status_code

            codes = list(pool.map(create, sessions, bodies, bodies.values()))
            assert sorted(codes) == [200, 409, 409, 409], codes
            held = [c for c in bodies if sessions[0].get(gateway.api(f"{c}/{name}")).status_code == 200]
            assert held == [list(bodies)[codes.index(200)]], (codes, held)


def test_a_namespaces_entities_share_one_set_of_names_as_in_openwhisk(gateway, http):
    """A name taken by an action, package, trigger or rule cannot be created in another collection,
    and asking another collection for it is OpenWhisk's 409, not a 404; nothing is stored."""
    conformance = "Resource by this name exists but is not in this collection."
    action, trigger = unique("taken"), unique("taken")
    assert put(http, gateway, action, {"exec": {"kind": "python:3", "code": HELLO}}).status_code == 200
    assert http.put(gateway.api(f"triggers/{trigger}"), json={}).status_code == 200
    rule_body = {"trigger": f"/_/{trigger}", "action": f"/_/{action}"}
    for name, elsewhere in ((action, ["packages", "triggers", "rules"]), (trigger, ["actions", "packages", "rules"])):
        for collection in elsewhere:
            url = gateway.api(f"{collection}/{name}")
            body = {"exec": {"kind": "python:3", "code": HELLO}} if collection == "actions" else rule_body
            for answer in (http.put(url, json=body), http.put(url, json=body, params={"overwrite": "true"}),
                           http.get(url), http.delete(url)):
                assert answer.status_code == 409 and answer.json()["error"] == conformance, (collection, answer.text)
    for answer in (http.post(gateway.api(f"triggers/{action}"), json={}),
                   http.post(gateway.api(f"actions/{trigger}"), params={"blocking": "true"})):
        assert answer.status_code == 409 and answer.json()["error"] == conformance, answer.text
    assert http.get(gateway.api(f"actions/{action}")).status_code == 200  # untouched
    assert http.get(gateway.api(f"triggers/{trigger}")).status_code == 200
    assert http.get(gateway.api(f"rules/{unique('missing')}")).status_code == 404  # a name nobody holds
    package = unique("pkg")
    assert http.put(gateway.api(f"packages/{package}"), json={}).status_code == 200
    inside = put(http, gateway, f"{package}/{trigger}", {"exec": {"kind": "python:3", "code": HELLO}})
    assert inside.status_code == 200  # an action in a package has a name of its own


def test_an_empty_body_is_read_as_an_empty_object_as_openwhisk_reads_one(gateway, http):
    """``curl -X PUT .../triggers/t`` without a body creates the trigger, as on OpenWhisk; an action
    still needs its exec."""
    trigger, package, action = unique("trg"), unique("pkg"), unique("act")
    assert http.put(gateway.api(f"triggers/{trigger}"), data=b"").json()["name"] == trigger
    assert http.put(gateway.api(f"packages/{package}"), data=b"").json()["name"] == package
    refused = http.put(gateway.api(f"actions/{action}"), data=b"")
    assert refused.status_code == 400 and "exec" in refused.json()["error"], refused.text
