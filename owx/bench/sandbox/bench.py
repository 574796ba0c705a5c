"""``owx bench sandbox``: the cold start of a sandboxed local container, with and without the zygote.

A cold start is ``Platform.run`` of a fresh action on a fresh container: cgroup, the container's
pid 1 forked (by the zygote) into new pid, mount, ipc, uts and cgroup namespaces, its read-only
view built, the runtime started as the tenant's uid, ``/init`` and a trivial ``/run`` answered
over the runtime's Unix socket. The first start (the zygote's own start-up) is not counted.
Goal: p50 <= 50 ms. ``--control zygote`` starts every container from a fresh interpreter (the
exec path, the same sandbox code run by ``python -m owx.runtimes.zygote --once``) and must fail it.
The machine's load average is reported with the figures: on a shared 2-core machine the
figures move with it.
"""

from __future__ import annotations

import argparse
import os
import statistics

from owx.bench.invoke.coldstart import measure_cold_start
from owx.bench.results import Report

GOAL_MS = 50.0
CONTROLS = ("zygote",)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="owx bench sandbox", description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=40, help="cold starts measured (after one not counted)")
    parser.add_argument("--memory-mb", type=int, default=256)
    parser.add_argument("--control", choices=CONTROLS, help="switch the zygote off (the goal must fail)")
    args = parser.parse_args(argv)
    zygote = args.control != "zygote"
    load_before = os.getloadavg()[0]
    samples = sorted(s * 1000 for s in measure_cold_start("local", args.n + 1, args.memory_mb, zygote=zygote)[1:])
    load_after = os.getloadavg()[0]
    report = Report("sandbox", parameters={"cold_starts": args.n, "memory_mb": args.memory_mb, "zygote": zygote,
                                           "load_1min_before": round(load_before, 2),
                                           "load_1min_after": round(load_after, 2), "cpus": os.cpu_count()},
                    control=args.control)
    p50 = statistics.median(samples)
    p90 = samples[min(len(samples) - 1, int(0.9 * len(samples)))]
    report.figure("sandboxed cold start, p50", round(p50, 1), "ms")
    report.figure("sandboxed cold start, p90", round(p90, 1), "ms")
    report.figure("sandboxed cold start, min", round(samples[0], 1), "ms")
    print(f"sandboxed cold start ({'zygote' if zygote else 'exec path'}): p50 {p50:.1f} ms, p90 {p90:.1f} ms, "
          f"min {samples[0]:.1f} ms (n={len(samples)}, load {load_before:.1f} -> {load_after:.1f})")
    report.goal(f"sandboxed cold start p50 <= {GOAL_MS:.0f} ms", round(p50, 1), GOAL_MS, "ms")
    return report.finish()


if __name__ == "__main__":
    raise SystemExit(main())
