"""Real runtime processes (``python -m owx.runtimes.python_action``) and action archives."""

from __future__ import annotations

import base64
import io
import json
import os
import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import requests

SENTINEL = "XXX_THE_END_OF_A_WHISK_ACTIVATION_XXX"


class RuntimeProcess:
    """One proxy process started the way the embedded platform starts it (``--fd``)."""

    def __init__(self, workdir: Path, command: list[str] | None = None, port: int | None = None) -> None:
        """Spawn the runtime; with ``port`` it binds that port itself, else it gets an inherited ``--fd``."""
        self.stdout_path = workdir / "stdout.log"
        self.stderr_path = workdir / "stderr.log"
        command = command or [sys.executable, "-m", "owx.runtimes.python_action"]
        listener: socket.socket | None = None
        if port is None:
            listener = socket.socket()
            listener.bind(("127.0.0.1", 0))
            listener.listen(16)
            self.port = listener.getsockname()[1]
            args = ["--fd", str(listener.fileno())]
        else:
            self.port = port
            args = ["--host", "127.0.0.1", "--port", str(port)]
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.process = subprocess.Popen(
                [*command, *args],
                stdout=out,
                stderr=err,
                pass_fds=(listener.fileno(),) if listener else (),
                cwd=workdir,
                env={**os.environ, "TMPDIR": str(workdir)},  # its scratch (a zip action's files) goes with the test's
            )
        if listener is not None:
            listener.close()  # the child holds it now
        else:
            wait_for_port(port)
        self.session = requests.Session()
        self.ended = 0  # activations answered (runs, and inits that failed to load), each ending its logs

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def post(self, path: str, body: Any = None, data: bytes | None = None) -> requests.Response:
        payload = data if data is not None else json.dumps(body).encode()
        return self.session.post(self.url + path, data=payload, timeout=30)

    def init(self, code: str, **fields: Any) -> requests.Response:
        answer = self.post("/init", {"value": {"code": code, **fields}})
        self.ended += answer.status_code == 502  # an action that failed to load ends its logs too
        return answer

    def run(self, value: Any = None, **meta: Any) -> requests.Response:
        answer = self.post("/run", {"value": {} if value is None else value, **meta})
        self.ended += 1
        return answer

    def stdout(self) -> str:
        """What the runtime printed on stdout, once the activations answered so far ended their logs
        (a runtime writes the sentinels right after the answer, as the platform reads them)."""
        return self._ended_output(self.stdout_path)

    def stderr(self) -> str:
        return self._ended_output(self.stderr_path)

    def _ended_output(self, path: Path, timeout_s: float = 10.0) -> str:
        deadline = time.monotonic() + timeout_s
        while (text := path.read_text()).count(SENTINEL) < self.ended and time.monotonic() < deadline:
            time.sleep(0.01)
        return text

    def stop(self) -> None:
        self.session.close()
        self.process.kill()
        self.process.wait(timeout=10)


def wait_for_port(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.02)
    raise TimeoutError(f"nothing listens on port {port}")


def zip_action(files: dict[str, str]) -> str:
    """Base64 of a zip holding ``files`` (path -> text)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return base64.b64encode(buffer.getvalue()).decode()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
