"""An owx gateway in front of a stand-in upstream OpenWhisk.

No Apache OpenWhisk can be installed on these machines (its build needs Java artifacts that
cannot be downloaded), so the upstream is a second ``owx up`` on the embedded platform with
every extension off (``--no-extensions``): it speaks OpenWhisk's API (the npm client shows it)
and recovers, estimates and resizes nothing, so whatever does is the wrapping gateway. Both
are real processes; checkpoints go to a real redis-server both reach.
"""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from owx.bench.canary.redis_server import RedisServer
from owx.bench.gateway_process import GatewayProcess, start_gateway_process

UPSTREAM_AUTH = f"{uuid.uuid4()}:{secrets.token_hex(24)}"
CHECKPOINT_BUDGET_MB = 8  # what each namespace's checkpoints may hold in the wrapper's Redis
UPSTREAM_CONCURRENCY = 2  # the narrow stand-in runs at most this many activations of one namespace at once
ECHO = "def main(args):\n    return {'n': args.get('n')}\n"
SLOW = "import time\ndef main(args):\n    time.sleep(1.0)\n    return {'n': args.get('n')}\n"


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="owx-upstream-test-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def redis(workdir: Path) -> Iterator[RedisServer]:
    """Canary's checkpoint store; owx logs in with a password and gives each namespace a user of its own."""
    server = RedisServer(workdir / "redis", password=secrets.token_hex(16))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def upstream(workdir: Path, redis: RedisServer) -> Iterator[GatewayProcess]:
    """The stand-in OpenWhisk: plain embedded owx, no extensions, no stem cells; its containers may reach the
    redis-server on this machine (as an OpenWhisk's containers reach a store on the network)."""
    process = start_gateway_process(workdir / "upstream", args=["--no-extensions"], auth=UPSTREAM_AUTH,
                                    env={"OWX_PLATFORM__STEM_CELLS": "0", "OWX_LIMITS__MEMORY_MB__MAX": "1024",
                                         "OWX_PLATFORM__SANDBOX__HOST_PORTS": json.dumps([redis.port])})
    yield process
    process.stop()


@pytest.fixture(scope="module")
def wrapper(workdir: Path, upstream: GatewayProcess, redis: RedisServer) -> Iterator[GatewayProcess]:
    """owx in front of the upstream, checkpoints in Redis (large values too: no directory is shared),
    each namespace's within ``CHECKPOINT_BUDGET_MB``."""
    process = start_gateway_process(
        workdir / "wrapper", args=["--upstream", upstream.url, "--upstream-auth", UPSTREAM_AUTH],
        env={"OWX_CANARY__STORE_URL": redis.url, "OWX_LIMITS__MEMORY_MB__MAX": "1024",
             "OWX_CANARY__STORE_QUOTA_MB": str(CHECKPOINT_BUDGET_MB)})
    yield process
    process.stop()


@pytest.fixture(scope="module")
def narrow_upstream(workdir: Path) -> Iterator[GatewayProcess]:
    """A stand-in upstream that throttles each of its namespaces at two activations in flight (429 beyond)."""
    process = start_gateway_process(workdir / "narrow", args=["--no-extensions"], auth=UPSTREAM_AUTH,
                                    env={"OWX_PLATFORM__STEM_CELLS": "0",
                                         "OWX_GATEWAY__CONCURRENT_INVOCATIONS": str(UPSTREAM_CONCURRENCY)})
    yield process
    process.stop()


def admin(data_dir: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """``owx admin ARGS`` on the gateway of ``data_dir``, ``stdin`` its input."""
    return subprocess.run(["owx", "admin", "--data-dir", str(data_dir), *args], capture_output=True, text=True,
                          timeout=60, input=stdin)


def admin_create(data_dir: Path, subject: str) -> str:
    """A new tenant ``subject`` on the gateway of ``data_dir``: its key."""
    created = admin(data_dir, "user", "create", subject)
    assert created.returncode == 0, created.stderr
    return created.stdout.strip()


def slow_burst(front: GatewayProcess, count: int, auth: str | None = None, spread_s: float = 0.0,
               deployed: bool = False) -> list[str]:
    """Create a new action that sleeps a second, and send it ``count`` non-blocking invokes at once, or
    evenly over ``spread_s`` (as the tenant of ``auth``, else the default one); their activation ids.
    ``deployed``: after one blocking invoke, so that none of the burst deploys it upstream."""
    name = f"slow-{uuid.uuid4().hex[:6]}"
    created = front.session(auth).put(front.api(f"actions/{name}"), json={"exec": {"kind": "python:3", "code": SLOW}})
    assert created.ok, created.text
    if deployed:
        ran = front.session(auth).post(front.api(f"actions/{name}"), params={"blocking": "true"})
        assert ran.status_code == 200, ran.text
    ids: list[str] = []

    def invoke(n: int) -> None:
        time.sleep(n * spread_s / count)
        answer = front.session(auth).post(front.api(f"actions/{name}"), json={"n": n})
        assert answer.status_code == 202, answer.text
        ids.append(answer.json()["activationId"])

    threads = [threading.Thread(target=invoke, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return ids


def record_of(front: GatewayProcess, activation_id: str, auth: str | None = None, within_s: float = 90) -> dict:
    """The stored record of ``activation_id`` (read as the tenant of ``auth``), once there is one."""
    deadline = time.monotonic() + within_s
    while (stored := front.session(auth).get(front.api(f"activations/{activation_id}"))).status_code == 404:
        assert time.monotonic() < deadline, f"activation {activation_id} was never recorded"
        time.sleep(0.1)
    return stored.json()
