"""Containers forked by the local backend's zygote: cgroup, exit status, fresh random state, fallback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading

from platform_helpers import ECHO, SLEEP, pid_alive, request, spec
from tests.fixtures.polling import wait_for

from owx.common.cgroups import Cgroup
from owx.platform.types import SUCCESS

RANDOM = "import numpy as np\ndef main(args):\n    return {'draw': int(np.random.randint(1 << 30))}\n"


def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[1])


def test_containers_are_forked_by_the_zygote_into_their_own_cgroup(make_platform):
    platform = make_platform()
    assert platform.run(spec(ECHO), request(n=1)).status == SUCCESS
    (info,) = platform.containers()
    assert parent_of(info.pid) == platform.backends.for_kind("python:3").zygote.process.pid
    assert Cgroup(info.cgroup).pids() == [info.pid]  # pid 1 of its own namespace, and the runtime itself


def test_a_killed_forked_runtime_is_reported_and_reaped(make_platform):
    platform = make_platform()
    outcomes = []
    runner = threading.Thread(target=lambda: outcomes.append(platform.run(spec(SLEEP), request(s=30))))
    runner.start()
    wait_for(lambda: any(c.in_flight for c in platform.containers()), what="the run to start")
    (info,) = platform.containers()
    os.kill(info.pid, 9)
    runner.join(30)
    assert outcomes and outcomes[0].status != SUCCESS and outcomes[0].failure == "exited"
    wait_for(lambda: not pid_alive(info.pid), what="the zygote to reap its child")


def test_each_forked_runtime_draws_its_own_numpy_randoms(make_platform):
    platform = make_platform()
    draws = {platform.run(spec(RANDOM, name=f"draw{i}"), request()).result["draw"] for i in range(3)}
    assert len(draws) == 3


def test_containers_start_without_the_zygote_and_while_a_dead_one_is_replaced(make_platform):
    plain = make_platform(zygote=False)
    assert plain.backends.for_kind("python:3").zygote is None
    assert plain.run(spec(ECHO), request()).status == SUCCESS
    assert parent_of(plain.containers()[0].pid) == os.getpid()

    forked = make_platform()
    backend = forked.backends.for_kind("python:3")
    dead = backend.zygote
    dead.process.kill()
    wait_for(lambda: not dead.alive, what="the zygote's end to be noticed")
    assert forked.run(spec(ECHO), request()).status == SUCCESS
    assert parent_of(forked.containers()[0].pid) == os.getpid()
    wait_for(lambda: backend.zygote is not dead and backend.zygote.alive, timeout=60, what="a new zygote")
    assert forked.run(spec(ECHO, name="after"), request()).status == SUCCESS
    newest = max(forked.containers(), key=lambda c: c.action_key == "guest/after@1")
    assert parent_of(newest.pid) == backend.zygote.process.pid


PRELOADED = "import sys\ndef main(args):\n    return {'preloaded': 'xml.dom.minidom' in sys.modules}\n"


def test_a_kind_with_its_own_preloads_is_forked_from_its_own_zygote_once_ready(make_platform):
    platform = make_platform(zygote_kind_preload={"python:3.11": ["xml.dom.minidom"]})
    zygotes = platform.backends.for_kind("python:3.11").zygotes
    first = platform.run(spec(PRELOADED, name="first", kind="python:3.11"), request())
    assert first.status == SUCCESS and first.result == {"preloaded": False}  # the common zygote, while its own imports

    wait_for(lambda: zygotes.preloaded("python:3.11"), timeout=60, what="the kind's zygote")
    own = zygotes.for_kind("python:3.11")
    assert own is not zygotes.common
    later = platform.run(spec(PRELOADED, name="later", kind="python:3.11"), request())
    other = platform.run(spec(PRELOADED, name="other", kind="python:3"), request())
    assert later.result == {"preloaded": True} and other.result == {"preloaded": False}
    parents = {c.action_key: parent_of(c.pid) for c in platform.containers()}
    assert parents["guest/later@1"] == own.process.pid
    assert parents["guest/other@1"] == parents["guest/first@1"] == zygotes.common.process.pid


def test_a_zygote_whose_gateway_went_away_while_it_loaded_ends_quietly():
    """A gateway killed while its zygote imports: the zygote's 'ready' meets a closed socket, and it
    ends without a traceback in the gateway's log (three of ten such kills left one)."""
    ours, its = socket.socketpair()
    ours.close()
    done = subprocess.run([sys.executable, "-m", "owx.runtimes.zygote", str(its.fileno())], pass_fds=[its.fileno()],
                          capture_output=True, text=True, timeout=60)
    its.close()
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
