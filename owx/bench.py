"""``owx bench NAME``: run ``tests/bench/bench_NAME.py`` of this checkout.

Benchmarks compare against a baseline measured in the same run and print ratios;
each script parses its own options (pass them after the name).
"""

from __future__ import annotations

import argparse
import runpy
import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parents[1] / "tests" / "bench"


def available() -> list[str]:
    return sorted(p.stem.removeprefix("bench_") for p in BENCH_DIR.glob("bench_*.py"))


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("bench", help="run a benchmark from tests/bench")
    parser.add_argument("name", help="one of: " + ", ".join(available()))
    parser.add_argument("args", nargs=argparse.REMAINDER, help="options for the benchmark")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    script = BENCH_DIR / f"bench_{args.name}.py"
    if not script.exists():
        print(f"owx bench: no benchmark {args.name!r}; available: {', '.join(available())}", file=sys.stderr)
        return 2
    sys.argv = [str(script), *args.args]
    sys.path.insert(0, str(BENCH_DIR))
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0
