"""How an agent reaches the allocator: over HTTP, or by direct calls in the same process."""

from __future__ import annotations

import http.client
import select
import threading
import urllib.parse
from functools import partial
from typing import Protocol, TypeVar

from pydantic import BaseModel, ValidationError

from owx.common import bearer
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
    """``POST <url>/v1/<kind>`` with a JSON body; 409 means re-register.

    One kept-alive connection per calling thread (the period loop and the OOM
    reporter post concurrently), over ``http.client``: at ten posts a second a
    general-purpose client library's own work was half of the agent's CPU.
    A failed post is not retried (the allocator may have applied it); the
    connection is dropped and the next post opens a new one.
    """

    def __init__(self, url: str, timeout_s: float = 0.5, token: str | None = None) -> None:
        self.url = url.rstrip("/")
        self._headers = {"Content-Type": "application/json", **bearer.header(token)}
        parts = urllib.parse.urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"allocator URL {url!r} is not http(s)://host[:port]")
        self._connect = partial(http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection,
                                parts.hostname, parts.port, timeout=timeout_s)
        self._path = parts.path
        self._local = threading.local()

    def register(self, msg: Register) -> Directives:
        return self._post("register", msg, Directives)

    def telemetry(self, msg: TelemetryBatch) -> Directives:
        return self._post("telemetry", msg, Directives)

    def heartbeat(self, msg: Heartbeat) -> Directives:
        return self._post("heartbeat", msg, Directives)

    def oom(self, msg: OomEvent) -> OomReply:
        return self._post("oom", msg, OomReply)

    def _post(self, kind: str, msg: BaseModel, reply: type[Reply]) -> Reply:
        connection = self._connection()
        try:
            connection.request("POST", f"{self._path}/v1/{kind}", msg.model_dump_json().encode(), self._headers)
            response = connection.getresponse()
            content = response.read()
        except (OSError, http.client.HTTPException) as exc:
            connection.close()
            self._local.connection = None
            raise AllocatorUnavailable(f"allocator {self.url} unreachable: {exc!r}") from None
        if response.status == 409:
            raise StaleAgent(content.decode(errors="replace"))
        if response.status != 200:
            raise AllocatorUnavailable(f"allocator {self.url} answered {response.status}: {content[:200]!r}")
        try:
            return reply.model_validate_json(content)
        except ValidationError as exc:
            raise AllocatorUnavailable(f"allocator {self.url} sent an invalid {reply.__name__}: {exc}") from None

    def _connection(self) -> http.client.HTTPConnection:
        """This thread's connection; a new one if the server closed the kept-alive one meanwhile."""
        connection = getattr(self._local, "connection", None)
        if connection is not None and connection.sock is not None and select.select([connection.sock], [], [], 0)[0]:
            connection.close()  # readable while idle: the server closed it (or sent what nobody asked for)
            connection = None
        if connection is None:
            connection = self._local.connection = self._connect()
        return connection
