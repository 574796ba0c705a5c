"""Which FRR daemons of a namespace are running, as the node daemon's health reports them."""

from __future__ import annotations

import subprocess

from owx.thorn.frr import FrrInstance
from tests.fixtures.zombies import kill_unreaped


def test_a_killed_daemon_not_yet_reaped_is_not_running(tmp_path):
    """A daemon killed stays a zombie until init reaps it, seconds later here: it is dead from the kill on."""
    frr = FrrInstance(None, tmp_path)
    daemon = subprocess.Popen(["sleep", "600"])
    (tmp_path / "zebra.pid").write_text(str(daemon.pid))
    try:
        assert frr.pid("zebra") == daemon.pid and "zebra" not in frr.dead_daemons()
        kill_unreaped(daemon)
        assert frr.pid("zebra") is None and "zebra" in frr.dead_daemons()
    finally:
        daemon.kill()
        daemon.wait()
