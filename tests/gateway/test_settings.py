"""Settings from OWX_* variables: partial overrides of nested bounds, clear errors for bad ones."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from owx.settings import Settings


def test_raising_one_bound_keeps_the_others(monkeypatch):
    monkeypatch.setenv("OWX_LIMITS__MEMORY_MB__MAX", "16384")
    monkeypatch.setenv("OWX_LIMITS__TIMEOUT_MS__MAX", "3600000")
    limits = Settings().limits
    assert (limits.memory_mb.min, limits.memory_mb.default, limits.memory_mb.max) == (128, 256, 16384)
    assert limits.timeout_ms.max == 3_600_000 and limits.timeout_ms.default == 60_000


def test_inconsistent_bound_is_refused(monkeypatch):
    monkeypatch.setenv("OWX_LIMITS__MEMORY_MB__MAX", "100")
    with pytest.raises(ValidationError, match="min <= default <= max"):
        Settings()
