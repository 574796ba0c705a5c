"""Idle warm containers are paused (OpenWhisk's invoker pauses them after its pause grace): what an
action leaves running after its activation (a daemon, a busy thread) takes no CPU and prints
nothing until the container's next activation, which finds it running again."""

from __future__ import annotations

import time

from owx.platform.types import SUCCESS, ActionSpec
from platform_helpers import request

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
IDLE_S = 1.0


def _idle_cpu_seconds(make_platform, pause_grace_s: float) -> tuple[float, bool]:
    """The CPU seconds a container whose activation left a busy daemon behind used in IDLE_S of being
    idle (after 0.3 s of grace), whether it was paused, and that its next activation ran on it."""
    platform = make_platform(pause_grace_s=pause_grace_s)
    spec = ActionSpec(key="guest/daemon@1", kind="python:3", code=DAEMON, memory_mb=256)
    first = platform.run(spec, request(start=True))
    assert first.status == SUCCESS, first.result
    container = platform.node("node0").pool.container(first.container_id)
    time.sleep(0.3)
    paused = container.paused
    before = container.cgroup.cpu().usage_ns
    time.sleep(IDLE_S)
    used = (container.cgroup.cpu().usage_ns - before) / 1e9
    again = platform.run(spec, request())
    assert again.status == SUCCESS and again.container_id == first.container_id
    assert not container.paused
    return used, paused


def test_an_idle_container_is_paused_and_what_its_action_left_running_stops(make_platform) -> None:
    used, paused = _idle_cpu_seconds(make_platform, pause_grace_s=0.05)
    assert paused and used < 0.02, f"{used:.3f} CPU seconds while paused"


def test_without_pauses_the_daemon_runs_on(make_platform) -> None:
    """The control: the same daemon, with pauses off, keeps a core busy while the container is idle."""
    used, paused = _idle_cpu_seconds(make_platform, pause_grace_s=0)
    assert not paused and used > 0.3 * IDLE_S, f"{used:.3f} CPU seconds"
