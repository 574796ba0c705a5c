"""A private owx gateway (``owx up``) for DiSDeL's tests and benchmark.

Runs in its own process with its own data dir, free port, cgroup root and HOME (so it
never touches the user's ``~/.wskprops``); raised action limits for DL training.
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import requests


@dataclass
class PrivateGateway:
    url: str
    auth: str
    data_dir: Path
    process: subprocess.Popen

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_gateway(data_dir: Path, *, memory_max_mb: int = 4096, timeout_max_ms: int = 900_000,
                  pool_mb: int = 8192, extra_env: dict[str, str] | None = None) -> PrivateGateway:
    """Start ``owx up`` on a free port and wait until it answers."""
    data_dir.mkdir(parents=True, exist_ok=True)
    home = data_dir / "home"
    home.mkdir(exist_ok=True)
    auth = f"{uuid.uuid4()}:{secrets.token_hex(32)}"
    env = {
        **os.environ,
        "HOME": str(home),
        "OWX_LIMITS__MEMORY_MB__MAX": str(memory_max_mb),
        "OWX_LIMITS__TIMEOUT_MS__MAX": str(timeout_max_ms),
        "OWX_PLATFORM__USER_MEMORY_MB": str(pool_mb),
        "OWX_PLATFORM__CGROUP_ROOT": f"owx-disdel-gw-{secrets.token_hex(3)}",
        "OWX_PLATFORM__STEM_CELLS": "0",
        "OWX_LOG_LEVEL": "WARNING",
        **(extra_env or {}),
    }
    log = open(data_dir / "gateway.log", "w")
    process = subprocess.Popen(
        [sys.executable, "-m", "owx.cli", "up", "--port", "0", "--data-dir", str(data_dir), "--auth", auth],
        stdout=subprocess.PIPE, stderr=log, env=env, text=True,
    )
    deadline = time.monotonic() + 60
    url = None
    assert process.stdout is not None
    while time.monotonic() < deadline and url is None:
        line = process.stdout.readline()
        if not line:
            break
        if match := re.search(r"apihost (\S+)", line):
            url = match.group(1)
    if url is None:
        process.kill()
        raise RuntimeError(f"owx up did not start; see {data_dir / 'gateway.log'}")
    gateway = PrivateGateway(url, auth, data_dir, process)
    while time.monotonic() < deadline:
        try:
            if requests.get(f"{url}/api/v1", timeout=2).ok:
                return gateway
        except requests.ConnectionError:
            time.sleep(0.1)
    gateway.stop()
    raise RuntimeError("owx up did not answer within 60 s")
