"""The Python SDK: client calls and the ``@action`` decorator against a running gateway."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest

from owx.gateway.sdk import ActionFailed, Client, OwxError, action


@pytest.fixture()
def client(gateway):
    sdk = Client(gateway.url, gateway.auth)
    yield sdk
    sdk.close()


def test_decorated_function_runs_remotely(client):
    @action(client=client, name=f"square-{uuid.uuid4().hex[:8]}", memory=128)
    def square(x, offset=0):
        import os
        return {"value": x * x + offset, "pid": os.getpid()}

    local = square(3)
    remote = square.invoke(3, offset=1)
    assert remote["value"] == 10 and remote["pid"] != local["pid"]  # ran in the action's process
    assert square.submit(4).result(timeout=30)["value"] == 16
    assert [r["value"] for r in square.map(range(6))] == [0, 1, 4, 9, 16, 25]
    assert [r["value"] for r in square.map([{"x": 2, "offset": 1}])] == [5]
    assert client.get_action(square.name)["limits"]["memory"] == 128


def test_a_function_without_source_fails_where_it_is_decorated_and_says_why():
    """As a user trying the README's snippet in ``python -c``: a clear error before any request."""
    snippet = ("from owx.gateway.sdk import action\n"
               "@action(name='nosource')\ndef square(x):\n    return x * x\n")
    done = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "SourceUnavailable" in done.stderr and "define the function in a file" in done.stderr


def test_failures_surface_as_exceptions(client):
    @action(client=client, name=f"fails-{uuid.uuid4().hex[:8]}")
    def fails():
        raise RuntimeError("nope")

    with pytest.raises(ActionFailed) as failed:
        fails.invoke()
    assert failed.value.activation["response"]["status"] == "action developer error"
    with pytest.raises(OwxError) as missing:
        client.get_action("no-such-action")
    assert missing.value.status == 404


def test_names_are_taken_as_wsk_takes_them_relative_or_fully_qualified(client, gateway):
    name = f"named-{uuid.uuid4().hex[:8]}"
    client.put_action(name, "def main(args):\n    return {'n': args.get('n', 0)}\n")
    for spelled in (name, f"/{gateway.namespace}/{name}", f"/_/{name}"):
        assert client.invoke(spelled, {"n": 3}) == {"n": 3}, spelled
    assert client.get_action(f"/{gateway.namespace}/{name}")["name"] == name
    with pytest.raises(OwxError) as elsewhere:
        client.invoke(f"/somebody-else/{name}")
    assert elsewhere.value.status in (403, 404)
