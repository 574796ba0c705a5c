"""Thin, typed access to Linux control groups (v1 split hierarchies and v2 unified).

One :class:`Cgroup` names the same relative path in every controller owx uses
(``memory``, ``cpu``, ``cpuacct``, ``pids`` on v1; the unified tree on v2).  The
embedded platform creates one per action container; the Escra agent reads and
resizes them.  Every method is a direct file read or write: no shelling out.
"""

from __future__ import annotations

import errno
import os
import re
import signal
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TypeVar

ROOT = Path("/sys/fs/cgroup")
HYBRID_UNIFIED = ROOT / "unified"  # where a v1 system mounts the v2 hierarchy beside its controllers
V1_CONTROLLERS = ("memory", "cpu", "cpuacct", "pids")
CFS_PERIOD_US = 100_000
UNLIMITED = -1
T = TypeVar("T")
STAT_MAX_BYTES = 64 * 1024  # the longest counter file read through a kept descriptor (cpu.stat, memory.events)


class CgroupError(OSError):
    """A cgroup file could not be read or written (missing group, refused value)."""


@dataclass(frozen=True)
class CpuStat:
    """Cumulative CPU counters of one cgroup."""

    periods: int
    throttled_periods: int
    throttled_ns: int
    usage_ns: int


@dataclass(frozen=True)
class MemoryStat:
    """Memory use of one cgroup, in bytes."""

    usage: int
    limit: int
    max_usage: int
    oom_kills: int


@lru_cache(maxsize=1)
def is_v2() -> bool:
    """True when /sys/fs/cgroup is the unified (v2) hierarchy."""
    return (ROOT / "cgroup.controllers").exists()


@lru_cache(maxsize=1)
def unified_root() -> Path | None:
    """The v2 hierarchy: /sys/fs/cgroup itself on v2, its ``unified`` mount beside the v1 controllers on
    a hybrid system, None where there is none. Cgroup BPF programs attach to groups there."""
    if is_v2():
        return ROOT
    return HYBRID_UNIFIED if (HYBRID_UNIFIED / "cgroup.procs").exists() else None


@lru_cache(maxsize=1)
def _swap_accounted() -> bool:
    """cgroup v1: whether the kernel accounts swap (groups then have ``memory.memsw.*``)."""
    return (ROOT / "memory" / "memory.memsw.limit_in_bytes").exists()


def available() -> bool:
    """True when this process can create cgroups (root, writable hierarchy)."""
    probe = ROOT / ("memory" if not is_v2() else "")
    return os.access(probe, os.W_OK)


def _failed(path: Path, exc: OSError) -> CgroupError:
    """The `CgroupError` of ``exc``, raised by a system call on ``path``."""
    return CgroupError(exc.errno, f"{path}: {exc.strerror}", str(path))


def _write(path: Path, value: str | int) -> None:
    try:
        with open(path, "w") as handle:
            handle.write(str(value))
    except OSError as exc:
        raise _failed(path, exc) from None


def _read(path: Path) -> str:
    try:
        with open(path) as handle:
            return handle.read()
    except OSError as exc:
        raise _failed(path, exc) from None


_OOM_KILL = re.compile(r"^oom_kill (\d+)$", re.MULTILINE)


def _keyed(text: str) -> dict[str, int]:
    pairs = (line.split() for line in text.splitlines() if line.strip())
    return {key: int(value) for key, value, *_ in pairs}


def _close_all(fds: dict[tuple[str, str, int], int]) -> None:
    for fd in fds.values():
        os.close(fd)
    fds.clear()


class Cgroup:
    """One control group, addressed by its path relative to each hierarchy root.

    Counter files read again and again (memory, OOM kills, CPU) are opened once and re-read with
    ``pread``: one syscall instead of a path walk, open and close (measured: 2 µs against 50-110 µs
    per read, paid on every activation and every Escra tick); the limits written again and again
    (memory, memory+swap, CPU quota and period) are written likewise with ``pwrite``. The
    descriptors close with :meth:`destroy`, :meth:`close_files` or when the object is collected.
    """

    def __init__(self, relpath: str) -> None:
        self.relpath = relpath.strip("/")
        self._fds: dict[tuple[str, str, int], int] = {}  # (controller, file, open flags) -> descriptor
        self._fds_lock = threading.Lock()
        weakref.finalize(self, _close_all, self._fds)

    def __repr__(self) -> str:
        return f"Cgroup({self.relpath!r})"

    # -- paths -------------------------------------------------------------
    def dir(self, controller: str = "memory") -> Path:
        """The directory of this group in ``controller`` (the unified dir on v2)."""
        return ROOT / self.relpath if is_v2() else ROOT / controller / self.relpath

    def _stat(self, controller: str, name: str) -> str:
        """The contents of counter file ``name`` in ``controller``, through a kept descriptor."""
        return self._kept(controller, name, os.O_RDONLY, lambda fd: os.pread(fd, STAT_MAX_BYTES, 0)).decode()

    def _set(self, controller: str, name: str, value: str | int) -> None:
        """Write ``value`` to control file ``name`` in ``controller`` through a kept descriptor: one
        system call (open, write and close take ten times as long), for the limits Escra writes every
        tick and its OOM rescue raises. Raises `CgroupError` with the kernel's refusal (EBUSY, EINVAL)."""
        data = str(value).encode()
        self._kept(controller, name, os.O_WRONLY, lambda fd: os.pwrite(fd, data, 0))

    def _kept(self, controller: str, name: str, flags: int, use: Callable[[int], T]) -> T:
        """``use(fd)`` on file ``name`` in ``controller``, opened with ``flags`` once and kept; a
        descriptor of a group removed since (ENODEV) is dropped, and the file opened afresh once."""
        key = (controller, name, flags)
        with self._fds_lock:
            fd = self._fds.pop(key, None)
            if fd is not None:
                try:
                    result = use(fd)
                except OSError as exc:
                    if exc.errno != errno.ENODEV:
                        self._fds[key] = fd
                        path = self.dir(controller) / name
                        raise _failed(path, exc) from None
                    os.close(fd)  # removed, perhaps made again: open it afresh below
                else:
                    self._fds[key] = fd
                    return result
            path = self.dir(controller) / name  # only here: a path costs more than the read itself
            try:
                fd = os.open(path, flags | os.O_CLOEXEC)
            except OSError as exc:
                raise _failed(path, exc) from None
            self._fds[key] = fd
            try:
                return use(fd)
            except OSError as exc:
                raise _failed(path, exc) from None

    def close_files(self) -> None:
        """Close the kept descriptors (they reopen on the next read)."""
        with self._fds_lock:
            _close_all(self._fds)

    def dirs(self) -> list[Path]:
        """This group's directory in every hierarchy it is made in and its processes join: the unified
        one on v2; on v1 each controller's, and on a hybrid system the v2 hierarchy's too (it has no
        controllers there, only its processes, for the BPF programs attached to it)."""
        if is_v2():
            return [self.dir()]
        hybrid = unified_root()
        return [self.dir(c) for c in V1_CONTROLLERS] + ([hybrid / self.relpath] if hybrid else [])

    def _dirs_made_by_others(self) -> list[Path]:
        """On v1, this group's directories in the other hierarchies that exist: a Docker container's
        cgroup parent is made in every one (freezer, devices, blkio, ...), and nobody else removes them."""
        if is_v2():
            return []
        own = {*V1_CONTROLLERS, HYBRID_UNIFIED.name}
        try:
            hierarchies = [entry.path for entry in os.scandir(ROOT)
                           if entry.name not in own and entry.is_dir(follow_symlinks=False)]
        except OSError:
            return []
        return [path for path in (Path(h) / self.relpath for h in hierarchies) if path.is_dir()]

    def unified_dir(self) -> Path | None:
        """This group's directory in the v2 hierarchy (None: this machine has none)."""
        root = unified_root()
        return None if root is None else root / self.relpath

    @property
    def name(self) -> str:
        return self.relpath.rsplit("/", 1)[-1]

    def exists(self) -> bool:
        return self.dir().is_dir()

    # -- lifecycle ---------------------------------------------------------
    def create(self) -> "Cgroup":
        """Create the group in every controller (parents too); idempotent."""
        if is_v2():
            self._enable_v2_controllers()
        for path in self.dirs():
            path.mkdir(parents=True, exist_ok=True)
        return self

    def _enable_v2_controllers(self) -> None:
        parts = self.relpath.split("/")
        for depth in range(len(parts)):
            parent = ROOT.joinpath(*parts[:depth])
            parent.mkdir(exist_ok=True)
            wanted = {"memory", "cpu", "pids"} & set(_read(parent / "cgroup.controllers").split())
            for controller in sorted(wanted):
                try:
                    _write(parent / "cgroup.subtree_control", f"+{controller}")
                except CgroupError:
                    pass  # a parent that has processes of its own cannot delegate

    def add(self, pid: int) -> None:
        """Move process ``pid`` into this group in every controller."""
        for path in self.dirs():
            _write(path / "cgroup.procs", pid)

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in _read(self.dir() / "cgroup.procs").split()]
        except CgroupError:
            return []

    def freeze(self, frozen: bool) -> bool:
        """Freeze (or thaw) every process of the group through the v2 hierarchy's ``cgroup.freeze``
        (on a v1 system its ``unified`` mount, which the group's processes join); False where there
        is none (no v2 hierarchy, or a kernel before 5.2). A frozen process still dies of SIGKILL."""
        directory = self.unified_dir()
        if directory is None or not (directory / "cgroup.freeze").exists():
            return False
        _write(directory / "cgroup.freeze", "1" if frozen else "0")
        return True

    def kill_all(self, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to every process in the group."""
        for pid in self.pids():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def destroy(self, timeout: float = 2.0) -> None:
        """Kill what runs in the group and remove it from every hierarchy it is in."""
        self.set_oom_kill_disable(False, missing_ok=True)
        self.close_files()
        deadline = time.monotonic() + timeout
        for path in self.dirs() + self._dirs_made_by_others():
            while path.is_dir():
                self.kill_all()
                try:
                    path.rmdir()
                except OSError as exc:
                    if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                        if path.is_dir():
                            raise CgroupError(exc.errno, f"{path}: {exc.strerror}") from None
                    time.sleep(0.005)

    def remove_if_empty(self) -> None:
        """Remove the group if it exists and has no child groups (it may be shared: others keep it)."""
        if self.exists() and not self.children():
            try:
                self.destroy()
            except CgroupError:
                pass

    def children(self) -> list["Cgroup"]:
        """The groups directly below this one (one directory read, no stat per entry)."""
        return [Cgroup(f"{self.relpath}/{name}") for name in self.child_names()]

    def child_names(self) -> list[str]:
        """The names of the groups directly below this one, without making a `Cgroup` of each."""
        try:
            with os.scandir(self.dir()) as entries:
                return [entry.name for entry in entries if entry.is_dir(follow_symlinks=False)]
        except (FileNotFoundError, NotADirectoryError):
            return []

    # -- memory ------------------------------------------------------------
    def set_memory_limit(self, limit_bytes: int) -> None:
        """Set the hard memory limit (swap included on v1 where accounted).

        Raises :class:`CgroupError` (EBUSY) when the kernel refuses to shrink below usage.
        """
        if is_v2():
            self._set("memory", "memory.max", "max" if limit_bytes < 0 else limit_bytes)
            return
        value = UNLIMITED if limit_bytes < 0 else limit_bytes
        growing = value == UNLIMITED or value > self.memory_limit()
        # memory <= memory+swap must hold at every step, so the order depends on direction.
        if growing and _swap_accounted():
            self._set("memory", "memory.memsw.limit_in_bytes", value)
        self._set("memory", "memory.limit_in_bytes", value)
        if not growing and _swap_accounted():
            self._set("memory", "memory.memsw.limit_in_bytes", value)

    def set_memory_high(self, high_bytes: int | None) -> None:
        """cgroup v2 only: the throttle point below ``memory.max`` used for OOM rescue."""
        self._set("memory", "memory.high", "max" if high_bytes is None else high_bytes)

    def memory(self) -> MemoryStat:
        usage = int(self._stat("memory", "memory.current" if is_v2() else "memory.usage_in_bytes"))
        return MemoryStat(usage, self.memory_limit(), self.memory_peak(), self.oom_kills())

    def memory_limit(self) -> int:
        """The hard memory limit in bytes (UNLIMITED for v2's ``max``)."""
        if is_v2():
            raw = self._stat("memory", "memory.max").strip()
            return UNLIMITED if raw == "max" else int(raw)
        return int(self._stat("memory", "memory.limit_in_bytes"))

    def memory_high(self) -> int | None:
        """cgroup v2: the throttle point (``memory.high``) in bytes; None for ``max``."""
        raw = self._stat("memory", "memory.high").strip()
        return None if raw == "max" else int(raw)

    def oom_kills(self) -> int:
        """The kernel's OOM kill count of this group (one file read, for every activation)."""
        text = self._stat("memory", "memory.events" if is_v2() else "memory.oom_control")
        found = _OOM_KILL.search(text)
        return int(found.group(1)) if found else 0

    def memory_peak(self) -> int:
        """The group's memory high-water mark in bytes (v2 without ``memory.peak``: the usage now)."""
        if is_v2():
            try:
                return int(self._stat("memory", "memory.peak"))
            except CgroupError as exc:
                if exc.errno != errno.ENOENT:
                    raise
                return int(self._stat("memory", "memory.current"))
        return int(self._stat("memory", "memory.max_usage_in_bytes"))

    def set_oom_kill_disable(self, disabled: bool, missing_ok: bool = False) -> None:
        """cgroup v1: pause tasks at the limit instead of killing them."""
        if is_v2():
            return
        path = self.dir("memory") / "memory.oom_control"
        if missing_ok and not path.exists():
            return
        _write(path, 1 if disabled else 0)

    def under_oom(self) -> bool:
        """True while tasks are paused at the limit (v1 with oom_kill_disable)."""
        if is_v2():
            return False
        return _keyed(self._stat("memory", "memory.oom_control")).get("under_oom", 0) == 1

    def oom_eventfd(self) -> int:
        """A file descriptor that becomes readable on each OOM event of this group.

        v1: an eventfd registered through ``cgroup.event_control``; read 8 bytes to
        consume.  v2: an inotify descriptor on ``memory.events`` (readable when the
        file changes; ``high``/``max``/``oom`` counters tell what happened).
        The caller owns and closes the descriptor.
        """
        if is_v2():
            return _inotify_modify_fd(self.dir() / "memory.events")
        base = self.dir("memory")
        efd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        control = os.open(base / "memory.oom_control", os.O_RDONLY | os.O_CLOEXEC)
        try:
            _write(base / "cgroup.event_control", f"{efd} {control}")
        except CgroupError:
            os.close(efd)
            raise
        finally:
            os.close(control)
        return efd

    # -- cpu ---------------------------------------------------------------
    def set_cpu_quota(self, quota_us: int, period_us: int = CFS_PERIOD_US) -> None:
        """CFS bandwidth: ``quota_us`` of CPU time per ``period_us`` (-1: unlimited)."""
        if is_v2():
            self._set("cpu", "cpu.max", f"{'max' if quota_us < 0 else quota_us} {period_us}")
            return
        self._set("cpu", "cpu.cfs_period_us", period_us)
        self._set("cpu", "cpu.cfs_quota_us", quota_us)

    def cpu_quota(self) -> tuple[int, int]:
        """(quota_us, period_us); quota -1 means unlimited."""
        if is_v2():
            quota, period = self._stat("cpu", "cpu.max").split()
            return (UNLIMITED if quota == "max" else int(quota), int(period))
        return int(self._stat("cpu", "cpu.cfs_quota_us")), int(self._stat("cpu", "cpu.cfs_period_us"))

    def set_cpu_shares(self, shares: int) -> None:
        """Relative CPU weight (v1 shares 2..262144; mapped to v2 weight 1..10000)."""
        if is_v2():
            weight = max(1, min(10000, 1 + (shares - 2) * 9999 // 262142))
            _write(self.dir() / "cpu.weight", weight)
        else:
            _write(self.dir("cpu") / "cpu.shares", shares)

    def set_rt_runtime(self, runtime_us: int) -> None:
        """cgroup v1 with real-time group scheduling: real-time CPU time per second for the group's
        threads (a new group has 0: none of its threads may run real-time). Set parents first."""
        path = self.dir("cpu") / "cpu.rt_runtime_us"
        if not is_v2() and path.exists():
            _write(path, runtime_us)

    def cpu(self) -> CpuStat:
        if is_v2():
            stat = _keyed(self._stat("cpu", "cpu.stat"))
            return CpuStat(
                periods=stat.get("nr_periods", 0),
                throttled_periods=stat.get("nr_throttled", 0),
                throttled_ns=stat.get("throttled_usec", 0) * 1000,
                usage_ns=stat.get("usage_usec", 0) * 1000,
            )
        stat = _keyed(self._stat("cpu", "cpu.stat"))
        return CpuStat(
            periods=stat.get("nr_periods", 0),
            throttled_periods=stat.get("nr_throttled", 0),
            throttled_ns=stat.get("throttled_time", 0),
            usage_ns=int(self._stat("cpuacct", "cpuacct.usage")),
        )

    # -- pids --------------------------------------------------------------
    def set_pids_max(self, limit: int) -> None:
        _write(self.dir("pids") / "pids.max", "max" if limit < 0 else limit)


def _inotify_modify_fd(path: Path) -> int:
    """An inotify fd watching ``path`` for IN_MODIFY (cgroup v2 event files)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    if fd < 0:
        raise CgroupError(ctypes.get_errno(), "inotify_init1 failed")
    in_modify = 0x00000002
    if libc.inotify_add_watch(fd, str(path).encode(), in_modify) < 0:
        err = ctypes.get_errno()
        os.close(fd)
        raise CgroupError(err, f"inotify_add_watch {path} failed")
    return fd
