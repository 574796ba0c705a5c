"""What flows between the gateway, the extensions and a platform: typed values, no behaviour."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Status = Literal["success", "application error", "action developer error", "whisk internal error"]

SUCCESS: Status = "success"
APPLICATION_ERROR: Status = "application error"
DEVELOPER_ERROR: Status = "action developer error"
INTERNAL_ERROR: Status = "whisk internal error"

# OpenWhisk's own wording for platform-detected failures.
TIMEOUT_MESSAGE = "The action exceeded its time limits of {ms} milliseconds."
INIT_TIMEOUT_MESSAGE = "The action exceeded its time limits of {ms} milliseconds during initialization."
OOM_MESSAGE = "The action exhausted its memory and was aborted."
EXITED_MESSAGE = "The action did not produce a valid response and exited unexpectedly."
INIT_EXITED_MESSAGE = "The action did not initialize and exited unexpectedly."
RESULT_BYTES = 1024 * 1024  # OpenWhisk's default limit of a result (and of a payload)
INVALID_RESPONSE_MESSAGE = "The action did not produce a valid JSON or JSON Array response"
INVALID_INIT_MESSAGE = "The action failed during initialization"
#: The kinds owx's own Python runtime runs (``python:tensorflow`` with TensorFlow installed).
PYTHON_KINDS = ("python:3", "python:3.11", "python:default", "python:tensorflow")
LOG_TRUNCATED_MESSAGE = "Logs were truncated because the total bytes size exceeds the limit of {limit} bytes."
LOG_FAILURE_MESSAGE = "There was an issue while collecting your logs. Data might be missing."
DEVELOPER_ERROR_LOG_MESSAGE = "The action did not initialize or run as expected. Log data might be missing."


def tenant_of(key: str) -> str:
    """Whom the containers of an action key run for, as far as the node's memory is shared: the
    invoking namespace a key names after ``#`` (another tenant calling a published action; see
    ``ResolvedAction.container_key``), else the action's own namespace."""
    _, mark, caller = key.rpartition("#")
    return caller if mark else key.split("/", 1)[0]


@dataclass(frozen=True, slots=True)
class UnreadAnswer:
    """A ``/run`` answer longer than the action's result limit, left unparsed (parsing what a runtime
    sends costs the gateway many times its size): its length and its first ``result_bytes``, from
    which the record is OpenWhisk's truncated response."""

    size: int
    head: bytes


@dataclass(frozen=True, slots=True)
class ActionSpec:
    """Everything a platform needs to find or make a container for an action.

    ``key`` identifies code + kind + memory (``namespace/[pkg/]name@revision``): two
    specs with the same key may share warm containers.
    """

    key: str
    kind: str  # "python:3", "python:3.11", "python:default", "python:tensorflow", "blackbox"
    code: str | None = None  # source, or base64 zip when binary
    binary: bool = False
    main: str = "main"
    image: str | None = None  # blackbox image (docker backend)
    env: dict[str, str] = field(default_factory=dict)
    memory_mb: int = 256
    timeout_ms: int = 60_000
    logs_bytes: int = 10 * 1024 * 1024
    result_bytes: int = RESULT_BYTES  # the longest result recorded whole; a longer answer is an `UnreadAnswer`
    concurrency: int = 1

    @property
    def namespace(self) -> str:
        """The namespace the action belongs to (the first part of its key)."""
        return self.key.split("/", 1)[0]

    @property
    def tenant(self) -> str:
        """Whom its containers run for (:func:`tenant_of`): the node's memory and the loop's reading of
        their output are shared by tenant."""
        return tenant_of(self.key)


@dataclass(frozen=True, slots=True)
class RunRequest:
    """One activation as the runtime's ``POST /run`` receives it."""

    value: dict[str, Any] | list[Any]  # an array: a sequence's previous result
    namespace: str
    action_name: str
    activation_id: str
    transaction_id: str
    api_key: str | None = None
    api_host: str | None = None  # where the action reaches the gateway (owx's SDK, Canary's client)
    extra_env: dict[str, str] = field(default_factory=dict)  # e.g. canary function id, store location
    reservation: str | None = None  # a ledger holder whose memory this activation's new container may take
    action_version: str | None = None  # the action's version (``__OW_ACTION_VERSION``)

    def payload(self, deadline_ms: int) -> dict[str, Any]:
        """The body of ``/run`` (and the ``__OW_*`` environment of ``/init``); ``deadline_ms``: when the
        action's time runs out, in epoch milliseconds, counted from when it is sent (OpenWhisk's)."""
        body: dict[str, Any] = {
            "value": self.value,
            "namespace": self.namespace,
            "action_name": self.action_name,
            "activation_id": self.activation_id,
            "transaction_id": self.transaction_id,
            "deadline": str(deadline_ms),
        }
        if self.api_key:
            body["api_key"] = self.api_key
        if self.api_host:
            body["api_host"] = self.api_host
        if self.action_version:
            body["action_version"] = self.action_version
        body.update(self.extra_env)
        return body


@dataclass(slots=True)
class RunOutcome:
    """What happened to one activation inside the platform."""

    status: Status
    result: dict[str, Any] | list[Any]
    logs: list[str]
    start_ms: int
    end_ms: int
    init_ms: int | None = None  # set on cold starts: the container's /init
    container_id: str = ""
    node: str = ""
    memory_peak_bytes: int | None = None
    failure: Literal["timeout", "oom", "exited", "init", None] = None
    annotations: list[dict[str, Any]] = field(default_factory=list)  # extra record annotations (e.g. Canary's)
    checked: bool = False  # ``result`` is known to be storable JSON (parsed strictly): no need to walk it
    logs_checked: bool = False  # ``logs`` are the platform's collector's: text within the log limit, counted

    @property
    def duration_ms(self) -> int:
        return self.end_ms - self.start_ms


# Why a container stopped without being asked to (what death listeners receive).
DeathReason = Literal["exited", "oom", "timeout", "node-lost"]

# Where a container stands in its pool.
ContainerState = Literal["starting", "stem", "warm", "replica", "claimed"]


@dataclass(frozen=True, slots=True)
class ContainerDeath:
    """A container died: crashed, OOM-killed, killed for a timeout, or its node was lost."""

    container_id: str
    node: str
    reason: DeathReason
    action_key: str | None  # None for a stem cell that was never initialised
    detected_at: float  # time.time() when the platform noticed
    exit_code: int | None = None


@dataclass(frozen=True, slots=True)
class ContainerInfo:
    """One container of a platform, as the extensions see it."""

    id: str
    node: str
    backend: str
    state: ContainerState
    action_key: str | None
    memory_bytes: int  # current limit (what the pool accounts)
    cgroup: str  # path relative to each cgroup hierarchy root
    pid: int | None
    in_flight: int


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """One node (an invoker's worth of containers) of a platform."""

    name: str
    alive: bool
    budget_bytes: int  # memory its containers may hold together (OpenWhisk's userMemory)
    cgroup_parent: str | None  # where its containers' cgroups live on this machine; None: not on this machine
    backend: str
    queued: int = 0  # activations waiting for memory on the node (for a container to start)


@dataclass(frozen=True, slots=True)
class ContainerUsage:
    """What a running container uses now, from its cgroup."""

    memory_bytes: int
    memory_limit_bytes: int
    memory_peak_bytes: int
    cpu_usage_ns: int
    cpu_quota_us: int  # -1: unlimited


@dataclass(frozen=True, slots=True)
class PlatformLimits:
    """The largest action a platform can run, and how much runs at once."""

    max_action_memory_bytes: int  # the largest node budget: a bigger action never starts
    total_memory_bytes: int  # every live node's budget together
    nodes: int
