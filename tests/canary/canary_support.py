"""Shared by the Canary core/recovery tests: a real gateway with N nodes, stateful actions, kills."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from owx.platform.types import ContainerInfo
from owx.gateway.server import GatewayServer
from tests.fixtures.polling import wait_for
from tests.gateway.conftest import RunningGateway, start_gateway

# A stateful action in explicit mode: sums i*i over `steps` steps, a checkpoint after each.
COUNTER = '''
import os, time
from owx.canary.checkpoint import Checkpointer

def main(args):
    steps, delay = args.get("steps", 20), args.get("delay", 0.05)
    with Checkpointer.from_env() as ckpt:
        state = ckpt.restore() or {"i": 0, "total": 0}
        resumed_at = state["i"]
        while state["i"] < steps:
            time.sleep(delay)
            state["total"] += state["i"] * state["i"]
            state["i"] += 1
            ckpt.save("step-%d" % state["i"], **state)
            if args.get("oom_at") == state["i"] and ckpt.restored is None:
                hog = [bytearray(16 * 2**20) for _ in range(64)]  # a transient spike over the limit
    return {"total": state["total"], "resumed_at": resumed_at, "pid": os.getpid(),
            "warnings": len(ckpt.warnings)}
'''


def expected_total(steps: int) -> int:
    return sum(i * i for i in range(steps))


@dataclass
class CanaryGateway(RunningGateway):
    server: GatewayServer | None = None
    workdir: Path | None = None

    @property
    def platform(self):
        return self.service.platform

    @property
    def core(self):
        return self.service.extensions["canary"].core

    def put_action(self, http: requests.Session, code: str = COUNTER, canary: Any = None,
                   memory: int = 128, name: str | None = None, **extra: Any) -> str:
        name = name or f"act-{uuid.uuid4().hex[:8]}"
        body: dict[str, Any] = {"exec": {"kind": "python:3", "code": code}, "limits": {"memory": memory}}
        if canary is not None:
            body["annotations"] = [{"key": "canary", "value": canary}]
        body.update(extra)
        response = http.put(self.api(f"actions/{name}"), json=body)
        assert response.status_code == 200, response.text
        return name

    def stop(self) -> None:
        assert self.server is not None and self.workdir is not None
        self.server.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


def start_canary_gateway(gateway: dict[str, Any] | None = None, canary: dict[str, Any] | None = None,
                         **platform: Any) -> CanaryGateway:
    """A gateway on a free port with its own data dir and cgroup root (stopped by the caller);
    ``platform`` overrides platform settings, ``gateway`` the REST service's, ``canary`` Canary's."""
    workdir = Path(tempfile.mkdtemp(prefix="owx-canary-gw-"))
    workdir.chmod(0o711)  # the checkpoint store under the data dir must be reachable by the action user
    tag = workdir.name[-8:]
    platform = {"stem_cells": 0, "cgroup_root": f"owx-test-canary-{tag}", **platform}
    server, running = start_gateway(workdir / "data", platform=platform, gateway=gateway or {}, canary=canary or {})
    return CanaryGateway(running.url, running.auth, running.namespace, running.service, server, workdir)


def annotation(record: dict[str, Any], key: str) -> Any:
    return next((a["value"] for a in record["annotations"] if a["key"] == key), None)


def busy_containers(gw: CanaryGateway, action: str) -> list[ContainerInfo]:
    return [c for c in gw.platform.containers()
            if c.in_flight > 0 and c.state in ("warm", "claimed") and f"/{action}@" in (c.action_key or "")]


def wait_checkpoints(gw: CanaryGateway, activation_id: str, count: int) -> None:
    """Wait until ``activation_id`` has saved checkpoint number ``count``."""
    from owx.canary.checkpoint import open_checkpoint_store

    gw.core.store.grant(gw.namespace)  # the run may not have let the namespace into the store yet
    with open_checkpoint_store(gw.core.store.url_for(gw.namespace)) as store:  # one handle, polled gently: the gateway shares our GIL
        def checkpointed() -> bool:
            time.sleep(0.02)
            history = store.history(activation_id)
            return bool(history) and history[0].seq >= count

        wait_for(checkpointed, what=f"{count} checkpoints")


def kill_running(gw: CanaryGateway, action: str, activation_id: str, after_checkpoints: int = 3) -> float:
    """SIGKILL the container running ``activation_id`` once it has checkpointed; the kill time."""
    wait_checkpoints(gw, activation_id, after_checkpoints)
    container = wait_for(lambda: busy_containers(gw, action), what="a busy container")[0]
    killed_at = time.time()
    os.kill(container.pid, signal.SIGKILL)
    return killed_at
