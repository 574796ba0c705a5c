"""Fixtures of the embedded-platform tests: real cgroups (root), real runtime processes, real dockerd."""

from __future__ import annotations

import os
from typing import Any, Callable

import pytest

from owx.config import Settings
from owx.gateway.platform import Platform
from owx.gateway.platform.settings import PlatformSettings

CGROUP_ROOT = "owx-test-platform"


@pytest.fixture(scope="session", autouse=True)
def _needs_root() -> None:
    if os.geteuid() != 0:
        pytest.fail("the platform tests create cgroups and drop privileges: run them as root")


@pytest.fixture
def make_platform() -> Callable[..., Platform]:
    """``make_platform(**fields)``: a Platform under the test cgroup root; closed after the test.

    Fields of ``Settings`` and ``PlatformSettings`` may be mixed; stem cells default to 0.
    """
    made: list[Platform] = []

    def make(**fields: Any) -> Platform:
        platform_fields = {k: fields.pop(k) for k in list(fields) if k in PlatformSettings.model_fields}
        fields.setdefault("stem_cells", 0)
        settings = Settings(cgroup_root=CGROUP_ROOT, **fields)
        platform = Platform(settings, PlatformSettings(**platform_fields))
        made.append(platform)
        return platform

    yield make
    for platform in made:
        platform.close()
