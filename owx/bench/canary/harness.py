"""A gateway for the Canary benches: embedded platform, HTTP server and an authenticated session."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import requests

from owx.gateway.server import GatewayServer
from owx.gateway.service import Gateway
from owx.settings import Settings


@dataclass
class GatewayHarness:
    """A started gateway; ``url`` ends in ``/api/v1/namespaces/_``."""

    service: Gateway
    server: GatewayServer
    http: requests.Session
    url: str

    @classmethod
    def start(cls, settings: Settings) -> "GatewayHarness":
        service = Gateway.open(settings)
        identity = service.default_identity()
        server = GatewayServer(service, "127.0.0.1", 0)
        server.start_background()
        http = requests.Session()
        http.auth = tuple(identity.auth.split(":", 1))  # type: ignore[assignment]
        return cls(service, server, http, f"http://127.0.0.1:{server.port}/api/v1/namespaces/_")

    @property
    def namespace(self) -> str:
        return self.service.default_identity().namespace

    def deploy(self, name: str, kind: str, code: str, memory_mb: int, timeout_ms: int,
               canary: dict[str, Any]) -> None:
        body = {"exec": {"kind": kind, "code": code}, "limits": {"memory": memory_mb, "timeout": timeout_ms},
                "annotations": [{"key": "canary", "value": canary}]}
        response = self.http.put(f"{self.url}/actions/{name}?overwrite=true", json=body)
        if not response.ok:
            raise RuntimeError(f"deploying {name}: {response.status_code} {response.text}")

    def invoke(self, name: str, params: dict[str, Any]) -> str:
        """Start an activation (non-blocking); its id."""
        response = self.http.post(f"{self.url}/actions/{name}", json=params)
        response.raise_for_status()
        return response.json()["activationId"]

    def wait(self, activation_id: str, timeout: float = 900) -> dict[str, Any] | None:
        """The activation's record once stored (None after ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            record = self.service.activations.get(self.namespace, activation_id)
            if record is not None:
                return record
            time.sleep(0.02)
        return None

    def stop(self) -> None:
        self.server.stop()
