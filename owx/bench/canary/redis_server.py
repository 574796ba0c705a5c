"""A private redis-server for ``owx bench canary``: the in-memory KV tier of the checkpoints
(Apache Ignite in the paper; Redis here, from Debian's ``redis-server``)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path


class RedisServer:
    """redis-server on a free port with its own directory, no persistence.

    ``bind`` adds addresses to listen on besides 127.0.0.1 (e.g. the Docker bridge's, for
    containers); ``password`` then keeps other users out (``requirepass``).
    """

    def __init__(self, workdir: Path, bind: tuple[str, ...] = (), password: str | None = None) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise SystemExit("owx bench canary: redis-server is not installed (apt-get install redis-server)")
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        workdir.mkdir(parents=True, exist_ok=True)
        self.password = password
        auth = ["--requirepass", password] if password else []
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", *bind, "--dir", str(workdir), "--save", "",
             "--appendonly", "no", "--protected-mode", "no", *auth],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        probe = (f"AUTH {password}\r\n" if password else "").encode() + b"PING\r\n"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as sock:
                    sock.sendall(probe)
                    if b"+PONG" in _read_replies(sock, 2 if password else 1):
                        return
            except OSError:
                time.sleep(0.02)
        self.stop()
        raise SystemExit(f"owx bench canary: redis-server did not answer on port {self.port}")

    @property
    def url(self) -> str:
        credentials = f":{self.password}@" if self.password else ""
        return f"redis://{credentials}127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


def _read_replies(sock: socket.socket, count: int) -> bytes:
    """The first ``count`` reply lines (each ends in CRLF)."""
    data = b""
    while data.count(b"\r\n") < count:
        chunk = sock.recv(64)
        if not chunk:
            break
        data += chunk
    return data
