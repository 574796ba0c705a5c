"""Settings from OWX_* variables: partial overrides of nested bounds, clear errors for bad ones."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

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


def test_a_bad_setting_is_a_clear_error_that_never_prints_a_key(tmp_path):
    secret = "s3cr3t-upstream-key-without-its-uuid"
    env = {**os.environ, "HOME": str(tmp_path), "OWX_UPSTREAM__ACCOUNTS": json.dumps({"alice": secret})}
    refused = subprocess.run([sys.executable, "-m", "owx.cli", "up", "--upstream", "http://127.0.0.1:9",
                              "--upstream-auth", f"{uuid.uuid4()}:another-secret-key", "--data-dir",
                              str(tmp_path / "data")], env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2, refused.stderr
    assert "upstream.accounts" in refused.stderr and "uuid:key" in refused.stderr
    assert secret not in refused.stderr and "another-secret-key" not in refused.stderr
    assert "Traceback" not in refused.stderr
