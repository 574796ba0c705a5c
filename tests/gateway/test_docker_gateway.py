"""The gateway on the Docker backend: actions run in containers of the locally built runtime image."""

from __future__ import annotations

import pytest

from owx.common.dockerd import ensure_dockerd
from owx.runtimes.image.build import ensure_image
from tests.gateway.conftest import start_gateway

CODE = "import socket\n\ndef main(args):\n    return {'host': socket.gethostname(), 'x': args.get('x')}\n"


@pytest.fixture(scope="module")
def docker_gateway(tmp_path_factory):
    client = ensure_dockerd()
    ensure_image("owx/python-runtime:latest", client=client)
    server, running = start_gateway(tmp_path_factory.mktemp("docker"), platform={"kind": "docker", "stem_cells": 0})
    yield running, client
    server.stop()


def test_invoke_runs_in_a_limited_container(docker_gateway):
    gateway, client = docker_gateway
    http = gateway.session()
    body = {"exec": {"kind": "python:3", "code": CODE}, "limits": {"memory": 192}}
    assert http.put(gateway.api("actions/in-docker"), json=body).status_code == 200
    record = http.post(gateway.api("actions/in-docker"), params={"blocking": "true"}, json={"x": 5}).json()
    assert record["response"]["success"], record
    hostname = record["response"]["result"]["host"]
    containers = [c for c in client.containers.list() if c.id.startswith(hostname) or c.name == hostname
                  or c.attrs["Config"]["Hostname"] == hostname]
    assert containers, "the action did not run in a Docker container"
    host_config = containers[0].attrs["HostConfig"]
    assert host_config["Memory"] == 192 * 1024 * 1024
    assert host_config["CpuShares"] > 0 and host_config["NanoCpus"] == 0  # shares (+ quota when capped), not --cpus
    warm = http.post(gateway.api("actions/in-docker"), params={"blocking": "true"}, json={"x": 6}).json()
    assert warm["response"]["result"] == {"host": hostname, "x": 6}  # warm reuse of the same container
    assert not any(a["key"] == "initTime" for a in warm["annotations"])


def test_blackbox_action_runs_its_image(docker_gateway):
    gateway, _ = docker_gateway
    http = gateway.session()
    body = {"exec": {"kind": "blackbox", "image": "owx/python-runtime:latest",
                     "code": "def main(args):\n    return {'blackbox': args.get('v')}\n"}}
    created = http.put(gateway.api("actions/boxed"), json=body)
    assert created.status_code == 200, created.text
    assert {"key": "exec", "value": "blackbox"} in created.json()["annotations"]
    record = http.post(gateway.api("actions/boxed"), params={"blocking": "true"}, json={"v": 1}).json()
    assert record["response"]["result"] == {"blackbox": 1}, record["response"]
