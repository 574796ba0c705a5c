"""Fixtures of the embedded-platform tests: real cgroups (root), real runtime processes, real dockerd."""

from __future__ import annotations

import os
from typing import Any, Callable

import pytest

from owx.platform.embedded.platform import EmbeddedPlatform
from owx.platform.settings import PlatformSettings

CGROUP_ROOT = "owx-test-platform"


@pytest.fixture(scope="session", autouse=True)
def _needs_root() -> None:
    if os.geteuid() != 0:
        pytest.fail("the platform tests create cgroups and drop privileges: run them as root")


@pytest.fixture
def make_platform() -> Callable[..., EmbeddedPlatform]:
    """``make_platform(**fields)``: an embedded platform (fields of ``PlatformSettings``) under the test
    cgroup root, stem cells 0 unless given; closed after the test."""
    made: list[EmbeddedPlatform] = []

    def make(**fields: Any) -> EmbeddedPlatform:
        fields.setdefault("stem_cells", 0)
        platform = EmbeddedPlatform(PlatformSettings(cgroup_root=CGROUP_ROOT, **fields))
        made.append(platform)
        return platform

    yield make
    for platform in made:
        platform.close()
