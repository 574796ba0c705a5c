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
        if raw is None:
            return False
        groups = [Cgroup(f"{self.root.relpath}/{node.name}/{json.loads(raw)['container']}")
                  for node in self.root.dir("pids").iterdir() if node.is_dir()]
        return any([kill_subtree(group) for group in groups])


def subtree_pids(group: Cgroup) -> set[int]:
    """The processes in ``group`` and every cgroup below it (its pids hierarchy on cgroup v1)."""
    top = group.dir("pids")
    pids: set[int] = set()
    for procs in top.rglob("cgroup.procs") if top.is_dir() else ():
        try:
            pids.update(int(pid) for pid in procs.read_text().split())
        except OSError:
            pass  # a container cgroup removed meanwhile
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
