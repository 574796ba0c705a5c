"""``/metrics`` of the gateway and of the Escra agent, read with prometheus_client's own parser."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
import uuid

import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.clients.conftest import ECHO
from tests.fixtures.polling import wait_for


def _scrape(url: str) -> dict[str, list]:
    answer = requests.get(f"{url}/metrics", timeout=10)
    assert answer.status_code == 200, answer.text
    assert answer.headers["Content-Type"].startswith("text/plain")
    return {family.name: family.samples for family in text_string_to_metric_families(answer.text)}


def _value(samples, name: str, **labels) -> float:
    return sum(s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


def test_gateway_metrics(http, gateway):
    ok, failing = f"m-ok-{uuid.uuid4().hex[:6]}", f"m-err-{uuid.uuid4().hex[:6]}"
    http.put(gateway.api(f"actions/{ok}"), json={"exec": {"kind": "python:3", "code": ECHO}})
    http.put(gateway.api(f"actions/{failing}"),
             json={"exec": {"kind": "python:3", "code": "def main(args):\n    return {'error': 'no'}\n"}})
    before = _scrape(gateway.url)
    for _ in range(3):
        assert http.post(gateway.api(f"actions/{ok}"), params={"blocking": "true"}, json={}).status_code == 200
    assert http.post(gateway.api(f"actions/{failing}"), params={"blocking": "true"}, json={}).status_code == 502
    trigger = f"m-trg-{uuid.uuid4().hex[:6]}"
    http.put(gateway.api(f"triggers/{trigger}"), json={})
    http.put(gateway.api(f"rules/r-{trigger}"), json={"trigger": f"/_/{trigger}", "action": f"/_/{ok}"})
    assert http.post(gateway.api(f"triggers/{trigger}"), json={}).status_code == 202
    wait_for(lambda: _value(_scrape(gateway.url)["owx_activations"], "owx_activations_total",
                            kind="python:3", status="success")
             >= _value(before["owx_activations"], "owx_activations_total", kind="python:3", status="success") + 4)
    after = _scrape(gateway.url)

    def grew(family: str, name: str, by: float, **labels) -> bool:
        return _value(after[family], name, **labels) - _value(before.get(family, []), name, **labels) >= by

    assert grew("owx_activations", "owx_activations_total", 1, kind="python:3", status="application error")
    assert grew("owx_activation_duration_seconds", "owx_activation_duration_seconds_count", 5, kind="python:3")
    assert grew("owx_activation_wait_seconds", "owx_activation_wait_seconds_count", 5, kind="python:3")
    assert grew("owx_trigger_fires", "owx_trigger_fires_total", 1)
    assert grew("owx_rule_activations", "owx_rule_activations_total", 1)
    route = "/api/v1/namespaces/<ns>/actions/<path:name>"
    assert grew("owx_http_request_duration_seconds", "owx_http_request_duration_seconds_count", 4,
                method="POST", route=route)
    assert _value(after["owx_containers"], "owx_containers", backend="process") >= 1
    assert {s.labels["queue"] for s in after["owx_queue_depth"]} == {"admission", "node"}
    assert _value(after["owx_node_memory_bytes"], "owx_node_memory_bytes", kind="budget") > 0
    assert "owx_alarms_scheduled" in after and "owx_invocations_in_flight" in after
    assert "owx_canary_recoveries" in after  # extensions report through collect()
    assert "owx_escra_resizes" in after
    budget = _value(after["owx_busy_poll_budget_seconds"], "owx_busy_poll_budget_seconds")
    assert 100e-6 <= budget <= 1000e-6  # the busy poll's least (the default 100 us) and most
    text = requests.get(f"{gateway.url}/metrics", timeout=10).text
    uuid_part, key = gateway.auth.split(":")
    assert gateway.namespace not in text and uuid_part not in text and key not in text  # no tenant in labels


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_escra_agent_serves_its_own_metrics(tmp_path):
    controller_port = _free_port()
    controller = subprocess.Popen([sys.executable, "-m", "owx.cli", "agent", "--controller", "--port",
                                   str(controller_port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    agent = subprocess.Popen(
        [sys.executable, "-m", "owx.cli", "agent", "--allocator", f"http://127.0.0.1:{controller_port}",
         "--node", f"metrics-{uuid.uuid4().hex[:6]}", "--cgroup-root", f"owx-clients-{uuid.uuid4().hex[:6]}",
         "--metrics", "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert agent.stdout is not None
        port = int(re.search(r"port (\d+)", agent.stdout.readline()).group(1))
        url = f"http://127.0.0.1:{port}"
        families = wait_for(lambda: (f := _scrape(url)) and _value(
            f["owx_escra_allocator_reachable"], "owx_escra_allocator_reachable") == 1 and f, timeout=20)
        assert {"owx_escra_resizes", "owx_escra_oom_rescues", "owx_escra_containers"} <= set(families)
        controller.terminate()
        controller.wait(10)
        time.sleep(1)
        wait_for(lambda: _value(_scrape(url)["owx_escra_allocator_reachable"], "owx_escra_allocator_reachable") == 0,
                 timeout=20)
    finally:
        for process in (agent, controller):
            if process.poll() is None:
                process.terminate()
                process.wait(10)


def test_the_metrics_text_is_made_at_most_once_a_second(gateway):
    """Anyone may ask for it, without a key, and it runs to hundreds of KB: made for every request, a
    client asking in a loop made every tenant's requests wait. Its content type is Prometheus' own."""
    from prometheus_client import CONTENT_TYPE_LATEST

    first = requests.get(f"{gateway.url}/metrics", timeout=10)
    assert first.headers["Content-Type"] == CONTENT_TYPE_LATEST
    assert requests.get(f"{gateway.url}/metrics", timeout=10).content == first.content  # the first GET not yet in it
    time.sleep(1.1)
    assert requests.get(f"{gateway.url}/metrics", timeout=10).content != first.content
