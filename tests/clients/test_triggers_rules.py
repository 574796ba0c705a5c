"""Triggers and rules over the REST API, as OpenWhisk answers them."""

from __future__ import annotations

import json
import uuid

import requests

from tests.clients.conftest import ECHO, activations_of
from tests.fixtures.polling import wait_for


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _action(http, gateway, name: str, code: str = ECHO) -> None:
    answer = http.put(gateway.api(f"actions/{name}"), json={"exec": {"kind": "python:3", "code": code}})
    assert answer.status_code == 200, answer.text


def _trigger_and_rule(http, gateway, params=None):
    action, trigger, rule = _unique("act"), _unique("trg"), _unique("rule")
    _action(http, gateway, action)
    assert http.put(gateway.api(f"triggers/{trigger}"), json={"parameters": params or []}).status_code == 200
    created = http.put(gateway.api(f"rules/{rule}"), json={"trigger": f"/_/{trigger}", "action": f"/_/{action}"})
    assert created.status_code == 200, created.text
    return action, trigger, rule, created.json()


def test_trigger_lifecycle(http, gateway):
    name = _unique("trg")
    created = http.put(gateway.api(f"triggers/{name}"), json={"parameters": [{"key": "a", "value": 1}]})
    assert created.status_code == 200
    assert created.json()["namespace"] == gateway.namespace and created.json()["version"] == "0.0.1"
    duplicate = http.put(gateway.api(f"triggers/{name}"), json={})
    assert duplicate.status_code == 409 and duplicate.json()["error"] == "resource already exists"
    updated = http.put(gateway.api(f"triggers/{name}"), params={"overwrite": "true"},
                       json={"annotations": [{"key": "k", "value": "v"}]}).json()
    assert updated["version"] == "0.0.2" and updated["parameters"] == [{"key": "a", "value": 1}]
    assert name in [t["name"] for t in http.get(gateway.api("triggers")).json()]
    assert http.get(gateway.api("triggers"), params={"count": "true"}).json()["triggers"] >= 1
    assert http.delete(gateway.api(f"triggers/{name}")).json()["name"] == name
    gone = http.get(gateway.api(f"triggers/{name}"))
    assert gone.status_code == 404 and gone.json()["error"] == "The requested resource does not exist."
    assert http.post(gateway.api(f"triggers/{name}"), json={}).status_code == 404


def test_bad_trigger_requests_are_refused(http, gateway):
    assert http.put(gateway.api("triggers/bad%20name%20"), json={}).status_code == 400
    feed = http.put(gateway.api(f"triggers/{_unique('trg')}"), json={"annotations": [{"key": "feed", "value": 7}]})
    assert feed.status_code == 400 and feed.json()["error"] == "Feed name is not valid"
    assert http.put(gateway.api(f"triggers/{_unique('trg')}"), data="[1]").status_code == 400
    assert http.put(gateway.api(f"triggers/{_unique('trg')}"), json={"parameters": "x"}).status_code == 400
    _, trigger, _, _ = _trigger_and_rule(http, gateway)
    too_big = http.post(gateway.api(f"triggers/{trigger}"), json={"blob": "x" * (1024 * 1024)})
    assert too_big.status_code == 413 and too_big.json()["error"].startswith("Request larger than allowed")


def test_trigger_and_rule_bodies_are_held_to_openwhisks_size_limits(http, gateway):
    """A tenant cannot store megabytes in a trigger (which every fire would then carry) or a rule."""
    big = [{"key": "blob", "value": "x" * (1024 * 1024)}]
    trigger = _unique("trg")
    refused = http.put(gateway.api(f"triggers/{trigger}"), json={"parameters": big})
    assert refused.status_code == 413 and refused.json()["error"].startswith("parameters larger than allowed")
    assert http.put(gateway.api(f"triggers/{trigger}"), json={"annotations": big}).status_code == 413
    assert http.get(gateway.api(f"triggers/{trigger}")).status_code == 404  # nothing stored
    created = http.put(gateway.api(f"triggers/{trigger}"), json={"limits": {"blob": "x" * 1000}})
    assert created.status_code == 200 and created.json()["limits"] == {}  # OpenWhisk's trigger limits have no fields
    action, rule = _unique("act"), _unique("rule")
    _action(http, gateway, action)
    body = {"trigger": f"/_/{trigger}", "action": f"/_/{action}", "annotations": big}
    refused = http.put(gateway.api(f"rules/{rule}"), json=body)
    assert refused.status_code == 413 and refused.json()["error"].startswith("annotations larger than allowed")
    assert http.get(gateway.api(f"rules/{rule}")).status_code == 404


def test_every_fire_counts_against_the_namespaces_fires_per_minute(gateway):
    """As OpenWhisk's entitlement check: fires at a missing trigger count too, so a tenant cannot
    make the gateway look up triggers without limit; another namespace is not held back."""
    tenant = gateway.tenant(_unique("firer"))
    allowed = gateway.service.settings.gateway.trigger_fires_per_minute
    with tenant.session() as http:
        statuses = [http.post(tenant.api("triggers/missing"), json={}).status_code for _ in range(allowed + 1)]
    assert statuses[:allowed] == [404] * allowed and statuses[allowed] == 429
    with gateway.session() as other:
        assert other.post(gateway.api("triggers/missing"), json={}).status_code == 404


def test_fire_without_active_rule_answers_204_and_records_nothing(http, gateway):
    name = _unique("trg")
    http.put(gateway.api(f"triggers/{name}"), json={})
    fired = http.post(gateway.api(f"triggers/{name}"), json={"x": 1})
    assert fired.status_code == 204
    assert activations_of(http, gateway, name) == []


def test_fire_activates_the_rules_action_and_records_it(http, gateway):
    action, trigger, rule, created = _trigger_and_rule(http, gateway, [{"key": "p", "value": "trigger"}])
    assert created["status"] == "active"
    assert created["trigger"] == {"path": gateway.namespace, "name": trigger}
    fired = http.post(gateway.api(f"triggers/{trigger}"), json={"x": 2, "p": "payload wins"})
    assert fired.status_code == 202
    trigger_id = fired.json()["activationId"]
    assert fired.headers["x-openwhisk-activation-id"] == trigger_id
    record = gateway.wait_record(http, trigger_id)
    assert record["name"] == trigger and record["response"]["result"] == {"x": 2, "p": "payload wins"}
    assert "end" not in record and "duration" not in record  # as OpenWhisk: a client's end - start is not negative
    (line,) = [json.loads(text) for text in record["logs"]]
    assert line["rule"] == f"{gateway.namespace}/{rule}" and line["action"] == f"{gateway.namespace}/{action}"
    assert line["statusCode"] == 0 and line["success"] is True
    result = gateway.wait_record(http, line["activationId"])["response"]["result"]["got"]
    assert result["x"] == 2 and result["p"] == "payload wins"
    assert "authorization" not in result["__ow_headers"]  # the caller's key never reaches the action


def test_a_rules_action_runs_in_the_fires_transaction(http, gateway):
    """The action a fire starts gets the fire's transaction id (its answer's ``X-Request-ID``), as in OpenWhisk."""
    action, trigger, rule = _unique("act"), _unique("trg"), _unique("rule")
    _action(http, gateway, action, "import os\ndef main(args):\n    return {'tid': os.environ['__OW_TRANSACTION_ID']}\n")
    assert http.put(gateway.api(f"triggers/{trigger}"), json={}).status_code == 200
    assert http.put(gateway.api(f"rules/{rule}"), json={"trigger": f"/_/{trigger}", "action": f"/_/{action}"}).ok
    fired = http.post(gateway.api(f"triggers/{trigger}"), json={})
    (line,) = [json.loads(text) for text in gateway.wait_record(http, fired.json()["activationId"])["logs"]]
    ran = gateway.wait_record(http, line["activationId"])
    assert ran["response"]["result"] == {"tid": fired.headers["X-Request-ID"]}


def test_disabled_rule_does_not_fire(http, gateway):
    action, trigger, rule, _ = _trigger_and_rule(http, gateway)
    disabled = http.post(gateway.api(f"rules/{rule}"), json={"status": "inactive"})
    assert disabled.status_code == 200
    assert http.get(gateway.api(f"rules/{rule}")).json()["status"] == "inactive"
    assert http.post(gateway.api(f"triggers/{trigger}"), json={}).status_code == 204
    second = _unique("rule")
    http.put(gateway.api(f"rules/{second}"), json={"trigger": f"/_/{trigger}", "action": f"/_/{action}"})
    record = gateway.wait_record(http, http.post(gateway.api(f"triggers/{trigger}"), json={}).json()["activationId"])
    lines = {json.loads(text)["rule"]: json.loads(text) for text in record["logs"]}
    inactive = lines[f"{gateway.namespace}/{rule}"]
    assert inactive["statusCode"] == 1 and not inactive["success"]
    assert inactive["error"] == (f"Rule '{gateway.namespace}/{rule}' is inactive, "
                                 f"action '{gateway.namespace}/{action}' was not activated.")
    assert lines[f"{gateway.namespace}/{second}"]["success"]
    wait_for(lambda: len(activations_of(http, gateway, action)) == 1)
    assert http.post(gateway.api(f"rules/{rule}"), json={"status": "active"}).status_code == 200
    assert http.get(gateway.api(f"rules/{rule}")).json()["status"] == "active"


def test_rule_requests_are_checked(http, gateway):
    action, trigger, rule, _ = _trigger_and_rule(http, gateway)
    missing = http.put(gateway.api(f"rules/{_unique('rule')}"), json={"trigger": f"/_/{trigger}"})
    assert missing.status_code == 400 and missing.json()["error"] == "rule requires a valid trigger and a valid action"
    no_action = http.put(gateway.api(f"rules/{_unique('rule')}"), json={"trigger": f"/_/{trigger}", "action": "/_/nope"})
    assert no_action.status_code == 400
    assert no_action.json()["error"] == f"action /{gateway.namespace}/nope does not exist"
    no_trigger = http.put(gateway.api(f"rules/{_unique('rule')}"), json={"trigger": "/_/nope", "action": f"/_/{action}"})
    assert no_trigger.json()["error"] == f"trigger /{gateway.namespace}/nope does not exist"
    assert http.put(gateway.api(f"rules/{rule}"), json={"trigger": f"/_/{trigger}", "action": f"/_/{action}"}).status_code == 409
    bad_status = http.post(gateway.api(f"rules/{rule}"), json={"status": "paused"})
    assert bad_status.status_code == 400 and "'paused' is not a recognized rule state" in bad_status.json()["error"]
    assert http.post(gateway.api(f"rules/{_unique('rule')}"), json={"status": "active"}).status_code == 404
    # OpenWhisk reads a rule's references as fully qualified names, with or without the leading slash
    unslashed = http.put(gateway.api(f"rules/{_unique('rule')}"),
                         json={"trigger": f"{gateway.namespace}/{trigger}", "action": f"_/{action}"})
    assert unslashed.status_code == 200, unslashed.text
    assert unslashed.json()["action"] == {"path": gateway.namespace, "name": action}
    bare = http.put(gateway.api(f"rules/{_unique('rule')}"), json={"trigger": trigger, "action": f"/_/{action}"})
    assert bare.status_code == 400 and bare.json()["error"] == (
        "The request content was malformed:\nThe fully qualified name of the entity must contain at least the "
        "namespace and the name of the entity.")
    assert rule in [r["name"] for r in http.get(gateway.api("rules")).json()]


def test_rule_may_use_only_own_or_published_actions(http, gateway):
    other = gateway.service.auth.ensure_namespace(_unique("tenant"))
    stranger = requests.Session()
    stranger.auth = (other.uuid, other.key)
    own_trigger = _unique("trg")
    assert stranger.put(gateway.api(f"triggers/{own_trigger}"), json={}).status_code == 200
    private = _unique("act")
    _action(http, gateway, private)
    refused = stranger.put(gateway.api(f"rules/{_unique('rule')}"),
                           json={"trigger": f"/_/{own_trigger}", "action": f"/{gateway.namespace}/{private}"})
    assert refused.status_code == 403
    package = _unique("pub")
    assert http.put(gateway.api(f"packages/{package}"), json={"publish": True}).status_code == 200
    _action(http, gateway, f"{package}/shared")
    allowed = stranger.put(gateway.api(f"rules/{_unique('rule')}"),
                           json={"trigger": f"/_/{own_trigger}", "action": f"/{gateway.namespace}/{package}/shared"})
    assert allowed.status_code == 200, allowed.text
    fired = stranger.post(gateway.api(f"triggers/{own_trigger}"), json={"from": "stranger"}).json()["activationId"]
    record = wait_for(lambda: stranger.get(gateway.api(f"activations/{fired}")).json())
    line = json.loads(record["logs"][0])
    assert line["success"], line
    ran = wait_for(lambda: stranger.get(gateway.api(f"activations/{line['activationId']}")).json()
                   if stranger.get(gateway.api(f"activations/{line['activationId']}")).status_code == 200 else None)
    assert ran["namespace"] == other.namespace and ran["response"]["result"]["got"]["from"] == "stranger"
    foreign_trigger = stranger.put(gateway.api(f"rules/{_unique('rule')}"),
                                   json={"trigger": f"/{gateway.namespace}/x", "action": "/_/y"})
    assert foreign_trigger.status_code == 403


def test_deleting_rule_or_trigger(http, gateway):
    action, trigger, rule, _ = _trigger_and_rule(http, gateway)
    assert http.delete(gateway.api(f"triggers/{trigger}")).status_code == 200
    assert http.get(gateway.api(f"rules/{rule}")).json()["status"] == "inactive"
    activate = http.post(gateway.api(f"rules/{rule}"), json={"status": "active"})
    assert activate.status_code == 404
    assert activate.json()["error"] == "Only rules with existing triggers can be activated"
    deleted = http.delete(gateway.api(f"rules/{rule}"))
    assert deleted.status_code == 200 and deleted.json()["status"] == "inactive"
    assert http.get(gateway.api(f"rules/{rule}")).status_code == 404


def test_a_rule_and_its_link_cut_apart_by_a_killed_gateway_fire_as_the_rule_says(http, gateway):
    """A rule is a document and a link in its trigger, two writes. Left as a gateway killed between them
    leaves them: a link whose rule has moved to another trigger, or is deleted, fires nothing and is
    dropped (before, it ran the action with no rule naming it, for good); a rule stored without its
    link is linked again, active, by the update a client retries (before, it stayed inactive)."""
    store = gateway.service.entities
    action, first, moved, _ = _trigger_and_rule(http, gateway)
    second = _unique("trg")
    assert http.put(gateway.api(f"triggers/{second}"), json={}).status_code == 200
    rule = store.get(gateway.namespace, "rules", moved)  # moved to the second trigger, cut off before the unlink
    store.put(gateway.namespace, "rules", moved, {**rule.doc, "trigger": {"path": gateway.namespace, "name": second}},
              rule.rev)
    link = store.get(gateway.namespace, "triggers", first).doc["rules"]
    trigger = store.get(gateway.namespace, "triggers", second)
    store.put(gateway.namespace, "triggers", second, {**trigger.doc, "rules": link}, trigger.rev)
    assert http.post(gateway.api(f"triggers/{first}"), json={}).status_code == 204  # its only link was stale
    assert store.get(gateway.namespace, "triggers", first).doc["rules"] == {}
    fired = http.post(gateway.api(f"triggers/{second}"), json={})
    assert fired.status_code == 202
    (line,) = [json.loads(text) for text in gateway.wait_record(http, fired.json()["activationId"])["logs"]]
    assert line["rule"] == f"{gateway.namespace}/{moved}" and line["success"]

    cut = _unique("rule")  # stored, then the gateway died before the link
    body = {"trigger": f"/_/{first}", "action": f"/_/{action}"}
    store.put(gateway.namespace, "rules", cut, {**store.get(gateway.namespace, "rules", moved).doc, "name": cut,
                                                "trigger": {"path": gateway.namespace, "name": first}}, None)
    assert http.get(gateway.api(f"rules/{cut}")).json()["status"] == "inactive"
    retried = http.put(gateway.api(f"rules/{cut}"), params={"overwrite": "true"}, json=body)
    assert retried.status_code == 200 and retried.json()["status"] == "active"
    assert http.post(gateway.api(f"triggers/{first}"), json={}).status_code == 202
