"""Cold-start measurement of the embedded platform's backends (imported by ``owx bench invoke``).

A cold start is a new container plus ``/init`` answered.  Each sample times
``Platform.run`` of a fresh action (container, ``/init`` and a trivial ``/run``, about
1 ms warm), so it slightly over-states the cold start; the container is then removed
so the next sample starts from the same state (no stem cells, no eviction).
"""

from __future__ import annotations

import secrets
import time

from owx.platform.embedded.platform import EmbeddedPlatform
from owx.platform.settings import PlatformSettings
from owx.platform.types import SUCCESS, ActionSpec, RunRequest

CODE = "def main(args):\n    return {'ok': True}\n"


def measure_cold_start(backend_name: str, n: int, memory_mb: int = 256, zygote: bool = True) -> list[float]:
    """Seconds from asking for a cold container to its ``/init`` (and a trivial run) answered, ``n`` times
    (``zygote=False``: local containers start a fresh interpreter each, the exec path)."""
    settings = PlatformSettings(kind="docker" if backend_name == "docker" else "embedded", stem_cells=0, nodes=1,
                                cgroup_root=f"owx-bench-coldstart-{secrets.token_hex(3)}", zygote=zygote)
    platform = EmbeddedPlatform(settings)
    samples: list[float] = []
    try:
        for index in range(n):
            key = f"bench/cold{index}@{secrets.token_hex(4)}"
            spec = ActionSpec(key=key, kind="python:3", code=CODE, memory_mb=memory_mb)
            request = RunRequest({}, "bench", "cold", secrets.token_hex(16), secrets.token_hex(16))
            started = time.perf_counter()
            outcome = platform.run(spec, request)
            elapsed = time.perf_counter() - started
            if outcome.status != SUCCESS or outcome.init_ms is None:
                raise RuntimeError(f"cold start {index} on {backend_name} failed: {outcome.result}")
            samples.append(elapsed)
            platform.remove(outcome.container_id)
    finally:
        platform.close()
    return samples


if __name__ == "__main__":
    import statistics
    import sys

    for backend in sys.argv[1:] or ["local"]:
        times = sorted(measure_cold_start(backend, 20))
        print(f"{backend}: p50 {statistics.median(times) * 1000:.1f} ms, p99 {times[-1] * 1000:.1f} ms")
