"""Fixtures of DiSDeL's tests: a shared dir, the runtime's measured calibration, a private gateway."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pytest

from owx.common import cgroups
from owx.disdel.calibration import load_or_measure, local_probe, local_runtime_key
from owx.disdel.estimator import RuntimeCalibration
from owx.disdel.settings import DisdelSettings
from owx.bench.disdel.gateway import start_gateway
from owx.bench.gateway_process import GatewayProcess

CGROUP_PREFIX = "owx-disdel-test"


@pytest.fixture(scope="session")
def disdel_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("disdel")
    os.chmod(root, 0o755)
    return root


@pytest.fixture(scope="session")
def settings(disdel_root: Path) -> DisdelSettings:
    return DisdelSettings(shared_dir=disdel_root, cgroup_prefix=CGROUP_PREFIX, pool_memory_mb=8192, poll_s=0.2)


@pytest.fixture(scope="session")
def calibration(disdel_root: Path) -> RuntimeCalibration:
    """Measured once for the session (two TensorFlow probes in real cgroups, ~20-40 s)."""
    if not cgroups.available():
        pytest.fail("DiSDeL's tests need root and a writable cgroup hierarchy")
    return load_or_measure(disdel_root, local_runtime_key(), local_probe(CGROUP_PREFIX))


@pytest.fixture(scope="session")
def gateway(tmp_path_factory: pytest.TempPathFactory, disdel_root: Path) -> Iterator[GatewayProcess]:
    """``owx up`` in its own process with the README's limits: actions up to 4096 MB and one hour, in a
    node whose container pool has owx's default 2048 MB."""
    running = start_gateway(tmp_path_factory.mktemp("disdel-gw"), disdel_root, memory_max_mb=4096, timeout_max_ms=3_600_000,
                            pool_mb=2048)
    yield running
    running.stop()


SMALL_JOB = {
    "name": "t",
    "model": "small_cnn",
    "dataset": {"kind": "synthetic", "samples": 1300, "shape": [16, 16, 3], "classes": 4, "noise": 2.0, "seed": 3},
    "batch_size": 32,
    "epochs": 2,
    "eval_samples": 100,
}
