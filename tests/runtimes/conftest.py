"""Fixtures: real runtime processes."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from .processes import RuntimeProcess


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[RuntimeProcess]:
    proc = RuntimeProcess(tmp_path)
    yield proc
    proc.stop()
