"""Settings of the embedded platform that ``owx.config.Settings`` does not carry."""

from __future__ import annotations

import sys

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class PlatformSettings(BaseSettings):
    """Container limits and runtime launch options (env ``OWX_PLATFORM_<FIELD>``)."""

    model_config = SettingsConfigDict(env_prefix="OWX_PLATFORM_", extra="ignore")

    user_cpus: float | None = Field(
        None,
        gt=0,
        description="CPUs shared by a node's containers; when set, each container gets a CFS quota of "
        "user_cpus * memory / user_memory (OpenWhisk's userCpus). Unset: shares only, as OpenWhisk's default.",
    )
    pids_max: int = Field(1024, ge=16, description="pids limit of each container")
    runtime_python: str = Field(sys.executable, description="interpreter of the local backend's runtime")
    zygote: bool = Field(True, description="start local runtimes by forking a preloaded runtime process "
                         "(owx.runtimes.zygote) instead of starting an interpreter each time")
    zygote_preload: list[str] = Field(
        ["numpy", "redis", "owx.canary.checkpoint"],
        description="modules the zygote imports once for every runtime it forks (missing ones are skipped)",
    )
    stem_memory_mb: int = Field(256, ge=128, description="memory of a prewarmed stem cell (OpenWhisk's prewarm)")
    sentinel_wait_s: float = Field(2.0, gt=0, description="how long to wait for log sentinels after a run")
