"""``owx agent --controller`` and ``owx agent`` as real processes for the benchmark."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import requests


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class EscraStack:
    """An allocator with one application and a node agent managing ``<cgroup_root>/<node>/*``."""

    def __init__(self, cgroup_root: str, node: str, app: str, event_log: str | None = None,
                 controller_args: tuple[str, ...] = (), agent_args: tuple[str, ...] = ()) -> None:
        port = _free_port()
        self.url = f"http://127.0.0.1:{port}"
        owx = [sys.executable, "-m", "owx.cli", "agent"]
        self.controller = subprocess.Popen([*owx, "--controller", "--port", str(port), "--define-app", app, *controller_args],
                                           stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while True:
            try:
                if requests.get(f"{self.url}/v1/state", timeout=0.5).ok:
                    break
            except requests.RequestException:
                if time.monotonic() > deadline or self.controller.poll() is not None:
                    _end(self.controller)
                    raise RuntimeError("allocator did not start")
                time.sleep(0.1)
        where = ["--node", node, "--cgroup-root", cgroup_root, "--allocator", self.url, "--app", app.split(",")[0].split("=")[1]]
        if event_log:
            where += ["--event-log", event_log]
        self.agent = subprocess.Popen([*owx, *where, *agent_args], stdout=subprocess.DEVNULL)

    def state(self) -> dict:
        return requests.get(f"{self.url}/v1/state", timeout=2).json()

    def wait_managed(self, count: int = 1, name: str | None = None, timeout: float = 30) -> None:
        """Until the allocator manages ``count`` containers (or the one called ``name``)."""
        deadline = time.monotonic() + timeout
        while (name not in self.state()["containers"]) if name else len(self.state()["containers"]) < count:
            if time.monotonic() > deadline:
                raise RuntimeError("agent did not register the containers")
            time.sleep(0.1)

    def close(self) -> None:
        self.agent.terminate()
        self.controller.terminate()
        _end(self.agent)
        _end(self.controller)


def _end(proc: subprocess.Popen, grace_s: float = 15) -> None:
    """Terminate ``proc``; kill it if it has not exited after ``grace_s``."""
    proc.terminate()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
