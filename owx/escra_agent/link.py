"""How an agent reaches the allocator: over HTTP, or by direct calls in the same process."""

from __future__ import annotations

from typing import Protocol, TypeVar

import requests
from pydantic import BaseModel, ValidationError

from owx.escra_agent.allocator import ResourceAllocator, StaleAgent
from owx.escra_agent.messages import Directives, Heartbeat, OomEvent, OomReply, Register, TelemetryBatch

Reply = TypeVar("Reply", bound=BaseModel)

__all__ = ["AllocatorLink", "AllocatorUnavailable", "HttpLink", "LocalLink", "StaleAgent"]


class AllocatorUnavailable(ConnectionError):
    """The allocator did not answer (down, restarting, network) or answered garbage."""


class AllocatorLink(Protocol):
    def register(self, msg: Register) -> Directives: ...
    def telemetry(self, msg: TelemetryBatch) -> Directives: ...
    def heartbeat(self, msg: Heartbeat) -> Directives: ...
    def oom(self, msg: OomEvent) -> OomReply: ...


class LocalLink:
    """The allocator lives in this process (the gateway's embedded platform)."""

    def __init__(self, allocator: ResourceAllocator) -> None:
        self.allocator = allocator

    def register(self, msg: Register) -> Directives:
        return self.allocator.register(msg)

    def telemetry(self, msg: TelemetryBatch) -> Directives:
        return self.allocator.telemetry(msg)

    def heartbeat(self, msg: Heartbeat) -> Directives:
        return self.allocator.heartbeat(msg)

    def oom(self, msg: OomEvent) -> OomReply:
        return self.allocator.oom(msg)


class HttpLink:
    """``POST <url>/v1/<kind>`` with a JSON body; 409 means re-register."""

    def __init__(self, url: str, timeout_s: float = 0.5) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self._session = requests.Session()

    def register(self, msg: Register) -> Directives:
        return self._post("register", msg, Directives)

    def telemetry(self, msg: TelemetryBatch) -> Directives:
        return self._post("telemetry", msg, Directives)

    def heartbeat(self, msg: Heartbeat) -> Directives:
        return self._post("heartbeat", msg, Directives)

    def oom(self, msg: OomEvent) -> OomReply:
        return self._post("oom", msg, OomReply)

    def _post(self, kind: str, msg: BaseModel, reply: type[Reply]) -> Reply:
        try:
            response = self._session.post(
                f"{self.url}/v1/{kind}",
                data=msg.model_dump_json(),
                headers={"Content-Type": "application/json"},
                timeout=self.timeout_s,
            )
        except requests.RequestException as exc:
            raise AllocatorUnavailable(f"allocator {self.url} unreachable: {exc}") from None
        if response.status_code == 409:
            raise StaleAgent(response.text)
        if response.status_code != 200:
            raise AllocatorUnavailable(f"allocator {self.url} answered {response.status_code}: {response.text[:200]}")
        try:
            return reply.model_validate_json(response.content)
        except ValidationError as exc:
            raise AllocatorUnavailable(f"allocator {self.url} sent an invalid {reply.__name__}: {exc}") from None
