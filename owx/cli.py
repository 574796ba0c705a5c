"""The ``owx`` command: one entry point, one subcommand per package.

Each package contributes its subcommands through ``owx.<package>.cli.register``;
imports happen only for the subcommand that runs, so ``owx up`` never loads
TensorFlow and ``owx thorn`` never loads Flask.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from pydantic import ValidationError

# subcommand -> (module whose register(subparsers) adds it, one-line help)
COMMANDS = {
    "up": ("owx.gateway.cli", "start the gateway and the embedded platform"),
    "admin": ("owx.gateway.admin.cli", "administer subjects and keys (like wskadmin)"),
    "agent": ("owx.escra_agent.cli", "run the Escra node agent (or --controller)"),
    "thorn": ("owx.thorn.cli", "THORN node daemon and testbed"),
    "disdel": ("owx.disdel.cli", "submit and follow DiSDeL training jobs"),
    "runtime": ("owx.runtimes.cli", "run an action runtime or build its image"),
    "bench": ("owx.bench.cli", "run a benchmark (owx.bench)"),
}


def build_parser(command: str | None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="owx", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="{" + ",".join(COMMANDS) + "}")
    for name, (module, help_text) in COMMANDS.items():
        if command == name:
            importlib.import_module(module).register(sub)
        else:
            sub.add_parser(name, help=help_text)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = argv[0] if argv and argv[0] in COMMANDS else None
    args = build_parser(command).parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except ValidationError as exc:  # the settings (environment, command line) or a file they name
        print(f"owx {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
