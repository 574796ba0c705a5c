"""Helpers shared by the platform tests (imported as ``platform_helpers``)."""

from __future__ import annotations

import os
import secrets
import socket
import threading
import time
from typing import Any, Callable

from owx.platform.types import ActionSpec, ContainerDeath, ContainerInfo, RunOutcome, RunRequest
from owx.runtimes.http_wire import read_request


def spec(code: str, name: str | None = None, **limits: Any) -> ActionSpec:
    """An action of kind python:3 with a unique key unless ``name`` is given."""
    key = f"guest/{name or 'a' + secrets.token_hex(4)}@1"
    return ActionSpec(key=key, kind=limits.pop("kind", "python:3"), code=code, **limits)


def run_waited(runner: Any, action: ActionSpec, run_request: RunRequest) -> tuple[RunOutcome, int]:
    """``runner.run(action, run_request)`` (a platform or a pool) and the milliseconds from asking to
    the activation's start (queueing, and making a container on a cold start)."""
    asked_ms = time.time() * 1000
    outcome = runner.run(action, run_request)
    return outcome, round(outcome.start_ms - asked_ms)


def request(**value: Any) -> RunRequest:
    return RunRequest(
        value=value,
        namespace="guest",
        action_name="test",
        activation_id=secrets.token_hex(16),
        transaction_id=secrets.token_hex(16),
    )


class OnDeath:
    """A platform listener that hands every container death to ``callback``."""

    def __init__(self, callback: Callable[[ContainerDeath], Any]) -> None:
        self.callback = callback

    def container_started(self, info: ContainerInfo) -> None:
        pass

    def container_died(self, death: ContainerDeath) -> None:
        self.callback(death)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


ECHO = "def main(args):\n    print('echo', args)\n    return {'echo': args}\n"
SLEEP = "import time\ndef main(args):\n    time.sleep(args.get('s', 0.3))\n    return {'slept': args.get('s', 0.3)}\n"


def serve_answers(listener: socket.socket, answer: Callable[[socket.socket], "bool | None"]) -> list[int]:
    """Accept connections on ``listener`` in the background; for each request read, ``answer``
    writes the reply (returning False closes the connection). Returns ``[connections accepted]``,
    kept up to date until the listener is closed."""
    accepted = [0]

    def serve(conn: socket.socket) -> None:
        reader = conn.makefile("rb")
        with conn, reader:
            while read_request(reader, conn) is not None and answer(conn) is not False:
                pass

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            accepted[0] += 1
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return accepted
