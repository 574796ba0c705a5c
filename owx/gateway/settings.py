"""Settings of the REST service and of the limits it grants actions (``OWX_GATEWAY__*``, ``OWX_LIMITS__*``)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, IPvAnyNetwork, ValidationInfo, field_validator, model_validator

from owx.platform.types import RESULT_BYTES


class Bound(BaseModel):
    """An inclusive range with a default inside it."""

    min: int
    max: int
    default: int

    @model_validator(mode="after")
    def _ordered(self) -> "Bound":
        if not self.min <= self.default <= self.max:
            raise ValueError(f"bound needs min <= default <= max, got {self.min}/{self.default}/{self.max}")
        return self


class ActionLimits(BaseModel):
    """What an action may ask for (OpenWhisk's defaults; raise ``memory_mb.max`` for deep learning).

    ``OWX_LIMITS__MEMORY_MB__MAX=4096`` alone raises the maximum; fields not given keep their defaults.
    """

    timeout_ms: Bound = Bound(min=100, max=300_000, default=60_000)
    memory_mb: Bound = Bound(min=128, max=512, default=256)
    logs_mb: Bound = Bound(min=0, max=10, default=10)
    concurrency: Bound = Bound(min=1, max=500, default=1)

    @field_validator("timeout_ms", "memory_mb", "logs_mb", "concurrency", mode="before")
    @classmethod
    def _partial_bound(cls, value: object, info: ValidationInfo) -> object:
        if isinstance(value, dict):
            default: Bound = cls.model_fields[info.field_name].default  # type: ignore[index]
            return {**default.model_dump(), **value}
        return value


class GatewaySettings(BaseModel):
    """The REST service: where it listens, its stores, and OpenWhisk's per-namespace throttles."""

    host: str = "127.0.0.1"
    port: int = Field(3233, ge=0, le=65535, description="HTTP port (0: a free one)")
    tls_port: int | None = Field(3443, ge=0, le=65535, description="HTTPS port (0: a free one; unset: no HTTPS)")
    tls_cert: Path | None = Field(None, description="the server certificate (PEM); unset: a self-signed one "
                                  "made in <data dir>/tls on first start")
    tls_key: Path | None = Field(None, description="the key of tls_cert (PEM)")
    http_threads: int = Field(32, ge=1, le=1024, description="threads serving the REST API's Flask views and "
                              "what an invoke must read from the store (never held by waits), taken by the callers' "
                              "namespaces in turn")
    tenant_thread_share: float = Field(0.125, gt=0, le=1, description="the share of http_threads one "
                                       "namespace's API and web requests may hold at once (4 of 32; callers not "
                                       "known yet share one), so that Flask views holding the interpreter in turns "
                                       "stay few and another namespace's next request finds a thread; 1: no cap "
                                       "(a benchmark control)")
    loop_runs: bool = Field(True, description="an activation a warm container can take runs from the event loop "
                            "(no thread); off, every activation runs on a worker thread (a benchmark control)")
    trusted_proxies: list[IPvAnyNetwork] = Field(
        [], description="proxies in front of owx (addresses or networks) whose X-Forwarded-For names the client: "
        "a request through them takes turns by that client's address, not the proxy's")
    unknown_turn_by_address: bool = Field(True, description="callers whose key is not known yet (read from "
                                          "the store) take turns by client address (an IPv6 one's /64), so that "
                                          "one address's flood of made-up keys queues none of another's; off, they "
                                          "share one turn (a benchmark control)")
    defer_waits: bool = Field(True, description="blocking waits hold no thread; off, a waiting request holds "
                              "one of http_threads as on a plain WSGI server (a benchmark control)")
    busy_poll_us: int = Field(100, ge=0, le=10_000, description="the event loop polls at least this long "
                              "instead of sleeping when an answer is due at once (a runtime's, a client's next "
                              "request), longer (up to 10 times) when such answers take longer on this machine; "
                              "0: it always sleeps (see owx.common.eventloop.BusyPoll)")
    short_gc_pauses: bool = Field(True, description="owx up freezes what start-up made and sets the collector's "
                                  "thresholds so that no collection scans many objects, and full ones stay rare "
                                  "(owx.common.gc_pauses); off, Python's collector as it comes (a benchmark control)")
    public_url: str | None = Field(None, description="where clients and actions reach the gateway "
                                   "(default http://HOST:PORT); actions get it as __OW_API_HOST")
    store: Literal["sqlite", "couchdb"] = "sqlite"
    couchdb_url: str = "http://127.0.0.1:5984"
    couchdb_prefix: str = "owx_"
    entity_mb_per_namespace: int = Field(1024, ge=0, description="what a namespace's actions, packages, triggers "
                                         "and rules may take together, as stored JSON (a write past it: 403); "
                                         "0: no bound")
    entity_write_mb_per_minute: int = Field(256, ge=0, description="the bytes of entity documents (actions' code "
                                            "above all) a namespace may send per minute, refilled evenly (a body past "
                                            "it: 429, not parsed): the gateway's one interpreter parses each; 0: any")
    activation_mb_per_namespace: int = Field(1024, ge=0, description="the activation records a namespace keeps in "
                                             "the SQLite store, its newest (past it, its oldest are deleted: see "
                                             "owx.gateway.stores.retention); 0: all. A CouchDB's retention is "
                                             "its operator's, as OpenWhisk's is")
    couchdb_max_document_bytes: int = Field(8_000_000, ge=1_000_000, description="the largest document the "
                                            "CouchDB server takes (its max_document_size; 8,000,000 by default "
                                            "since CouchDB 3): an activation record past it keeps its logs' "
                                            "first lines that fit, with a line saying so, instead of being refused")
    default_namespace: str = "guest"
    blocking_wait_s: float = Field(60.0, gt=0, description="a blocking invoke answers 202 after this")
    max_payload_bytes: int = Field(RESULT_BYTES, gt=0)
    invocations_per_minute: int = Field(6000, ge=1)
    concurrent_invocations: int = Field(500, ge=1)
    workers: int = Field(256, ge=2, le=4096, description="activations running at once (a namespace takes at "
                         "most half; those that need a thread take one each); more queue, fairly by namespace")
    shutdown_grace_s: float = Field(5.0, ge=0, description="on SIGTERM, how long running activations may finish "
                                    "before they are recorded as failed")
    trigger_fires_per_minute: int = Field(60, ge=1, description="trigger fires a namespace may make per minute "
                                          "(OpenWhisk's firesPerMinute); more answer 429")
