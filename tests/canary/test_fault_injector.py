"""The benches' fault injector: a real process in a real cgroup, killed at its moment,
found through the announcement file a sandboxed action would write."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from owx.bench.canary.containers import ContainerFiles
from owx.bench.canary.faults import FaultInjector, Target
from owx.bench.escra.procs import IDLE, python, spawn_in
from owx.common.cgroups import Cgroup


class CountedFiles(ContainerFiles):
    """The announcement files, counting how often the injector looks."""

    looks = 0

    def announced(self, activation_id: str) -> float | None:
        self.looks += 1
        return super().announced(activation_id)


def test_the_injector_kills_at_the_moment_without_busy_polling(tmp_path: Path) -> None:
    root = f"owx-test-faults-{uuid.uuid4().hex[:6]}"
    group = Cgroup(f"{root}/node0/c1").create()
    proc = spawn_in(group, python(IDLE))
    files = CountedFiles(tmp_path, root)
    target, spared = Target("aid-1", 0.5, 2.0), Target("aid-2", 0.5, 2.0)  # killed 1 s after announcing
    try:
        injector = FaultInjector(files, [target, spared]).start()
        time.sleep(0.3)
        (tmp_path / "aid-1").write_text("c1")
        announced = (tmp_path / "aid-1").stat().st_mtime
        assert proc.wait(timeout=5) == -9
        injector.stop()
    finally:
        proc.kill()
        group.destroy()
        Cgroup(f"{root}/node0").destroy()
        Cgroup(root).destroy()
    assert target.started_at == announced
    assert 0.0 <= target.killed_at - (announced + 1.0) < 0.5  # at its moment, not before (a loaded machine wakes late)
    assert spared.killed_at is None  # never announced: never killed
    # two targets looked up every 100 ms for about 1.3 s, not every few milliseconds
    assert files.looks < 60
