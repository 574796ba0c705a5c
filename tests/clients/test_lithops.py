"""Lithops, unmodified, against a fresh ``owx up`` on the default (embedded) platform, over the HTTPS
owx serves (Lithops speaks nothing else): its blackbox actions run in Docker on a runtime image derived
from owx's with Lithops' requirements, registered under the image name Lithops asks for; storage is a
redis-server started here."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import lithops
import pytest
import yaml
from lithops.serverless.backends.openwhisk.config import AVAILABLE_PY_RUNTIMES
from lithops.utils import CURRENT_PY_VERSION

from owx.bench.canary.redis_server import RedisServer
from owx.bench.gateway_process import start_gateway_process
from owx.common.dockerd import ensure_dockerd
from owx.runtimes.image.build import add_alias, derived, ensure_runtime

pytestmark = [pytest.mark.docker, pytest.mark.slow]
FLOW = Path(__file__).with_name("lithops_flow.py")
RUNTIME_IMAGE = "owx/lithops-runtime:latest"
DEFAULT_RUNTIME = AVAILABLE_PY_RUNTIMES[CURRENT_PY_VERSION]  # what Lithops deploys when told nothing


@pytest.fixture(scope="session")
def lithops_runtime() -> str:
    """owx's runtime plus Lithops' requirements, also named as Lithops' default runtime image."""
    client = ensure_dockerd()
    image = ensure_runtime(derived(RUNTIME_IMAGE, f"lithops[redis]=={lithops.__version__}\n"), client=client)
    add_alias(client, image, DEFAULT_RUNTIME)
    return DEFAULT_RUNTIME


@pytest.fixture()
def stack(tmp_path, lithops_runtime):
    """redis on the Docker bridge, ``owx up`` with its defaults (HTTPS included) and redis's port open
    to its containers; the Lithops config file."""
    bridge = _bridge_address()
    password = secrets.token_hex(16)
    redis = RedisServer(tmp_path / "redis", bind=(bridge,), password=password)
    gateway = start_gateway_process(tmp_path / "gw", env={"OWX_PLATFORM__SANDBOX__HOST_PORTS": json.dumps([redis.port])})
    namespace = gateway.session().get(f"{gateway.url}/api/v1/namespaces").json()[0]
    config = {
        "lithops": {"backend": "openwhisk", "storage": "redis", "log_level": "INFO"},
        "openwhisk": {"endpoint": gateway.tls_url, "namespace": namespace, "api_key": gateway.auth},
        "redis": {"host": bridge, "port": redis.port, "password": password},
    }
    path = tmp_path / "lithops.yaml"
    path.write_text(yaml.safe_dump(config))
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "LITHOPS_CONFIG_FILE": str(path),  # Lithops verifies the certificate:
           "REQUESTS_CA_BUNDLE": str(gateway.data_dir / "tls" / "ca.pem")}  # the CA owx made for it
    try:
        yield gateway, path, env
    finally:
        gateway.stop()
        redis.stop()


def _bridge_address() -> str:
    """The host's address on Docker's default bridge (where containers reach services of the host)."""
    network = ensure_dockerd().networks.get("bridge").attrs
    device = network["Options"].get("com.docker.network.bridge.name", "docker0")
    shown = subprocess.run(["ip", "-j", "-4", "addr", "show", device], capture_output=True, text=True, check=True)
    return json.loads(shown.stdout)[0]["addr_info"][0]["local"]


def _lithops_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("lithops") or "lithops"
    done = subprocess.run([binary, *args], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_lithops_runtime_deploy_call_async_map_map_reduce_list_and_clean(stack):
    gateway, config, env = stack
    _lithops_cli(env, "runtime", "deploy", DEFAULT_RUNTIME, "-c", str(config))
    listed = _lithops_cli(env, "runtime", "list", "-c", str(config))
    assert DEFAULT_RUNTIME in listed.stdout + listed.stderr
    done = subprocess.run([sys.executable, str(FLOW), str(config)], capture_output=True, text=True, env=env,
                          timeout=1200)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["call_async"] == 10
    assert seen["map"] == [x * x for x in range(100)]
    assert seen["map_reduce"] == sum(x * x for x in range(20))
    http = gateway.session()
    assert any(p["name"].startswith("lithops_") for p in http.get(gateway.api("packages")).json())
    _lithops_cli(env, "clean", "-c", str(config))
    assert not any(p["name"].startswith("lithops_") for p in http.get(gateway.api("packages")).json())
