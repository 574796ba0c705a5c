"""The Python action runtime: ``python3 -m owx.runtimes.python_action``.

Serves OpenWhisk's runtime protocol (see :mod:`owx.runtimes.protocol`) on
``--host``/``--port`` (default 0.0.0.0:8080, as OpenWhisk's runtimes) or on an
already bound and listening socket inherited as ``--fd`` (the embedded platform
binds port 0 itself, so it knows the port and can send ``/init`` at once).
Standard library only, and start-up imports little: this is on the cold path.
The Python+TensorFlow kind is this same module run by an interpreter that has
tensorflow.
"""

from __future__ import annotations

import argparse
import os
import socket

from .http_wire import serve_forever
from .protocol import ActionProxy

DEFAULT_HOST = "0.0.0.0"
DEFAULT_PORT = 8080
SECRET_ENV = "OWX_RUNTIME_SECRET"  # set: every request must carry it (a Docker container's runtime)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python3 -m owx.runtimes.python_action", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return parser.parse_args(argv)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The runtime's options (shared with ``owx runtime serve``)."""
    parser.add_argument("--host", default=DEFAULT_HOST, help="address to bind (default %(default)s)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--port", type=int, default=DEFAULT_PORT, help="port to bind (default %(default)s)")
    where.add_argument("--fd", type=int, help="serve on this inherited, bound and listening socket instead")


def open_listener(host: str, port: int, fd: int | None) -> socket.socket:
    """The listening socket: the inherited one, or a new one on host:port."""
    if fd is not None:
        listener = socket.socket(fileno=fd)
        listener.set_inheritable(False)  # the action's subprocesses must not hold it
    else:
        listener = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
    listener.listen(128)
    return listener


def serve(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, fd: int | None = None) -> None:
    """Run the runtime until the process is stopped (requiring ``$OWX_RUNTIME_SECRET`` on every request
    if it is set; it is taken out of the environment the action sees)."""
    secret = os.environ.pop(SECRET_ENV, None) or None
    proxy = ActionProxy()
    serve_forever(open_listener(host, port, fd), proxy.handle, secret, proxy.answered)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        serve(args.host, args.port, args.fd)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
