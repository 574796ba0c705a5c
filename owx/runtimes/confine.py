"""A runtime process's entry into its container: join the cgroup, then become the action user.

Shared by both ways the local backend starts a runtime: between fork and exec of a new
interpreter, and in a child forked by the zygote. Standard library only.
"""

from __future__ import annotations

import os
from collections.abc import Iterable


def enter_container(procs_files: Iterable[str | bytes], ids: tuple[int, int] | None) -> None:
    """Write this process's pid to each ``cgroup.procs`` file, then drop to ``(uid, gid)`` if given."""
    pid = str(os.getpid()).encode()
    for path in procs_files:
        fd = os.open(path, os.O_WRONLY)
        try:
            os.write(fd, pid)
        finally:
            os.close(fd)
    if ids is not None:
        os.setgroups([])
        os.setgid(ids[1])
        os.setuid(ids[0])
