"""Tunables of the Escra allocator and node agent (env ``OWX_ESCRA_*``)."""

from __future__ import annotations

from pydantic import BaseModel, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

MIB = 1024 * 1024
CFS_PERIOD_US = 100_000
TOKEN_ENV = "OWX_ESCRA_TOKEN"  # the allocator's and its agents' shared secret (owx.common.bearer)


class AllocatorParams(BaseModel):
    """Knobs of the resource allocator (the paper's symbols in brackets).

    Units: CPU quotas are microseconds of runtime per 100 ms CFS period
    (100_000 µs = one core); memory is bytes.
    """

    upsilon: float = Field(20.0, ge=0, le=100, description="[Υ] % of the unallocated runtime a container throttled in every window period claims per period (0: quotas never grow)")
    gamma: float = Field(0.2, ge=0, lt=1, description="[γ] share of its quota a container must leave unused in a period before the quota shrinks")
    kappa: float = Field(0.8, ge=0, le=1, description="[κ] share of the windowed unused runtime taken back per period (0: quotas never shrink)")
    window: int = Field(10, ge=1, description="[n] periods in the sliding throttle/unused windows")
    sigma: float = Field(0.2, ge=0, lt=1, description="[σ] fraction of the global memory withheld for OOM events")
    delta_bytes: int = Field(50 * MIB, ge=0, description="[δ] reclaim safe margin above usage")
    reclaim_interval_s: float = Field(5.0, gt=0, description="period of proactive memory reclamation")
    oom_slice_bytes: int = Field(64 * MIB, gt=0, description="memory given to a container per OOM event")
    node_reserve_bytes: int = Field(128 * MIB, ge=0, description="pre-granted rescue memory each agent holds")
    fair_share: bool = Field(True, description="a throttled container below its equal split gets what it asked for, up to the split, at once (owx's)")
    min_quota_us: int = Field(1_000, ge=1_000, description="a quota never shrinks below this (the kernel's minimum CFS quota, 0.01 core)")
    min_memory_bytes: int = Field(16 * MIB, gt=0, description="a memory limit never shrinks below this")
    quota_step_us: int = Field(1_000, ge=0, description="quota changes smaller than this are not sent")
    oom_wait_s: float = Field(2.0, gt=0, description="how long an OOM may wait for reclaimed memory before it proceeds")
    node_timeout_s: float = Field(30.0, gt=0, description="silence after which a node's allocations return to the pool")


def _owx_up_cgroup_root() -> str:
    """The cgroup root of ``owx up``'s containers on this machine (``OWX_DATA_DIR``, ``OWX_PLATFORM__CGROUP_ROOT``)."""
    from owx.platform.settings import for_instance
    from owx.settings import Settings

    settings = Settings()
    return for_instance(settings.platform, settings.data_dir).cgroup_root or ""


class AgentSettings(BaseSettings):
    """Configuration of one node agent."""

    model_config = SettingsConfigDict(env_prefix="OWX_ESCRA_", extra="ignore")

    node: str = "node0"
    cgroup_root: str = Field(default_factory=_owx_up_cgroup_root,
                             description="unset: the one `owx up` uses with the same data dir and settings")
    allocator_url: str = "http://127.0.0.1:3240"
    app: str = Field("openwhisk", description="application of containers that carry no owx.app label")
    period_s: float = Field(0.1, gt=0, description="telemetry period")
    docker: bool = Field(False, description="also manage Docker containers (owx.node/owx.action labels, wsk* names)")
    docker_sync_s: float = Field(1.0, gt=0, description="Docker's recorded limits follow direct writes after this quiet time")
    rediscover_s: float = Field(1.0, gt=0, description="how often Docker is asked for containers")
    request_timeout_s: float = Field(0.5, gt=0)
    oom_slice_bytes: int = Field(64 * MIB, gt=0, description="memory a local OOM rescue adds to the limit")
    event_log: str | None = Field(None, description="JSON-lines file receiving one record per OOM rescue")
    token: SecretStr | None = Field(None, description="the allocator's token (OWX_ESCRA_TOKEN)")


class EscraSettings(BaseModel):
    """Escra inside ``owx up``: one allocator and one agent per embedded node (``OWX_ESCRA__*``)."""

    enabled: bool = Field(False, description="run Escra's allocator and node agents inside the gateway")
    allocator: AllocatorParams = AllocatorParams()
