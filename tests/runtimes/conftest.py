"""Fixtures: real runtime processes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .processes import RuntimeProcess


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[RuntimeProcess]:
    proc = RuntimeProcess(tmp_path)
    yield proc
    proc.stop()
