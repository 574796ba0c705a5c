"""owx settings: one object, every field also an ``OWX_<FIELD>`` environment variable."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


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


class Settings(BaseSettings):
    """Configuration of the gateway and the embedded platform.

    Nested fields take JSON or ``__``-separated variables, e.g.
    ``OWX_MEMORY_MB__MAX=16384`` raises the action memory ceiling for DL work.
    """

    model_config = SettingsConfigDict(env_prefix="OWX_", env_nested_delimiter="__", extra="ignore")

    host: str = "127.0.0.1"
    port: int = 3233
    data_dir: Path = Path.home() / ".owx"
    backend: Literal["local", "docker"] = "local"
    store: Literal["sqlite", "couchdb"] = "sqlite"
    couchdb_url: str = "http://127.0.0.1:5984"
    couchdb_prefix: str = "owx_"
    default_namespace: str = "guest"

    # action limits (OpenWhisk's defaults; raise max for deep-learning actions)
    timeout_ms: Bound = Bound(min=100, max=300_000, default=60_000)
    memory_mb: Bound = Bound(min=128, max=512, default=256)
    logs_mb: Bound = Bound(min=0, max=10, default=10)
    concurrency: Bound = Bound(min=1, max=500, default=1)

    # invocation
    blocking_wait_s: float = 60.0
    max_payload_bytes: int = 1024 * 1024
    invocations_per_minute: int = 6000
    concurrent_invocations: int = 500

    # embedded platform
    nodes: int = Field(1, ge=1, description="invoker pools on this machine, each with its own cgroup parent")
    user_memory_mb: int = Field(2048, ge=128, description="memory budget of each node's container pool")
    stem_cells: int = Field(2, ge=0, description="prewarmed python containers per node")
    idle_evict_s: float = Field(600.0, gt=0)
    cgroup_root: str = "owx"
    action_user: str = "nobody"
    runtime_image: str = "owx/python-runtime:latest"
    escra: bool = Field(False, description="run Escra's allocator and one agent per node inside the gateway")

    @field_validator("timeout_ms", "memory_mb", "logs_mb", "concurrency", mode="before")
    @classmethod
    def _partial_bound(cls, value: object, info: ValidationInfo) -> object:
        """``OWX_MEMORY_MB__MAX=4096`` alone: fields not given keep their defaults."""
        if isinstance(value, dict):
            default: Bound = cls.model_fields[info.field_name].default  # type: ignore[index]
            return {**default.model_dump(), **value}
        return value

    @property
    def entity_db(self) -> Path:
        return self.data_dir / "owx.db"
