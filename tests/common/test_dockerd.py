"""Starting the machine's Docker engine: what a pid file says, and an engine that died leaving one."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess

import pytest

from owx.common.dockerd import PIDFILE, engine_pid, ensure_dockerd
from tests.fixtures.polling import wait_for
from tests.fixtures.zombies import kill_unreaped

pytestmark = pytest.mark.docker


def test_a_pid_file_names_the_engine_only_while_a_dockerd_holds_its_pid(tmp_path):
    """A pid file a dead engine left, its pid since reused by another process, names no engine."""
    ensure_dockerd().close()
    running = engine_pid()
    assert running is not None  # the running engine wrote the machine's pid file
    pidfile = tmp_path / "docker.pid"
    pidfile.write_text(str(os.getpid()))  # alive, and not a dockerd
    assert engine_pid(pidfile) is None
    pidfile.write_text(str(running))
    assert engine_pid(pidfile) == running


def test_a_dead_engine_its_parent_has_not_reaped_is_no_engine(tmp_path):
    """An engine started by this process and stopped stays a zombie until reaped: it names no engine."""
    impostor = tmp_path / "dockerd"  # a process whose command is "dockerd"
    shutil.copy(shutil.which("sleep"), impostor)
    process = subprocess.Popen([str(impostor), "600"])
    pidfile = tmp_path / "docker.pid"
    pidfile.write_text(str(process.pid))
    try:
        assert engine_pid(pidfile) == process.pid
        kill_unreaped(process)
        assert engine_pid(pidfile) is None
    finally:
        process.kill()
        process.wait()


def test_an_engine_that_died_leaving_its_pid_file_to_another_process_is_started_again(tmp_path):
    """dockerd refuses to start while its pid file names a live process: owx removes a dead engine's."""
    ensure_dockerd().close()
    engine = engine_pid()
    assert engine is not None
    stopped = tmp_path / "stopped.pid"  # the engine removes its own pid file as it stops
    stopped.write_text(str(engine))
    os.kill(engine, signal.SIGTERM)
    wait_for(lambda: engine_pid(stopped) is None, timeout=60, what="the engine to stop")
    squatter = subprocess.Popen(["sleep", "600"])  # the dead engine's pid, reused
    try:
        PIDFILE.write_text(str(squatter.pid))
        client = ensure_dockerd(timeout=60)
        assert client.ping()
        client.close()
        assert engine_pid() not in (None, squatter.pid)
    finally:
        squatter.kill()
        squatter.wait()
