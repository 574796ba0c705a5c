"""The runtime image: built offline, run by a real dockerd, spoken to through the published port."""

from __future__ import annotations

import base64
import sys
import time
import uuid
from collections.abc import Iterator

import docker
import pytest
import requests
from docker.models.containers import Container
from docker.models.images import Image

from owx.common.dockerd import ensure_dockerd
from owx.runtimes.image.build import FINGERPRINT_LABEL, PYTHON_IMAGE, RUNTIME_PORT, ensure_image

from .processes import SENTINEL, zip_action

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture(scope="session")
def docker_client() -> docker.DockerClient:
    return ensure_dockerd()


@pytest.fixture(scope="session")
def runtime_image(docker_client: docker.DockerClient) -> Image:
    return ensure_image(PYTHON_IMAGE, client=docker_client)


@pytest.fixture
def container(docker_client: docker.DockerClient, runtime_image: Image) -> Iterator[Container]:
    started = docker_client.containers.run(
        runtime_image.id,
        detach=True,
        name=f"owx-rt-test-{uuid.uuid4().hex[:12]}",
        ports={f"{RUNTIME_PORT}/tcp": ("127.0.0.1", None)},
        mem_limit="256m",
    )
    try:
        yield started
    finally:
        started.remove(force=True)


def runtime_url(container: Container, timeout: float = 20.0) -> str:
    """The container's published runtime port, once the proxy answers on it."""
    container.reload()
    url = f"http://127.0.0.1:{container.ports[f'{RUNTIME_PORT}/tcp'][0]['HostPort']}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if requests.get(url + "/init", timeout=1).status_code == 405:  # answered by the proxy itself
                return url
        except requests.ConnectionError:
            pass
        time.sleep(0.02)
    raise TimeoutError(f"runtime in {container.name} did not answer: {container.logs()[-2000:]!r}")


def _ended_logs(container: Container, activations: int, timeout: float = 10.0) -> tuple[str, str]:
    """The container's stdout and stderr once ``activations`` ended their logs on both (a runtime writes
    the sentinels right after its answer, and dockerd copies them into its log a moment later)."""
    deadline = time.monotonic() + timeout
    while True:
        stdout = container.logs(stdout=True, stderr=False).decode()
        stderr = container.logs(stdout=False, stderr=True).decode()
        if min(stdout.count(SENTINEL), stderr.count(SENTINEL)) >= activations or time.monotonic() > deadline:
            return stdout, stderr
        time.sleep(0.02)


def test_image_is_reused_not_rebuilt(docker_client: docker.DockerClient, runtime_image: Image) -> None:
    started = time.monotonic()
    again = ensure_image(PYTHON_IMAGE, client=docker_client)
    assert again.id == runtime_image.id
    assert time.monotonic() - started < 5
    assert again.labels.get(FINGERPRINT_LABEL)
    assert again.attrs["Config"]["Env"].count("REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt") == 1


def test_container_speaks_the_protocol(container: Container) -> None:
    url = runtime_url(container)
    code = zip_action(
        {
            "__main__.py": (
                "import os, sys, helper\n"
                "def main(args):\n"
                "    print('inside', args['n'])\n"
                "    return {'n': helper.inc(args['n']), 'python': sys.version_info[:2],\n"
                "            'activation': os.environ['__OW_ACTIVATION_ID'], 'cwd': os.getcwd()}\n"
            ),
            "helper.py": "def inc(n):\n    return n + 1\n",
        }
    )
    with requests.Session() as session:
        init = session.post(url + "/init", json={"value": {"code": code, "binary": True, "main": "main"}}, timeout=10)
        assert init.status_code == 200, init.text
        for n in range(3):
            run = session.post(url + "/run", json={"value": {"n": n}, "activation_id": f"{n:032x}"}, timeout=10)
            assert run.status_code == 200, run.text
            body = run.json()
            assert body["n"] == n + 1 and body["activation"] == f"{n:032x}"
        assert body["python"] == [3, 11]
        assert session.post(url + "/init", json={"value": {"code": "x"}}, timeout=10).status_code == 403
    stdout, stderr = _ended_logs(container, activations=3)
    assert stdout.count(SENTINEL) == stderr.count(SENTINEL) == 3
    assert stdout.index("inside 0") < stdout.index(SENTINEL)


def test_container_cold_start(docker_client: docker.DockerClient, runtime_image: Image) -> None:
    """``docker run`` to an answered ``/init`` stays within a couple of seconds (the note measured ~0.5 s)."""
    started = time.monotonic()
    container = docker_client.containers.run(
        runtime_image.id, detach=True, name=f"owx-rt-test-{uuid.uuid4().hex[:12]}",
        ports={f"{RUNTIME_PORT}/tcp": ("127.0.0.1", None)},
    )  # fmt: skip
    try:
        url = runtime_url(container)
        source = "def main(args):\n    return {'ok': True}\n"
        init = requests.post(url + "/init", json={"value": {"code": source}}, timeout=10)
        assert init.status_code == 200
        elapsed = time.monotonic() - started
        print(f"docker cold start: {elapsed * 1000:.0f} ms", file=sys.stderr)
        assert elapsed < 5
    finally:
        container.remove(force=True)


def test_zip_code_is_base64_in_the_container_too(container: Container) -> None:
    url = runtime_url(container)
    bad = requests.post(
        url + "/init", json={"value": {"code": base64.b64encode(b"not a zip").decode(), "binary": True}}
    )
    assert bad.status_code == 502
    assert "zip" in bad.json()["error"].lower()
