"""The alarms feed (``/whisk.system/alarms/...``): lifecycle events, fires, restarts."""

from __future__ import annotations

import time
import uuid
from datetime import datetime, timedelta, timezone

import pytest
import requests

from owx.bench.gateway_process import start_gateway_process
from tests.clients.conftest import ECHO, activations_of
from tests.fixtures.polling import wait_for

FEED = "api/v1/namespaces/whisk.system/actions/alarms"


def _setup(http, gateway, trigger: str, action: str) -> None:
    assert http.put(gateway.api(f"actions/{action}"), json={"exec": {"kind": "python:3", "code": ECHO}}).ok
    assert http.put(gateway.api(f"triggers/{trigger}"), json={
        "annotations": [{"key": "feed", "value": "/whisk.system/alarms/alarm"}]}).ok
    assert http.put(gateway.api(f"rules/r-{trigger}"), json={"trigger": f"/_/{trigger}", "action": f"/_/{action}"}).ok


def _feed(http, url: str, feed: str, event: str, auth: str, trigger: str, **params):
    body = {"lifecycleEvent": event, "authKey": auth, "triggerName": f"/_/{trigger}", **params}
    return http.post(f"{url}/{FEED}/{feed}", params={"blocking": "true"}, json=body)


def test_feed_package_is_published(http, gateway):
    package = gateway.service.entities.get("whisk.system", "packages", "alarms")
    assert package is not None and package.doc["publish"] is True
    feeds = [e.name for e in gateway.service.entities.list("whisk.system", "actions", prefix="alarms/")]
    assert sorted(feeds) == ["alarms/alarm", "alarms/interval", "alarms/once"]


def test_alarm_every_second_fires_the_rule_again_and_again(http, gateway):
    trigger, action = f"tick-{uuid.uuid4().hex[:6]}", f"tock-{uuid.uuid4().hex[:6]}"
    _setup(http, gateway, trigger, action)
    created = _feed(http, gateway.url, "alarm", "CREATE", gateway.auth, trigger, cron="* * * * * *",
                    trigger_payload={"tick": True})
    assert created.status_code == 200, created.text
    assert created.json()["response"]["result"] == {"status": "success"}
    def three_ran() -> list[dict] | None:
        # fires start their activations without waiting (the first one cold): poll for their records
        done = [r for r in activations_of(http, gateway, action) if r["response"]["success"]]
        return done if len(done) >= 3 else None

    ran = wait_for(three_ran, timeout=20, what="3 activations of an alarm that fires every second")
    assert all(r["response"]["result"]["got"] == {"tick": True} for r in ran)
    assert len(activations_of(http, gateway, trigger)) >= 3
    described = _feed(http, gateway.url, "alarm", "READ", gateway.auth, trigger).json()["response"]["result"]
    assert described["config"]["cron"] == "* * * * * *" and described["status"]["active"] is True
    assert http.delete(gateway.api(f"triggers/{trigger}")).status_code == 200
    time.sleep(1.2)  # a fire already under way when the trigger went may still land
    settled = len(activations_of(http, gateway, action))
    time.sleep(2.5)
    assert len(activations_of(http, gateway, action)) == settled, "the alarm kept firing after its trigger was deleted"


def test_feed_refusals_use_the_alarms_packages_messages(http, gateway):
    trigger = f"bad-{uuid.uuid4().hex[:6]}"
    _setup(http, gateway, trigger, f"a-{trigger}")
    cases = [
        ({"cron": "every minute"}, "cron pattern 'every minute' is not valid"),
        ({}, "alarms trigger feed is missing the cron parameter"),
        ({"cron": "* * * * *", "maxTriggers": 3, "stopDate": "2099-01-01T00:00:00Z"},
         "maxTriggers is not allowed when the stopDate parameter is specified"),
        ({"cron": "* * * * *", "startDate": "2001-01-01T00:00:00Z"},
         "startDate parameter '2001-01-01T00:00:00Z' must be in the future"),
        ({"cron": "0 0 31 2 *"}, "the alarm never fires: no date matches cron pattern '0 0 31 2 *' before the year 10000"),
        ({"cron": "* * * * *", "startDate": 10**17}, "startDate parameter '100000000000000000' must be before the year 10000"),
    ]
    for params, message in cases:
        answer = _feed(http, gateway.url, "alarm", "CREATE", gateway.auth, trigger, **params)
        assert answer.status_code == 502, answer.text
        assert answer.json()["response"]["result"] == {"error": message}
    once = _feed(http, gateway.url, "once", "CREATE", gateway.auth, trigger)
    assert once.json()["response"]["result"]["error"] == "alarms once trigger feed is missing the date parameter"
    interval = _feed(http, gateway.url, "interval", "CREATE", gateway.auth, trigger, minutes=0)
    assert interval.json()["response"]["result"]["error"] == "the minutes parameter must be an integer greater than zero"
    wrong_key = _feed(http, gateway.url, "alarm", "CREATE", "nobody:nothing", trigger, cron="* * * * *")
    assert wrong_key.json()["response"]["result"]["error"] == "Trigger authentication request failed."
    unknown = _feed(http, gateway.url, "alarm", "READ", gateway.auth, trigger)
    assert "could not find trigger" in unknown.json()["response"]["result"]["error"]
    assert _feed(http, gateway.url, "alarm", "PAUSE", gateway.auth, trigger).json()["response"]["result"] == {
        "error": "unsupported lifecycleEvent"}


def test_an_alarm_due_centuries_from_now_stops_no_other(http, gateway):
    """One tenant's alarm far in the future must not stop the scheduler every tenant's alarms share."""
    far = f"far-{uuid.uuid4().hex[:6]}"
    _setup(http, gateway, far, f"a-{far}")
    assert _feed(http, gateway.url, "once", "CREATE", gateway.auth, far, date="2999-01-01T00:00:00Z").ok
    trigger, action = f"near-{uuid.uuid4().hex[:6]}", f"a-near-{uuid.uuid4().hex[:6]}"
    _setup(http, gateway, trigger, action)
    assert _feed(http, gateway.url, "alarm", "CREATE", gateway.auth, trigger, cron="* * * * * *").ok
    wait_for(lambda: len(activations_of(http, gateway, trigger)) >= 2, timeout=10, what="2 fires of the near alarm")
    assert http.delete(gateway.api(f"triggers/{trigger}")).ok and http.delete(gateway.api(f"triggers/{far}")).ok


def test_a_stored_alarm_that_can_never_fire_does_not_stop_the_gateway_starting(gateway):
    """As an older version stored one: the alarms start (the others scheduled), that one does not fire."""
    from owx.gateway.feeds.alarms import ALARMS

    key = f"guest/never-{uuid.uuid4().hex[:6]}"
    gateway.service.entities.put("whisk.system", ALARMS, key, {
        "namespace": "guest", "trigger": key.split("/")[1], "auth": gateway.auth, "kind": "cron", "cron": "0 0 31 2 *"},
        None)
    try:
        gateway.service.reactive.alarms.start()
        assert gateway.service.reactive.alarms.scheduler.get(key) is not None
    finally:
        gateway.service.reactive.alarms.forget("guest", key.split("/")[1])


def test_once_fires_once_and_deletes_its_trigger_when_asked(http, gateway):
    trigger, action = f"once-{uuid.uuid4().hex[:6]}", f"a-once-{uuid.uuid4().hex[:6]}"
    _setup(http, gateway, trigger, action)
    when = (datetime.now(timezone.utc) + timedelta(seconds=1.5)).isoformat()
    created = _feed(http, gateway.url, "once", "CREATE", gateway.auth, trigger, date=when, deleteAfterFire="rules")
    assert created.status_code == 200, created.text
    wait_for(lambda: http.get(gateway.api(f"triggers/{trigger}")).status_code == 404, timeout=10)
    assert http.get(gateway.api(f"rules/r-{trigger}")).status_code == 404
    # the fire started the action without waiting for it: its record comes when it has run
    wait_for(lambda: activations_of(http, gateway, action), timeout=10)
    time.sleep(1.0)  # a second firing would have come by now
    assert len(activations_of(http, gateway, action)) == 1


@pytest.mark.slow
def test_triggers_rules_and_alarms_survive_a_restart(tmp_path):
    process = start_gateway_process(tmp_path / "gw")
    try:
        http = process.session()
        trigger, action = "survivor", "counted"
        assert http.put(process.api(f"actions/{action}"), json={"exec": {"kind": "python:3", "code": ECHO}}).ok
        assert http.put(process.api(f"triggers/{trigger}"), json={}).ok
        assert http.put(process.api("rules/keep"), json={"trigger": f"/_/{trigger}", "action": f"/_/{action}"}).ok
        assert http.post(process.api("rules/keep"), json={"status": "inactive"}).ok
        assert _feed(http, process.url, "alarm", "CREATE", process.auth, trigger, cron="* * * * * *").ok
        process.stop()
        process = process.restart()
        http = process.session()
        assert http.get(process.api("rules/keep")).json()["status"] == "inactive"
        assert http.post(process.api("rules/keep"), json={"status": "active"}).ok

        def ran():
            answer = http.get(process.api("activations"), params={"name": action})
            return len(answer.json()) >= 2
        wait_for(ran, timeout=10)
    finally:
        process.stop()


def test_a_namespace_may_hold_only_so_many_alarms(gateway):
    from owx.gateway.feeds.alarms import MAX_ALARMS_PER_NAMESPACE

    tenant = gateway.service.auth.ensure_namespace(f"alarmed-{uuid.uuid4().hex[:6]}")
    http = requests.Session()
    http.auth = (tenant.uuid, tenant.key)
    for index in range(MAX_ALARMS_PER_NAMESPACE + 1):
        assert http.put(gateway.api(f"triggers/t{index}"), json={}).ok
        answer = _feed(http, gateway.url, "alarm", "CREATE", tenant.auth, f"t{index}", cron="0 0 1 1 *")
        if index < MAX_ALARMS_PER_NAMESPACE:
            assert answer.status_code == 200, answer.text
    assert answer.status_code == 502
    assert answer.json()["response"]["result"]["error"] == f"the namespace has {MAX_ALARMS_PER_NAMESPACE} alarms, the most allowed"
    assert http.delete(gateway.api("triggers/t0")).ok  # deleting a trigger frees its alarm's place
    assert _feed(http, gateway.url, "alarm", "CREATE", tenant.auth, f"t{MAX_ALARMS_PER_NAMESPACE}",
                 cron="0 0 1 1 *").status_code == 200
