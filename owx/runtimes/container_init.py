"""pid 1 of a local container: build the sandbox, learn the tenant, start the runtime, mirror its end.

The process is forked by the zygote (or by a one-shot zygote on the exec path) as the first
process of a new pid namespace, as root. It enters the sandbox (:func:`confine.enter`), then
waits on its control socket for the tenant (a stem cell waits until it is claimed): the
namespace's gid and, optionally, the namespace's directory as a detached mount. It mounts
that, forks the runtime, which drops to the tenant before it accepts its first request, and
then only reaps: orphans of the action are its children too. When the runtime ends it exits
with the runtime's status (128 + signal for a signal), and the kernel kills whatever else the
action left in the namespace. When the control socket closes (the platform destroyed the
container, or the gateway died) it kills everything at once: no daemon outlives its container.
"""

from __future__ import annotations

import os
import selectors
import signal
import socket
import sys
import traceback

from owx.runtimes import fd_messages
from owx.runtimes.child_exits import ChildExits, forget_in_child
from owx.runtimes.confine import ContainerPlan, Tenant, attach_directory, become, enter

KILLED = 128 + signal.SIGKILL
WORKDIR = "/tmp"


def run(plan: ContainerPlan, listener: int, out: int, err: int, control: int) -> int:
    """Serve as the container's pid 1; the exit status to end with."""
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
    pid = os.fork()
    if pid == 0:
        channel.close()
        os._exit(_runtime(plan, tenant, listener))
    os.close(listener)
    return _supervise(pid, channel)


def _runtime(plan: ContainerPlan, tenant: Tenant, listener: int) -> int:
    try:
        forget_in_child()
        become(plan, tenant)
        os.chdir(WORKDIR)
        if "numpy" in sys.modules:  # numpy's global generator is not reseeded at fork, unlike ``random``
            sys.modules["numpy"].random.seed()
        from owx.runtimes.python_action import main

        return main(["--fd", str(listener)])
    except BaseException:  # noqa: BLE001 - whatever happens, the runtime must not go back to pid 1's code
        traceback.print_exc()
        return 1


def _supervise(runtime: int, channel: socket.socket) -> int:
    exits = ChildExits()
    selector = selectors.DefaultSelector()
    selector.register(exits.fd, selectors.EVENT_READ, "child")
    selector.register(channel, selectors.EVENT_READ, "control")
    while True:
        for pid, code in exits.ended():  # orphans of the action are reaped here too
            if pid == runtime:
                return code
        for key, _ in selector.select():
            if key.data == "control" and not channel.recv(1):  # the platform let go of the container
                os.kill(-1, signal.SIGKILL)  # from pid 1: every other process of the namespace
                return KILLED
