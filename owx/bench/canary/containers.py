"""Killing sandboxed activations from outside owx, by their container's cgroup.

A sandboxed action sees neither its host pid (own pid namespace: it is pid 1) nor the
host's files, but its hostname is its container's id, which is also the name of the
container's cgroup under ``<cgroup root>/<node>/``. The action announces itself in a Redis
hash (``HSET key <activation id> {"container", "t"}``, snippet :data:`ANNOUNCE`); the
bench kills every process in that cgroup with SIGKILL, as a crash or the kernel would.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

from owx.common.cgroups import Cgroup

ANNOUNCE = '''
def _announce(args):
    import redis
    redis.Redis.from_url(args["effects_url"]).hset(args["announce_key"], os.environ.get("__OW_ACTIVATION_ID", "local"),
                                                   json.dumps({"container": os.uname().nodename, "t": time.time()}))

def _retire(args):
    """This execution is done: the injector must not kill the container's next activation."""
    import redis
    redis.Redis.from_url(args["effects_url"]).hdel(args["announce_key"], os.environ.get("__OW_ACTIVATION_ID", "local"))
'''


class AnnouncedContainers:
    """:class:`owx.bench.canary.faults.Announcements` read from the Redis hash ``key``."""

    def __init__(self, client: Any, key: str, cgroup_root: str) -> None:
        self.client = client
        self.key = key
        self.root = Cgroup(cgroup_root)

    def running(self) -> dict[str, tuple[str, float]]:
        """Activation id -> (container id, announced at) of every announced execution."""
        return {aid.decode(): (doc["container"], doc["t"]) for aid, raw in self.client.hgetall(self.key).items()
                for doc in [json.loads(raw)]}

    def announced(self, activation_id: str) -> float | None:
        raw = self.client.hget(self.key, activation_id)
        return None if raw is None else json.loads(raw)["t"]

    def kill(self, activation_id: str) -> bool:
        raw = self.client.hget(self.key, activation_id)
        return raw is not None and kill_container(self.root, json.loads(raw)["container"])


class ContainerFiles:
    """:class:`owx.bench.canary.faults.Announcements` as files ``<directory>/<activation id>``
    holding the container id (written by the action into a directory it shares with the bench)."""

    def __init__(self, directory: Path, cgroup_root: str) -> None:
        self.directory = directory
        self.root = Cgroup(cgroup_root)

    def announced(self, activation_id: str) -> float | None:
        try:
            return (self.directory / activation_id).stat().st_mtime
        except FileNotFoundError:
            return None

    def kill(self, activation_id: str) -> bool:
        try:
            container = (self.directory / activation_id).read_text().strip()
        except FileNotFoundError:
            return False
        return bool(container) and kill_container(self.root, container)


def kill_container(root: Cgroup, container: str) -> bool:
    """SIGKILL every process of ``container`` (on whichever node of ``root`` it is)."""
    nodes = next(os.walk(root.dir("pids")), ("", [], []))[1]
    return any([kill_subtree(Cgroup(f"{root.relpath}/{node}/{container}")) for node in nodes])


def subtree_pids(group: Cgroup) -> set[int]:
    """The processes in ``group`` and every cgroup below it (its pids hierarchy on cgroup v1)."""
    pids: set[int] = set()
    for directory, _, files in os.walk(group.dir("pids")):  # a group removed meanwhile is skipped
        if "cgroup.procs" in files:
            try:
                pids.update(int(pid) for pid in (Path(directory) / "cgroup.procs").read_text().split())
            except OSError:
                pass
    return pids


def kill_subtree(group: Cgroup) -> bool:
    """SIGKILL every process under ``group`` until none is left; False if there was none."""
    killed = False
    for _ in range(1000):  # a process forked meanwhile is caught in the next round
        pids = subtree_pids(group)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed = True
            except ProcessLookupError:
                pass
    return killed
