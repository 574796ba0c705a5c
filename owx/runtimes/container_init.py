"""The first process of a local container: build the sandbox, learn the tenant, become its runtime.

The process is forked by the zygote (or by a one-shot zygote on the exec path) as pid 1 of a
new pid namespace, as root. It enters the sandbox (:func:`confine.enter`), then waits on its
control socket for the tenant (a stem cell waits until it is claimed): the namespace's gid and,
optionally, the namespace's directory as a detached mount. It mounts that, drops to the tenant
for good (:func:`confine.become`) and serves the runtime on the listening socket it inherited:
it is never root while it parses a request or runs an action. The zygote reaps it, so its exit
status is the runtime's own; when it ends, the kernel kills whatever else the action left in its
pid namespace. When the control socket closes (the platform destroyed the container, or the
gateway died) it ends at once: no daemon outlives its container. Like OpenWhisk's runtimes,
which are pid 1 of their Docker containers, it does not reap the action's orphans.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading

from owx.runtimes import fd_messages
from owx.runtimes.confine import ContainerPlan, Tenant, attach_directory, become, enter

KILLED = 128 + signal.SIGKILL
WORKDIR = "/tmp"


def run(plan: ContainerPlan, listener: int, out: int, err: int, control: int) -> int:
    """Be the container until it ends; its exit status."""
    os.setsid()
    null = os.open(os.devnull, os.O_RDONLY)
    for source, target in ((null, 0), (out, 1), (err, 2)):
        os.dup2(source, target)
    for fd in (null, out, err):
        os.close(fd)
    os.environ.clear()
    os.environ.update(plan.env)
    enter(plan)
    channel = socket.socket(fileno=control)
    received = fd_messages.receive(channel)
    if received is None:  # destroyed before it was claimed
        return 0
    message, fds = received
    tenant = Tenant(**message)
    if tenant.directory is not None:
        attach_directory(fds[0], tenant.directory, plan.mount_points)
    for fd in fds:
        os.close(fd)
    become(plan, tenant)
    _end_with(channel)
    os.chdir(WORKDIR)
    if "numpy" in sys.modules:  # numpy's global generator is not reseeded at fork, unlike ``random``
        sys.modules["numpy"].random.seed()
    from owx.runtimes.python_action import main

    return main(["--fd", str(listener)])


def _end_with(channel: socket.socket) -> None:
    """End the container when the platform closes its end of ``channel``."""

    def watch() -> None:
        try:
            while channel.recv(1):
                pass
        except OSError:
            pass
        os._exit(KILLED)  # pid 1 ends: the kernel kills every other process of the namespace

    threading.Thread(target=watch, name="owx-platform-watch", daemon=True).start()
