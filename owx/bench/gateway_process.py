"""``owx up`` in a process of its own, for benchmarks and tests that need a real server to stop or kill.

Each process gets its own data dir, HOME (so it never writes the user's ``~/.wskprops``), cgroup
root and port; :meth:`GatewayProcess.restart` brings it back on the same port and data dir.
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import requests

START_TIMEOUT_S = 60.0


@dataclass
class GatewayProcess:
    """A running ``owx up``: its URL, the default namespace's key, and the process."""

    url: str
    auth: str
    data_dir: Path
    process: subprocess.Popen[str]
    tls_url: str | None = None
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def session(self, auth: str | None = None) -> requests.Session:
        """A session with the default namespace's key, or with ``auth`` (another tenant's)."""
        session = requests.Session()
        session.auth = tuple((auth or self.auth).split(":", 1))  # type: ignore[assignment]
        return session

    def api(self, path: str) -> str:
        return f"{self.url}/api/v1/namespaces/_/{path}"

    def rss_mb(self) -> float:
        """The process's resident memory now, in MB."""
        return self._status("VmRSS:") / 1024

    def threads(self) -> int:
        """The process's threads now."""
        return int(self._status("Threads:"))

    def _status(self, field_name: str) -> int:
        """A number of ``/proc/PID/status`` (kB for sizes)."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith(field_name):
                return int(line.split()[1])
        raise RuntimeError(f"{field_name} is not in the status of process {self.process.pid}")

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout_s``."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def kill(self) -> None:
        """SIGKILL: the crash a supervisor's kill or a lost machine causes."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def restart(self) -> "GatewayProcess":
        """Start again on the same port and data dir (stop or kill it first)."""
        restarted = start_gateway_process(self.data_dir, args=self.args, env=self.env, port=self.port, auth=self.auth)
        self.process, self.url, self.tls_url = restarted.process, restarted.url, restarted.tls_url
        return self


def start_gateway_process(data_dir: Path, *, args: list[str] | None = None, env: dict[str, str] | None = None,
                          port: int = 0, auth: str | None = None) -> GatewayProcess:
    """Start ``owx up [args]`` with ``env`` over the environment and wait until it answers."""
    data_dir.mkdir(parents=True, exist_ok=True)
    home = data_dir / "home"
    home.mkdir(exist_ok=True)
    auth = auth or f"{uuid.uuid4()}:{secrets.token_hex(32)}"
    # its own cgroup root, kept by restart() as a real restart keeps it: the new process reaps what a
    # killed one left there
    given = {"OWX_PLATFORM__CGROUP_ROOT": f"owx-gw-{secrets.token_hex(3)}", **(env or {})}
    full_env = {
        **os.environ,
        "HOME": str(home),
        "OWX_GATEWAY__TLS_PORT": "0",
        "OWX_LOG_LEVEL": "WARNING",
        **given,
    }
    log = open(data_dir / "gateway.log", "a")
    command = [sys.executable, "-m", "owx.cli", "up", "--port", str(port), "--data-dir", str(data_dir),
               "--auth", auth, *(args or [])]  # HTTPS on a free port (OWX_GATEWAY__TLS_PORT=0): tls_url
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, env=full_env, text=True)
    log.close()
    deadline = time.monotonic() + START_TIMEOUT_S
    url = tls_url = None
    assert process.stdout is not None
    while time.monotonic() < deadline and not (line := process.stdout.readline()).startswith("auth "):
        if not line:
            break
        if match := re.search(r"^owx is up: apihost (\S+)", line):
            url = match.group(1)
        if match := re.search(r"^https apihost (\S+)", line):
            tls_url = match.group(1)
    if url is None:
        process.kill()
        raise RuntimeError(f"owx up did not start; see {data_dir / 'gateway.log'}")
    gateway = GatewayProcess(url, auth, data_dir, process, tls_url=tls_url, args=list(args or []), env=given)
    while time.monotonic() < deadline:
        try:
            if requests.get(f"{url}/api/v1", timeout=2).ok:
                return gateway
        except requests.ConnectionError:
            time.sleep(0.1)
    gateway.stop()
    raise RuntimeError(f"owx up did not answer within {START_TIMEOUT_S:.0f} s")
