"""A private owx gateway (``owx up`` in its own process) for DiSDeL's tests and benchmark, with the
action limits deep-learning training needs."""

from __future__ import annotations

import json
from pathlib import Path

from owx.bench.gateway_process import GatewayProcess, start_gateway_process


def start_gateway(data_dir: Path, shared_dir: Path, *, memory_max_mb: int = 4096, timeout_max_ms: int = 900_000,
                  pool_mb: int = 8192, extra_env: dict[str, str] | None = None) -> GatewayProcess:
    """Start ``owx up`` with raised limits (no stem cells), its containers seeing DiSDeL's ``shared_dir``
    (jobs' shards, weights and progress), and wait until it answers."""
    return start_gateway_process(data_dir, env={
        "OWX_PLATFORM__SANDBOX__SHARED": json.dumps([str(shared_dir)]),
        "OWX_LIMITS__MEMORY_MB__MAX": str(memory_max_mb),
        "OWX_LIMITS__TIMEOUT_MS__MAX": str(timeout_max_ms),
        "OWX_PLATFORM__USER_MEMORY_MB": str(pool_mb),
        "OWX_PLATFORM__STEM_CELLS": "0",
        **(extra_env or {}),
    })
