"""``owx bench NAME [options]``: run one of owx's benchmarks (``owx bench NAME --help`` for its options)."""

from __future__ import annotations

import argparse
import importlib

from owx.bench import BENCHMARKS


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("bench", help="run a benchmark")
    parser.add_argument("name", choices=(*BENCHMARKS, "table"), help="the benchmark (table: the results table)")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="options for the benchmark")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    module = "owx.bench.table" if args.name == "table" else f"owx.bench.{args.name}.bench"
    bench = importlib.import_module(module)
    return int(bench.main(args.args) or 0)
