"""A fork server for the local backend's containers (SOCK-style "zygote").

The zygote imports the runtime, the sandbox and a list of preloaded modules once, then forks
one child per container, each the first process of a new pid namespace
(:mod:`owx.runtimes.container_init`: it builds the sandbox and starts the runtime). A container
start then costs a fork instead of an interpreter start plus imports.

Protocol on a SOCK_SEQPACKET socket (:mod:`owx.runtimes.fd_messages`):

- request ``{"id": n, "plan": ContainerPlan fields}`` with four descriptors attached (listener,
  stdout, stderr, the container's control socket); reply ``{"id": n, "pid": n}`` or
  ``{"id": n, "error": str}``;
- notice ``{"exited": pid, "code": n}`` when a child ends (the zygote is its parent);
- notice ``{"ready": true}`` once the preloaded modules are imported (requests sent before wait).

``python -m owx.runtimes.zygote --once PLAN_JSON FD FD FD FD`` is the same start without a zygote
(the exec path): it forks one container from the four descriptors it inherited and mirrors its
exit status.
Runs single-threaded: forking a threaded process is unsafe.
"""

from __future__ import annotations

import importlib
import json
import os
import selectors
import socket
import sys
import traceback
from typing import Any

from owx.runtimes import container_init, fd_messages, kernel
from owx.runtimes.child_exits import ChildExits, exit_status, forget_in_child
from owx.runtimes.confine import ContainerPlan

FDS = 4


def spawn(plan: ContainerPlan, fds: list[int], private: list[int] = ()) -> int:  # type: ignore[assignment]
    """Fork the first process of a new container (pid 1 of a new pid namespace); its pid here.

    ``private`` descriptors are closed in the child.
    """
    if len(fds) != FDS:
        raise ValueError(f"expected {FDS} descriptors, got {len(fds)}")
    own = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    try:
        kernel.unshare(kernel.CLONE_NEWPID)  # the next child is pid 1 of a namespace of its own
        pid = os.fork()
    finally:
        if os.getpid() != 1:  # the parent: its next child must get a new namespace again, not this one
            kernel.setns(own, kernel.CLONE_NEWPID)
        os.close(own)  # the child too (it does not exec): a container keeps no handle on the host's namespace
    if pid:
        return pid
    code = 1
    try:
        forget_in_child()
        for fd in private:
            os.close(fd)
        code = container_init.run(plan, *fds)
    except BaseException:  # noqa: BLE001 - the child must never return into the zygote's loop
        traceback.print_exc()
    finally:
        os._exit(code)


def serve(sock: socket.socket, preload: list[str]) -> None:
    """Answer spawn requests until the socket closes."""
    for name in preload:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - a missing optional module only costs its import later
            print(f"owx zygote: not preloaded {name}: {exc}", file=sys.stderr, flush=True)
    import owx.runtimes.python_action  # noqa: F401  the runtime itself

    try:
        fd_messages.send(sock, {"ready": True})
    except OSError:  # the gateway went away while the modules loaded: nothing to serve
        return
    exits = ChildExits()
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ, "request")
    selector.register(exits.fd, selectors.EVENT_READ, "child")
    private = [sock.fileno(), *exits.fds, selector.fileno()]
    while True:
        for key, _ in selector.select():
            if key.data == "child":
                _report(sock, exits)
                continue
            try:
                message = fd_messages.receive(sock)
            except OSError:
                return
            if message is None:
                return
            request, fds = message
            reply: dict[str, Any] = {"id": request.get("id")}
            try:
                reply["pid"] = spawn(ContainerPlan(**request["plan"]), fds, private)
            except Exception as exc:  # noqa: BLE001 - reported to the gateway, which falls back to exec
                reply["error"] = f"{type(exc).__name__}: {exc}"
            finally:
                for fd in fds:
                    os.close(fd)
            fd_messages.send(sock, reply)


def _report(sock: socket.socket, exits: ChildExits) -> None:
    for pid, code in exits.ended():
        try:
            fd_messages.send(sock, {"exited": pid, "code": code})
        except OSError:
            return


def once(plan: ContainerPlan, fds: list[int]) -> int:
    """Start one container from the inherited descriptors ``fds`` and wait for it: its exit status."""
    pid = spawn(plan, fds)
    for fd in fds:
        os.close(fd)
    return exit_status(os.waitpid(pid, 0)[1])


def main(argv: list[str] | None = None) -> int:
    """``python -m owx.runtimes.zygote FD [MODULE ...]``: serve on the inherited socket FD;
    ``--once PLAN_JSON FD FD FD FD``: start one container."""
    args = sys.argv[1:] if argv is None else argv
    if args[0] == "--once":
        return once(ContainerPlan(**json.loads(args[1])), [int(fd) for fd in args[2:]])
    serve(socket.socket(fileno=int(args[0])), args[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
