"""One embedded platform's place on this machine: its state dir, its cgroup root, and what a killed
predecessor left there.

The state dir (``<data_dir>/platform`` by default, mode 0700) holds the runtimes' sockets (see
`socket_dir`) and the namespaces' directories and gids; a lock on it keeps a second live instance off the same data dir.
The cgroup root is the instance's own (derived from its data dir unless configured), so at start
every group under it belongs to a predecessor that died without cleaning up (``kill -9``): its
processes are killed and its groups, sockets and Docker containers removed. Nothing outside this
instance's root and state dir is touched. A platform made without a state dir (tests, benchmarks)
gets a private temporary one and reaps nothing.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import secrets
import shutil
import tempfile
from pathlib import Path

from owx.common.cgroups import Cgroup, CgroupError
from owx.platform.interface import PlatformUnavailable
from owx.platform.settings import PlatformSettings

log = logging.getLogger(__name__)

SOCKETS = "sockets"
MAX_SOCKET_DIR = 85  # + "/owx-<12 hex>.sock" stays within sun_path's 108 bytes
RUN_DIR = Path("/run/owx")


class Instance:
    """The state dir (locked for this process) and cgroup root of one platform."""

    def __init__(self, settings: PlatformSettings) -> None:
        self.temporary = settings.state_dir is None
        self.state_dir = Path(tempfile.mkdtemp(prefix="owx-platform-")) if self.temporary else settings.state_dir
        self.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.state_dir.chmod(0o700)
        self._lock = os.open(self.state_dir / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock)
            raise PlatformUnavailable(f"another owx instance is running on {self.state_dir}") from None
        self.cgroup_root = (settings.cgroup_root or f"owx-{secrets.token_hex(4)}").strip("/")
        self.sockets = socket_dir(self.state_dir)
        if not self.temporary:
            self.reap()
        self.sockets.mkdir(mode=0o700, exist_ok=True)

    @property
    def label(self) -> str:
        """What this instance's Docker containers are labelled with (``owx.instance``)."""
        return self.cgroup_root

    def reap(self) -> int:
        """Kill and remove every container a predecessor left; the number of groups removed."""
        removed = destroy_tree(Cgroup(self.cgroup_root), keep_root=True)
        shutil.rmtree(self.sockets, ignore_errors=True)
        if removed:
            log.warning("removed %d containers and groups a previous run left under %s", removed, self.cgroup_root)
        return removed

    def close(self) -> None:
        Cgroup(self.cgroup_root).remove_if_empty()
        shutil.rmtree(self.sockets, ignore_errors=True)
        os.close(self._lock)
        if self.temporary:
            shutil.rmtree(self.state_dir, ignore_errors=True)


def socket_dir(state_dir: Path) -> Path:
    """Where the runtimes' sockets live: ``<state_dir>/sockets``, or, when that path is too long for
    a Unix socket's name, ``/run/owx/<hash of the state dir>`` (root's, as deterministic as the first)."""
    inside = state_dir / SOCKETS
    if len(str(inside)) <= MAX_SOCKET_DIR:
        return inside
    RUN_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
    return RUN_DIR / hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:16]


def destroy_tree(group: Cgroup, keep_root: bool = False) -> int:
    """Kill the processes of ``group`` and every group below it and remove them, deepest first."""
    removed = 0
    for child in group.children():
        removed += destroy_tree(child)
    if keep_root or not group.exists():
        return removed
    try:
        group.destroy()
        removed += 1
    except CgroupError as exc:
        log.warning("could not remove %s: %s", group, exc)
    return removed
