"""Shared by the isolation tests: a real ``owx up`` (a process of its own, real sandboxes, real cgroups) with two tenants:
the victim (the default namespace) and the attacker (a second subject made with ``owx admin``)."""

from __future__ import annotations

import dataclasses
import os
import secrets
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from owx.bench.gateway_process import GatewayProcess, start_gateway_process

SMALL_TMP_MB = 32
PIDS_MAX = 64


@dataclass
class Tenant:
    """One namespace's view of the gateway: its key, its actions, its activations."""

    gateway: GatewayProcess
    auth: str
    namespace: str

    def session(self) -> requests.Session:
        return dataclasses.replace(self.gateway, auth=self.auth).session()

    def put(self, code: str, name: str | None = None, **body: Any) -> str:
        name = name or f"a{uuid.uuid4().hex[:10]}"
        exec_ = {"kind": "python:3", "code": code, **body.pop("exec", {})}
        answer = self.session().put(f"{self.gateway.url}/api/v1/namespaces/_/actions/{name}",
                                    params={"overwrite": "true"}, json={"exec": exec_, **body}, timeout=60)
        assert answer.status_code == 200, answer.text
        return name

    def invoke(self, name: str, timeout: float = 120, **params: Any) -> dict[str, Any]:
        """A blocking invocation's activation record."""
        answer = self.session().post(f"{self.gateway.url}/api/v1/namespaces/_/actions/{name}",
                                     params={"blocking": "true"}, json=params, timeout=timeout)
        assert answer.status_code in (200, 502), answer.text
        return answer.json()

    def run(self, code: str, **params: Any) -> dict[str, Any]:
        """Deploy ``code`` and return its result (asserting success)."""
        record = self.invoke(self.put(code), **params)
        assert record["response"]["success"], record
        return record["response"]["result"]


@dataclass
class Instance:
    gateway: GatewayProcess
    victim: Tenant
    attacker: Tenant
    cgroup_root: str

    @property
    def state_dir(self) -> Path:
        return self.gateway.data_dir / "platform"


def add_tenant(gateway: GatewayProcess, subject: str) -> Tenant:
    """A second namespace, made the way an operator does: ``owx admin user create``."""
    made = subprocess.run([sys.executable, "-m", "owx.cli", "admin", "--data-dir", str(gateway.data_dir), "user",
                           "create", subject], capture_output=True, text=True, timeout=60, check=True,
                          env={**os.environ, "HOME": str(gateway.data_dir / "home")})
    return Tenant(gateway, made.stdout.strip().splitlines()[-1], subject)


def start_instance(data_dir: Path, **env: str) -> Instance:
    cgroup_root = env.setdefault("OWX_PLATFORM__CGROUP_ROOT", f"owx-iso-{secrets.token_hex(3)}")
    env.setdefault("OWX_PLATFORM__SANDBOX__TMP_MB", str(SMALL_TMP_MB))
    env.setdefault("OWX_PLATFORM__PIDS_MAX", str(PIDS_MAX))
    env.setdefault("OWX_PLATFORM__STEM_CELLS", "1")
    gateway = start_gateway_process(data_dir, env=env)
    return Instance(gateway, Tenant(gateway, gateway.auth, "guest"), add_tenant(gateway, "mallory"), cgroup_root)


def host_pids_with(marker: str) -> list[int]:
    """Host processes whose command line holds ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found
