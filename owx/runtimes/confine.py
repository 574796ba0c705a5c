"""A container's sandbox, built by its first process: pid 1 of a fresh pid namespace, still root.

:func:`enter` joins the container's cgroups, then leaves the host's mount, ipc, uts and cgroup
namespaces and pivots into a view built from nothing: a tmpfs root holding read-only binds of
what the runtime needs (``ContainerPlan.expose``: /usr, /etc, the interpreter, owx), a private
/proc of the new pid namespace, a minimal /dev, /sys without the host's cgroups (only the
container's own groups, read-only), and one writable place, /tmp, a tmpfs whose size is the
container's disk quota (its pages are charged to the container's memory cgroup). Nothing else
of the host is in the view: not the data dir, not the other containers' sockets.

:func:`attach_directory` adds the tenant's namespace directory later (a stem cell learns its
tenant only when it is claimed); :func:`become` turns the process into the tenant:
its own uid, the namespace's gid, no capabilities, no new privileges, a Landlock domain and a
syscall filter. The container keeps the host's network namespace, so actions reach the network;
which of the host's own services its uid may reach is the platform's firewall
(:mod:`owx.platform.embedded.host_firewall`), and that it binds no port the platform's port bind
filter (:mod:`owx.platform.embedded.port_binds`). Standard library only: this runs in processes forked by the zygote.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from owx.runtimes import kernel
from owx.runtimes.syscall_filter import tenant_filter

DEVICES = {"null": (1, 3), "zero": (1, 5), "full": (1, 7), "random": (1, 8), "urandom": (1, 9)}
WRITABLE = "/tmp"
SHM = "/dev/shm"
VIEW_MOUNT_FLAGS = kernel.MS_NOSUID | kernel.MS_NODEV
UMASK = 0o007  # files the action makes in its namespace directory stay writable by the namespace's group


@dataclass(frozen=True)
class ContainerPlan:
    """Everything a container's first process needs to build its sandbox (sent as JSON)."""

    name: str  # the container id; also its hostname
    procs: list[str]  # cgroup.procs files to join
    new_root: str  # an empty host directory the view is assembled on (in the container's own mount ns)
    expose: list[str]  # host paths shown read-only at the same place
    links: dict[str, str]  # symbolic links at the top of the view (merged /usr: /bin -> usr/bin)
    cgroup_views: dict[str, str]  # path in the view -> host directory of one of the container's own groups
    mount_points: list[str]  # empty directories, writable by root only, where namespace directories go later
    tmp_bytes: int  # size of /tmp, the only writable place
    uid: int  # the container's own uid (never 0)
    env: dict[str, str] = field(default_factory=dict)
    shared: list[str] = field(default_factory=list)  # host directories shown read-write at the same place


@dataclass(frozen=True)
class Tenant:
    """Who a container runs for: its namespace's gid and, if it has one, the namespace's directory."""

    gid: int
    directory: str | None = None  # attached read-write at this same path (the tree comes as a descriptor)


def enter(plan: ContainerPlan) -> None:
    """Join the cgroups, unshare, build the view and pivot into it (the caller is pid 1, root)."""
    for path in plan.procs:
        fd = os.open(path, os.O_WRONLY)
        try:
            os.write(fd, b"0")  # 0: the writer itself (its pid in this new namespace means nothing to the host's)
        finally:
            os.close(fd)
    kernel.unshare(kernel.CLONE_NEWNS | kernel.CLONE_NEWIPC | kernel.CLONE_NEWUTS | kernel.CLONE_NEWCGROUP)
    kernel.sethostname(plan.name[:64])
    kernel.mount(None, "/", None, kernel.MS_REC | kernel.MS_PRIVATE)
    _build_view(plan, plan.new_root)
    os.chdir(plan.new_root)
    kernel.pivot_root(".", ".")  # the old root ends up stacked on the new one ...
    kernel.umount(".", kernel.MNT_DETACH)  # ... and is gone from this namespace
    os.chdir("/")


def _build_view(plan: ContainerPlan, root: str) -> None:
    kernel.mount("tmpfs", root, "tmpfs", VIEW_MOUNT_FLAGS, "size=1m,mode=0755")
    for path in plan.expose:
        _bind(path, root + path)
    for path in plan.shared:
        if not _in_tmp(path):
            _bind(path, root + path)
    for link, target in plan.links.items():
        os.symlink(target, root + link)
    for place in ("/proc", "/dev", "/sys", WRITABLE, *plan.mount_points):
        os.makedirs(root + place, exist_ok=True)
    kernel.mount("/sys", root + "/sys", None, kernel.MS_BIND)  # not recursive: without the host's cgroups
    kernel.mount("tmpfs", root + "/sys/fs/cgroup", "tmpfs", VIEW_MOUNT_FLAGS, "size=16k,mode=0755")
    for inside, host in plan.cgroup_views.items():
        os.makedirs(root + inside, exist_ok=True)
        kernel.mount(host, root + inside, None, kernel.MS_BIND)
    kernel.mount_setattr(root, kernel.MOUNT_ATTR_RDONLY | kernel.MOUNT_ATTR_NOSUID | kernel.MOUNT_ATTR_NODEV)
    _make_dev(root + "/dev")
    kernel.mount("proc", root + "/proc", "proc", VIEW_MOUNT_FLAGS | kernel.MS_NOEXEC)
    kernel.mount("tmpfs", root + WRITABLE, "tmpfs", VIEW_MOUNT_FLAGS, f"size={plan.tmp_bytes},mode=1777")
    kernel.mount(root + WRITABLE, root + SHM, None, kernel.MS_BIND)  # shared memory counts against the quota
    for path in plan.expose:  # what the writable tmpfs just covered (owx or a venv living under /tmp), again
        if _in_tmp(path):
            _bind(path, root + path)
            kernel.mount_setattr(root + path, kernel.MOUNT_ATTR_RDONLY | kernel.MOUNT_ATTR_NOSUID |
                                 kernel.MOUNT_ATTR_NODEV)
    for path in plan.shared:
        if _in_tmp(path):
            _bind(path, root + path)
        kernel.mount_setattr(root + path, kernel.MOUNT_ATTR_NOSUID | kernel.MOUNT_ATTR_NODEV,
                             attr_clr=kernel.MOUNT_ATTR_RDONLY)
    for place in plan.mount_points:
        os.makedirs(root + place, exist_ok=True)  # again, if it is under /tmp (root-owned, in a sticky /tmp)
        kernel.mount("tmpfs", root + place, "tmpfs", VIEW_MOUNT_FLAGS, "size=16k,mode=0755")


def _in_tmp(path: str) -> bool:
    return path.startswith(WRITABLE.rstrip("/") + "/")


def _bind(path: str, inside: str) -> None:
    """Show the host's ``path`` at ``inside`` (a directory or a file; recursively)."""
    if os.path.isdir(path):
        os.makedirs(inside, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(inside), exist_ok=True)
        os.close(os.open(inside, os.O_CREAT | os.O_WRONLY, 0o644))
    kernel.mount(path, inside, None, kernel.MS_BIND | kernel.MS_REC)


def _make_dev(dev: str) -> None:
    kernel.mount("tmpfs", dev, "tmpfs", kernel.MS_NOSUID | kernel.MS_NOEXEC, "size=16k,mode=0755")
    for name, (major, minor) in DEVICES.items():
        os.mknod(f"{dev}/{name}", 0o666 | 0o020000, os.makedev(major, minor))
        os.chmod(f"{dev}/{name}", 0o666)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"{dev}/{name}")
    os.mkdir(dev + SHM[len("/dev"):])
    kernel.mount_setattr(dev, kernel.MOUNT_ATTR_RDONLY | kernel.MOUNT_ATTR_NOSUID, recursive=False)


def attach_directory(tree_fd: int, path: str, mount_points: list[str]) -> None:
    """Mount a detached tree (the namespace's directory) at ``path`` under one of the ``mount_points``."""
    parent = next(p for p in mount_points if path.startswith(p.rstrip("/") + "/"))
    os.makedirs(path, exist_ok=True)
    kernel.attach(tree_fd, path)
    kernel.mount_setattr(parent, kernel.MOUNT_ATTR_RDONLY | kernel.MOUNT_ATTR_NOSUID | kernel.MOUNT_ATTR_NODEV,
                         recursive=False)


def become(plan: ContainerPlan, tenant: Tenant) -> None:
    """Drop to the tenant for good: uid, gid, no capabilities, no new privileges, a Landlock domain
    (no TCP port bound, no abstract Unix socket or signal beyond the container), the syscall filter."""
    if plan.uid <= 0 or tenant.gid <= 0:
        raise ValueError("a container never runs as root")
    kernel.prctl(kernel.PR_SET_NO_NEW_PRIVS, 1)
    kernel.drop_bounding_set()
    os.setgroups([tenant.gid])
    os.setresgid(tenant.gid, tenant.gid, tenant.gid)
    os.setresuid(plan.uid, plan.uid, plan.uid)  # clears the permitted and effective capabilities
    if os.getuid() == 0 or os.geteuid() == 0:
        raise OSError("the uid did not change")
    os.umask(UMASK)
    _enter_landlock_domain()
    kernel.install_seccomp(tenant_filter())


def _enter_landlock_domain() -> None:
    """No TCP port bound (the runtime's listener is inherited; a bound port could only squat a host
    service's port, the firewall's open ports above all), no abstract Unix socket or signal beyond the
    container. What an older kernel lacks is left out (the platform warns at start)."""
    abi = kernel.landlock_abi()
    no_bind = kernel.LANDLOCK_ACCESS_NET_BIND_TCP if abi >= kernel.LANDLOCK_NET_ABI else 0
    scopes = (kernel.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | kernel.LANDLOCK_SCOPE_SIGNAL
              if abi >= kernel.LANDLOCK_SCOPES_ABI else 0)
    if no_bind or scopes:
        kernel.landlock_restrict(no_bind, scopes)
