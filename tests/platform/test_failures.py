"""Failures the platform detects and reports with OpenWhisk's wording (local backend)."""

from __future__ import annotations

import time

from platform_helpers import ECHO, pid_alive, request, spec
from tests.fixtures.polling import wait_for

from owx.common.cgroups import Cgroup
from owx.platform.embedded.logs import SENTINEL
from owx.platform.embedded.proxy import INIT_ANSWER_BYTES
from owx.platform.types import (
    DEVELOPER_ERROR,
    EXITED_MESSAGE,
    INIT_TIMEOUT_MESSAGE,
    INVALID_INIT_MESSAGE,
    LOG_TRUNCATED_MESSAGE,
    OOM_MESSAGE,
    SUCCESS,
    TIMEOUT_MESSAGE,
)


def test_timeout_kills_the_container(make_platform):
    platform = make_platform()
    action = spec("import time\ndef main(args):\n    print('starting')\n    time.sleep(30)\n", timeout_ms=400)
    started = time.monotonic()
    outcome = platform.run(action, request())
    assert time.monotonic() - started < 10  # cut at its 400 ms timeout, not after its 30 s sleep
    assert outcome.status == DEVELOPER_ERROR
    assert outcome.result == {"error": TIMEOUT_MESSAGE.format(ms=400)}
    assert outcome.failure == "timeout"
    assert any(line.endswith("stdout: starting") for line in outcome.logs)
    assert platform.containers() == []
    again = platform.run(action, request())  # a fresh container, not the killed one
    assert again.container_id != outcome.container_id


def test_a_timeout_while_loading_says_so(make_platform):
    """Module code that outlasts the action's timeout: OpenWhisk's init-timeout wording, and a timeout."""
    platform = make_platform()
    outcome = platform.run(spec("import time\ntime.sleep(30)\ndef main(args):\n    return {}\n", timeout_ms=400),
                           request())
    assert outcome.status == DEVELOPER_ERROR and outcome.failure == "timeout"
    assert outcome.result == {"error": INIT_TIMEOUT_MESSAGE.format(ms=400)}
    assert platform.containers() == []


def test_oom_kill_is_recognised(make_platform):
    platform = make_platform()
    code = "def main(args):\n    blocks = [bytearray(16 * 2**20) for _ in range(40)]\n    return {'n': len(blocks)}\n"
    outcome = platform.run(spec(code, memory_mb=128), request())
    assert outcome.status == DEVELOPER_ERROR
    assert outcome.result == {"error": OOM_MESSAGE}
    assert outcome.failure == "oom"
    assert platform.containers() == []


def test_process_exit_is_a_developer_error(make_platform):
    platform = make_platform()
    code = "import os\ndef main(args):\n    print('bye')\n    os._exit(3)\n"
    outcome = platform.run(spec(code), request())
    assert outcome.status == DEVELOPER_ERROR
    assert outcome.result == {"error": EXITED_MESSAGE}
    assert outcome.failure == "exited"
    assert any(line.endswith("stdout: bye") for line in outcome.logs)
    assert platform.containers() == []


def test_init_failure_reports_the_runtime_error(make_platform):
    platform = make_platform()
    outcome = platform.run(spec("def main(args) return 1\n"), request())
    assert outcome.status == DEVELOPER_ERROR
    assert outcome.failure == "init"
    assert "SyntaxError" in outcome.result["error"] or "Cannot load" in outcome.result["error"]
    assert platform.containers() == []


def test_logs_are_cut_at_the_limit(make_platform):
    platform = make_platform()
    code = "def main(args):\n    for i in range(200):\n        print(f'line {i:04d}')\n    return {}\n"
    outcome = platform.run(spec(code, logs_bytes=100), request())
    assert outcome.status == SUCCESS
    assert outcome.logs[-1].endswith("stderr: " + LOG_TRUNCATED_MESSAGE.format(limit=100))
    kept = [line.split("stdout: ", 1)[1] for line in outcome.logs[:-1]]
    assert kept == [f"line {i:04d}" for i in range(len(kept))]
    assert 0 < sum(len(text) for text in kept) <= 100
    follow = platform.run(spec(ECHO, name="x"), request())  # the sentinel kept activations apart
    assert not any(SENTINEL in line for line in follow.logs)


def test_dead_idle_container_leaves_the_pool(make_platform):
    platform = make_platform()
    platform.run(spec(ECHO), request())
    (info,) = platform.containers()
    Cgroup(info.cgroup).kill_all()
    wait_for(lambda: platform.containers() == [], what="the dead container to leave the pool")
    assert not pid_alive(info.pid)
    wait_for(lambda: not Cgroup(info.cgroup).exists(), what="its cgroup to be removed")


INIT_HIJACK = '''
import gc, socket
def _answer_init_ourselves(items):
    body = b"[" + b"{}," * (items - 1) + b"{}]"
    for sock in [o for o in gc.get_objects() if isinstance(o, socket.socket) and o.fileno() >= 0]:
        try:
            sock.getpeername()
            if not sock.getsockname():
                continue  # not the runtime's connection
        except OSError:
            continue
        sock.sendall(b"HTTP/1.1 200 OK\\r\\nContent-Type: application/json\\r\\nContent-Length: %d\\r\\n\\r\\n%s"
                     % (len(body), body))
_answer_init_ourselves(ITEMS)
def main(args):
    return {}
'''


def test_an_init_answer_past_its_bound_fails_the_initialization_unparsed(make_platform):
    """The action's own code can answer /init on the runtime's connection: a 3 MB answer (some 70 MB
    once parsed) fails the initialization without being read, a short one is OpenWhisk's."""
    platform = make_platform()
    outcome = platform.run(spec(INIT_HIJACK.replace("ITEMS", str(1_000_000))), request())
    assert outcome.status == DEVELOPER_ERROR and outcome.failure == "init", outcome
    assert outcome.result == {"error": f"{INVALID_INIT_MESSAGE}: its /init answer was over {INIT_ANSWER_BYTES} bytes"}
    assert platform.containers() == []
