"""A fork server for the local backend's Python runtimes (SOCK-style "zygote").

The zygote imports the runtime and a list of preloaded modules once, then forks one
child per container: the child joins the container's cgroup, takes its stdout/stderr
pipes and its listening socket, becomes the action user and serves the runtime. A
container start then costs a fork instead of an interpreter start plus imports.

Protocol on a SOCK_SEQPACKET socket (one JSON message per packet):

- request ``{"procs": [...], "cwd": str, "env": {...}, "ids": [uid, gid] | null}`` with
  three descriptors attached (listener, stdout, stderr); reply ``{"pid": n}`` or
  ``{"error": str}``;
- notice ``{"exited": pid, "code": n}`` when a child ends (the zygote is its parent).

Runs single-threaded: forking a threaded process is unsafe.
"""

from __future__ import annotations

import array
import importlib
import json
import os
import selectors
import signal
import socket
import sys
import traceback
from typing import Any

from owx.runtimes.confine import enter_container

MAX_MESSAGE = 1 << 20
FDS = 3


def recv_request(sock: socket.socket) -> tuple[dict[str, Any], list[int]] | None:
    """One request and its descriptors; None when the other end closed."""
    fds = array.array("i")
    data, ancdata, _, _ = sock.recvmsg(MAX_MESSAGE, socket.CMSG_LEN(FDS * fds.itemsize))
    if not data:
        return None
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    return json.loads(data), list(fds)


def serve(sock: socket.socket, preload: list[str]) -> None:
    """Answer spawn requests until the socket closes."""
    for name in preload:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - a missing optional module only costs its import later
            print(f"owx zygote: not preloaded {name}: {exc}", file=sys.stderr, flush=True)
    import owx.runtimes.python_action  # noqa: F401  the runtime itself

    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ, "request")
    selector.register(wake_r, selectors.EVENT_READ, "child")
    while True:
        for key, _ in selector.select():
            if key.data == "child":
                _drain(wake_r)
                _reap(sock)
                continue
            try:
                message = recv_request(sock)
            except OSError:
                return
            if message is None:
                return
            request, fds = message
            try:
                reply = {"pid": _spawn(request, fds, sock, wake_r, wake_w, selector.fileno())}
            except Exception as exc:  # noqa: BLE001 - reported to the gateway, which falls back to exec
                reply = {"error": f"{type(exc).__name__}: {exc}"}
            finally:
                for fd in fds:
                    os.close(fd)
            sock.send(json.dumps(reply).encode())


def _spawn(request: dict[str, Any], fds: list[int], sock: socket.socket, *private: int) -> int:
    if len(fds) != FDS:
        raise ValueError(f"expected {FDS} descriptors, got {len(fds)}")
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        sock.close()
        for fd in private:
            os.close(fd)
        code = _become_runtime(request, fds)
    except BaseException:  # noqa: BLE001 - the child must never return into the zygote's loop
        traceback.print_exc()
    finally:
        os._exit(code)


def _become_runtime(request: dict[str, Any], fds: list[int]) -> int:
    listener, out, err = fds
    os.setsid()
    os.chdir(request["cwd"])
    null = os.open(os.devnull, os.O_RDONLY)
    for source, target in ((null, 0), (out, 1), (err, 2)):
        os.dup2(source, target)
    for fd in (null, out, err):
        os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    enter_container(request["procs"], tuple(request["ids"]) if request.get("ids") else None)
    if "numpy" in sys.modules:  # numpy's global generator is not reseeded at fork, unlike ``random``
        sys.modules["numpy"].random.seed()
    from owx.runtimes.python_action import main

    return main(["--fd", str(listener)])


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        try:
            sock.send(json.dumps({"exited": pid, "code": os.waitstatus_to_exitcode(status)}).encode())
        except OSError:
            return


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


def main(argv: list[str] | None = None) -> int:
    """``python -m owx.runtimes.zygote FD [MODULE ...]``: serve on the inherited socket FD."""
    args = sys.argv[1:] if argv is None else argv
    sock = socket.socket(fileno=int(args[0]))
    serve(sock, args[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
