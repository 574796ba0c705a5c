"""Fixtures of the isolation tests: one real ``owx up`` with two tenants per module (root only)."""

from __future__ import annotations

import os

import pytest
from isolation_support import Instance, start_instance


@pytest.fixture(scope="session", autouse=True)
def _needs_root() -> None:
    if os.geteuid() != 0:
        pytest.fail("the isolation tests build sandboxes and cgroups: run them as root")


@pytest.fixture(scope="module")
def instance(tmp_path_factory) -> Instance:
    running = start_instance(tmp_path_factory.mktemp("iso"))
    yield running
    running.gateway.stop()
