"""A real gateway (SQLite or CouchDB store, local platform) served on a free port."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest
import requests

from owx.gateway.admin.users import Users
from owx.settings import Settings
from owx.gateway.server import GatewayServer
from owx.gateway.service import Gateway


@dataclass
class RunningGateway:
    url: str
    auth: str
    namespace: str
    service: Gateway

    def session(self) -> requests.Session:
        session = requests.Session()
        session.auth = tuple(self.auth.split(":", 1))  # type: ignore[assignment]
        return session

    def api(self, path: str, namespace: str = "_") -> str:
        return f"{self.url}/api/v1/namespaces/{namespace}/{path}"

    def tenant(self, subject: str) -> "RunningGateway":
        """Another subject with a namespace of its own name, on the same gateway (as ``owx admin
        user create SUBJECT`` makes one)."""
        key = Users(self.service.entities).create(subject)
        return RunningGateway(self.url, key.auth, key.namespace, self.service)

    def wait_record(self, http: requests.Session, activation_id: str, timeout: float = 60) -> dict[str, Any]:
        """The activation's record once it is stored."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            answer = http.get(self.api(f"activations/{activation_id}"))
            if answer.status_code == 200:
                return answer.json()
            time.sleep(0.05)
        raise TimeoutError(f"activation {activation_id} never recorded")


def start_gateway(tmp: Path, **sections: dict[str, Any]) -> tuple[GatewayServer, RunningGateway]:
    """A gateway on a free port; ``sections`` override parts of the settings tree (``platform={...}``)."""
    platform = {"cgroup_root": f"owx-test-gw-{tmp.name[-8:]}", "stem_cells": 1, **sections.pop("platform", {})}
    gateway = {"port": 0, **sections.pop("gateway", {})}
    settings = Settings(data_dir=tmp, gateway=gateway, platform=platform, **sections)
    service = Gateway.open(settings)
    identity = service.default_identity()
    server = GatewayServer(service, "127.0.0.1", 0)  # HTTPS is tested in tests/gateway/test_tls.py
    server.start_background()
    running = RunningGateway(f"http://127.0.0.1:{server.port}", identity.auth, identity.namespace, service)
    return server, running


@pytest.fixture(scope="module")
def gateway(tmp_path_factory) -> Iterator[RunningGateway]:
    server, running = start_gateway(tmp_path_factory.mktemp("gw"))
    yield running
    server.stop()


@pytest.fixture()
def http(gateway: RunningGateway) -> requests.Session:
    return gateway.session()
