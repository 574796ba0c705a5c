"""The gateway on the Docker backend: actions run in containers of the locally built runtime image."""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

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


API_CALLER = """import json, os, socket, urllib.parse, urllib.request, base64

def main(args):
    host = os.environ['__OW_API_HOST']
    key = base64.b64encode(os.environ['__OW_API_KEY'].encode()).decode()
    request = urllib.request.Request(host + '/api/v1/namespaces/_/actions',
                                     headers={'Authorization': 'Basic ' + key})
    with urllib.request.urlopen(request, timeout=10) as answer:
        names = [action['name'] for action in json.load(answer)]
    closed = socket.socket()
    closed.settimeout(5)
    try:
        closed.connect((urllib.parse.urlsplit(host).hostname, args['closed_port']))
        other_service = 'reached'
    except OSError as exc:
        other_service = type(exc).__name__
    return {'host': host, 'names': names, 'other_service': other_service}
"""


def test_an_action_in_docker_reaches_the_gateway_at_its_api_host_and_no_other_service(docker_gateway):
    """A container has a network namespace of its own, where 127.0.0.1 is the container: its
    ``__OW_API_HOST`` names an address of this machine it reaches (the action calls the API with
    its key, as Lithops' remote invoker does), and that address opens no other port of the machine."""
    gateway, _ = docker_gateway
    http = gateway.session()
    service = socket.create_server(("0.0.0.0", 0))  # a service of this machine's that containers must not reach
    body = {"exec": {"kind": "python:3", "code": API_CALLER},
            "annotations": [{"key": "provide-api-key", "value": True}]}
    assert http.put(gateway.api("actions/api-caller"), json=body).status_code == 200
    with service:
        record = http.post(gateway.api("actions/api-caller"), params={"blocking": "true"},
                           json={"closed_port": service.getsockname()[1]}).json()
    assert record["response"]["success"], record["response"]
    result = record["response"]["result"]
    assert "api-caller" in result["names"]
    assert urlsplit(result["host"]).hostname not in ("127.0.0.1", "localhost")
    assert result["other_service"] == "ConnectionRefusedError"
