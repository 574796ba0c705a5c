"""DiSDeL's own settings (``OWX_DISDEL__<FIELD>``); platform limits come from the gateway."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field


class DisdelSettings(BaseModel):
    """Where jobs live and the constants of the estimator, planner and timeout manager."""

    shared_dir: Path | None = Field(
        None, description="job files (shards, weights, progress, state) every action can reach; "
        "default <OWX_DATA_DIR>/disdel")
    namespace: str = Field("_", description="namespace the actions are created in")
    train_kind: str = "python:tensorflow"
    cgroup_prefix: str = Field("owx-disdel", description="cgroups of measurement runs outside the gateway")
    unit_price_gb_s: float = Field(0.0000166667, gt=0, description="μ: price of one GB-second of action time")
    invocation_memory_margin: float = Field(1.25, ge=1.0, description="an estimated action's memory = margin x "
                                            "the largest peak its activations of that input size measured")
    invocation_min_timeout_ms: int = Field(1000, ge=100, description="the least timeout an estimated action gets")
    history_margin: float = Field(1.5, ge=1.0, description="timeout = margin x the time history predicts")
    min_timeout_ms: int = Field(30_000, ge=100)
    oom_growth: float = Field(1.5, gt=1.0, description="memory factor after an out-of-memory failure")
    timeout_growth: float = Field(2.0, gt=1.0, description="timeout factor after an out-of-time failure")
    max_attempts: int = Field(4, ge=1, description="attempts per action before the job fails")
    cluster_size: int = Field(4, ge=2, description="training actions per level-1 aggregator (at most)")
    sync_every: int = Field(1, ge=0, description="epochs between model averages; 0 = once at the end (the paper)")
    pool_memory_mb: int | None = Field(None, ge=128, description="container pool memory; default "
                                       "OWX_PLATFORM__USER_MEMORY_MB x OWX_PLATFORM__NODES, as the gateway runs with")
    measure_step: bool = Field(True, description="train the job's model one epoch on two parts of its data, each in "
                               "a fresh container, before planning, and estimate from those peaks (else from the "
                               "model's profile only)")
    prime: bool = Field(True, description="load the runtime in a container of its own before a job's actions, so "
                        "that on a fresh machine TensorFlow's page cache is not charged to a training action (only "
                        "without measure_step, whose containers have loaded it just before)")
    poll_s: float = Field(0.5, gt=0)

    def root(self) -> Path:
        from owx.settings import Settings

        return self.shared_dir or Settings().data_dir / "disdel"

    def pool_memory(self) -> int:
        if self.pool_memory_mb is not None:
            return self.pool_memory_mb
        from owx.settings import Settings

        platform = Settings().platform
        return platform.user_memory_mb * platform.nodes
