"""Canary's settings: where checkpoints go, how long replicas linger, how failures are read."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field


class CanarySettings(BaseModel):
    """Canary's settings (``OWX_CANARY__<FIELD>``)."""

    store_url: str | None = Field(
        None, description="checkpoint store URL; default: SQLite + blob directory under the data dir. A Redis URL "
        "with a password gives each namespace a Redis user that reaches its own checkpoints only"
    )
    store_dir: Path | None = Field(
        None, description="one directory for every namespace's default store (shared; containers must be able to "
        "reach it). Unset: one store per namespace, in the directory the platform mounts into its containers only"
    )
    store_quota_mb: int = Field(
        1024, ge=0, description="bytes (MiB) each namespace's checkpoints may hold in a Redis store_url with a password "
        "(a user per namespace); past it its actions' writes are refused until they delete. 0: no budget"
    )
    store_client_memory_mb: int = Field(
        1024, gt=0, description="bytes (MiB) all clients of that Redis may hold unwritten together (values being "
        "sent, commands a MULTI queued; Redis' maxmemory-clients, which owx sets unless it is tighter): past it "
        "Redis closes the clients holding the most"
    )
    table_rows: int = Field(
        10_000, ge=1, description="rows each Canary table (jobs, functions, checkpoints, replicas, commits) keeps per "
        "namespace, its newest by update; older ones go once they are table_min_age_s old (the rows count against "
        "the namespace's entity bound)")
    table_min_age_s: float = Field(
        3600.0, ge=0, description="no Canary row younger is deleted, however many there are: a function's commit "
        "must outlive every attempt of it, so at least the longest a stateful function runs, its retries included")
    failure_window: int = Field(50, ge=5, description="recent function outcomes the dynamic strategy looks at")
    replica_linger_s: float = Field(
        10.0, ge=0, description="how long replicas of a runtime outlive its last active function"
    )
    death_wait_s: float = Field(0.5, gt=0, description="how long recovery waits for the death notice of a container")
    replica_wait_s: float = Field(
        60.0, ge=0, description="how long a failed function waits for a replica that is still starting when none "
        "is warm, before it takes a new container (0: never waits)"
    )
