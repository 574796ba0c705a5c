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


SUITE_HELP = {"all": "owx bench all: every benchmark in turn, with its defaults, then writes results/README.md "
                     "(the table of their goals); takes no options",
              "table": "owx bench table: writes results/README.md, the table of the goals in results/*.json; "
                       "takes no options"}


def run(args: argparse.Namespace) -> int:
    if args.name in SUITE_HELP and args.args:  # --help, or an option meant for one benchmark
        print(SUITE_HELP[args.name])
        return 0 if set(args.args) <= {"-h", "--help"} else 2
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
