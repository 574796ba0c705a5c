"""What a local container's sandbox shows of this machine (:class:`owx.runtimes.confine.ContainerPlan`).

Read-only: /usr, /etc, the merged-/usr links (/bin -> usr/bin ...) or the real directories, the
runtime interpreter's prefixes and site directories, owx's own package directory, and whatever
``sandbox.expose`` adds; read-write: only ``sandbox.shared``, if the operator names any. Nothing else: the data dir, /root, /home, /run, /var, the other
containers' sockets and the host's cgroups are simply not there.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from owx.common.cgroups import Cgroup, is_v2
from owx.platform.settings import SandboxSettings
from owx.runtimes.confine import ContainerPlan

SYSTEM = ("/usr", "/etc")
TOP_LEVEL = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
MB = 1024 * 1024


@dataclass(frozen=True)
class SandboxLayout:
    """The parts of every container's plan that do not change from one container to the next."""

    new_root: str
    expose: list[str]
    links: dict[str, str]
    mount_points: list[str]
    tmp_bytes: int
    shared: list[str]

    @classmethod
    def build(cls, runtime_paths: list[str], state_dir: Path, namespaces_dir: Path,
              sandbox: SandboxSettings) -> "SandboxLayout":
        """The layout for runtimes that need ``runtime_paths``; refuses one that would show ``state_dir``."""
        links = {top: os.readlink(top) for top in TOP_LEVEL if os.path.islink(top)}
        wanted = [*SYSTEM, *(t for t in TOP_LEVEL if os.path.isdir(t) and t not in links), *runtime_paths,
                  *map(str, sandbox.expose)]
        expose = _outermost(os.path.realpath(p) for p in wanted if os.path.exists(p))
        for path in sandbox.shared:
            path.mkdir(parents=True, exist_ok=True)
        shared = _outermost(os.path.realpath(p) for p in sandbox.shared)
        for hidden in (state_dir, state_dir.parent):
            shown = [p for p in (*expose, *shared) if _inside(str(hidden.resolve()), p)]
            if shown:
                raise ValueError(f"the sandbox would show {hidden} through {shown[0]}: move the data dir")
        new_root = state_dir / "rootfs"
        new_root.mkdir(mode=0o700, exist_ok=True)
        return cls(str(new_root), expose, links, [str(namespaces_dir.resolve())], sandbox.tmp_mb * MB, shared)

    def plan(self, name: str, cgroup: Cgroup, uid: int, env: dict[str, str]) -> ContainerPlan:
        """The plan of container ``name`` in ``cgroup``, running as ``uid``."""
        procs = [str(path / "cgroup.procs") for path in cgroup.dirs()]
        views = {"/sys/fs/cgroup": str(cgroup.dir())} if is_v2() else {
            "/sys/fs/cgroup/memory": str(cgroup.dir("memory"))}
        return ContainerPlan(name=name, procs=procs, new_root=self.new_root, expose=self.expose, links=self.links,
                             cgroup_views=views, mount_points=self.mount_points, tmp_bytes=self.tmp_bytes,
                             uid=uid, env=env, shared=self.shared)


def _inside(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def _outermost(paths) -> list[str]:
    """The paths without those inside another one, parents first."""
    kept: list[str] = []
    for path in sorted(set(paths), key=len):
        if not any(_inside(path, outer) for outer in kept):
            kept.append(path)
    return kept
