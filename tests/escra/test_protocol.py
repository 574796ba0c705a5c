"""The allocator's HTTP protocol: validation, stale epochs, state."""

from __future__ import annotations

import os
import subprocess
import sys

import requests

from owx.escra_agent.link import HttpLink
from owx.escra_agent.messages import Register

APP = "name=app,cpu=2,memory-mb=1024,containers=4"


def test_bad_messages_get_400_with_a_clear_error(controller):
    server = controller("--define-app", APP)
    post = lambda path, **kw: requests.post(f"{server.url}{path}", timeout=2, **kw)  # noqa: E731

    response = post("/v1/register", data="{not json", headers={"Content-Type": "application/json"})
    assert response.status_code == 400 and "invalid" in response.json()["error"].lower()

    response = post("/v1/register", json={"node": "n1", "containers": [{"id": "c1", "app": "app"}]})
    assert response.status_code == 400
    assert "containers.0.cpu_quota_us" in response.json()["error"]

    response = post("/v1/telemetry", json={"node": "bad name!", "epoch": "x", "seq": 0})
    assert response.status_code == 400 and "node" in response.json()["error"]

    response = post("/v1/register", json={"node": "n1", "surprise": 1})
    assert response.status_code == 400 and "surprise" in response.json()["error"]

    response = post("/v1/register", data="node=n1")
    assert response.status_code == 400 and "JSON" in response.json()["error"]


def test_stale_epoch_gets_409_and_registration_gives_directives(controller):
    server = controller("--define-app", APP)
    stale = requests.post(f"{server.url}/v1/heartbeat", json={"node": "n1", "epoch": "old"}, timeout=2)
    assert stale.status_code == 409
    info = {"id": "c1", "app": "app", "cpu_quota_us": -1, "memory_limit": -1, "memory_usage": 1 << 20}
    reply = requests.post(f"{server.url}/v1/register", json={"node": "n1", "containers": [info]}, timeout=2).json()
    assert reply["epoch"] == server.state()["epoch"]
    assert reply["updates"] == [{"id": "c1", "cpu_quota_us": 50_000, "memory_limit": (1024 << 20) * 8 // 10 // 4 // 4096 * 4096}]
    beat = requests.post(f"{server.url}/v1/heartbeat", json={"node": "n1", "epoch": reply["epoch"]}, timeout=2)
    assert beat.status_code == 200


def test_unknown_container_oom_is_404_and_unknown_route_is_json(controller):
    server = controller("--define-app", APP)
    epoch = requests.post(f"{server.url}/v1/register", json={"node": "n1"}, timeout=2).json()["epoch"]
    event = {"node": "n1", "epoch": epoch, "id": "ghost", "memory_usage": 1, "memory_limit": 4096}
    response = requests.post(f"{server.url}/v1/oom", json=event, timeout=2)
    assert response.status_code == 404 and "ghost" in response.json()["error"]
    assert requests.get(f"{server.url}/v1/nothing", timeout=2).json()["code"] == 404


def test_limits_past_any_machine_are_a_400_and_the_allocator_lives_on(controller):
    """cpu_cores 1e308 was stored, then every /v1/state answered 500 (its quota overflowed an int)."""
    server = controller("--define-app", APP)
    for limits in ({"name": "x", "cpu_cores": 1e308, "memory_bytes": 1}, {"name": "y", "cpu_cores": 1,
                                                                            "memory_bytes": 2 ** 80}):
        response = requests.post(f"{server.url}/v1/apps", json=limits, timeout=2)
        assert response.status_code == 400, response.text
    assert requests.get(f"{server.url}/v1/state", timeout=2).status_code == 200


def test_with_a_token_only_its_holders_reach_the_allocator(controller):
    """Agents change every node's limits through it: anyone else who reaches it (an action container
    on the cluster network) gets a 401, and an agent with the token registers."""
    server = controller("--define-app", APP, token="s3cret")
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic s3cret"}):
        assert requests.get(f"{server.url}/v1/state", headers=headers, timeout=2).status_code == 401
        refused = requests.post(f"{server.url}/v1/register", json={"node": "n1", "containers": []}, headers=headers,
                                timeout=2)
        assert refused.status_code == 401 and "token" in refused.json()["error"]
    directives = HttpLink(server.url, 2.0, "s3cret").register(Register(node="n1", containers=[]))
    assert directives.epoch == server.state()["epoch"]


def test_an_allocator_other_machines_reach_needs_a_token():
    done = subprocess.run([sys.executable, "-m", "owx.cli", "agent", "--controller", "--host", "0.0.0.0", "--port", "0"],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "OWX_ESCRA_TOKEN": ""})
    assert done.returncode != 0 and "needs OWX_ESCRA_TOKEN" in done.stderr
