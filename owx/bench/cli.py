"""``owx bench NAME [options]``: run one of owx's benchmarks (``owx bench NAME --help`` for its options)."""

from __future__ import annotations

import argparse
import importlib

from owx.bench import BENCHMARKS, table


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("bench", help="run a benchmark")
    parser.add_argument("name", choices=(*BENCHMARKS, "all", "table"),
                        help="the benchmark; all: every one in turn, then the table; table: the results table only")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="options for the benchmark")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.name == "table":
        return table.main()
    if args.name != "all":
        return _bench(args.name, args.args)
    failed = [name for name in BENCHMARKS if _survived(name) != 0]
    table.main()
    if failed:
        print(f"goals failed or the run broke in: {', '.join(failed)}")
    return 1 if failed else 0


def _bench(name: str, argv: list[str]) -> int:
    return int(importlib.import_module(f"owx.bench.{name}.bench").main(argv) or 0)


def _survived(name: str) -> int:
    """One benchmark with its defaults; one that breaks counts as failed and the others still run."""
    try:
        return _bench(name, [])
    except Exception as exc:  # noqa: BLE001 - reported, and ``all`` goes on
        print(f"owx bench {name} broke: {exc!r}")
        return 2
