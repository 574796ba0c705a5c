"""Blackbox actions on the default embedded platform: Python kinds as processes, blackbox in Docker,
and a missing image answered as OpenWhisk does."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest

from owx.runtimes.image.build import PYTHON_IMAGE, ensure_image
from tests.clients.conftest import ECHO

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def runtime_image() -> str:
    ensure_image(PYTHON_IMAGE)
    return PYTHON_IMAGE


def _backends(gateway) -> dict[str, str]:
    return {info.action_key.split("@")[0]: info.backend for info in gateway.service.platform.containers()
            if info.action_key}


def test_one_platform_two_backends_chosen_per_kind(http, gateway, runtime_image):
    boxed, plain = f"boxed-{uuid.uuid4().hex[:6]}", f"plain-{uuid.uuid4().hex[:6]}"
    body = {"exec": {"kind": "blackbox", "image": runtime_image, "code": ECHO}}
    assert http.put(gateway.api(f"actions/{boxed}"), json=body).status_code == 200
    assert http.put(gateway.api(f"actions/{plain}"), json={"exec": {"kind": "python:3", "code": ECHO}}).ok
    for name in (boxed, plain):
        answer = http.post(gateway.api(f"actions/{name}"), params={"blocking": "true", "result": "true"}, json={"n": 1})
        assert answer.status_code == 200 and answer.json() == {"got": {"n": 1}}, answer.text
    backends = _backends(gateway)
    assert backends[f"{gateway.namespace}/{boxed}"] == "docker"
    assert backends[f"{gateway.namespace}/{plain}"] == "process"


def test_missing_image_is_a_failed_pull(http, gateway):
    image = f"owx-test/absent-{uuid.uuid4().hex[:8]}"
    name = f"nowhere-{uuid.uuid4().hex[:6]}"
    assert http.put(gateway.api(f"actions/{name}"), json={"exec": {"kind": "blackbox", "image": image}}).ok
    answer = http.post(gateway.api(f"actions/{name}"), params={"blocking": "true"}, json={})
    assert answer.status_code == 502, answer.text
    record = answer.json()
    assert record["response"]["status"] == "action developer error"
    assert record["response"]["result"] == {"error": f"Failed to pull container image '{image}'."}
    assert any(a["key"] == "limits" for a in record["annotations"])


def test_derived_runtime_under_the_name_a_client_asks_for(http, gateway, tmp_path, runtime_image):
    """``owx runtime build-image --requirements --alias``: a blackbox action naming the alias runs the derived image."""
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("# what the client's functions import\nsix\n")
    alias = "registry.example:5000/client/runtime-v1:3.11"
    built = subprocess.run([sys.executable, "-m", "owx.cli", "runtime", "build-image", "--name",
                            "owx-test/clients-derived:latest", "--requirements", str(requirements), "--alias", alias],
                           capture_output=True, text=True, timeout=900)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    name = f"derived-{uuid.uuid4().hex[:6]}"
    code = "import six\n\ndef main(args):\n    return {'six': six.__version__}\n"
    assert http.put(gateway.api(f"actions/{name}"), json={"exec": {"kind": "blackbox", "image": alias, "code": code}}).ok
    answer = http.post(gateway.api(f"actions/{name}"), params={"blocking": "true", "result": "true"}, json={})
    assert answer.status_code == 200 and answer.json()["six"], answer.text
