"""Namespace directories as volumes of their own (real loop mounts): a stopped instance leaves none
mounted, those a killed predecessor left included."""

from __future__ import annotations

import os

from owx.platform.embedded.identities import Identities
from owx.platform.settings import SandboxSettings


def test_an_instance_that_stops_detaches_the_volumes_a_killed_one_left(tmp_path) -> None:
    sandbox = SandboxSettings(namespace_dir_mb=32)
    killed = Identities(tmp_path, sandbox)
    directory = killed.directory("alice", create=True)  # mounted; then the instance is killed: no close
    assert directory is not None and os.path.ismount(directory)
    try:
        after = Identities(tmp_path, sandbox)  # the next start, which never runs alice's actions
        after.close()
        assert not os.path.ismount(directory)
    finally:
        if os.path.ismount(directory):
            killed.close()
