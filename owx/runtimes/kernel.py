"""Thin wrappers over the Linux calls a container's sandbox is built from (glibc through ctypes).

Python 3.11 has no ``os.unshare`` and none of the mount API (``pivot_root``, ``mount_setattr``,
``open_tree``, ``move_mount``); each wrapper here is one system call that raises ``OSError``
with the kernel's errno. Standard library only: this runs in the zygote's children.
"""

from __future__ import annotations

import ctypes
import os
import platform

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
MNT_DETACH = 0x2

MOUNT_ATTR_RDONLY = 0x1
MOUNT_ATTR_NOSUID = 0x2
MOUNT_ATTR_NODEV = 0x4
AT_EMPTY_PATH = 0x1000
AT_RECURSIVE = 0x8000
OPEN_TREE_CLONE = 0x1
OPEN_TREE_CLOEXEC = os.O_CLOEXEC
MOVE_MOUNT_F_EMPTY_PATH = 0x4
AT_FDCWD = -100

PR_SET_NO_NEW_PRIVS = 38
PR_CAPBSET_DROP = 24
PR_SET_PDEATHSIG = 1
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
LAST_CAP = 40  # CAP_CHECKPOINT_RESTORE; dropping unknown higher ones fails harmlessly

LANDLOCK_CREATE_RULESET_VERSION = 0x1
LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET = 0x1
LANDLOCK_SCOPE_SIGNAL = 0x2
LANDLOCK_SCOPES_ABI = 6  # the first Landlock ABI (Linux 6.12) with scopes
LANDLOCK_ACCESS_NET_BIND_TCP = 0x1
LANDLOCK_NET_ABI = 4  # the first Landlock ABI (Linux 6.7) with network rights

# Calls glibc 2.36 has no wrapper for. The numbers of the newer ones are the same on every architecture.
_SYSCALLS = {
    "x86_64": {"pivot_root": 155, "open_tree": 428, "move_mount": 429, "mount_setattr": 442},
    "aarch64": {"pivot_root": 41, "open_tree": 428, "move_mount": 429, "mount_setattr": 442},
}
for _numbers in _SYSCALLS.values():
    _numbers.update(landlock_create_ruleset=444, landlock_restrict_self=446)

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.mount.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p)


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def _syscall(name: str, *args) -> int:
    number = _SYSCALLS[platform.machine()][name]
    return _check(_libc.syscall(ctypes.c_long(number), *args), name)


def _path(path: str | None) -> bytes | None:
    return None if path is None else os.fsencode(path)


def unshare(flags: int) -> None:
    _check(_libc.unshare(ctypes.c_int(flags)), "unshare")


def setns(fd: int, nstype: int) -> None:
    _check(_libc.setns(ctypes.c_int(fd), ctypes.c_int(nstype)), "setns")


def mount(source: str | None, target: str, fstype: str | None, flags: int = 0, data: str | None = None) -> None:
    _check(_libc.mount(_path(source), _path(target), _path(fstype), flags, _path(data)), f"mount {target}")


def umount(target: str, flags: int = 0) -> None:
    _check(_libc.umount2(_path(target), ctypes.c_int(flags)), f"umount {target}")


def pivot_root(new_root: str, put_old: str) -> None:
    _syscall("pivot_root", _path(new_root), _path(put_old))


def mount_setattr(target: str, attr_set: int, attr_clr: int = 0, recursive: bool = True, dirfd: int = AT_FDCWD) -> None:
    """Set and clear mount attributes (``MOUNT_ATTR_*``) of the mount at ``target`` (and below it)."""
    attr = _MountAttr(attr_set, attr_clr, 0, 0)
    flags = AT_RECURSIVE if recursive else 0
    if not target:
        flags |= AT_EMPTY_PATH
    _syscall("mount_setattr", ctypes.c_int(dirfd), _path(target), ctypes.c_uint(flags), ctypes.byref(attr),
             ctypes.c_size_t(ctypes.sizeof(attr)))


def clone_tree(dirfd: int, path: str) -> int:
    """A detached copy of the mount at ``path`` (relative to ``dirfd``): a descriptor for :func:`attach`."""
    return _syscall("open_tree", ctypes.c_int(dirfd), _path(path) or b"",
                    ctypes.c_uint(OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | (AT_EMPTY_PATH if not path else 0)))


def attach(tree_fd: int, target: str) -> None:
    """Mount the detached tree ``tree_fd`` at ``target``."""
    _syscall("move_mount", ctypes.c_int(tree_fd), b"", ctypes.c_int(AT_FDCWD), _path(target),
             ctypes.c_uint(MOVE_MOUNT_F_EMPTY_PATH))


def sethostname(name: str) -> None:
    raw = name.encode()
    _check(_libc.sethostname(raw, ctypes.c_size_t(len(raw))), "sethostname")


def prctl(option: int, arg: int = 0) -> None:
    _check(_libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0),
                       ctypes.c_ulong(0)), f"prctl {option}")


def drop_bounding_set() -> None:
    """Remove every capability from the bounding set (no exec can gain one back)."""
    for cap in range(LAST_CAP + 1):
        try:
            prctl(PR_CAPBSET_DROP, cap)
        except OSError:
            break


def landlock_abi() -> int:
    """The kernel's Landlock ABI version (0: no Landlock)."""
    try:
        return _syscall("landlock_create_ruleset", None, ctypes.c_size_t(0), ctypes.c_uint32(LANDLOCK_CREATE_RULESET_VERSION))
    except OSError:
        return 0


def landlock_restrict(handled_access_net: int, scoped: int) -> None:
    """Confine the caller and its future children to a Landlock domain that denies the network rights
    in ``handled_access_net`` (no rule grants any back: ``LANDLOCK_ACCESS_NET_BIND_TCP`` and it binds
    no TCP port) and has the ``scoped`` scopes (``LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET``: it cannot
    connect to an abstract Unix socket made outside the domain; ``LANDLOCK_SCOPE_SIGNAL``: it cannot
    signal a process outside it). File access is not restricted. Needs no_new_privs (or
    CAP_SYS_ADMIN)."""

    class _Ruleset(ctypes.Structure):
        _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                    ("scoped", ctypes.c_uint64)]

    ruleset = _Ruleset(0, handled_access_net, scoped)
    fd = _syscall("landlock_create_ruleset", ctypes.byref(ruleset), ctypes.c_size_t(ctypes.sizeof(ruleset)),
                  ctypes.c_uint32(0))
    try:
        _syscall("landlock_restrict_self", ctypes.c_int(fd), ctypes.c_uint32(0))
    finally:
        os.close(fd)


def install_seccomp(program: bytes) -> None:
    """Install a classic-BPF seccomp filter (``struct sock_filter`` array); needs no_new_privs."""

    class _Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    buffer = ctypes.create_string_buffer(program, len(program))
    prog = _Prog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    _check(_libc.prctl(ctypes.c_int(PR_SET_SECCOMP), ctypes.c_ulong(SECCOMP_MODE_FILTER), ctypes.byref(prog),
                       ctypes.c_ulong(0), ctypes.c_ulong(0)), "seccomp")
