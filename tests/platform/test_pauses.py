"""Idle warm containers are paused (OpenWhisk's invoker pauses them after its pause grace): what an
action leaves running after its activation (a daemon, a busy thread) takes no CPU and prints
nothing until the container's next activation, which finds it running again. The same on both
backends: process containers (the cgroup's freezer) and Docker containers (``docker pause``)."""

from __future__ import annotations

import time

import pytest

from owx.common.dockerd import ensure_dockerd
from owx.platform.types import SUCCESS, ActionSpec
from owx.runtimes.image.build import PYTHON_IMAGE, ensure_image
from platform_helpers import request
from tests.fixtures.polling import wait_for

DAEMON = '''
import os

def main(args):
    if args.get("start"):
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                while True:
                    pass
            os._exit(0)
        os.wait()
    return {"pid": os.getpid()}
'''
DAEMON_ACTION = ActionSpec(key="guest/daemon@1", kind="python:3", code=DAEMON, memory_mb=256)
IDLE_S = 1.0


@pytest.fixture(scope="module", params=["embedded", pytest.param("docker", marks=pytest.mark.docker)])
def backend(request) -> str:
    """The platform kind; Docker's with dockerd started and the runtime image built."""
    if request.param == "docker":
        client = ensure_dockerd()
        ensure_image(PYTHON_IMAGE, client=client)
        client.close()
    return request.param


def _idle_cpu_seconds(make_platform, backend: str, pause_grace_s: float) -> tuple[float, bool]:
    """The CPU seconds a container whose activation left a busy daemon behind used in IDLE_S of being
    idle (after 0.3 s of grace), whether it was paused, and that its next activation ran on it."""
    platform = make_platform(kind=backend, pause_grace_s=pause_grace_s)
    first = platform.run(DAEMON_ACTION, request(start=True))
    assert first.status == SUCCESS, first.result
    container = platform.node("node0").pool.container(first.container_id)
    time.sleep(0.3)
    paused = container.paused
    before = container.cgroup.cpu().usage_ns
    time.sleep(IDLE_S)
    used = (container.cgroup.cpu().usage_ns - before) / 1e9
    again = platform.run(DAEMON_ACTION, request())
    assert again.status == SUCCESS and again.container_id == first.container_id
    assert not container.paused
    return used, paused


def test_an_idle_container_is_paused_and_what_its_action_left_running_stops(make_platform, backend) -> None:
    used, paused = _idle_cpu_seconds(make_platform, backend, pause_grace_s=0.05)
    assert paused and used < 0.02, f"{used:.3f} CPU seconds while paused"


def test_without_pauses_the_daemon_runs_on(make_platform, backend) -> None:
    """The control: the same daemon, with pauses off, keeps a core busy while the container is idle."""
    used, paused = _idle_cpu_seconds(make_platform, backend, pause_grace_s=0)
    assert not paused and used > 0.3 * IDLE_S, f"{used:.3f} CPU seconds"


def test_a_paused_container_is_removed_at_once(make_platform, backend) -> None:
    """Closing the platform kills and removes a paused container (and the daemon its action left)
    without waiting for it to thaw."""
    platform = make_platform(kind=backend, pause_grace_s=0.05)
    first = platform.run(DAEMON_ACTION, request(start=True))
    container = platform.node("node0").pool.container(first.container_id)
    wait_for(lambda: container.paused, what="the idle container to be paused")
    started = time.monotonic()
    platform.close()
    assert time.monotonic() - started < 3.0
    assert not container.is_alive() and not container.cgroup.exists()
