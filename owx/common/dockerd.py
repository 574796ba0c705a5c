"""Bring up the machine's Docker engine when it is not running, and connect to it.

There is no systemd on these machines: when ``docker info`` fails we start
``dockerd --storage-driver=overlay2`` ourselves, detached (own session, stdin
closed, log in a file), and poll until it answers. A lock file makes concurrent
callers (tests of several packages, the docker backend) start at most one engine.
A pid file a dead engine left is removed first: dockerd refuses to start while the
pid in it is alive, even when another process has taken that pid since.
Never start a second engine with ``--bridge=none``: it deletes the host's docker0.
The engine is left running on purpose: it is the machine's, shared by everyone.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import docker
import docker.errors

from owx.common.processes import running

DEFAULT_SOCKET = "/var/run/docker.sock"
PIDFILE = Path("/var/run/docker.pid")
LOCKFILE = Path(tempfile.gettempdir()) / "owx-dockerd.lock"


class DockerdError(RuntimeError):
    """The Docker engine is not reachable and could not be started."""


def ensure_dockerd(timeout: float = 60.0) -> docker.DockerClient:
    """Return a client of a running Docker engine, starting ``dockerd`` if needed.

    When ``DOCKER_HOST`` names another engine, that engine is used as is and never
    started here.
    """
    client = _connect()
    if client is not None:
        return client
    if os.environ.get("DOCKER_HOST"):
        raise DockerdError(f"DOCKER_HOST={os.environ['DOCKER_HOST']} does not answer; not starting a local dockerd")
    with file_lock(LOCKFILE):
        client = _connect()
        if client is not None:
            return client
        if engine_pid() is not None:
            return _wait_ready(None, timeout)
        PIDFILE.unlink(missing_ok=True)  # a dead engine's: dockerd refuses to start while its pid is alive
        return _wait_ready(_start_dockerd(), timeout)


def dockerd_log_path() -> Path:
    """Where a dockerd started by owx writes its log."""
    log_dir = Path("/var/log")
    if not os.access(log_dir, os.W_OK):
        log_dir = Path(tempfile.gettempdir())
    return log_dir / "owx-dockerd.log"


def _connect() -> docker.DockerClient | None:
    try:
        client = docker.from_env(timeout=120)
        client.ping()
    except docker.errors.DockerException:
        return None
    return client


def engine_pid(pidfile: Path = PIDFILE) -> int | None:
    """The pid of a dockerd that is alive but maybe not ready yet (started by someone else). A pid
    file a dead engine left names no engine: not when its pid now belongs to another process, and not
    while the engine is a zombie its parent has not reaped (the process that started it)."""
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if running(pid, "dockerd") else None


def _start_dockerd() -> subprocess.Popen[bytes]:
    binary = shutil.which("dockerd")
    if binary is None:
        raise DockerdError("dockerd is not installed (apt-get install -y --no-install-recommends docker.io)")
    log = open(dockerd_log_path(), "ab")  # noqa: SIM115 - handed to the child, closed below
    try:
        return subprocess.Popen(
            [binary, "--storage-driver=overlay2"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    finally:
        log.close()


def _wait_ready(process: subprocess.Popen[bytes] | None, timeout: float) -> docker.DockerClient:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        client = _connect()
        if client is not None:
            return client
        if process is not None and process.poll() is not None:
            raise DockerdError(f"dockerd exited with {process.returncode}; log tail:\n{_log_tail()}")
        time.sleep(0.1)
    raise DockerdError(f"dockerd did not answer within {timeout:.0f} s; log tail:\n{_log_tail()}")


def _log_tail(lines: int = 20) -> str:
    try:
        return "\n".join(dockerd_log_path().read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created if missing) for the block."""
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
