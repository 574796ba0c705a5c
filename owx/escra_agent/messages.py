"""Typed messages between node agents and the resource allocator.

Every exchange is agent-initiated request/response (``POST /v1/<kind>``), so
agents need no listening socket.  Units: CPU in microseconds of runtime per
100 ms CFS period (100_000 = one core), memory in bytes; ``-1`` means unlimited.
The allocator's ``epoch`` changes on every allocator start; an agent whose
``epoch`` is stale gets HTTP 409 and registers again.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_BYTES = 1 << 50  # 1 PiB: more than any node has; a bound keeps sums and conversions finite
MAX_CORES = 4096
MAX_QUOTA_US = MAX_CORES * 100_000
Name = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")]
Bytes = Annotated[int, Field(ge=-1, le=MAX_BYTES)]
Quota = Annotated[int, Field(ge=-1, le=MAX_QUOTA_US)]
Count = Annotated[int, Field(ge=0, le=MAX_BYTES)]
PositiveBytes = Annotated[int, Field(gt=0, le=MAX_BYTES)]


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ContainerInfo(Message):
    """A container an agent found on its node."""

    id: Name
    app: Name
    cpu_quota_us: Quota
    memory_limit: Bytes
    memory_usage: Count
    managed: bool = False  # its limits were set by Escra (known to the agent from before)


class LimitUpdate(Message):
    """New limits for one container; ``None`` leaves that resource alone."""

    id: Name
    cpu_quota_us: Annotated[int, Field(gt=0, le=MAX_QUOTA_US)] | None = None
    memory_limit: PositiveBytes | None = None


class Sample(Message):
    """One container's telemetry over one agent period (deltas of cumulative counters)."""

    id: Name
    interval_us: Annotated[int, Field(gt=0, le=MAX_BYTES)]  # wall time the deltas cover
    periods: Count  # CFS periods elapsed
    throttled_periods: Count
    throttled_us: Count
    used_us: Count  # CPU time consumed (cpuacct.usage / usage_usec)
    cpu_quota_us: Quota
    memory_usage: Count
    memory_limit: Bytes


class Reclaimed(Message):
    """ψ: memory an agent took back from one container during periodic reclamation."""

    id: Name
    memory_limit: PositiveBytes
    freed_bytes: PositiveBytes


class Register(Message):
    node: Name
    containers: list[ContainerInfo] = []


class TelemetryBatch(Message):
    """Everything one node reports for one period."""

    node: Name
    epoch: str
    seq: Count
    samples: list[Sample] = []
    new: list[ContainerInfo] = []
    gone: list[Name] = []
    reclaimed: list[Reclaimed] = []


class Heartbeat(Message):
    node: Name
    epoch: str


class OomEvent(Message):
    """A container hit its memory limit and is paused at it.

    ``granted_bytes`` > 0: the agent already raised the limit to ``memory_limit``
    from its pre-granted reserve (fast path) and reports it.  0: the agent's
    reserve was short and it asks the allocator for memory.
    """

    node: Name
    epoch: str
    id: Name
    memory_usage: Count
    memory_limit: PositiveBytes
    granted_bytes: Count = 0


class Directives(Message):
    """The allocator's answer to register, telemetry and heartbeat messages."""

    epoch: str
    updates: list[LimitUpdate] = []
    reclaim: bool = False  # reclaim every container to usage + delta_bytes now
    delta_bytes: Count = 0
    reserve_grant: dict[Name, Count] = {}  # app -> bytes added to the agent's local rescue reserve
    deny_oom: list[Name] = []  # paused containers that get no memory: let the OOM proceed


class OomReply(Message):
    epoch: str
    decision: Literal["granted", "wait", "denied", "recorded"]
    memory_limit: int | None = None
    reserve_grant: Count = 0  # bytes added to the agent's rescue reserve of the container's app


class ErrorBody(Message):
    error: str
    code: int


class AppLimits(Message):
    """A distributed container: one application's global limits across nodes."""

    name: Name
    cpu_cores: Annotated[float, Field(gt=0, le=MAX_CORES, allow_inf_nan=False)]
    memory_bytes: PositiveBytes
    expected_containers: Annotated[int, Field(gt=0, le=1_000_000)] | None = None
    adopt_memory: bool = False  # keep the memory limit a container arrives with (a pool already sized it)


class AllocatorView(Message):
    """Read-only state for operators and benchmarks (``GET /v1/state``)."""

    epoch: str
    apps: dict[str, dict[str, float | int]]
    containers: dict[str, dict[str, float | int | str]]
