"""Shared by the canary tests.

The checkpoint-store contract suite also runs against Apache Ignite, but only when an
Ignite node is given as ``OWX_TEST_IGNITE=host:port``; CI has none, so those tests are
deselected (the header of the test run says so).
"""

from __future__ import annotations

import os

import pytest
from ckpt_support import backend, open_store, password_redis, redis_server, store_url  # noqa: F401 (fixtures of the checkpoint tests)

IGNITE_ENV = "OWX_TEST_IGNITE"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"ignite: needs an Apache Ignite node given as {IGNITE_ENV}=host:port")


def pytest_report_header(config: pytest.Config) -> str:
    if os.environ.get(IGNITE_ENV):
        return f"canary: Ignite contract tests run against {os.environ[IGNITE_ENV]}"
    return f"canary: Ignite contract tests deselected (no Ignite server; set {IGNITE_ENV}=host:port to run them)"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get(IGNITE_ENV):
        return
    deselected = [item for item in items if item.get_closest_marker("ignite")]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if not item.get_closest_marker("ignite")]
