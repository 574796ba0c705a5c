"""Helpers shared by the Escra tests (a unique module name: every test folder has a conftest)."""

from __future__ import annotations

import time


def wait_for(predicate, timeout: float = 5.0, interval: float = 0.05):
    """Poll ``predicate`` until it returns something truthy; fail with its last value."""
    deadline = time.monotonic() + timeout
    value = predicate()
    while not value and time.monotonic() < deadline:
        time.sleep(interval)
        value = predicate()
    assert value, f"condition not met within {timeout}s"
    return value
