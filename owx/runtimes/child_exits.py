"""Children's ends as a readable descriptor, for the single-threaded forking processes (zygote, pid 1)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator


def exit_status(status: int) -> int:
    """A ``waitpid`` status as a shell would report it: the exit code, or 128 + the signal that killed it."""
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


class ChildExits:
    """SIGCHLD turned into a descriptor that becomes readable (``fd``), and the children that ended."""

    def __init__(self) -> None:
        self.fd, self._wake = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(self._wake)
        signal.signal(signal.SIGCHLD, lambda *_: None)

    @property
    def fds(self) -> list[int]:
        return [self.fd, self._wake]

    def ended(self) -> Iterator[tuple[int, int]]:
        """(pid, exit status) of every child that has ended since the last call."""
        try:
            while os.read(self.fd, 512):
                pass
        except BlockingIOError:
            pass
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            yield pid, exit_status(status)


def forget_in_child() -> None:
    """In a forked child: no wakeup descriptor, the default SIGCHLD."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
