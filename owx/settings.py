"""owx's settings: one tree, built once at start and passed down.

Every field is also an environment variable: ``OWX_`` and the path with ``__`` between
the parts, e.g. ``OWX_GATEWAY__PORT=3234``, ``OWX_LIMITS__MEMORY_MB__MAX=4096``,
``OWX_PLATFORM__NODES=2``, ``OWX_UPSTREAM__URL=https://whisk.example``, ``OWX_CANARY__STORE_URL=redis://…``.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from owx.canary.settings import CanarySettings
from owx.disdel.settings import DisdelSettings
from owx.escra_agent.settings import EscraSettings
from owx.gateway.settings import ActionLimits, Bound, GatewaySettings
from owx.platform.settings import PlatformSettings, UpstreamSettings

__all__ = ["Bound", "Settings"]


class Settings(BaseSettings):
    """The whole configuration of one owx instance."""

    # errors name the field and what is wrong, never its value: some values are keys
    model_config = SettingsConfigDict(env_prefix="OWX_", env_nested_delimiter="__", extra="ignore",
                                      hide_input_in_errors=True)

    data_dir: Path = Field(Path.home() / ".owx", description="stores, keys and the instance's files")
    extensions: list[str] | None = Field(
        None, description="extensions to load by name (canary, escra, disdel); unset: every installed one")
    gateway: GatewaySettings = GatewaySettings()
    limits: ActionLimits = ActionLimits()
    platform: PlatformSettings = PlatformSettings()
    upstream: UpstreamSettings = UpstreamSettings()
    canary: CanarySettings = CanarySettings()
    escra: EscraSettings = EscraSettings()
    disdel: DisdelSettings = DisdelSettings()

    @model_validator(mode="after")
    def _upstream_named(self) -> "Settings":
        if self.platform.kind == "openwhisk" and not (self.upstream.url and self.upstream.auth):
            raise ValueError("platform openwhisk needs upstream.url and upstream.auth (--upstream URL --upstream-auth UUID:KEY)")
        return self

    @property
    def entity_db(self) -> Path:
        return self.data_dir / "owx.db"
